"""Iggy users and personal access tokens, kept durably in ``<data>/iggy/users.json``.

The Iggy server front end asks this store who a client is (LOGIN_USER, LOGIN_REGISTER, logins by
token), and runs the user and token administration commands on it; the broker's authorizer asks it
what a user may do now (``permissions_of``: bayou's permission model, broker/authz.py, which the
store keeps and the Iggy front end converts from and to Iggy's ``Permissions`` messages).
Everything is synchronous; the calls that hash (``authenticate``, ``create_user``,
``change_password``) take tens of milliseconds by design, so the server runs them in an executor.
Reads (``get``, ``users``, ``tokens``, ``current``) never block: records are immutable and replaced
whole, and only writers take the lock.

Secrets never reach the disk in the clear: passwords are Argon2id hashes (argon2-cffi, t=2,
m=19 MiB, p=1) beside their SCRAM credentials (salt, iterations, StoredKey and ServerKey for
SCRAM-SHA-256 and SCRAM-SHA-512, protocols/scram.py: what a Kafka client's SCRAM login is checked
against, derived whenever a password is set; a user written before they were kept has none until
its password is set again), personal access tokens are stored as their SHA-256 hex digest (as Iggy does) and
handed out once, on creation. Each change is written temp + fsync + rename (STYLE habit 9).

Iggy's rules, from its server source (``shard/system/users.rs``, ``personal_access_tokens.rs``):
the root user has id 0 and every permission, cannot be deleted (48) and its permissions cannot be
changed (49); new users take the lowest free id; usernames are 3..50 bytes, passwords 3..100 bytes
(iggy.md E.9), token names 3..30 bytes; a token is unique by name per user. Unlike Iggy, a login
checks the password before it reports an inactive user, so the inactive status of an account is
not told to someone who does not know its password.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from bayou.broker import authz
from bayou.protocols.iggy import messages as m
from bayou.protocols.scram import HASHES, ScramCredential, derive_all
from bayou.storage.fsutil import atomic_write

log = logging.getLogger("bayou.iggy")
ROOT_ID = 0
USERNAME_LENGTH = (3, 50)
PASSWORD_LENGTH = (3, 100)
TOKEN_NAME_LENGTH = (3, 30)
MAX_TOKENS_PER_USER = 100  # Iggy's default ``personal_access_token.max_tokens_per_user``
_U64_MAX = (1 << 64) - 1
_FORMAT = 1

AuthReason = Literal["invalid_credentials", "inactive", "invalid_token"]


# -- errors -------------------------------------------------------------------------------------


class UserStoreError(Exception):
    """Base of the store's refusals; ``iggy_status`` is the Iggy error code to answer with."""

    iggy_status: int = 1


class AuthFailure(UserStoreError):
    """A login that did not succeed: ``reason`` picks the code (42 InvalidCredentials, 47
    UserInactive, 53 InvalidPersonalAccessToken; V evicts with reasons 9, 11 and 10)."""

    _STATUS: dict[str, int] = {"invalid_credentials": 42, "inactive": 47, "invalid_token": 53}

    def __init__(self, reason: AuthReason) -> None:
        super().__init__(reason)
        self.reason: AuthReason = reason
        self.iggy_status = self._STATUS[reason]


class UserNotFound(UserStoreError):
    iggy_status = 20  # ResourceNotFound: what Iggy answers for an unknown user id or name


class InvalidUsername(UserStoreError):
    iggy_status = 43


class InvalidPassword(UserStoreError):
    iggy_status = 44


class UserAlreadyExists(UserStoreError):
    iggy_status = 46


class TooManyGrants(UserStoreError):
    iggy_status = 4  # InvalidFormat, what the wire's reader answers past the same bound


class CannotDeleteRoot(UserStoreError):
    iggy_status = 48  # CannotDeleteUser


class CannotChangeRootPermissions(UserStoreError):
    iggy_status = 49  # CannotChangePermissions


class InvalidTokenName(UserStoreError):
    iggy_status = 50  # InvalidPersonalAccessTokenName


