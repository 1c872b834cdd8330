"""Who an Iggy client is and what it may do: the login commands (password, personal access token,
V's Register operation), the check every request passes first (``require_login``), the user and
token administration commands, and what the broker's authorizer asks of the Iggy users.

The users live in the user store (``users``); a login through the HTTP port goes through the same
store, hash pool and guard (``credentials_principal``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from bayou.broker.authz import Permissions, Principal, current_caller
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, EvictionReason, Status
from bayou.protocols.iggy.convert import ENVELOPE_CLIENT
from bayou.protocols.iggy.framing import Dialect, IggyError, RequestHeader
from bayou.protocols.scram import ScramFailure
from bayou.server.iggy.context import PROTOCOL_VERSION, SERVER_NAME, Context, Session
from bayou.server.iggy.state import USERS_FILE
from bayou.server.iggy.users import AuthFailure, User, UserStoreError, from_iggy, hash_token, permissions_of
from bayou.server.login_guard import LoginGuard, client_ip
from bayou.server.workers import hash_pool, run_in

log = logging.getLogger("bayou.iggy")
T = TypeVar("T")

# What a command needs before it runs: nothing (None) or a permission (see broker/authz.py).
PUBLIC = frozenset({Command.PING, Command.LOGIN_USER, Command.LOGIN_REGISTER,
                    Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN, Command.LOGIN_REGISTER_WITH_PAT})


class AuthHandlers:
    def __init__(self, ctx: Context, leave_groups: Callable[[Session], Awaitable[None]]) -> None:
        self.ctx = ctx
        self.users = ctx.users
        self.login_guard = LoginGuard()
        self._leave_groups = leave_groups  # a logout leaves the session's consumer groups
        self._unknown_cns: set[str] = set()  # certificate CNs naming no user, logged once each

    def require_login(self, s: Session, command: Command) -> None:
        caller = current_caller()
        if s.user is not None:  # permissions are the user's as they are now, not at login
            current = self.users.current(s.user.id, s.token_hash)
            if current is None:  # deleted, deactivated, or its token deleted: the session ends
                if caller is not None:
                    caller.logout()
                log.warning("iggy session ended: its user or token was revoked",
                            extra={"peer": s.address, "user": s.user.username})
                s.user = None
                s.close_after_reply = True
                raise IggyError(Status.UNAUTHENTICATED, "the user or token was revoked",
                                eviction=EvictionReason.INVALID_CREDENTIALS if s.dialect is Dialect.VSR
                                else None)
            s.user = current
            if caller is not None:  # what the broker checks this request against
                caller.login(Principal.login(current.id, current.username, s.token_hash))
            return
        if caller is not None:
            caller.logout()
        if command in PUBLIC or self.ctx.anonymous(s):
            return
        raise IggyError(Status.UNAUTHENTICATED, f"{command.name} needs a login")

    # -- what the broker's authorizer asks of the Iggy front end ------------------------------

    def serve_authorizer(self) -> None:
        """Make Iggy's users and streams the broker's principals and permission scopes: the
        authorizer asks this front end where a topic is and what a user may do, and forgets its
        answers whenever users or the catalog change."""
        authorizer = self.ctx.broker.authorizer
        authorizer.configure(resolver=self.resolve_topic, users=self.user_permissions)
        self.users.on_change = self.ctx.catalog.on_change = authorizer.invalidate

    def resolve_topic(self, topic: str) -> tuple[int, int | None]:
        """A bayou topic's (stream id, topic id) for the permission check (Catalog.locate)."""
        return self.ctx.catalog.locate(topic)

    def user_permissions(self, principal: Principal) -> Permissions | None:
        """A user principal's permissions now: a login's by id (None once the user or its token
        is gone or inactive), a certificate's by the CN as user name (None when no active user
        has that name: the connection is then anonymous; said once per name at INFO)."""
        if principal.user_id is not None:
            user = self.users.current(principal.user_id, principal.token_hash)
        else:
            found = self.users.get(principal.name or "")
            user = found if found is not None and found.active else None
            if user is None and principal.name not in self._unknown_cns:
                self._unknown_cns.add(principal.name or "")
                log.info("TLS client certificate names no active user: anonymous",
                         extra={"cn": principal.name})
        return None if user is None else permissions_of(user)

    # -- logins --------------------------------------------------------------------------------

    async def _authenticate(self, fn: Callable[..., User], *args: str) -> User:
        return await asyncio.get_running_loop().run_in_executor(hash_pool(), fn, *args)

    async def _guarded_login(self, s: Session, username: str, fn: Callable[..., User], *args: str) -> User:
        """A login attempt through the guard: after failures (on this connection or from this
        address) each attempt waits, doubling, before it is judged; every failure is logged at
        WARNING (address and user name, never the secret); the connection is closed after its
        budget of failures."""
        ip = client_ip(s.address)
        wait = self.login_guard.delay(ip, s.login_failures)
        if wait:
            await asyncio.sleep(wait)
        try:
            user = await self._authenticate(fn, *args)
        except AuthFailure:
            s.login_failures += 1
            recent = self.login_guard.failed(ip)
            closing = self.login_guard.exhausted(s.login_failures)
            log.warning("iggy login failed", extra={"peer": s.address, "user": username,
                                                    "failures": s.login_failures,
                                                    "address_failures": recent, "closing": closing})
            if closing:
                s.close_after_reply = True
            raise
        self.login_guard.succeeded(ip)
        return user

    async def _guarded(self, address: str, username: str, via: str, attempt: Callable[[], Awaitable[T]],
                       failures: tuple[type[Exception], ...] = (AuthFailure,)) -> T:
        """A login outside an Iggy connection through the guard: the wait doubles with the
        address's recent failures; every failure (one of ``failures``, raised as it is) is logged at
        WARNING with the address and user name, never the secret."""
        ip = client_ip(address)
        wait = self.login_guard.delay(ip, 0)
        if wait:
            await asyncio.sleep(wait)
        try:
            result = await attempt()
        except failures:
            recent = self.login_guard.failed(ip)
            log.warning("%s login failed", via, extra={
                "peer": address, "user": username, "address_failures": recent})
            raise
        self.login_guard.succeeded(ip)
        return result

    async def credentials_principal(self, address: str, username: str | None, secret: str,
                                    via: str = "http") -> Principal:
        """The principal of credentials presented outside an Iggy connection (the HTTP port's
        Basic ``username``/password or a Bearer personal access token when ``username`` is None;
        SASL PLAIN on a Kafka listener): the same users, hash pool and guard as an Iggy login.
        Raises AuthFailure."""
        async def attempt() -> Principal:
            if username is None:
                user = await self._authenticate(self.users.authenticate_token, secret)
                return Principal.login(user.id, user.username, hash_token(secret))
            user = await self._authenticate(self.users.authenticate, username, secret)
            return Principal.login(user.id, user.username)

        return await self._guarded(address, username or "(personal access token)", via, attempt)

    async def scram_principal(self, address: str, username: str, verify: Callable[[], T]
                              ) -> tuple[Principal, T]:
        """A SCRAM login's proof judged through the same guard (``verify``: the exchange's last
        step, a few HMACs, run here; it raises ScramFailure), then the principal of ``username``
        as the store has it now, with what ``verify`` returned (the server-final message)."""
        async def attempt() -> tuple[Principal, T]:
            answer = verify()
            user = self.users.get(username)
            if user is None or not user.active:  # deleted or deactivated during the exchange
                raise AuthFailure("invalid_credentials")
            return Principal.login(user.id, user.username), answer

        return await self._guarded(address, username, "kafka", attempt, (AuthFailure, ScramFailure))

    async def login_user(self, s: Session, req: m.LoginUser) -> m.LoginReply:
        if s.dialect is None:
            s.dialect = Dialect.LEGACY
        try:
            s.user = await self._guarded_login(s, req.username, self.users.authenticate, req.username,
                                               req.password)
            s.token_hash = None
            s.envelopes = (req.version or "").startswith(ENVELOPE_CLIENT)
        except AuthFailure as exc:
            raise IggyError(Status(exc.iggy_status), "login refused") from None
        log.info("iggy login", extra={"client": s.client_id, "user": s.user.username})
        return m.LoginReply(s.user.id)

    async def login_token(self, s: Session, req: m.LoginWithToken) -> m.LoginReply:
        if s.dialect is None:
            s.dialect = Dialect.LEGACY
        try:
            s.user = await self._guarded_login(s, "(personal access token)", self.users.authenticate_token,
                                               req.token)
            s.token_hash = hash_token(req.token)
        except AuthFailure as exc:
            raise IggyError(Status(exc.iggy_status), "token refused") from None
        return m.LoginReply(s.user.id)

    async def login_register(self, s: Session, req: m.LoginRegister | m.LoginRegisterWithToken,
                             header: RequestHeader) -> m.LoginRegisterReply:
        if req.protocol_version >> 10 != PROTOCOL_VERSION >> 10:
            raise IggyError(Status.INCOMPATIBLE_PROTOCOL_VERSION, "protocol version",
                            eviction=EvictionReason.INCOMPATIBLE_PROTOCOL)
        try:
            if isinstance(req, m.LoginRegister):
                user = await self._guarded_login(s, req.username, self.users.authenticate, req.username,
                                                 req.password)
                s.token_hash = None
            else:
                user = await self._guarded_login(s, "(personal access token)", self.users.authenticate_token,
                                                 req.token)
                s.token_hash = hash_token(req.token)
        except AuthFailure as exc:
            reason = {Status.USER_INACTIVE: EvictionReason.USER_INACTIVE,
                      Status.INVALID_PERSONAL_ACCESS_TOKEN: EvictionReason.INVALID_TOKEN,
                      }.get(Status(exc.iggy_status), EvictionReason.INVALID_CREDENTIALS)
            raise IggyError(Status(exc.iggy_status), "login refused", eviction=reason) from None
        s.user = user
        s.dialect = Dialect.VSR
        s.session = secrets.randbits(63) | 1
        log.info("iggy login", extra={"client": s.client_id, "user": user.username})
        return m.LoginRegisterReply(user.id, s.session, PROTOCOL_VERSION, SERVER_NAME)

    async def unreachable(self, s: Session, req: Any) -> None:
        raise IggyError(Status.INVALID_COMMAND, "a V login must travel as operation Register")

    async def logout(self, s: Session, req: m.LogoutUser) -> None:
        await self._leave_groups(s)
        s.user = None
        s.session = 0
        return None

    # -- users and personal access tokens ------------------------------------------------------

    async def change_users(self, change: Callable[[], Any]) -> Any:
        """A change of the users made outside an Iggy connection (the HTTP admin API), made as the
        Iggy commands make theirs: on the hashing pool, the file rewritten later if it cannot be
        written now, and in cluster mode under the shared lock on the cluster's copy. The store's
        own errors (UserStoreError) are raised as they are."""
        state = self.ctx.state
        async with state.shared_change() if state.shared is not None else contextlib.nullcontext():
            try:
                return await run_in(hash_pool(), change)
            except OSError as exc:
                raise state.unsaved(USERS_FILE, exc) from None

    async def _users_call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:  # user changes hash passwords: their own pool, not the one TANK's sendfile uses
            return await loop.run_in_executor(hash_pool(), lambda: fn(*args, **kwargs))
        except UserStoreError as exc:
            raise IggyError(Status(exc.iggy_status), str(exc)) from None
        except OSError as exc:  # the change is made in memory; its file is written later
            raise self.ctx.state.unsaved(USERS_FILE, exc) from None

    async def get_user(self, s: Session, req: m.GetUser) -> m.Reply | None:
        self.ctx.permit(s, "read_users")
        user = self.users.get(req.user.value)
        return None if user is None else user.details()

    async def get_users(self, s: Session, req: m.GetUsers) -> m.Reply:
        self.ctx.permit(s, "read_users")
        return tuple(u.info() for u in self.users.users())

    async def create_user(self, s: Session, req: m.CreateUser) -> m.Reply:
        self.ctx.permit(s, "manage_users")
        user: User = await self._users_call(self.users.create_user, req.username, req.password,
                                            active=req.status == m.UserStatus.ACTIVE,
                                            permissions=from_iggy(req.permissions))
        return user.details()

    async def delete_user(self, s: Session, req: m.DeleteUser) -> None:
        self.ctx.permit(s, "manage_users")
        await self._users_call(self.users.delete_user, req.user.value)

    async def update_user(self, s: Session, req: m.UpdateUser) -> None:
        self.ctx.permit(s, "manage_users")
        active = None if req.status is None else req.status == m.UserStatus.ACTIVE
        await self._users_call(self.users.update_user, req.user.value, username=req.username,
                               active=active)

    async def update_permissions(self, s: Session, req: m.UpdatePermissions) -> None:
        self.ctx.permit(s, "manage_users")
        await self._users_call(self.users.update_permissions, req.user.value, from_iggy(req.permissions))

    async def change_password(self, s: Session, req: m.ChangePassword) -> None:
        assert s.user is not None
        target = self.users.get(req.user.value)
        if target is None or target.id != s.user.id:
            self.ctx.permit(s, "manage_users")
        await self._users_call(self.users.change_password, req.user.value, req.current_password,
                               req.new_password)

    async def get_tokens(self, s: Session, req: m.GetPersonalAccessTokens) -> m.Reply:
        assert s.user is not None
        return tuple(t.info() for t in self.users.tokens(s.user.id))

    async def create_token(self, s: Session, req: m.CreatePersonalAccessToken) -> m.Reply:
        assert s.user is not None
        token = await self._users_call(self.users.create_token, s.user.id, req.name,
                                       req.expiry or None)
        return m.RawPersonalAccessToken(token)

    async def delete_token(self, s: Session, req: m.DeletePersonalAccessToken) -> None:
        assert s.user is not None
        await self._users_call(self.users.delete_token, s.user.id, req.name)


__all__ = ["PUBLIC", "AuthHandlers"]
