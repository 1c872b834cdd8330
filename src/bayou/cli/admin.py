"""A small blocking client of the broker's admin REST API (``/api/v1`` on the HTTP listener), for
the group, cluster and topic-alter commands. The standard library's urllib is enough for a few JSON
requests per command; errors come back as ``{"error": {"code", "message"}}`` with a 4xx status."""

from __future__ import annotations

import base64
import functools
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import click

from bayou.cli.common import HTTP_PORT, Address, bootstrap_option, parse_address, target, tls, tls_options


class AdminError(click.ClickException):
    """The admin API refused a request: its message (and code) on one line, exit 1."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({code})" if code and code not in message.split(";")[0] else message)
        self.status = status
        self.code = code


def admin_url(bootstrap: Address, admin: str | None) -> str:
    """``--admin`` (a URL, or HOST[:PORT]), else -b's host on the HTTP port; https when a --tls*
    option is given."""
    scheme = "https" if tls() is not None else "http"
    if admin is None:
        return f"{scheme}://{Address(bootstrap.host, HTTP_PORT)}"
    admin = admin.strip().rstrip("/")
    if "://" in admin:
        parsed = urllib.parse.urlsplit(admin)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise click.BadParameter(f"{admin!r} is not an http(s) URL", param_hint="--admin")
        return admin
    try:
        return f"{scheme}://{parse_address(admin, HTTP_PORT)}"
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--admin") from None


class AdminClient:
    def __init__(self, base_url: str, *, user: str | None = None, password: str | None = None,
                 token: str | None = None, timeout: float = 30.0) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        elif user is not None:
            basic = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self.headers["Authorization"] = f"Basic {basic}"
        config = tls()
        self.context = config.context() if config is not None and self.base.startswith("https:") else None

    def request(self, method: str, path: str, body: object = None) -> Any:
        """The decoded JSON reply to ``method path`` (None for an empty one)."""
        target("admin API", self.base)
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base + "/api/v1" + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.context) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise _error_of(exc) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, OSError):
                raise ConnectionError(reason.strerror or str(reason)) from None
            raise ConnectionError(str(reason)) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ConnectionError(f"not a JSON reply to {method} {path}: {raw[:80]!r}") from None

    def get(self, path: str) -> Any:
        return self.request("GET", path)


def _error_of(exc: urllib.error.HTTPError) -> AdminError:
    try:
        raw = exc.read()
    except OSError:
        raw = b""
    hint = "; log in with --user/--password or --token" if exc.code == 401 else ""
    try:
        err = json.loads(raw)["error"]
        return AdminError(exc.code, str(err.get("code", "")), str(err.get("message", "")) + hint)
    except (ValueError, KeyError, TypeError, AttributeError):
        text = raw.decode(errors="replace").strip()[:200]
        return AdminError(exc.code, "", f"HTTP {exc.code} {exc.reason}" + (f": {text}" if text else ""))


def quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def admin_api(f: Callable[..., None]) -> Callable[..., None]:
    """-b, --admin, --user, --password, --token and the --tls* options on an admin-API command,
    which gets an ``api`` (AdminClient) made of them instead."""

    @functools.wraps(f)
    def run(*args: Any, bootstrap: Address, admin: str | None, user: str | None, password: str | None,
            token: str | None, **kwargs: Any) -> None:
        f(*args, api=AdminClient(admin_url(bootstrap, admin), user=user, password=password, token=token),
          **kwargs)

    options = [
        bootstrap_option,
        click.option("--admin", metavar="URL", envvar="BAYOU_ADMIN",
                     help=f"The broker's admin API. [default: http://<-b's host>:{HTTP_PORT}; https with "
                          "--tls*]"),
        click.option("--user", envvar="BAYOU_USER", help="Log in to the admin API as this Iggy user."),
        click.option("--password", envvar="BAYOU_PASSWORD", help="The --user's password."),
        click.option("--token", envvar="BAYOU_TOKEN", help="An Iggy personal access token (Bearer)."),
    ]
    for option in reversed(options):
        run = option(run)
    return tls_options(run)