class TokenAlreadyExists(UserStoreError):
    iggy_status = 51  # PersonalAccessTokenAlreadyExists


class TokenLimitReached(UserStoreError):
    iggy_status = 52  # PersonalAccessTokensLimitReached


class TokenNotFound(UserStoreError):
    iggy_status = 20  # ResourceNotFound, as Iggy's delete_personal_access_token answers


# -- records ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class User:
    """What the rest of the server sees of a user: never the password hash."""

    id: int
    username: str
    created_at: int  # microseconds since the epoch
    active: bool
    permissions: authz.Permissions | None

    @property
    def is_root(self) -> bool:
        return self.id == ROOT_ID

    @property
    def status(self) -> m.UserStatus:
        return m.UserStatus.ACTIVE if self.active else m.UserStatus.INACTIVE

    def info(self) -> m.UserInfo:
        """The GET_USERS record."""
        return m.UserInfo(self.id, self.created_at, self.status, self.username)

    def details(self) -> m.UserDetails:
        """The GET_USER / CREATE_USER reply."""
        return m.UserDetails(self.info(), to_iggy(self.permissions))


@dataclass(frozen=True, slots=True)
class TokenInfo:
    name: str
    expiry_at_us: int | None  # None = never expires

    def info(self) -> m.PersonalAccessTokenInfo:
        """The GET_PERSONAL_ACCESS_TOKENS entry."""
        return m.PersonalAccessTokenInfo(self.name, self.expiry_at_us)


@dataclass(frozen=True, slots=True)
class _Token:
    name: str
    token_hash: str  # SHA-256 hex of the token
    expiry_at_us: int | None


@dataclass(frozen=True, slots=True)
class _Record:
    user: User
    password_hash: str
    tokens: tuple[_Token, ...] = field(default=())
    scram: tuple[ScramCredential, ...] = field(default=())  # one per mechanism; () before SCRAM

    def scram_credential(self, mechanism: str) -> ScramCredential | None:
        return next((c for c in self.scram if c.mechanism == mechanism), None)


# -- the store ----------------------------------------------------------------------------------


def _now_us() -> int:
    return time.time_ns() // 1000


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


PASSED_CHECKS_KEPT = 4096  # password checks remembered (one per user and password hash)


