"""Issue 14 items 2 and 6 together: a TLS client certificate is a principal on the protocols that
have no login (V1, Cursus, TANK).

One ``bayou serve`` subprocess with ``[security] anonymous = "none"`` and every listener on TLS with
optional client certificates (Iggy's left plain, for the setup as root). Iggy's root creates the
stream ``mtls`` with topics a, b and priv and the user ``alice`` allowed to send on a and poll b.
A connection presenting a certificate with CN ``alice`` then gets exactly alice's grants on every
protocol, as she has them at each request (a change of her permissions applies to the next one on
the same connection); a certificate whose CN names no user, and no certificate at all, are
anonymous: allowed nothing.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
import trustme

from bayou.protocols.iggy import messages as im
from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, decode_chunk, encode_bundle
from support.brokers import BrokerProcess, LineConn
from support.cursus import FrameConn, envelope
from support.iggy import legacy_login, poll
from support.tank import PING, TankConn

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

STREAM = "mtls"
A, B, PRIV = "a", "b", "priv"


@dataclass(frozen=True)
class Pki:
    ca: str
    alice: tuple[str, str]  # (certificate, key): CN alice, a user
    bob: tuple[str, str]  # CN bob: no such user

    def client(self, who: tuple[str, str] | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca)
        if who is not None:
            ctx.load_cert_chain(*who)
        return ctx


def _pki(root: Path) -> tuple[Pki, list[str]]:
    ca = trustme.CA()
    files: dict[str, str] = {}

    def write(name: str, blob: trustme.Blob) -> str:
        files[name] = str(root / name)
        blob.write_to_path(files[name])
        return files[name]

    broker = ca.issue_cert("localhost", "127.0.0.1", common_name="bayou-broker")
    alice = ca.issue_cert("alice.example", common_name="alice")
    bob = ca.issue_cert("bob.example", common_name="bob")
    pki = Pki(write("ca.pem", ca.cert_pem),
              (write("alice.pem", alice.cert_chain_pems[0]), write("alice.key", alice.private_key_pem)),
              (write("bob.pem", bob.cert_chain_pems[0]), write("bob.key", bob.private_key_pem)))
    args = ["--tls-cert", write("broker.pem", broker.cert_chain_pems[0]),
            "--tls-key", write("broker.key", broker.private_key_pem), "--tls-ca", pki.ca,
            "--tls-client-auth", "optional", "--tls-plain", "iggy"]
    return pki, args


@dataclass
class Setup:
    broker: BrokerProcess
    pki: Pki
    ids: dict[str, int]


@pytest.fixture(scope="module")
def process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Pki]]:
    tmp = tmp_path_factory.mktemp("mtls-principals")
    pki, args = _pki(tmp)
    config = tmp / "bayou.toml"
    config.write_text('[security]\nanonymous = "none"\n')
    b = BrokerProcess(tmp / "data", "--config", str(config), *args).start()
    try:
        yield b, pki
    finally:
        b.stop()


def _alice_grants(ids: dict[str, int], *, send_a: bool = True) -> im.Permissions:
    return im.Permissions(streams=(im.StreamPermissions(ids[STREAM], topics=(
        im.TopicPermissions(ids[A], send_messages=send_a),
        im.TopicPermissions(ids[B], poll_messages=True))),))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def setup(process: tuple[BrokerProcess, Pki]) -> AsyncIterator[Setup]:
    b, pki = process
    root = await legacy_login(b.iggy_port)
    ids = {STREAM: (await root.call(im.CreateStream(STREAM))).stream.id}
    for name in (A, B, PRIV):
        ids[name] = (await root.call(im.CreateTopic(im.Identifier(STREAM), name, 1))).topic.id
    await root.call(im.CreateUser("alice", "pw-alice-1", permissions=_alice_grants(ids)))
    await root.close()
    yield Setup(b, pki, ids)


async def _stored(s: Setup, topic: str) -> list[bytes]:
    root = await legacy_login(s.broker.iggy_port)
    polled = await root.call(poll(STREAM, topic, 0, count=100))
    await root.close()
    return [msg.payload for msg in polled.messages]


async def _open(port: int, ctx: ssl.SSLContext) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost",
                                         limit=1 << 24)


def _denied(reply: str, cid: int) -> None:
    assert reply.startswith(f"V1|{cid}|ERR|UNAUTHORIZED|"), reply


async def test_v1_certificate_principal_gets_the_users_grants_as_they_are_now(setup: Setup) -> None:
    line = LineConn(*await _open(setup.broker.port, setup.pki.client(setup.pki.alice)))
    assert (await line.ask("V1|1|PRODUCE|mtls.a k:v1-a acks=1")).startswith("V1|1|OK")
    _denied(await line.ask("V1|2|CONSUME|mtls.a 0 0"), 2)  # send only
    _denied(await line.ask("V1|3|PRODUCE|mtls.priv k:forged acks=1"), 3)
    _denied(await line.ask("V1|4|CONSUME|mtls.priv 0 0"), 4)
    _denied(await line.ask("V1|5|ADMIN_DELETE_TOPIC|mtls.b"), 5)
    meta = await line.ask("V1|6|ADMIN_GET_METADATA|")
    assert "mtls.a" in meta and "mtls.b" in meta and "mtls.priv" not in meta, meta

    # Iggy's root takes alice's send grant away: her open V1 connection loses it at the next request
    root = await legacy_login(setup.broker.iggy_port)
    await root.call(im.UpdatePermissions(im.Identifier("alice"), _alice_grants(setup.ids, send_a=False)))
    _denied(await line.ask("V1|7|PRODUCE|mtls.a k:after-revoke acks=1"), 7)
    await root.call(im.UpdatePermissions(im.Identifier("alice"), _alice_grants(setup.ids)))
    await root.close()
    assert (await line.ask("V1|8|PRODUCE|mtls.a k:v1-a2 acks=1")).startswith("V1|8|OK")
    await line.close()
    assert await _stored(setup, PRIV) == []
    assert b"after-revoke" not in await _stored(setup, A)


async def test_cursus_certificate_principal(setup: Setup) -> None:
    c = FrameConn(*await _open(setup.broker.cursus_port, setup.pki.client(setup.pki.alice)))
    reply = (await c.ask(envelope("PUBLISH topic=mtls.a acks=1 producerId=p1 message=cursus-a"))).decode()
    assert json.loads(reply)["status"] == "OK", reply
    for command in ("PUBLISH topic=mtls.priv acks=1 producerId=p1 message=forged",
                    "CONSUME topic=mtls.priv partition=0 offset=0 member=x group=g batch=10",
                    "DELETE topic=mtls.a"):
        reply = (await c.ask(envelope(command))).decode()
        assert reply.startswith("ERROR: unauthorized reason="), (command, reply)
    listed = (await c.ask(envelope("LIST"))).decode()
    assert "mtls.a" in listed and "mtls.priv" not in listed, listed
    await c.close()
    assert b"cursus-a" in await _stored(setup, A)
    assert await _stored(setup, PRIV) == []


async def test_tank_certificate_principal(setup: Setup) -> None:
    root = await legacy_login(setup.broker.iggy_port)
    await root.call(im.SendMessages(im.Identifier(STREAM), im.Identifier(B), im.Partitioning.partition(0),
                                    (im.Message(b"for-b"),)))
    await root.close()
    t = TankConn(*await _open(setup.broker.tank_port, setup.pki.client(setup.pki.alice)))
    assert await t.read_exactly(5) == PING
    bundle = encode_bundle([TankMessage(0, 1_650_000_000_000, b"k", b"tank-a")])
    produced = await t.call(tm.Produce(1, (tm.ProduceTopic("mtls.a", (tm.ProduceEntry(0, bundle),)),)))
    assert isinstance(produced, tm.ProduceResponse)
    assert produced.topics[0].topic_error is None and produced.topics[0].errors == (0,)
    produced = await t.call(tm.Produce(1, (tm.ProduceTopic("mtls.priv", (tm.ProduceEntry(0, bundle),)),)))
    assert isinstance(produced, tm.ProduceResponse) and produced.topics[0].topic_error == 0xFE
    whole = (tm.ConsumePartition(0, 0, 1 << 20),)
    consumed = await t.call(tm.Consume(2, (tm.ConsumeTopic("mtls.b", whole),)))
    assert isinstance(consumed, tm.ConsumeResponse)
    result = consumed.topics[0]
    assert isinstance(result, tm.ConsumeTopicResult)
    p = result.partitions[0]
    assert [m.value for m in decode_chunk(p.chunk, p.base_seq, sparse_first=False)] == [b"for-b"]
    denied = await t.call(tm.Consume(3, (tm.ConsumeTopic("mtls.priv", whole),)))
    assert isinstance(denied, tm.ConsumeResponse) and isinstance(denied.topics[0], tm.ConsumeUnknownTopic)
    await t.close()
    assert b"tank-a" in await _stored(setup, A)
    assert await _stored(setup, PRIV) == []


@pytest.mark.parametrize("who", ["bob", "no certificate"])
async def test_a_certificate_naming_no_user_or_none_is_anonymous(setup: Setup, who: str) -> None:
    pki = setup.pki
    line = LineConn(*await _open(setup.broker.port, pki.client(pki.bob if who == "bob" else None)))
    _denied(await line.ask("V1|1|PRODUCE|mtls.a k:anon acks=1"), 1)
    _denied(await line.ask("V1|2|CONSUME|mtls.b 0 0"), 2)
    assert await line.ask("V1|3|PING|") == "V1|3|OK"  # the connection still works
    await line.close()
    assert b"anon" not in await _stored(setup, A)
