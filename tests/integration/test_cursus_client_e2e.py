"""The published Cursus client (cursus-client 0.1.1) end to end against a real broker subprocess.

Covers what the client does on the wire (cursus.md 15.1): keyed and round-robin batches, gzip
batches, acks 0/1/-1, idempotent replays, POLLING and STREAMING consumers, a two-member group that
rebalances, and committed offsets that survive a broker restart. Stored data is checked with raw
CONSUME frames decoded by bayou's own codec, so a resent batch (the client resends on any non-JSON
reply) shows up as a duplicate record.
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cursus import Consumer, Producer
from cursus.config import ConsumerConfig, ProducerConfig
from cursus.connection.sync_conn import SyncConnection
from cursus.types import Acks, ConsumerMode, Message

from bayou.protocols.cursus.batch import decode_head, decode_messages, encode_batch, encode_messages
from bayou.records.cursus import CursusMessage
from support.brokers import BrokerProcess
from support.oracles import fnv1a_32, fnv1a_64

pytestmark = pytest.mark.timeout(120)

_U32 = struct.Struct(">I")


# -- helpers -----------------------------------------------------------------------------------




def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


def start_broker(data_dir: Path, **kw: Any) -> BrokerProcess:
    b = BrokerProcess(data_dir, "--advertised-host", "127.0.0.1", **kw).start()
    wait_port(b.cursus_port)
    return b


def wait_until(cond: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return cond()


class Wire:
    """A blocking Cursus connection speaking raw frames."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, body: bytes) -> None:
        self.sock.sendall(_U32.pack(len(body)) + body)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv(self) -> bytes:
        (n,) = _U32.unpack(self._exact(4))
        return self._exact(n) if n else b""

    def ask(self, body: bytes) -> bytes:
        self.send(body)
        return self.recv()

    def command(self, text: str, envelope: bytes = b"\x00\x00") -> str:
        return self.ask(envelope + text.encode()).decode("utf-8", "replace")


def command(port: int, text: str) -> str:
    with Wire(port) as w:
        return w.command(text)


def read_partition(port: int, topic: str, partition: int) -> list[CursusMessage]:
    """Every stored record of one partition, read with CONSUME under a group that never commits."""
    group = f"reader-{uuid.uuid4().hex[:8]}"
    out: list[CursusMessage] = []
    with Wire(port) as w:
        while True:
            body = w.ask(b"\x00\x00" + (
                f"CONSUME topic={topic} partition={partition} offset={len(out)} member=reader "
                f"group={group} batch=100000").encode())
            assert body[:2] == b"\xba\x7c", f"CONSUME answered {body[:200]!r}"
            head = decode_head(body)
            assert (head.topic, head.partition) == (topic, partition)
            msgs = decode_messages(body, head)
            if not msgs:
                return out
            assert [m.offset for m in msgs] == list(range(len(out), len(out) + len(msgs))), \
                "offsets are not consecutive from 0"
            out += msgs


def read_topic(port: int, topic: str, partitions: int) -> dict[int, list[CursusMessage]]:
    return {p: read_partition(port, topic, p) for p in range(partitions)}


def payloads(stored: dict[int, list[CursusMessage]]) -> list[str]:
    return [m.payload.decode() for msgs in stored.values() for m in msgs]


def assert_stored_once(stored: dict[int, list[CursusMessage]], expected: list[str]) -> None:
    got = Counter(payloads(stored))
    dups = {k: v for k, v in got.items() if v > 1}
    assert not dups, f"records stored more than once (a batch was resent): {sorted(dups.items())[:10]}"
    missing = set(expected) - set(got)
    extra = set(got) - set(expected)
    assert not missing and not extra, f"missing {sorted(missing)[:10]}, unexpected {sorted(extra)[:10]}"


def producer(port: int, topic: str, **kw: Any) -> Producer:
    kw.setdefault("linger_ms", 5)
    return Producer(ProducerConfig(topic=topic, brokers=[f"127.0.0.1:{port}"], **kw))


