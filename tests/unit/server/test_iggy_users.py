"""The Iggy user and token store: first start, persistence without plain secrets, logins, the
administration rules Iggy's server applies, and Iggy's permission messages as bayou's model."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bayou.broker import authz
from bayou.protocols.iggy import messages as m
from bayou.server.iggy.users import (
    AuthFailure,
    CannotChangeRootPermissions,
    CannotDeleteRoot,
    InvalidPassword,
    InvalidTokenName,
    InvalidUsername,
    TokenAlreadyExists,
    TokenLimitReached,
    TokenNotFound,
    User,
    UserAlreadyExists,
    UserNotFound,
    UserStore,
    UserStoreError,
    from_iggy,
    permissions_of,
    to_iggy,
)

ROOT_PASSWORD = "root-s3cret-pw"


class Clock:
    def __init__(self, now: int = 1_700_000_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "iggy" / "users.json"


@pytest.fixture
def store(path: Path, clock: Clock) -> UserStore:
    s = UserStore(path, "iggy", ROOT_PASSWORD, clock=clock, max_tokens_per_user=3)
    s.load()
    return s


def _reloaded(path: Path, clock: Clock) -> UserStore:
    s = UserStore(path, "iggy", "another-default", clock=clock)
    s.load()
    return s


def _auth_reason(fn: Callable[..., object], *args: str) -> tuple[str, int]:
    with pytest.raises(AuthFailure) as err:
        fn(*args)
    return err.value.reason, err.value.iggy_status


# -- first start and persistence ----------------------------------------------------------------


def test_first_load_creates_root_with_a_hashed_password(store: UserStore, path: Path, clock: Clock) -> None:
    root = store.get(0)
    assert root == User(0, "iggy", clock.now, True, authz.Permissions.everything())
    assert store.get("iggy") == root and root.is_root and store.users() == [root]
    text = path.read_text()
    assert ROOT_PASSWORD not in text
    (saved,) = json.loads(text)["users"]
    assert saved["password_hash"].startswith("$argon2id$v=19$m=19456,t=2,p=1$")
    assert store.authenticate("iggy", ROOT_PASSWORD) == root


def test_reload_reads_the_file_instead_of_recreating_root(store: UserStore, path: Path,
                                                          clock: Clock) -> None:
    perms = m.Permissions(m.GlobalPermissions(read_users=True), (
        m.StreamPermissions(3, poll_messages=True, topics=(m.TopicPermissions(1, send_messages=True),)),))
    alice = store.create_user("alice", "alice-pw", permissions=from_iggy(perms))
    store.create_user("bob", "bob-pw", active=False)
    again = _reloaded(path, clock)
    assert again.users() == store.users()
    assert again.get("alice") == alice and alice.permissions == from_iggy(perms)
    assert again.authenticate("iggy", ROOT_PASSWORD).id == 0  # not the new default password
    _auth_reason(again.authenticate, "iggy", "another-default")


def test_an_unreadable_file_is_an_error_not_a_reset(path: Path, clock: Clock) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(ValueError):
        UserStore(path, clock=clock).load()
    assert path.read_text() == "{not json"


def test_root_credentials_are_validated(path: Path) -> None:
    with pytest.raises(InvalidPassword):
        UserStore(path, "iggy", "pw").load()
    with pytest.raises(InvalidUsername):
        UserStore(path, "ig", "iggy").load()
    assert not path.exists()


def test_default_root_is_iggy_iggy(path: Path) -> None:
    s = UserStore(path)
    s.load()
    assert s.authenticate("iggy", "iggy").id == 0


# -- logins -------------------------------------------------------------------------------------


def test_authenticate(store: UserStore) -> None:
    bob = store.create_user("bob", "bob-pw")
    assert store.authenticate("bob", "bob-pw") == bob
    assert _auth_reason(store.authenticate, "bob", "wrong") == ("invalid_credentials", 42)
    assert _auth_reason(store.authenticate, "nobody", "bob-pw") == ("invalid_credentials", 42)
    store.update_user("bob", active=False)
    assert _auth_reason(store.authenticate, "bob", "bob-pw") == ("inactive", 47)
    # the inactive status is told only to someone who knows the password
    assert _auth_reason(store.authenticate, "bob", "wrong") == ("invalid_credentials", 42)


# -- user administration ------------------------------------------------------------------------


def test_ids_are_the_lowest_free_and_usernames_unique(store: UserStore) -> None:
    assert [store.create_user(n, "password").id for n in ("aaa", "bbb", "ccc")] == [1, 2, 3]
    store.delete_user("bbb")
    assert store.create_user("ddd", "password").id == 2
    with pytest.raises(UserAlreadyExists) as err:
        store.create_user("aaa", "password")
    assert err.value.iggy_status == 46


@pytest.mark.parametrize(("username", "password", "error", "status"), [
    ("ab", "password", InvalidUsername, 43),
    ("a" * 51, "password", InvalidUsername, 43),
    ("é" * 26, "password", InvalidUsername, 43),  # 52 bytes: the limits count bytes, as Iggy does
    ("alice", "pw", InvalidPassword, 44),
    ("alice", "p" * 101, InvalidPassword, 44),
])
def test_limits_of_e9(store: UserStore, username: str, password: str, error: type[UserStoreError],
                      status: int) -> None:
    with pytest.raises(error) as err:
        store.create_user(username, password)
    assert err.value.iggy_status == status
    assert store.get(username) is None


def test_update_user(store: UserStore) -> None:
    alice = store.create_user("alice", "alice-pw")
    store.create_user("bob", "bob-pw")
    renamed = store.update_user(alice.id, username="alicia")
    assert renamed.username == "alicia" and store.get("alice") is None and store.get("alicia") == renamed
    assert store.update_user("alicia", username="alicia").username == "alicia"  # its own name is fine
    with pytest.raises(UserAlreadyExists):
        store.update_user("alicia", username="bob")
    with pytest.raises(InvalidUsername):
        store.update_user("alicia", username="al")
    assert store.update_user(alice.id, active=False).active is False
    with pytest.raises(UserNotFound) as err:
        store.update_user("nobody", active=True)
    assert err.value.iggy_status == 20


def test_update_permissions(store: UserStore, path: Path, clock: Clock) -> None:
    alice = store.create_user("alice", "alice-pw")
    perms = authz.Permissions(authz.GlobalPermissions(poll_messages=True))
    assert store.update_permissions("alice", perms).permissions == perms
    reloaded = _reloaded(path, clock).get(alice.id)
    assert reloaded is not None and reloaded.permissions == perms
    assert store.update_permissions(alice.id, None).permissions is None
    with pytest.raises(CannotChangeRootPermissions) as err:
        store.update_permissions(0, None)
    assert err.value.iggy_status == 49
    with pytest.raises(UserNotFound):
        store.update_permissions(42, perms)


def test_change_password(store: UserStore, path: Path, clock: Clock) -> None:
    store.create_user("alice", "alice-pw")
    refused = _auth_reason(store.change_password, "alice", "wrong", "new-password")
    assert refused == ("invalid_credentials", 42)
    with pytest.raises(InvalidPassword):
        store.change_password("alice", "alice-pw", "pw")
    store.change_password("alice", "alice-pw", "new-password")
    again = _reloaded(path, clock)
    assert again.authenticate("alice", "new-password").username == "alice"
    _auth_reason(again.authenticate, "alice", "alice-pw")
    assert "new-password" not in path.read_text()


def test_delete_user(store: UserStore) -> None:
    alice = store.create_user("alice", "alice-pw")
    token = store.create_token(alice.id, "ci-token", None)
    store.delete_user("alice")
    assert store.get(alice.id) is None
    assert _auth_reason(store.authenticate_token, token) == ("invalid_token", 53)
    with pytest.raises(CannotDeleteRoot) as err:
        store.delete_user(0)
    assert err.value.iggy_status == 48
    with pytest.raises(CannotDeleteRoot):
        store.delete_user("iggy")
    with pytest.raises(UserNotFound):
        store.delete_user("alice")


# -- personal access tokens ---------------------------------------------------------------------


def test_tokens_are_returned_once_and_stored_as_sha256(store: UserStore, path: Path, clock: Clock) -> None:
    alice = store.create_user("alice", "alice-pw")
    token = store.create_token(alice.id, "ci-token", None)
    assert 32 <= len(token) <= 255  # it travels as name8
    assert store.authenticate_token(token) == alice
    text = path.read_text()
    assert token not in text and hashlib.sha256(token.encode()).hexdigest() in text
    assert _reloaded(path, clock).authenticate_token(token) == alice
    assert _auth_reason(store.authenticate_token, token + "x") == ("invalid_token", 53)
    assert store.create_token(alice.id, "other", None) != token


def test_token_expiry(store: UserStore, clock: Clock) -> None:
    token = store.create_token(0, "short", 1_000_000)
    forever = store.create_token(0, "forever", 0)
    huge = store.create_token(0, "huge", (1 << 64) - 1)  # Iggy's "never expire"
    assert store.tokens(0) == sorted(store.tokens(0), key=lambda t: t.name)
    assert {t.name: t.expiry_at_us for t in store.tokens(0)} == {
        "short": clock.now + 1_000_000, "forever": None, "huge": None}
    assert store.tokens(0)[0].info() == m.PersonalAccessTokenInfo("forever", None)
    clock.now += 999_999
    assert store.authenticate_token(token).id == 0
    clock.now += 1
    assert _auth_reason(store.authenticate_token, token) == ("invalid_token", 53)
    assert store.authenticate_token(forever).id == 0 and store.authenticate_token(huge).id == 0
    assert [t.name for t in store.tokens(0)] == ["forever", "huge", "short"]  # expired ones listed


def test_token_rules(store: UserStore) -> None:
    alice = store.create_user("alice", "alice-pw")
    token = store.create_token(alice.id, "abc", None)
    with pytest.raises(TokenAlreadyExists) as exists:
        store.create_token(alice.id, "abc", None)
    assert exists.value.iggy_status == 51
    assert store.create_token(0, "abc", None)  # names are unique per user
    for bad in ("ab", "x" * 31):
        with pytest.raises(InvalidTokenName) as name:
            store.create_token(alice.id, bad, None)
        assert name.value.iggy_status == 50
    store.create_token(alice.id, "def", None)
    store.create_token(alice.id, "ghi", None)
    with pytest.raises(TokenLimitReached) as limit:
        store.create_token(alice.id, "jkl", None)
    assert limit.value.iggy_status == 52
    with pytest.raises(UserNotFound):
        store.create_token(99, "abc", None)
    store.update_user(alice.id, active=False)
    assert _auth_reason(store.authenticate_token, token) == ("inactive", 47)
    store.delete_token(alice.id, "abc")
    assert [t.name for t in store.tokens(alice.id)] == ["def", "ghi"]
    assert _auth_reason(store.authenticate_token, token) == ("invalid_token", 53)
    with pytest.raises(TokenNotFound) as missing:
        store.delete_token(alice.id, "abc")
    assert missing.value.iggy_status == 20


# -- permissions (the model itself: tests/unit/broker/test_authz.py) ------------------------------


def test_permissions_of_root_and_of_users_without_any() -> None:
    assert permissions_of(User(0, "iggy", 0, True, None)) is authz.EVERYTHING
    assert permissions_of(User(5, "someone", 0, True, None)) is authz.NOTHING


def test_iggy_permissions_convert_both_ways() -> None:
    perms = m.Permissions(m.GlobalPermissions(read_users=True, send_messages=True), (
        m.StreamPermissions(3, poll_messages=True, topics=(m.TopicPermissions(1, send_messages=True),
                                                         m.TopicPermissions(2, manage_topic=True))),
        m.StreamPermissions(4, manage_stream=True)))
    ours = from_iggy(perms)
    assert ours == authz.Permissions(authz.GlobalPermissions(read_users=True, send_messages=True), (
        authz.StreamPermissions(3, poll_messages=True, topics=(
            authz.TopicPermissions(1, send_messages=True), authz.TopicPermissions(2, manage_topic=True))),
        authz.StreamPermissions(4, manage_stream=True)))
    assert to_iggy(ours) == perms
    assert from_iggy(None) is None and to_iggy(None) is None


class _CountingHasher:
    """The store's argon2 hasher, recording the password of every check it makes."""

    def __init__(self, hasher: Any) -> None:
        self.hasher = hasher
        self.checks: list[str] = []

    def hash(self, password: str) -> str:
        return str(self.hasher.hash(password))

    def verify(self, password_hash: str, password: str) -> bool:
        self.checks.append(password)
        return bool(self.hasher.verify(password_hash, password))