class UserStore:
    def __init__(self, path: Path, root_username: str = "iggy", root_password: str = "iggy", *,
                 clock: Callable[[], int] = _now_us, max_tokens_per_user: int = MAX_TOKENS_PER_USER
                 ) -> None:
        self.path = path
        self.root_username = root_username
        self.root_password = root_password
        self.clock = clock
        self.max_tokens_per_user = max_tokens_per_user
        self._hasher = PasswordHasher(time_cost=2, memory_cost=19456, parallelism=1)
        self._records: dict[int, _Record] = {}
        self._by_token: dict[str, tuple[int, str]] = {}  # token hash -> (user id, token name)
        self._lock = threading.RLock()
        self._dummy_hash: str | None = None
        # argon2 checks that passed, remembered for this process: password hash -> HMAC-SHA256 of
        # the password under a key drawn at start (never stored). A client that logs in again with
        # the same password (a Spark job's many worker processes, a reconnect) costs a hash
        # compare, not another 20-50 ms argon2 check; a wrong password, an unknown user, or a
        # password changed since (a new hash) still costs the full check.
        self._passed: dict[str, bytes] = {}
        self._passed_key = secrets.token_bytes(32)
        self._passed_lock = threading.Lock()
        self._live_hashes: set[str] = set()  # the users' current password hashes
        self.unsaved = False  # the first start could not write the file (the server retries it)
        self.on_change: Callable[[], None] | None = None  # after every change (the authorizer's epoch)

    # -- persistence ---------------------------------------------------------------------------

    def load(self) -> None:
        """Read the file; on first start (no file) create the root user, id 0, active, with every
        permission, and save. A file that cannot be read as a users file raises ValueError rather
        than being replaced (which would reset the root password)."""
        with self._lock:
            if not self.path.exists():
                _check_username(self.root_username)
                _check_password(self.root_password)
                root = User(ROOT_ID, self.root_username, self.clock(), True, authz.Permissions.everything())
                self._set({ROOT_ID: _Record(root, self._hasher.hash(self.root_password),
                                            scram=derive_all(self.root_password))})
                self._save_at_start()
                return
            self.replace(self.path.read_bytes(), str(self.path))
            self._give_root_scram()

    def _give_root_scram(self) -> None:
        """A users file written before SCRAM credentials were kept: the root user gets its own
        now when the configured root password is still its password (every other user when its
        password is next set), so that root can log in with SCRAM after an upgrade."""
        root = self._records.get(ROOT_ID)
        if root is None or root.scram or not self._verify(root.password_hash, self.root_password):
            return
        self._set({**self._records, ROOT_ID: dataclasses.replace(
            root, scram=derive_all(self.root_password))})
        self._save_at_start()

    def _save_at_start(self) -> None:
        try:
            self._save()
        except OSError as exc:  # a full disk: the users work from memory until written
            self.unsaved = True
            log.warning("cannot write the Iggy users file at start: %s", exc)

    def replace(self, data: bytes, source: str = "the users document") -> None:
        """Take every user from ``snapshot()`` bytes (cluster mode: the shared copy)."""
        with self._lock:
            try:
                raw = json.loads(data)
                records = {r.user.id: r for r in (_record_from_json(u) for u in raw["users"])}
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{source}: not a readable users file ({exc})") from exc
            self._set(records)

    def snapshot(self) -> bytes:
        with self._lock:
            body = {"format": _FORMAT, "users": [_record_json(r) for r in sorted(
                self._records.values(), key=lambda r: r.user.id)]}
            return json.dumps(body, indent=1).encode()

    def _set(self, records: dict[int, _Record]) -> None:
        self._records = records
        self._by_token = {t.token_hash: (r.user.id, t.name) for r in records.values() for t in r.tokens}
        live = {r.password_hash for r in records.values()}
        with self._passed_lock:  # a changed or deleted password is not kept in any form
            self._live_hashes = live
            self._passed = {h: mac for h, mac in self._passed.items() if h in live}
        if self.on_change is not None:
            self.on_change()

    def save_copy(self) -> None:
        """Write the file (cluster mode: this broker's copy of the shared users)."""
        with self._lock:
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, self.snapshot())
        os.chmod(self.path, 0o600)  # hashes only, but still nobody else's business

    def _replace(self, record: _Record | None, user_id: int) -> None:
        records = dict(self._records)
        if record is None:
            del records[user_id]
        else:
            records[user_id] = record
        self._set(records)
        self._save()

    # -- lookups -------------------------------------------------------------------------------

    def _record(self, ident: int | str) -> _Record | None:
        if isinstance(ident, int):
            return self._records.get(ident)
        return next((r for r in self._records.values() if r.user.username == ident), None)

    def _require(self, ident: int | str) -> _Record:
        record = self._record(ident)
        if record is None:
            raise UserNotFound(f"user {ident!r} not found")
        return record

    def get(self, ident: int | str) -> User | None:
        """By numeric id or by username (an Iggy Identifier's value)."""
        record = self._record(ident)
        return None if record is None else record.user

    def users(self) -> list[User]:
        return sorted((r.user for r in self._records.values()), key=lambda u: u.id)

    # -- authentication ------------------------------------------------------------------------

    def _verify(self, password_hash: str, password: str) -> bool:
        mac = hmac.digest(self._passed_key, password.encode("utf-8", "surrogatepass"), "sha256")
        seen = self._passed.get(password_hash)
        if seen is not None and hmac.compare_digest(seen, mac):
            return True
        try:
            if not self._hasher.verify(password_hash, password):
                return False
        except (VerificationError, InvalidHashError):
            return False
        with self._passed_lock:
            if password_hash not in self._live_hashes:  # changed while we checked, or the dummy
                return True
            if password_hash not in self._passed and len(self._passed) >= PASSED_CHECKS_KEPT:
                del self._passed[next(iter(self._passed))]  # the oldest
            self._passed[password_hash] = mac
        return True

    def authenticate(self, username: str, password: str) -> User:
        """The user whose credentials these are. An unknown user costs one hash too, so timing
        does not tell which usernames exist."""
        record = self._record(username)
        if record is None:
            if self._dummy_hash is None:
                self._dummy_hash = self._hasher.hash(secrets.token_hex(16))
            self._verify(self._dummy_hash, password)
            raise AuthFailure("invalid_credentials")
        if not self._verify(record.password_hash, password):
            raise AuthFailure("invalid_credentials")
        if not record.user.active:
            raise AuthFailure("inactive")
        return record.user

    def scram_credential(self, username: str, mechanism: str) -> ScramCredential | None:
        """The SCRAM credential a Kafka login as ``username`` is checked against; None for an
        unknown or inactive user, or one whose password was set before SCRAM credentials were kept
        (a look-up, no hashing: the exchange checks the proof)."""
        record = self._record(username)
        if record is None or not record.user.active:
            return None
        found = record.scram_credential(mechanism)
        if found is None:
            log.warning("user has no SCRAM credentials (its password was set before bayou kept them): "
                        "set its password again to log in with SCRAM", extra={"user": username})
        return found

    def authenticate_token(self, token: str) -> User:
        """The owner of a personal access token; an unknown or expired token is "invalid_token"."""
        user_id, name = self._by_token.get(hash_token(token), (-1, ""))
        record = self._records.get(user_id)
        pat = None if record is None else next((t for t in record.tokens if t.name == name), None)
        if record is None or pat is None or _expired(pat, self.clock()):
            raise AuthFailure("invalid_token")
        if not record.user.active:
            raise AuthFailure("inactive")
        return record.user

    def current(self, user_id: int, token_hash: str | None = None) -> User | None:
        """The user a session logged in as, as it is now (permissions included): None once it
        was deleted or deactivated, or when the personal access token it logged in with
        (``token_hash``) was deleted or has expired. Dictionary look-ups only: asked per request."""
        record = self._records.get(user_id)
        if record is None or not record.user.active:
            return None
        if token_hash is not None:
            owner, name = self._by_token.get(token_hash, (-1, ""))
            pat = next((t for t in record.tokens if t.name == name), None) if owner == user_id else None
            if pat is None or _expired(pat, self.clock()):
                return None
        return record.user

    # -- user administration -------------------------------------------------------------------

    def create_user(self, username: str, password: str, *, active: bool = True,
                    permissions: authz.Permissions | None = None) -> User:
        _check_username(username)
        _check_password(password)
        _check_grants(permissions)
        if self._record(username) is not None:
            raise UserAlreadyExists(f"user {username!r} already exists")
        password_hash, credentials = self._hasher.hash(password), derive_all(password)
        with self._lock:
            if self._record(username) is not None:  # created while we hashed
                raise UserAlreadyExists(f"user {username!r} already exists")
            user = User(_lowest_free(self._records), username, self.clock(), active, permissions)
            self._replace(_Record(user, password_hash, scram=credentials), user.id)
            return user

    def update_user(self, ident: int | str, *, username: str | None = None,
                    active: bool | None = None) -> User:
        if username is not None:
            _check_username(username)
        with self._lock:
            record = self._require(ident)
            if username is not None:
                other = self._record(username)
                if other is not None and other.user.id != record.user.id:
                    raise UserAlreadyExists(f"user {username!r} already exists")
            user = dataclasses.replace(
                record.user, username=record.user.username if username is None else username,
                active=record.user.active if active is None else active)
            self._replace(dataclasses.replace(record, user=user), user.id)
            return user

    def update_permissions(self, ident: int | str, permissions: authz.Permissions | None) -> User:
        """A full replacement (None removes every permission). Root's cannot change."""
        _check_grants(permissions)
        with self._lock:
            record = self._require(ident)
            if record.user.is_root:
                raise CannotChangeRootPermissions("the root user's permissions cannot change")
            user = dataclasses.replace(record.user, permissions=permissions)
            self._replace(dataclasses.replace(record, user=user), user.id)
            return user

    def change_password(self, ident: int | str, current: str, new: str) -> None:
        _check_password(new)
        record = self._require(ident)
        if not self._verify(record.password_hash, current):
            raise AuthFailure("invalid_credentials")
        new_hash, credentials = self._hasher.hash(new), derive_all(new)
        with self._lock:
            latest = self._require(record.user.id)
            if latest.password_hash != record.password_hash:  # changed while we hashed
                raise AuthFailure("invalid_credentials")
            self._replace(dataclasses.replace(latest, password_hash=new_hash, scram=credentials),
                          latest.user.id)

    def delete_user(self, ident: int | str) -> None:
        """Deletes the user and its tokens; root cannot be deleted."""
        with self._lock:
            record = self._require(ident)
            if record.user.is_root:
                raise CannotDeleteRoot("the root user cannot be deleted")
            self._replace(None, record.user.id)

    # -- personal access tokens ----------------------------------------------------------------

    def create_token(self, user_id: int, name: str, expiry_us: int | None) -> str:
        """A new token for ``user_id``, valid for ``expiry_us`` microseconds (None or 0: forever;
        so is anything past u64, Iggy's "never expire"). The token is returned here and only here;
        the store keeps its SHA-256 digest."""
        if not TOKEN_NAME_LENGTH[0] <= len(name.encode()) <= TOKEN_NAME_LENGTH[1]:
            raise InvalidTokenName("token names are 3..30 bytes")
        if expiry_us is not None and expiry_us < 0:
            raise ValueError("a token's expiry cannot be negative")
        now = self.clock()
        expiry_at = now + expiry_us if expiry_us and now + expiry_us < _U64_MAX else None
        with self._lock:
            record = self._require(user_id)
            if any(t.name == name for t in record.tokens):
                raise TokenAlreadyExists(f"token {name!r} already exists")
            if len(record.tokens) >= self.max_tokens_per_user:
                raise TokenLimitReached(f"at most {self.max_tokens_per_user} tokens per user")
            token = secrets.token_urlsafe(32)
            pat = _Token(name, hash_token(token), expiry_at)
            self._replace(dataclasses.replace(record, tokens=(*record.tokens, pat)), user_id)
            return token

    def delete_token(self, user_id: int, name: str) -> None:
        with self._lock:
            record = self._require(user_id)
            kept = tuple(t for t in record.tokens if t.name != name)
            if len(kept) == len(record.tokens):
                raise TokenNotFound(f"token {name!r} not found")
            self._replace(dataclasses.replace(record, tokens=kept), user_id)

    def tokens(self, user_id: int) -> list[TokenInfo]:
        """Sorted by name, as the Iggy client sorts them; expired ones are listed too."""
        return sorted((TokenInfo(t.name, t.expiry_at_us) for t in self._require(user_id).tokens),
                      key=lambda t: t.name)