def consumer_config(port: int, topic: str, group: str, **kw: Any) -> ConsumerConfig:
    return ConsumerConfig(topic=topic, brokers=[f"127.0.0.1:{port}"], group_id=group, **kw)


class Collector:
    """A Consumer driven by ``start(handler)`` on a background thread."""

    def __init__(self, config: ConsumerConfig) -> None:
        self.consumer = Consumer(config)
        self.got: list[Message] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.consumer.start(self.got.append)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def keys(self) -> list[tuple[int, int]]:
        return [(m.partition, m.offset) for m in list(self.got)]

    def wait_for(self, n: int, timeout: float) -> bool:
        return wait_until(lambda: len({(m.partition, m.offset) for m in list(self.got)}) >= n
                          or self.error is not None, timeout)

    def close(self) -> None:
        self.consumer.close()
        self.thread.join(10)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("cursus-e2e") / "data")
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def port(broker: BrokerProcess) -> int:
    assert broker.proc is not None and broker.proc.poll() is None, f"broker died: {broker.log()}"
    return broker.cursus_port


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


# -- producing ---------------------------------------------------------------------------------


def test_keyed_messages_land_in_fnv1a32_partition_and_unkeyed_go_round_robin(port: int) -> None:
    topic = unique("e2e-keys")
    n = 3  # with 3 partitions FNV-1a 32 and FNV-1a 64 disagree for some keys (cursus.md 13)
    keys = [f"user-{i}" for i in range(12)]
    assert any(fnv1a_32(k.encode()) % n != fnv1a_64(k.encode()) % n for k in keys)
    with producer(port, topic, partitions=n) as p:
        for i in range(60):
            p.send(f"keyed-{i}", key=keys[i % len(keys)])
        for i in range(30):
            p.send(f"plain-{i}")
        p.flush()
        assert p.unique_ack_count == 90
    stored = read_topic(port, topic, n)
    assert_stored_once(stored, [f"keyed-{i}" for i in range(60)] + [f"plain-{i}" for i in range(30)])
    for part, msgs in stored.items():
        for m in msgs:
            if m.key:
                want = fnv1a_32(m.key) % n
                assert part == want, f"key {m.key!r} stored in partition {part}, FNV-1a-32 says {want}"
        # keyed messages keep their order per key
        for k in keys:
            idx = [int(m.payload.split(b"-")[1]) for m in msgs if m.key == k.encode()]
            assert idx == sorted(idx), f"key {k} out of order in partition {part}: {idx}"
        # the client numbers seq per partition from 1 in send order; the broker keeps every field
        assert [m.seq_num for m in msgs] == list(range(1, len(msgs) + 1))
        assert all(m.producer_id.startswith(b"py-") and m.epoch > 1_700_000_000 for m in msgs)
        plain = [m for m in msgs if not m.key]
        assert len(plain) == 10, f"round robin put {len(plain)} unkeyed messages in partition {part}"


