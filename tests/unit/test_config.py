"""The config file is checked against a schema: a key of the wrong type, an unknown key, a file that
is not UTF-8 or not TOML is named in one clear line, and ``bayou serve`` exits non-zero without a
traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bayou.config import load_config
from bayou.errors import InvalidConfig

BAD = [
    ('default_partitions = 3\n', "unknown config keys: default_partitions"),
    ('[broker]\ndefault_partitions = "three"\n',
     "[broker] default_partitions must be an integer, not the string 'three'"),
    ('data_dir = 5\n', "data_dir must be a string, not the number 5"),
    ('listeners = 3\n', "[listeners] must be a table"),
    ('[broker]\nauto_create_topics = "false"\n',
     "[broker] auto_create_topics must be a boolean (true or false), not the string 'false'"),
    ('[broker]\nreplication_factor = 2.5\n', "[broker] replication_factor must be an integer"),
    ('[broker]\nauto_create_topics = 1\n', "[broker] auto_create_topics must be a boolean"),
    ('[log]\nsegment_bytes = "1MB"\n', "[log] segment_bytes must be an integer"),
    ('[log]\nsegmentbytes = 1\n', "unknown [log] keys: segmentbytes"),
    ('[iggy]\nseed_dialect = "yes"\n', "[iggy] seed_dialect must be a boolean"),
    ('[iggy]\nroot_password = 1234\n', "[iggy] root_password must be a string"),
    ('[security]\nanonymous = false\n', "[security] anonymous must be a string, not the boolean false"),
    ('[security]\nanonymous = "readonly"\n',
     "[security] anonymous must be one of all, read, none, not 'readonly'"),
    ('[security]\nanon = "none"\n', "unknown [security] keys: anon (known: anonymous)"),
    ('[cluster]\nsession_timeout_ms = "4s"\n', "[cluster] session_timeout_ms must be an integer"),
    ('[listeners]\nrtes = true\n', "[listeners] rtes must be a string or an integer"),
    ('[listeners]\nkafka2 = "9092"\n', "unknown listener 'kafka2'"),
    ('[advertised_ports]\nkafka = "19092"\n', "[advertised_ports] kafka must be an integer"),
    ('[advertised_ports]\nkafka = 0\n', "[advertised_ports] kafka: port 0 out of range 1..65535"),
    ('[advertised_ports]\nkafak = 19092\n', "[advertised_ports] unknown listener 'kafak'"),
    ('advertised_ports = 19092\n', "[advertised_ports] must be a table"),
    ('max_connections = "many"\n', "max_connections must be an integer"),
    ('shutdown_grace_s = "10s"\n', "shutdown_grace_s must be a number"),
    ('broker = 1\n', "[broker] must be a table"),
    ('[broker]\ndefault_partitions = 0\n', "default partitions must be >= 1"),
    ('fsync = "sometimes"\n', "fsync must be always, never or interval:<ms>"),
    ('data_dir = \n', "not valid TOML"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m for _t, m in BAD])
def test_bad_values_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bayou.toml"
    path.write_text(text)
    with pytest.raises(InvalidConfig) as err:
        load_config(path)
    assert message in err.value.message
    assert str(path) in err.value.message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bayou.toml"
    path.write_bytes(b'data_dir = "d\xff"\n')
    with pytest.raises(InvalidConfig, match="not UTF-8 text"):
        load_config(path)


def test_good_file_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "bayou.toml"
    path.write_text('data_dir = "d"\nshutdown_grace_s = 3\nmax_connections = 7\n'
                    '[listeners]\nrtes = 19092\ncursus = "off"\n'
                    '[broker]\nauto_create_topics = false\ndefault_partitions = 5\n'
                    '[log]\nsegment_bytes = 1048576\n[iggy]\nseed_dialect = true\n')
    cfg = load_config(path)
    assert cfg.broker.auto_create_topics is False
    assert cfg.broker.default_partitions == 5
    assert cfg.broker.data_dir == Path("d")
    assert cfg.broker.log.segment_bytes == 1048576
    assert cfg.listeners["rtes"] == ("127.0.0.1", 19092)  # a bare port binds loopback (issue 14.8)
    assert cfg.listeners["cursus"] is None
    assert cfg.shutdown_grace_s == 3 and cfg.max_connections == 7
    assert cfg.iggy.seed_dialect is True
    assert cfg.security.anonymous == "all"  # the default: today's behaviour
    path.write_text('[security]\nanonymous = "read"\n')
    assert load_config(path).security.anonymous == "read"


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bayou.toml"
    path.write_text('data_dir = "d"\nadvertised_host = "a"\n')
    cfg = load_config(path, data_dir="e", advertised_host="b")
    assert cfg.broker.data_dir == Path("e") and cfg.advertised_host == "b"


@pytest.mark.parametrize("text", [b'[broker]\ndefault_partitions = "three"\n', b"listeners = 3\n",
                                  b"\xff\xfe\n", b'[broker]\nauto_create_topics = "false"\n'])
def test_serve_refuses_without_a_traceback(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "bayou.toml"
    path.write_bytes(text)
    proc = subprocess.run([sys.executable, "-m", "bayou", "serve", "--config", str(path),
                           "--data-dir", str(tmp_path / "data"), "--log-format", "text"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr
    assert not (tmp_path / "data").exists()


def test_the_kafka_listener_is_off_unless_configured(tmp_path: Path) -> None:
    """Kafka clients use the V1 port (first-byte sniff); a Kafka-only listener is opt-in."""
    assert load_config(None).listeners["kafka"] is None
    path = tmp_path / "bayou.toml"
    path.write_text('[listeners]\nkafka = "0.0.0.0:19092"\n')
    assert load_config(path).listeners["kafka"] == ("0.0.0.0", 19092)
    assert load_config(path, listeners={"kafka": "off"}).listeners["kafka"] is None
    assert load_config(None, listeners={"kafka": "29092"}).listeners["kafka"] == ("127.0.0.1", 29092)


def test_advertised_ports_from_the_file_and_the_flags(tmp_path: Path) -> None:
    """A listener's port as clients reach it (NAT, containers): the file's table, the flags over it."""
    from bayou.config import parse_advertised_ports

    assert load_config(None).advertised_port("kafka", 9092) == 9092  # none: the bound port
    path = tmp_path / "bayou.toml"
    path.write_text('[advertised_ports]\nkafka = 19092\nrtes = 19093\n')
    cfg = load_config(path, advertised_ports=parse_advertised_ports(["rtes=29093", "replication=29094"]))
    assert cfg.advertised_ports == {"kafka": 19092, "rtes": 29093, "replication": 29094}
    assert cfg.advertised_port("kafka", 9092) == 19092 and cfg.advertised_port("tank", 11011) == 11011
    for bad, message in (("kafka", "expects LISTENER=PORT"), ("kafka=x", "expects LISTENER=PORT"),
                         ("kafka=70000", "out of range"), ("nope=1", "unknown listener 'nope'")):
        with pytest.raises(InvalidConfig, match=message):
            parse_advertised_ports([bad])
