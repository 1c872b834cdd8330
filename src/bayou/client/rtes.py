"""A small synchronous client for the V1 line protocol (used by the CLI and the tests)."""

from __future__ import annotations

import itertools
import socket
from dataclasses import dataclass

from bayou.client.tls import TlsConfig
from bayou.protocols.rtes.codec import ENCODING, ERRORS, UnsafeField, check_field

__all__ = ["Produced", "RtesClient", "RtesClientError", "UnsafeField"]


class RtesClientError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Produced:
    partition: int
    offset: int
    hw: int


def field(payload: str, name: str) -> str:
    """The token after the first ``name=`` (how the reference SDK reads payloads)."""
    i = payload.find(name + "=")
    if i < 0:
        raise RtesClientError("BAD_REPLY", f"no {name}= in {payload!r}")
    return payload[i + len(name) + 1 :].split(" ", 1)[0]


def int_list(text: str) -> list[int]:
    inner = text.strip()[1:-1].strip()
    return [int(x) for x in inner.split()] if inner else []


class RtesClient:
    def __init__(self, host: str = "127.0.0.1", port: int = 9092, timeout: float = 10.0,
                 tls: TlsConfig | None = None) -> None:
        self.addr = (host, port)
        self.timeout = timeout
        self.tls = tls
        self._sock: socket.socket | None = None
        self._buf = b""
        self._ids = itertools.count(1)

    def __enter__(self) -> RtesClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _conn(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.create_connection(self.addr, timeout=self.timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                try:
                    self._sock = self.tls.wrap(self._sock, self.addr[0])
                except BaseException:
                    self.close()
                    raise
            self._buf = b""
        return self._sock

    def _readline(self) -> bytes:
        sock = self._conn()
        while b"\n" not in self._buf:
            chunk = sock.recv(1 << 20)
            if not chunk:
                self.close()
                raise ConnectionError("broker closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def raw(self, line: bytes) -> bytes:
        """Send one raw request line; return the raw reply line (without LF)."""
        self._conn().sendall(line + b"\n")
        return self._readline()

    def request(self, command: str, *args: str) -> str:
        """One request; every argument must be one V1 token (UnsafeField, before anything is
        sent, otherwise: a newline or '|' in a key could smuggle in another request)."""
        check_field("command", command)
        for i, arg in enumerate(args):
            check_field(f"argument {i + 1}", arg)
        cid = str(next(self._ids))
        line = f"V1|{cid}|{command}|{' '.join(args)}".encode(ENCODING, ERRORS)
        reply = self.raw(line).decode(ENCODING, ERRORS)
        parts = reply.split("|", 4)
        if len(parts) < 3 or parts[0] != "V1":
            raise RtesClientError("BAD_REPLY", reply)
        if parts[1] != cid:
            raise RtesClientError("BAD_REPLY", f"correlation mismatch: sent {cid}, got {parts[1]}")
        if parts[2] == "ERR":
            raise RtesClientError(parts[3] if len(parts) > 3 else "", parts[4] if len(parts) > 4 else "")
        return reply.split("|", 3)[3] if len(parts) > 3 else ""

    # -- conveniences --------------------------------------------------------------------------

    def ping(self) -> None:
        self.request("PING")

    @staticmethod
    def check_record(topic: str, key: str, value: str) -> None:
        """UnsafeField unless the topic, key and value can be sent as a V1 PRODUCE: one token each,
        no ':' in the key (the server splits at the first one), no ',' in the value (CONSUME joins
        records with ',')."""
        check_field("topic", topic)
        check_field("key", key, ":", empty_ok=True)
        check_field("value", value, ",", empty_ok=True)

    def produce(self, topic: str, key: str, value: str, acks: str = "1") -> Produced:
        self.check_record(topic, key, value)
        p = self.request("PRODUCE", topic, f"{key}:{value}", f"acks={acks}")
        return Produced(int(field(p, "partition")), int(field(p, "offset")), int(field(p, "hw")))

    def consume(self, topic: str, partition: int, offset: int) -> tuple[list[tuple[int, str]], int]:
        p = self.request("CONSUME", topic, str(partition), str(offset))
        msgs = field(p, "messages")
        records = []
        for item in msgs.split(",") if msgs else []:
            off, _sep, value = item.partition(":")
            records.append((int(off), value))
        return records, int(field(p, "hw"))

    def create_topic(self, topic: str, partitions: int, replication_factor: int | None = None,
                     config: dict[str, str] | None = None) -> str:
        """Create ``topic``; without ``replication_factor`` the broker's default applies (sent as
        -1, bayou's extension of ADMIN_CREATE_TOPIC)."""
        extra = [f"{k}={v}" for k, v in (config or {}).items()]
        rf = -1 if replication_factor is None else replication_factor
        return self.request("ADMIN_CREATE_TOPIC", topic, str(partitions), str(rf), *extra)

    def describe_topic(self, topic: str) -> dict[str, str]:
        p = self.request("ADMIN_DESCRIBE_TOPIC", topic)
        out: dict[str, str] = {}
        rest = p
        for name in ("topic", "partitions", "replication_factor", "log_start", "log_end", "hw",
                     "size_bytes", "roles"):
            out[name] = _bracketed(rest, name)
        out["config"] = p.split(" config=", 1)[1] if " config=" in p else ""
        head = p.split(" config=", 1)[0]
        # ok / offline:<percent-escaped reason> per partition (absent from older brokers)
        out["status"] = _bracketed(head, "status") if " status=" in head else ""
        return out

    def delete_topic(self, topic: str) -> None:
        self.request("ADMIN_DELETE_TOPIC", topic)

    def list_topics(self) -> list[str]:
        p = self.request("ADMIN_GET_METADATA")
        inner = _bracketed(p, "topics")[1:-1].strip()
        return inner.split() if inner else []

    def offset(self, group: str, topic: str, partition: int) -> int:
        return int(field(self.request("OFFSET", group, topic, str(partition)), "offset"))


def _bracketed(payload: str, name: str) -> str:
    i = payload.find(name + "=")
    if i < 0:
        raise RtesClientError("BAD_REPLY", f"no {name}= in {payload!r}")
    rest = payload[i + len(name) + 1 :]
    if rest.startswith("["):
        return rest[: rest.index("]") + 1]
    return rest.split(" ", 1)[0]