# -- permissions --------------------------------------------------------------------------------


def permissions_of(user: User) -> authz.Permissions:
    """What ``user`` may do (root: everything, whatever its record says; none: nothing)."""
    if user.is_root:
        return authz.EVERYTHING
    return user.permissions or authz.NOTHING


def _fields(obj: Any, skip: str = "") -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.name != skip}


# (permission set, global, stream, topic) types: Iggy's messages and bayou's model share every name
_IGGY: tuple[type, type, type, type] = (m.Permissions, m.GlobalPermissions, m.StreamPermissions,
                                        m.TopicPermissions)
_BAYOU: tuple[type, type, type, type] = (authz.Permissions, authz.GlobalPermissions,
                                         authz.StreamPermissions, authz.TopicPermissions)


def _convert(p: Any, kinds: tuple[type, type, type, type]) -> Any:
    perms, glob, stream, topic = kinds
    return perms(glob(**_fields(p.global_permissions)), tuple(
        stream(**_fields(s, "topics"), topics=tuple(topic(**_fields(t)) for t in s.topics))
        for s in p.streams))


def from_iggy(p: m.Permissions | None) -> authz.Permissions | None:
    """An Iggy ``Permissions`` message (CREATE_USER, UPDATE_PERMISSIONS) as bayou's model."""
    return None if p is None else cast(authz.Permissions, _convert(p, _BAYOU))


