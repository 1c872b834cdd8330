"""SCRAM credentials in the user store: derived whenever a password is set (first start's root user,
a new user, a changed password), kept with the users in their file (never the password), loaded
back, and a users file written before they were kept still loads."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import pytest

from bayou.protocols.scram import ITERATIONS, MECHANISMS, ScramCredential, ScramExchange, ScramFailure
from bayou.server.iggy.users import AuthFailure, UserStore
from support.scram import scram_login

ROOT_PASSWORD = "root-s3cret-pw"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "iggy" / "users.json"


@pytest.fixture
def store(path: Path) -> UserStore:
    s = UserStore(path, "iggy", ROOT_PASSWORD)
    s.load()
    return s


def logs_in(store: UserStore, user: str, password: str, mechanism: str) -> bool:
    x = ScramExchange(mechanism, store.scram_credential)
    try:
        scram_login(x, mechanism, user, password)
    except ScramFailure:
        return False
    return True


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_root_user_of_a_first_start_has_scram_credentials(store: UserStore, mechanism: str) -> None:
    cred = store.scram_credential("iggy", mechanism)
    assert cred is not None and cred.iterations >= ITERATIONS >= 4096
    assert logs_in(store, "iggy", ROOT_PASSWORD, mechanism)
    assert not logs_in(store, "iggy", "iggy", mechanism)


def test_a_new_user_has_credentials_for_each_mechanism_and_they_survive_a_reload(
        store: UserStore, path: Path) -> None:
    store.create_user("alice", "wonder-land")
    creds = {m: store.scram_credential("alice", m) for m in MECHANISMS}
    assert all(creds.values())
    again = UserStore(path, "iggy", ROOT_PASSWORD)
    again.load()
    assert {m: again.scram_credential("alice", m) for m in MECHANISMS} == creds
    for m in MECHANISMS:
        assert logs_in(again, "alice", "wonder-land", m)


def test_the_file_keeps_salt_iterations_and_keys_never_the_password(store: UserStore, path: Path) -> None:
    store.create_user("alice", "wonder-land")
    text = path.read_text()
    assert "wonder-land" not in text and ROOT_PASSWORD not in text
    alice = next(u for u in json.loads(text)["users"] if u["username"] == "alice")
    assert set(alice["scram"]) == set(MECHANISMS)
    for entry in alice["scram"].values():
        assert set(entry) == {"salt", "iterations", "stored_key", "server_key"}
        assert entry["iterations"] >= 4096 and len(base64.b64decode(entry["salt"])) == 32


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_changed_password_changes_the_credentials(store: UserStore, mechanism: str) -> None:
    store.create_user("alice", "wonder-land")
    before = store.scram_credential("alice", mechanism)
    store.change_password("alice", "wonder-land", "looking-glass")
    after = store.scram_credential("alice", mechanism)
    assert before is not None and after is not None and after.salt != before.salt
    assert logs_in(store, "alice", "looking-glass", mechanism)
    assert not logs_in(store, "alice", "wonder-land", mechanism)


def test_a_refused_password_change_keeps_the_credentials(store: UserStore) -> None:
    store.create_user("alice", "wonder-land")
    with pytest.raises(AuthFailure):
        store.change_password("alice", "not-it", "looking-glass")
    assert logs_in(store, "alice", "wonder-land", "SCRAM-SHA-256")


def test_renamed_inactive_and_deleted_users(store: UserStore) -> None:
    store.create_user("alice", "wonder-land")
    store.update_user("alice", username="alicia")  # the name is not in the derivation
    assert logs_in(store, "alicia", "wonder-land", "SCRAM-SHA-512")
    assert store.scram_credential("alice", "SCRAM-SHA-512") is None
    store.update_user("alicia", active=False)
    assert store.scram_credential("alicia", "SCRAM-SHA-512") is None
    assert not logs_in(store, "alicia", "wonder-land", "SCRAM-SHA-512")
    store.update_user("alicia", active=True)
    store.delete_user("alicia")
    assert not logs_in(store, "alicia", "wonder-land", "SCRAM-SHA-512")


def _strip_scram(path: Path) -> None:
    """The users file as bayou wrote it before SCRAM credentials were kept."""
    doc = json.loads(path.read_text())
    for u in doc["users"]:
        del u["scram"]
    path.write_text(json.dumps(doc))


def test_a_users_file_from_before_scram_loads_and_its_users_cannot_use_scram_until_a_new_password(
        store: UserStore, path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store.create_user("alice", "wonder-land")
    _strip_scram(path)
    old = UserStore(path, "iggy", "another-root-pw")  # root's configured password is not its own
    old.load()
    assert old.authenticate("alice", "wonder-land").username == "alice"  # PLAIN and Iggy still work
    assert old.scram_credential("alice", "SCRAM-SHA-256") is None
    assert "set its password again" in caplog.text
    assert not logs_in(old, "alice", "wonder-land", "SCRAM-SHA-256")
    assert old.scram_credential("iggy", "SCRAM-SHA-256") is None  # root: password does not match
    old.change_password("alice", "wonder-land", "looking-glass")
    assert logs_in(old, "alice", "looking-glass", "SCRAM-SHA-256")


def test_the_root_user_of_an_old_file_gets_credentials_when_the_configured_password_is_its_own(
        store: UserStore, path: Path) -> None:
    _strip_scram(path)
    old = UserStore(path, "iggy", ROOT_PASSWORD)
    old.load()
    assert logs_in(old, "iggy", ROOT_PASSWORD, "SCRAM-SHA-512")
    assert "scram" in json.loads(path.read_text())["users"][0]  # and written back


def test_a_damaged_scram_entry_is_refused_like_any_unreadable_users_file(store: UserStore, path: Path
                                                                         ) -> None:
    doc = json.loads(path.read_text())
    doc["users"][0]["scram"]["SCRAM-SHA-256"]["salt"] = "not base64!"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError):
        UserStore(path, "iggy", ROOT_PASSWORD).load()


def test_snapshot_round_trip_keeps_the_credentials(store: UserStore, tmp_path: Path) -> None:
    """Cluster mode shares the users as the snapshot document: the credentials travel in it."""
    store.create_user("alice", "wonder-land")
    other = UserStore(tmp_path / "other.json", "iggy", ROOT_PASSWORD)
    other.replace(store.snapshot())
    cred = other.scram_credential("alice", "SCRAM-SHA-256")
    assert isinstance(cred, ScramCredential) and cred == store.scram_credential("alice", "SCRAM-SHA-256")
    assert dataclasses.asdict(cred)["iterations"] == ITERATIONS
