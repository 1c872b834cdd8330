"""Record the Kafka requests real clients send: how the vectors in this directory were made.

Not a test and not run by the suite (the vectors are committed). It needs the clients, which the
project does not depend on, in a scratch virtualenv:

    python3 -m venv /tmp/kvenv
    /tmp/kvenv/bin/pip install confluent-kafka kafka-python aiokafka python-snappy zstandard lz4 cramjam
    PYTHONPATH=src .venv/bin/python tests/conformance/vectors/kafka/capture.py /tmp/kvenv/bin/python

It serves a one-broker, in-memory "cluster" on loopback with bayou's Kafka codec (one topic of two
partitions, produce stores the batches with offsets assigned, fetch returns them, a consumer group
with one member), runs one script per client against it in a subprocess, and writes one JSON file
per client: every request frame (hex, without the size prefix) with the response frame bayou
answered and the client went on from. kcat (Debian's package) runs too when it is on PATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import shutil
import subprocess
import sys
import traceback
import typing
import uuid
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kio.schema.errors import ErrorCode

from bayou.protocols.kafka import codec
from bayou.protocols.kafka.codes import SUPPORTED, ApiKey, VersionRange
from bayou.protocols.kafka.framing import FrameReader, KafkaError
from bayou.protocols.kafka.guard import field_shape
from bayou.records.batch import HEADER, iter_batches, set_base_offset

HERE = Path(__file__).parent
TOPIC = "vectors"
PARTITIONS = 2
KEEP_PER_KIND = 3  # frames kept per (api_key, api_version): enough to see variation, not a log
KEEP_PRODUCE = 16  # every compression codec's first batches
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def build(cls: Any, **values: Any) -> Any:
    """A kio entity with ``values`` (dicts and lists of dicts become nested entities), every
    other field its zero value. Keys the version does not have are dropped, so one call serves
    every version of an API."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        annotation = hints[field.name]
        inner, is_array, optional = field_shape(annotation)
        if field.name in values:
            value = values[field.name]
            if dataclasses.is_dataclass(inner):
                if is_array:
                    value = tuple(build(inner, **v) for v in value)
                elif value is not None:
                    value = build(inner, **value)
            elif is_array:
                value = tuple(value)
            kwargs[field.name] = value
        elif field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING:
            continue
        else:
            kwargs[field.name] = _zero(field, inner, is_array, optional)
    return cls(**kwargs)


def _zero(field: Any, inner: Any, is_array: bool, optional: bool) -> Any:
    if is_array:
        return ()
    if optional:
        return None
    if dataclasses.is_dataclass(inner):
        return build(inner)
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return _EPOCH
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "bool":
        return False
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    return 0


