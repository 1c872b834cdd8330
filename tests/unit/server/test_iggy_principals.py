"""What the broker's authorizer asks the Iggy front end: a principal's permissions now, from the
real user store (a login by user id and token, a TLS client certificate by its CN as user name),
and where a bayou topic sits in the catalog. mTLS itself (the listener that verifies the
certificate and sets ``Connection.peer_cn``) is tested with TLS; this is the mapping it relies on."""

from __future__ import annotations

import contextvars
import logging
from pathlib import Path

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.broker.authz import (
    ANONYMOUS,
    EVERYTHING,
    NOTHING,
    Caller,
    GlobalPermissions,
    Permissions,
    Principal,
    StreamPermissions,
    TopicPermissions,
    bind_caller,
    connection_principal,
)
from bayou.errors import Unauthorized
from bayou.server.iggy import IggyService
from bayou.server.iggy.users import hash_token

SENDER = Permissions(GlobalPermissions(send_messages=True))


@pytest.fixture
def iggy(tmp_path: Path) -> IggyService:
    service = IggyService(Broker(BrokerConfig(data_dir=tmp_path / "data")), port=0)
    service.serve_authorizer()
    service.broker.authorizer.configure(anonymous="read")
    return service


def test_a_certificate_is_the_user_its_cn_names_as_it_is_now(iggy: IggyService,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    az = iggy.broker.authorizer
    carol = iggy.users.create_user("carol", "pw-carol", permissions=SENDER)
    by_cert = connection_principal("carol")
    assert az.permits_topic(by_cert, "send", "t") and not az.permits_topic(by_cert, "poll", "t")
    iggy.users.update_user("carol", active=False)  # inactive: worth what anonymous is (read)
    assert not az.permits_topic(by_cert, "send", "t") and az.permits_topic(by_cert, "poll", "t")
    iggy.users.update_user("carol", active=True)
    iggy.users.update_permissions(carol.id, None)  # no permissions: nothing, not anonymous's
    assert iggy.user_permissions(by_cert) == NOTHING
    assert iggy.user_permissions(connection_principal("iggy")) is EVERYTHING  # root
    with caplog.at_level(logging.INFO, logger="bayou.iggy"):
        stranger = connection_principal("mallory")
        assert az.permits_topic(stranger, "poll", "t") and not az.permits_topic(stranger, "send", "t")
        assert az.permits_topic(stranger, "poll", "u")
    assert sum("names no active user" in r.message for r in caplog.records) == 1  # once per CN
    assert connection_principal(None) is ANONYMOUS


def test_a_login_ends_with_its_user_or_token(iggy: IggyService) -> None:
    dave = iggy.users.create_user("dave", "pw-dave", permissions=SENDER)
    token = iggy.users.create_token(dave.id, "ci-token", None)
    by_password = Principal.login(dave.id, "dave")
    by_token = Principal.login(dave.id, "dave", hash_token(token))
    assert iggy.user_permissions(by_password) == SENDER == iggy.user_permissions(by_token)
    iggy.users.delete_token(dave.id, "ci-token")
    assert iggy.user_permissions(by_token) is None and iggy.user_permissions(by_password) == SENDER
    iggy.users.delete_user("dave")
    assert iggy.user_permissions(by_password) is None
    assert not iggy.broker.authorizer.permits_topic(by_password, "poll", "t")  # not even anonymous's


def test_a_connections_kept_answers_go_with_any_change(iggy: IggyService) -> None:
    """The authorizer keeps each connection's answers until users or topics change: a grant
    taken away, a user deleted or a topic moved applies to the very next request."""
    az = iggy.broker.authorizer
    stream = iggy.catalog.add_stream("s", 0)
    topic = iggy.catalog.add_topic(stream, "t", "s.t", 0)
    grant = Permissions(streams=(StreamPermissions(stream.id, topics=(
        TopicPermissions(topic.id, send_messages=True),)),))
    erin = iggy.users.create_user("erin", "pw-erin", permissions=grant)

    def sends() -> bool:
        try:
            az.check_topic("send", "s.t")
        except Unauthorized:
            return False
        return True

    def as_erin() -> list[bool]:
        bind_caller(Caller(Principal.login(erin.id, "erin")))
        seen = [sends(), sends()]
        iggy.users.update_permissions(erin.id, None)
        seen.append(sends())
        iggy.users.update_permissions(erin.id, grant)
        seen.append(sends())
        iggy.catalog.remove_topic(stream, topic.id)  # s.t now goes by its prefix: no topic grant
        seen.append(sends())
        iggy.catalog.add_topic(stream, "t", "s.t", 0, topic_id=topic.id)
        seen.append(sends())
        iggy.users.delete_user("erin")
        seen.append(sends())
        return seen

    assert contextvars.copy_context().run(as_erin) == [True, True, False, True, False, True, False]