def test_gzip_compressed_batches(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = unique("e2e-gzip")
    frames: list[bytes] = []
    real_write = SyncConnection.write_frame

    def spy(self: SyncConnection, data: bytes) -> None:
        frames.append(data[:2])
        real_write(self, data)

    monkeypatch.setattr(SyncConnection, "write_frame", spy)
    expected = [f"gzip-{i}-héllo-✓-" + "x" * (i % 7) * 150 for i in range(200)]
    with producer(port, topic, partitions=2, compression_type="gzip", batch_size=64) as p:
        for payload in expected:
            p.send(payload)
        p.flush()
        assert p.unique_ack_count == 200
    assert frames.count(b"\x1f\x8b") >= 4, f"the client sent no gzip frames: {Counter(frames)}"
    assert_stored_once(read_topic(port, topic, 2), expected)


@pytest.mark.parametrize("acks", [Acks.NONE, Acks.ONE, Acks.ALL], ids=["acks0", "acks1", "acks-all"])
def test_every_ack_mode_acknowledges_each_message_once(port: int, acks: Acks,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import cursus.producer as cp

    topic = unique(f"e2e-acks{acks.value}")
    replies: list[bytes] = []
    failures: list[str] = []
    real = cp.decode_ack

    def spy(data: bytes) -> Any:
        replies.append(data)
        try:
            return real(data)
        except Exception as exc:
            failures.append(f"{data[:80]!r}: {exc}")
            raise

    monkeypatch.setattr(cp, "decode_ack", spy)
    expected = [f"a{acks.value}-{i}" for i in range(400)]
    with producer(port, topic, partitions=2, acks=acks, batch_size=50, flush_timeout_ms=10_000) as p:
        for payload in expected:
            p.send(payload)
        p.flush()
        acked = p.unique_ack_count
    assert acked == 400, (f"{acked} of 400 messages acknowledged; replies {Counter(replies).most_common(2)}; "
                          f"{len(payloads(read_topic(port, topic, 2)))} records stored")
    assert not failures, f"non-JSON produce replies made the client resend: {failures[:3]}"
    acks_seen = [json.loads(r) for r in replies]
    assert all(a["status"] == "OK" for a in acks_seen), acks_seen[:3]
    assert_stored_once(read_topic(port, topic, 2), expected)


@pytest.mark.parametrize("acks", ["0", "1", "-1", "all", ""])
def test_raw_batch_acks_forms_get_the_json_ack(port: int, acks: str) -> None:
    topic = unique("e2e-rawacks")
    with Wire(port) as w:
        assert w.command(f"CREATE topic={topic} partitions=1", envelope=b"\x00\x05admin").startswith("OK ")
        last = -1
        for round_ in range(3):
            msgs = [CursusMessage(f"r{round_}-{i}".encode(), 0, round_ * 4 + i + 1, b"raw-p", b"", 42)
                    for i in range(4)]
            body = encode_batch(topic, 0, encode_messages(msgs), 4, msgs[0].seq_num, msgs[-1].seq_num, acks)
            reply = w.ask(body)
            ack = json.loads(reply)
            assert list(ack) == ["status", "last_offset", "producer_epoch", "producer_id", "seq_start",
                                 "seq_end"], reply
            assert ack["status"] == "OK" and ack["last_offset"] == last + 4, reply
            assert (ack["producer_id"], ack["producer_epoch"]) == ("raw-p", 42)
            assert (ack["seq_start"], ack["seq_end"]) == (msgs[0].seq_num, msgs[-1].seq_num)
            last = ack["last_offset"]
    assert len(read_partition(port, topic, 0)) == 12


# -- idempotence -------------------------------------------------------------------------------


def test_idempotent_topic_stores_a_replayed_batch_once(port: int) -> None:
    topic = unique("e2e-idem-raw")

    def batch(seqs: range) -> bytes:
        msgs = [CursusMessage(f"idem-{s}".encode(), 0, s, b"raw-idem", b"k", 7) for s in seqs]
        return encode_batch(topic, 0, encode_messages(msgs), len(msgs), seqs[0], seqs[-1], "1",
                            idempotent=True)

    with Wire(port) as w:
        reply = w.command(f"CREATE topic={topic} partitions=1 idempotent=true", envelope=b"\x00\x05admin")
        assert reply.startswith(f"OK topic={topic} partitions=1"), reply
        first = json.loads(w.ask(batch(range(1, 6))))
        again = json.loads(w.ask(batch(range(1, 6))))
        assert first["status"] == again["status"] == "OK", (first, again)
        assert first["last_offset"] == again["last_offset"] == 4, (first, again)
    with Wire(port) as w:  # a resend normally arrives on a new connection
        assert json.loads(w.ask(batch(range(1, 6))))["status"] == "OK"
        nxt = json.loads(w.ask(batch(range(6, 9))))
        assert nxt["status"] == "OK" and nxt["last_offset"] == 7, nxt
    stored = read_partition(port, topic, 0)
    assert [m.seq_num for m in stored] == list(range(1, 9)), "a replayed batch was stored again"


def test_client_resend_is_deduplicated_only_on_an_idempotent_topic(port: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Lose the first acknowledgement: the client drops the connection and resends the same batch
    (same producer id, epoch and seq). An idempotent topic stores it once; a plain one twice."""
    import cursus.producer as cp

    real = cp.decode_ack
    lost: list[bytes] = []
    lock = threading.Lock()

    def lose_first_ack(data: bytes) -> Any:
        with lock:
            if not lost:
                lost.append(data)
                raise ConnectionError("simulated lost acknowledgement")
        return real(data)

    monkeypatch.setattr(cp, "decode_ack", lose_first_ack)
    results = {}
    for idempotent in (True, False):
        lost.clear()
        topic = unique("e2e-idem-client" if idempotent else "e2e-plain-client")
        flag = " idempotent=true" if idempotent else ""
        assert command(port, f"CREATE topic={topic} partitions=1{flag}").startswith("OK ")
        expected = [f"resend-{i}" for i in range(20)]
        with producer(port, topic, partitions=1, idempotent=True, batch_size=100, linger_ms=50) as p:
            for payload in expected:
                p.send(payload)
            p.flush()
            assert p.unique_ack_count == 20
        assert lost, "the simulated lost ack never happened"
        results[idempotent] = Counter(payloads({0: read_partition(port, topic, 0)}))
        assert set(results[idempotent]) == set(expected)
    dups = {k: v for k, v in results[True].items() if v != 1}
    assert not dups, f"idempotent topic stored a resent batch twice: {dups}"
    # Control: the resend really happened (cursus.md 11: the flag alone does not de-duplicate).
    assert max(results[False].values()) == 2, results[False]


# -- consuming ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [ConsumerMode.POLLING, ConsumerMode.STREAMING], ids=lambda m: m.value)
def test_consumer_receives_everything(port: int, mode: ConsumerMode) -> None:
    topic = unique(f"e2e-consume-{mode.value}")
    with producer(port, topic, partitions=3) as p:
        for i in range(150):
            p.send(f"before-{i}", key=f"k{i % 10}")
        p.flush()
    c = Collector(consumer_config(port, topic, unique("g"), mode=mode))
    try:
        assert c.wait_for(150, 20), f"got {len(set(c.keys()))} of 150 (error {c.error!r})"
        with producer(port, topic, partitions=3) as p:  # arrive while the consumer runs
            for i in range(90):
                p.send(f"after-{i}")
            p.flush()
        assert c.wait_for(240, 20), f"got {len(set(c.keys()))} of 240 (error {c.error!r})"
    finally:
        c.close()
    got = {m.payload for m in c.got}
    assert got == {f"before-{i}" for i in range(150)} | {f"after-{i}" for i in range(90)}
    for m in c.got:
        if m.key:
            assert m.partition == fnv1a_32(m.key.encode()) % 3
    # what the consumer saw is what is stored
    stored = read_topic(port, topic, 3)
    assert {(m.partition, m.offset, m.payload) for m in c.got} == {
        (p, s.offset, s.payload.decode()) for p, msgs in stored.items() for s in msgs}


def test_polling_consumer_does_not_redeliver_processed_records(port: int) -> None:
    """The client polls each partition on a new connection with ``offset=`` = its own position and
    commits only every 5 s / 100 records. If CONSUME prefers a lower committed offset over
    ``offset=`` (cursus.md 7, H), every poll re-delivers what was processed since the last commit."""
    topic = unique("e2e-poll-dups")
    with producer(port, topic, partitions=3) as p:
        for i in range(150):
            p.send(f"m-{i}")
        p.flush()
    c = Collector(consumer_config(port, topic, unique("g"), mode=ConsumerMode.POLLING))
    try:
        assert c.wait_for(150, 20), f"got {len(set(c.keys()))} of 150 (error {c.error!r})"
        with producer(port, topic, partitions=3) as p:  # more records while the consumer polls
            for i in range(150, 240):
                p.send(f"m-{i}")
            p.flush()
        assert c.wait_for(240, 20), f"got {len(set(c.keys()))} of 240 (error {c.error!r})"
        time.sleep(2.0)  # a few more 0.5 s polls
    finally:
        c.close()
    dups = {k: v for k, v in Counter(c.keys()).items() if v > 1}
    assert not dups, (
        f"the polling consumer was handed {sum(dups.values()) - len(dups)} already-processed records "
        f"again ({len(dups)} distinct (partition, offset), e.g. {sorted(dups)[:5]}): CONSUME started "
        f"at the group's committed offset although the client asked for a later offset=")


@pytest.mark.slow
def test_two_member_group_splits_partitions_and_rebalances_when_one_leaves(port: int) -> None:
    topic = unique("e2e-group")
    group = unique("grp")
    n = 4
    with producer(port, topic, partitions=n) as p:
        for i in range(40):
            p.send(f"g0-{i}")
        p.flush()

    def status() -> dict[str, Any]:
        return dict(json.loads(command(port, f"GROUP_STATUS group={group}")))

    def stable(*cs: Collector) -> bool:
        st = status()
        members = {m["member_id"]: sorted(m["assignments"]) for m in st["members"]}
        ids = {c.consumer._member_id for c in cs}
        if set(members) != ids:
            return False
        if any(c.consumer._generation != st["generation"] for c in cs):
            return False
        if any(sorted(c.consumer._assignments) != members[c.consumer._member_id] for c in cs):
            return False
        parts = [p for a in members.values() for p in a]
        return sorted(parts) == list(range(n)) and all(members.values())

    def committed() -> list[str]:
        return [command(port, f"FETCH_OFFSET topic={topic} partition={p} group={group}") for p in range(n)]

    # Commit often: cursus-client 0.1.1 keeps uncommitted offsets of partitions it has lost and
    # retries them for ever (NOT_OWNER, then offset_regression once it owns them again, which also
    # kills start()); committing everything before each rebalance keeps this test about the broker.
    cfg = {"mode": ConsumerMode.POLLING, "auto_commit_interval_s": 0.3}
    a = Collector(consumer_config(port, topic, group, consumer_id="member-a", **cfg))
    b: Collector | None = None
    try:
        assert a.wait_for(40, 20), f"first member got {len(set(a.keys()))} of 40 (error {a.error!r})"
        assert wait_until(lambda: stable(a), 10, 0.2), f"one member does not own everything: {status()}"
        assert wait_until(lambda: committed() == ["OK offset=10"] * n, 10, 0.2), committed()
        b = Collector(consumer_config(port, topic, group, consumer_id="member-b", **cfg))
        ok = wait_until(lambda: stable(a, b), 30, 0.2)
        assert ok, (
            "two members never settled on a split: each rejoin (the client re-sends its suffixed id) "
            f"added another member and bumped the generation again. Group now: {status()}")
        a_parts = set(a.consumer._assignments)
        b_parts = set(b.consumer._assignments)
        assert a_parts and b_parts and not a_parts & b_parts and a_parts | b_parts == set(range(n))
        a.got.clear()
        b.got.clear()
        with producer(port, topic, partitions=n) as p:
            for i in range(40):
                p.send(f"g1-{i}")
            p.flush()
        split_got = lambda: {m.payload for m in a.got + b.got if m.payload.startswith("g1-")}  # noqa: E731
        assert wait_until(lambda: len(split_got()) == 40, 20), \
            f"the split group did not receive every new message: {len(split_got())} of 40"
        assert {m.partition for m in a.got if m.payload.startswith("g1-")} <= a_parts
        assert {m.partition for m in b.got if m.payload.startswith("g1-")} <= b_parts
        b.close()
        assert wait_until(lambda: stable(a) and sorted(a.consumer._assignments) == list(range(n)), 30, 0.2), \
            f"the remaining member did not take over every partition: {status()}"
        a.got.clear()
        with producer(port, topic, partitions=n) as p:
            for i in range(40):
                p.send(f"g2-{i}")
            p.flush()
        ok = wait_until(lambda: len({m.payload for m in a.got if m.payload.startswith("g2-")}) == 40, 20)
        assert ok, ("after the rebalance the remaining member did not receive every new message: got "
                    f"{sorted({(m.partition, m.offset) for m in a.got if m.payload.startswith('g2-')})}, "
                    f"client offsets {a.consumer._offsets}, consumer error {a.error!r}, group {status()}")
    finally:
        a.close()
        if b is not None:
            b.close()


def test_streaming_consumer_close_commits_only_what_was_processed(port: int) -> None:
    """The client commits what it processed; the broker must not move the group past that on its
    own when the STREAM ends (cursus.md 8: H has no auto-commit), or unprocessed records are lost."""
    topic = unique("e2e-stream-commit")
    group = unique("g")
    with producer(port, topic, partitions=1) as p:
        for i in range(100):
            p.send(f"s-{i}")
        p.flush()
    c = Consumer(consumer_config(port, topic, group, mode=ConsumerMode.STREAMING))
    watchdog = threading.Timer(30, c.close)
    watchdog.start()
    seen = []
    try:
        for m in c:
            seen.append(m.offset)
            if len(seen) == 37:
                break
    finally:
        c.close()
        watchdog.cancel()
    assert seen == list(range(37))
    fetch = f"FETCH_OFFSET topic={topic} partition=0 group={group}"
    assert command(port, fetch) == "OK offset=37"
    # the client's stream socket times out after 5 s; then the broker ends the stream
    time.sleep(7)
    assert command(port, fetch) == "OK offset=37", (
        "the broker auto-committed the STREAM's push position past what the client processed and "
        "committed: the next member of the group skips records nobody consumed")


def test_committed_offsets_resume_after_broker_restart(tmp_path: Path) -> None:
    b = start_broker(tmp_path / "data")
    try:
        port = b.cursus_port
        topic, group = "e2e-restart", "resume"
        expected = {f"r-{i}" for i in range(100)}
        with producer(port, topic, partitions=2) as p:
            for i in range(100):
                p.send(f"r-{i}")
            p.flush()
            assert p.unique_ack_count == 100
        c = Consumer(consumer_config(port, topic, group, mode=ConsumerMode.POLLING))
        watchdog = threading.Timer(30, c.close)
        watchdog.start()
        first: list[Message] = []
        try:
            for m in c:
                first.append(m)
                if len(first) == 37:
                    break
        finally:
            c.close()
            watchdog.cancel()
        assert len(first) == 37
        per_part = Counter(m.partition for m in first)
        committed = {p: command(port, f"FETCH_OFFSET topic={topic} partition={p} group={group}")
                     for p in range(2)}
        assert committed == {p: f"OK offset={per_part[p]}" for p in range(2)}, (committed, per_part)

        assert b.kill(signal.SIGTERM) == 0, b.log()
        b = start_broker(tmp_path / "data", port=b.port, cursus_port=port)
        after = {p: command(port, f"FETCH_OFFSET topic={topic} partition={p} group={group}")
                 for p in range(2)}
        assert after == committed, "committed offsets did not survive the restart"

        c2 = Collector(consumer_config(port, topic, group, mode=ConsumerMode.POLLING))
        try:
            assert c2.wait_for(63, 20), f"got {len(set(c2.keys()))} of 63 (error {c2.error!r})"
        finally:
            c2.close()
        first_keys = {(m.partition, m.offset) for m in first}
        reread = first_keys & set(c2.keys())
        assert not reread, f"the new consumer re-read committed records {sorted(reread)[:10]}"
        assert {m.payload for m in first} | {m.payload for m in c2.got} == expected
    finally:
        b.stop()