class Cluster:
    """Just enough of a broker for a client to go from one request to the next."""

    def __init__(self, host: str, port: int,
                 supported: Mapping[ApiKey, VersionRange] = SUPPORTED) -> None:
        self.host, self.port = host, port
        self.supported = supported
        self.logs: dict[tuple[str, int], list[bytes]] = defaultdict(list)
        self.ends: dict[tuple[str, int], int] = defaultdict(int)
        self.topics: dict[str, int] = {TOPIC: PARTITIONS}
        self.committed: dict[tuple[str, str, int], int] = {}
        self.members: dict[str, list[tuple[str, bytes]]] = defaultdict(list)
        self.assignments: dict[tuple[str, str], bytes] = {}
        self.protocols: dict[str, tuple[str, str]] = {}
        self.generation = 0
        self.producer_id = 1000

    def respond(self, req: codec.Request) -> Any:
        key, version = req.header.api_key, req.header.api_version
        schema = codec.response_schema(key, version)
        body: Any = req.body
        handler = getattr(self, f"_{ApiKey(key).name.lower()}")
        return build(schema, **handler(body, version))

    # -- one method per API: the fields of the response, by name -------------------------------

    def _api_versions(self, body: Any, version: int) -> dict[str, Any]:
        return {"api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                             for k, lo, hi in codec.api_versions(self.supported)]}

    def _broker(self) -> dict[str, Any]:
        return {"node_id": 1, "host": self.host, "port": self.port, "rack": None}

    def _metadata(self, body: Any, version: int) -> dict[str, Any]:
        names = list(self.topics) if body.topics is None else [t.name for t in body.topics]
        if body.topics is not None and getattr(body, "allow_auto_topic_creation", False):
            for name in names:
                self.topics.setdefault(name, 1)
        topics = []
        for name in names:
            count = self.topics.get(name)
            topics.append({
                "error_code": ErrorCode.none if count else ErrorCode.unknown_topic_or_partition,
                "name": name, "topic_authorized_operations": -2147483648,
                "partitions": [{"partition_index": p, "leader_id": 1, "leader_epoch": 0,
                                "replica_nodes": [1], "isr_nodes": [1]}
                               for p in range(count or 0)]})
        return {"brokers": [self._broker()], "cluster_id": "bayou-capture", "controller_id": 1,
                "topics": topics, "cluster_authorized_operations": -2147483648}

    def _produce(self, body: Any, version: int) -> dict[str, Any]:
        responses = []
        for topic in body.topic_data:
            parts = []
            for p in topic.partition_data:
                base = self.ends[(topic.name, p.index)]
                data = bytearray(p.records or b"")
                end = base
                for pos, head in iter_batches(data):
                    set_base_offset(data, end, pos)
                    end += head.last_offset + 1 - head.base_offset
                self.logs[(topic.name, p.index)].append(bytes(data))
                self.ends[(topic.name, p.index)] = end
                parts.append({"index": p.index, "base_offset": base, "log_append_time": None,
                              "log_start_offset": 0})
            responses.append({"name": topic.name, "partition_responses": parts})
        return {"responses": responses}

    def _fetch(self, body: Any, version: int) -> dict[str, Any]:
        responses = []
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                key = (topic.topic, p.partition)
                end = self.ends[key]
                records = b"".join(self.logs[key]) if p.fetch_offset < end else b""
                parts.append({"partition_index": p.partition, "high_watermark": end,
                              "last_stable_offset": end, "log_start_offset": 0,
                              "preferred_read_replica": -1, "records": records})
            responses.append({"topic": topic.topic, "partitions": parts})
        return {"responses": responses, "session_id": 0}

    def _list_offsets(self, body: Any, version: int) -> dict[str, Any]:
        topics = []
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                end = self.ends[(topic.name, p.partition_index)]
                offset = 0 if p.timestamp == -2 else end
                parts.append({"partition_index": p.partition_index, "offset": offset,
                              "timestamp": -1, "leader_epoch": 0, "old_style_offsets": [offset]})
            topics.append({"name": topic.name, "partitions": parts})
        return {"topics": topics}

    def _offset_for_leader_epoch(self, body: Any, version: int) -> dict[str, Any]:
        return {"topics": [{"topic": t.topic, "partitions": [
            {"partition": p.partition, "leader_epoch": 0, "end_offset": self.ends[(t.topic, p.partition)]}
            for p in t.partitions]} for t in body.topics]}

    def _find_coordinator(self, body: Any, version: int) -> dict[str, Any]:
        keys = list(getattr(body, "coordinator_keys", ()) or [getattr(body, "key", "")])
        return {"node_id": 1, "host": self.host, "port": self.port,
                "coordinators": [{"key": k, **self._broker()} for k in keys]}

    def _join_group(self, body: Any, version: int) -> dict[str, Any]:
        member = body.member_id or f"{body.group_instance_id or 'member'}-{uuid.uuid4()}"
        proto = body.protocols[0]
        self.generation += 1
        self.members[body.group_id] = [(member, proto.metadata)]
        self.protocols[body.group_id] = (body.protocol_type, proto.name)
        return {"generation_id": self.generation, "protocol_type": body.protocol_type,
                "protocol_name": proto.name, "leader": member, "member_id": member,
                "members": [{"member_id": m, "metadata": meta, "group_instance_id": None}
                            for m, meta in self.members[body.group_id]]}

    def _sync_group(self, body: Any, version: int) -> dict[str, Any]:
        for a in body.assignments:
            self.assignments[(body.group_id, a.member_id)] = a.assignment
        ptype, pname = self.protocols.get(body.group_id, ("consumer", "range"))
        return {"protocol_type": ptype, "protocol_name": pname,
                "assignment": self.assignments.get((body.group_id, body.member_id), b"")}

    def _heartbeat(self, body: Any, version: int) -> dict[str, Any]:
        return {}

    def _leave_group(self, body: Any, version: int) -> dict[str, Any]:
        members = getattr(body, "members", ())
        return {"members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id}
                            for m in members]}

    def _offset_commit(self, body: Any, version: int) -> dict[str, Any]:
        for t in body.topics:
            for p in t.partitions:
                self.committed[(body.group_id, t.name, p.partition_index)] = p.committed_offset
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index} for p in t.partitions]} for t in body.topics]}

    def _offset_fetch(self, body: Any, version: int) -> dict[str, Any]:
        groups = list(getattr(body, "groups", ()))
        if groups:
            return {"groups": [self._offsets(g.group_id, g.topics) for g in groups]}
        return {"topics": self._offsets(body.group_id, body.topics)["topics"]}

    def _offsets(self, group: str, topics: Any) -> dict[str, Any]:
        out = []
        for t in topics or ():
            parts = [{"partition_index": p, "committed_offset":
                      self.committed.get((group, t.name, p), -1), "committed_leader_epoch": -1,
                      "metadata": ""} for p in t.partition_indexes]
            out.append({"name": t.name, "partitions": parts})
        return {"group_id": group, "topics": out}

    def _init_producer_id(self, body: Any, version: int) -> dict[str, Any]:
        self.producer_id += 1
        return {"producer_id": self.producer_id, "producer_epoch": 0}

    def _create_topics(self, body: Any, version: int) -> dict[str, Any]:
        out = []
        for t in body.topics:
            count = t.num_partitions if t.num_partitions > 0 else 1
            exists = t.name in self.topics
            self.topics.setdefault(t.name, count)
            out.append({"name": t.name, "error_code": ErrorCode.topic_already_exists if exists
                        else ErrorCode.none, "error_message": None, "num_partitions": count,
                        "replication_factor": 1})
        return {"topics": out}

    def _delete_topics(self, body: Any, version: int) -> dict[str, Any]:
        names = list(getattr(body, "topic_names", ())) or [t.name for t in getattr(body, "topics", ())]
        for name in names:
            self.topics.pop(name, None)
        return {"responses": [{"name": n} for n in names]}

    def _create_partitions(self, body: Any, version: int) -> dict[str, Any]:
        for t in body.topics:
            self.topics[t.name] = t.count
        return {"results": [{"name": t.name, "error_message": None} for t in body.topics]}

    def _describe_configs(self, body: Any, version: int) -> dict[str, Any]:
        return {"results": [{"resource_type": r.resource_type, "resource_name": r.resource_name,
                             "error_message": None, "configs": [
                                 {"name": "retention.ms", "value": "604800000", "read_only": False,
                                  "config_source": 5, "is_sensitive": False, "synonyms": [],
                                  "config_type": 5, "documentation": None}]}
                            for r in body.resources]}

    def _describe_cluster(self, body: Any, version: int) -> dict[str, Any]:
        return {"cluster_id": "bayou-capture", "controller_id": 1, "brokers": [
            {"broker_id": 1, "host": self.host, "port": self.port, "rack": None}],
            "cluster_authorized_operations": -2147483648, "error_message": None, "endpoint_type": 1}

    def _list_groups(self, body: Any, version: int) -> dict[str, Any]:
        return {"groups": [{"group_id": g, "protocol_type": "consumer", "group_state": "Stable",
                            "group_type": "classic"} for g in self.members]}

    def _describe_groups(self, body: Any, version: int) -> dict[str, Any]:
        return {"groups": [{"group_id": g, "group_state": "Stable", "protocol_type": "consumer",
                            "protocol_data": self.protocols.get(g, ("", ""))[1],
                            "authorized_operations": -2147483648, "error_message": None,
                            "members": [{"member_id": m, "group_instance_id": None,
                                         "client_id": "c", "client_host": "/127.0.0.1",
                                         "member_metadata": meta,
                                         "member_assignment": self.assignments.get((g, m), b"")}
                                        for m, meta in self.members.get(g, [])]}
                           for g in body.groups]}

    def _delete_groups(self, body: Any, version: int) -> dict[str, Any]:
        for g in body.groups_names:
            self.members.pop(g, None)
        return {"results": [{"group_id": g} for g in body.groups_names]}