def to_iggy(p: authz.Permissions | None) -> m.Permissions | None:
    """bayou's model as Iggy's ``Permissions`` message (GET_USER, CREATE_USER replies)."""
    return None if p is None else cast(m.Permissions, _convert(p, _IGGY))


# -- helpers ------------------------------------------------------------------------------------


def check_root_credentials(username: str, password: str) -> None:
    """The configured root user's name and password against Iggy's rules (raises InvalidUsername
    or InvalidPassword), so that a broker refuses them at start rather than at the first login."""
    _check_username(username)
    _check_password(password)


def _check_username(username: str) -> None:
    if not USERNAME_LENGTH[0] <= len(username.encode()) <= USERNAME_LENGTH[1]:
        raise InvalidUsername("usernames are 3..50 bytes")


def _check_grants(permissions: authz.Permissions | None) -> None:
    """At most authz.MAX_GRANTS streams and topics (whichever way the permissions came)."""
    if permissions is not None and permissions.grants > authz.MAX_GRANTS:
        raise TooManyGrants(f"permissions name {permissions.grants} streams and topics; "
                            f"at most {authz.MAX_GRANTS}")


def _check_password(password: str) -> None:
    if not PASSWORD_LENGTH[0] <= len(password.encode()) <= PASSWORD_LENGTH[1]:
        raise InvalidPassword("passwords are 3..100 bytes")