def _count_checks(store: UserStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    counting = _CountingHasher(store._hasher)
    monkeypatch.setattr(store, "_hasher", counting)
    return counting.checks


def test_a_passed_password_check_is_remembered_but_never_for_another_password(
        store: UserStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A login that passed is not argon2-checked again (a Spark job's worker processes each log
    in); a wrong password, an unknown user, a changed password and an inactive user still are
    refused, each after a full check."""
    checks = _count_checks(store, monkeypatch)
    bob = store.create_user("bob", "bob-pw")
    assert store.authenticate("bob", "bob-pw") == bob
    assert store.authenticate("bob", "bob-pw") == bob
    assert checks == ["bob-pw"]
    assert _auth_reason(store.authenticate, "bob", "bob-pw ") == ("invalid_credentials", 42)
    assert _auth_reason(store.authenticate, "bob", "") == ("invalid_credentials", 42)
    assert _auth_reason(store.authenticate, "nobody", "bob-pw") == ("invalid_credentials", 42)
    assert checks == ["bob-pw", "bob-pw ", "", "bob-pw"]
    store.create_user("carol", "bob-pw")  # the same password, another user: its own check
    store.authenticate("carol", "bob-pw")
    assert checks[-1] == "bob-pw" and len(checks) == 5
    old_hash = store._record("bob").password_hash  # type: ignore[union-attr]
    assert old_hash in store._passed
    store.change_password("bob", "bob-pw", "bob-new-pw")  # remembered: no check
    assert len(checks) == 5
    assert old_hash not in store._passed  # an old password is not kept in any form
    assert _auth_reason(store.authenticate, "bob", "bob-pw") == ("invalid_credentials", 42)
    assert store.authenticate("bob", "bob-new-pw").username == "bob"
    store.update_user("bob", active=False)
    assert _auth_reason(store.authenticate, "bob", "bob-new-pw") == ("inactive", 47)
    carol_hash = store._record("carol").password_hash  # type: ignore[union-attr]
    assert carol_hash in store._passed
    store.delete_user("carol")
    assert carol_hash not in store._passed


def test_remembered_checks_are_bounded(store: UserStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bayou.server.iggy.users.PASSED_CHECKS_KEPT", 2)
    for name in ("user1", "user2", "user3"):
        store.create_user(name, f"{name}-pw")
        store.authenticate(name, f"{name}-pw")
    assert len(store._passed) == 2
    checks = _count_checks(store, monkeypatch)
    store.authenticate("user1", "user1-pw")  # the oldest went first: checked again
    store.authenticate("user3", "user3-pw")
    assert checks == ["user1-pw"]