class Recorder:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.frames: list[dict[str, Any]] = []
        self.kept: dict[tuple[int, int], int] = defaultdict(int)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameReader()
        try:
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    reply = self._answer(frame)
                    if reply is None:
                        return
                    writer.write(reply)
                await writer.drain()
        except (KafkaError, ConnectionError) as exc:
            print("closing:", exc, file=sys.stderr)
        except Exception:
            traceback.print_exc()
        finally:
            writer.close()

    def _answer(self, frame: bytes) -> bytes | None:
        try:
            req = codec.decode_request(frame, self.cluster.supported)
        except KafkaError as exc:
            self._keep(frame, exc.reply, note=exc.message)
            return exc.reply
        reply = codec.encode_response(req.header, self.cluster.respond(req))
        if req.header.api_key == ApiKey.PRODUCE and getattr(req.body, "acks", 1) == 0:
            self._keep(frame, None, note="acks=0: no response")
            return b""
        self._keep(frame, reply)
        return reply

    def _keep(self, frame: bytes, reply: bytes | None, note: str | None = None) -> None:
        kind = (int.from_bytes(frame[0:2], "big", signed=True),
                int.from_bytes(frame[2:4], "big", signed=True))
        self.kept[kind] += 1
        if self.kept[kind] > (KEEP_PRODUCE if kind[0] == ApiKey.PRODUCE else KEEP_PER_KIND):
            return
        entry: dict[str, Any] = {"api_key": kind[0], "api_version": kind[1],
                                 "request_hex": frame.hex()}
        entry["response_hex"] = None if reply is None else reply[4:].hex()
        if note:
            entry["note"] = note
        self.frames.append(entry)