def _lowest_free(taken: dict[int, Any]) -> int:
    n = 0
    while n in taken:
        n += 1
    return n


def _expired(token: _Token, now_us: int) -> bool:
    return token.expiry_at_us is not None and token.expiry_at_us <= now_us


def _record_json(r: _Record) -> dict[str, Any]:
    u = r.user
    return {"id": u.id, "username": u.username, "created_at": u.created_at, "active": u.active,
            "password_hash": r.password_hash,
            "permissions": None if u.permissions is None else dataclasses.asdict(u.permissions),
            "tokens": [{"name": t.name, "token_hash": t.token_hash, "expiry_at": t.expiry_at_us}
                       for t in r.tokens],
            "scram": {c.mechanism: {"salt": _b64(c.salt), "iterations": c.iterations,
                                    "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key)}
                      for c in r.scram}}


def _record_from_json(d: dict[str, Any]) -> _Record:
    user = User(int(d["id"]), str(d["username"]), int(d["created_at"]), bool(d["active"]),
                _permissions_from_json(d["permissions"]))
    tokens = tuple(_Token(str(t["name"]), str(t["token_hash"]),
                          None if t["expiry_at"] is None else int(t["expiry_at"])) for t in d["tokens"])
    credentials = tuple(  # absent in a file written before SCRAM credentials were kept
        ScramCredential(str(mech), _unb64(c["salt"]), int(c["iterations"]), _unb64(c["stored_key"]),
                              _unb64(c["server_key"]))
        for mech, c in d.get("scram", {}).items() if mech in HASHES)
    return _Record(user, str(d["password_hash"]), tokens, credentials)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: object) -> bytes:
    return base64.b64decode(str(text), validate=True)


def _permissions_from_json(d: dict[str, Any] | None) -> authz.Permissions | None:
    if d is None:
        return None
    # read through Iggy's types, which sort and refuse duplicate stream and topic ids
    streams = tuple(
        m.StreamPermissions(**{**s, "topics": tuple(m.TopicPermissions(**t) for t in s["topics"])})
        for s in d["streams"])
    return from_iggy(m.Permissions(m.GlobalPermissions(**d["global_permissions"]), streams))