CLIENTS: dict[str, str] = {
    "confluent-kafka": """
import confluent_kafka, sys
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, NewPartitions, ConfigResource
B = sys.argv[1]
a = AdminClient({"bootstrap.servers": B})
for f in a.create_topics([NewTopic("ck-admin", 3, 1)]).values(): f.result()
for f in a.create_partitions([NewPartitions("ck-admin", 4)]).values(): f.result()
for f in a.describe_configs([ConfigResource("topic", "ck-admin")]).values(): f.result()
a.describe_cluster().result() if hasattr(a, "describe_cluster") else None
p = Producer({"bootstrap.servers": B, "enable.idempotence": True, "compression.type": "zstd",
              "linger.ms": 5})
for i in range(20):
    p.produce("vectors", key=b"k%d" % i, value=b"value-%d" % i, partition=i % 2,
              headers=[("h", b"v%d" % i)], timestamp=1700000000000 + i)
assert p.flush(20) == 0
for codec in ("gzip", "snappy", "lz4"):
    q = Producer({"bootstrap.servers": B, "compression.type": codec, "acks": "1"})
    q.produce("vectors", key=codec.encode(), value=codec.encode() * 20, partition=0)
    assert q.flush(20) == 0
c = Consumer({"bootstrap.servers": B, "group.id": "ck-group", "auto.offset.reset": "earliest",
              "enable.auto.commit": False})
c.subscribe(["vectors"])
got = 0
for _ in range(100):
    m = c.poll(0.2)
    if m is not None and m.error() is None:
        got += 1
        if got >= 10:
            break
c.commit(asynchronous=False)
c.close()
print("confluent-kafka", confluent_kafka.version(), "librdkafka", confluent_kafka.libversion()[0],
      "consumed", got)
""",
    "kafka-python": """
import kafka, sys
from kafka import KafkaProducer, KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic
B = sys.argv[1]
a = KafkaAdminClient(bootstrap_servers=B)
a.create_topics([NewTopic("kp-admin", 2, 1)])
a.list_topics()
a.close()
for codec in ("gzip", "snappy", "lz4", "zstd", None):
    try:
        p = KafkaProducer(bootstrap_servers=B, compression_type=codec, acks=1)
    except Exception as exc:
        print("no", codec, exc); continue
    for i in range(3):
        # kafka-python keeps a batch uncompressed unless compressing makes it smaller
        p.send("vectors", key=b"kp", value=b"kafka-python %s %d|" % (str(codec).encode(), i) * 20,
               headers=[("h", b"1")], partition=i % 2)
    p.flush(20); p.close()
    print("produced with", codec)
c = KafkaConsumer("vectors", bootstrap_servers=B, group_id="kp-group",
                  auto_offset_reset="earliest", enable_auto_commit=False)
got = 0
for _ in range(20):
    for recs in c.poll(timeout_ms=500).values():
        got += len(recs)
    if got >= 10:
        break
c.commit()
c.close()
print("kafka-python", kafka.__version__, "consumed", got)
""",
    "aiokafka": """
import asyncio, aiokafka, sys
from aiokafka import AIOKafkaProducer, AIOKafkaConsumer
B = sys.argv[1]
async def main():
    p = AIOKafkaProducer(bootstrap_servers=B, enable_idempotence=True, compression_type="gzip")
    await p.start()
    for i in range(5):
        await p.send_and_wait("vectors", b"aiokafka %d" % i, key=b"ak", partition=i % 2,
                              headers=[("h", b"a")])
    await p.stop()
    for codec in ("snappy", "lz4", "zstd"):
        q = AIOKafkaProducer(bootstrap_servers=B, compression_type=codec, acks=1)
        await q.start()
        await q.send_and_wait("vectors", codec.encode() * 10, key=codec.encode(), partition=1)
        await q.stop()
    c = AIOKafkaConsumer("vectors", bootstrap_servers=B, group_id="ak-group",
                         auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    got = 0
    for _ in range(20):
        for recs in (await c.getmany(timeout_ms=500)).values():
            got += len(recs)
        if got >= 10:
            break
    await c.commit()
    await c.stop()
    print("aiokafka", aiokafka.__version__, "consumed", got)
asyncio.run(main())
""",
}


# ApiVersions capped at v2: a client that starts higher gets UNSUPPORTED_VERSION with the served
# list (a v0 response) and asks again at v2 (KIP-511). The vectors of that exchange.
FALLBACK = MappingProxyType({**SUPPORTED, ApiKey.API_VERSIONS: VersionRange(0, 2)})
FALLBACK_SCRIPT = """
import sys
from confluent_kafka.admin import AdminClient
AdminClient({"bootstrap.servers": sys.argv[1]}).list_topics(timeout=20)
import confluent_kafka
print("confluent-kafka", confluent_kafka.version(), "librdkafka", confluent_kafka.libversion()[0])
"""


async def capture(python: str) -> None:
    for name, script in CLIENTS.items():
        await _one(name, [python, "-c", script])
    await _one("confluent-kafka-apiversions-fallback", [python, "-c", FALLBACK_SCRIPT], FALLBACK)
    if shutil.which("kcat"):
        await _kcat()


async def _start(supported: Mapping[ApiKey, VersionRange] = SUPPORTED
                 ) -> tuple[asyncio.Server, Recorder, str]:
    holder: list[Recorder] = []
    server = await asyncio.start_server(lambda r, w: holder[0].serve(r, w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    holder.append(Recorder(Cluster("127.0.0.1", port, supported)))
    return server, holder[0], f"127.0.0.1:{port}"


async def _run(argv: list[str], stdin: bytes | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return out.decode()


async def _one(name: str, argv: list[str],
               supported: Mapping[ApiKey, VersionRange] = SUPPORTED) -> None:
    server, recorder, bootstrap = await _start(supported)
    async with server:
        out = await _run([*argv, bootstrap])
    _write(name, out.strip().splitlines()[-1], recorder)


async def _kcat() -> None:
    server, recorder, b = await _start()
    async with server:
        version = next(line.strip() for line in (await _run(["kcat", "-V"])).splitlines()
                       if line.startswith("Version"))
        await _run(["kcat", "-b", b, "-L"])
        await _run(["kcat", "-b", b, "-P", "-t", TOPIC, "-p", "0", "-K", ":", "-H", "h=v"],
                   stdin=b"k1:v1\nk2:v2\n")
        await _run(["kcat", "-b", b, "-C", "-t", TOPIC, "-p", "0", "-o", "beginning", "-e"])
        await _run(["kcat", "-b", b, "-C", "-t", TOPIC, "-p", "0", "-o", "-1", "-e"])
    _write("kcat", version, recorder)


def _write(name: str, version: str, recorder: Recorder) -> None:
    path = HERE / f"{name}.json"
    doc = {"client": name, "version": version, "captured_with": "capture.py",
           "served": {int(k): [r.min, r.max] for k, r in recorder.cluster.supported.items()},
           "frames": recorder.frames}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    kinds = sorted({(f["api_key"], f["api_version"]) for f in recorder.frames})
    print(f"{name}: {version}: {len(recorder.frames)} frames, (api, version) {kinds}")
    # the frames the cluster got from the producers must hold valid batches
    for data in recorder.cluster.logs.values():
        for blob in data:
            for _pos, head in iter_batches(blob):
                assert head.size >= HEADER.size


def _kio_ranges() -> Mapping[ApiKey, VersionRange]:
    from kio.schema.index import api_key_map, schema_name_map
    ranges = {}
    for key in ApiKey:
        versions = sorted(schema_name_map[api_key_map[int(key)]])
        ranges[key] = VersionRange(versions[0], versions[-1])
    return MappingProxyType(ranges)


async def probe(python: str) -> None:
    """Advertise every version kio knows and print what each client picks (nothing written):
    the versions the clients would use against a broker that offers everything."""
    for name, script in CLIENTS.items():
        server, recorder, bootstrap = await _start(_kio_ranges())
        async with server:
            with contextlib.suppress(RuntimeError, TimeoutError):
                await _run([python, "-c", script, bootstrap])
        print(name, sorted({(f["api_key"], f["api_version"]) for f in recorder.frames}))


if __name__ == "__main__":
    python = next((a for a in sys.argv[1:] if not a.startswith("--")), "/tmp/kvenv/bin/python")
    asyncio.run(probe(python) if "--probe" in sys.argv else capture(python))
