"""What keeps a board that can change production data safe: who may see it
(:class:`Access`: a bearer token, or HTTP basic credentials, compared in constant
time), where it may listen (:func:`check_bind`: loopback only without credentials),
forged requests (:class:`Csrf`: a signed token per browser, checked on every POST, and
the ``Origin`` header when a browser sends one) and the headers every answer carries
(a Content-Security-Policy with no inline script or style, framing denied).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from qcore.errors import ConfigError

__all__ = ["HEADERS", "SESSION_SECONDS", "Access", "Csrf", "check_bind", "is_loopback"]

#: how long a sign-in through the form lasts
SESSION_SECONDS = 12 * 3600

#: how far ahead of this board's clock a sign-in may have been issued (another replica)
_SESSION_SKEW_SECONDS = 60

#: sent with every answer
HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self';"
        " frame-ancestors 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    """Who may use the board: anyone who reaches it (neither set), the holder of
    ``token`` (``Authorization: Bearer``, or the sign-in form, whose cookie lasts
    ``session_seconds``), or ``user`` with ``password`` (HTTP basic). ``clock``: the
    time in seconds (tests move it)."""

    token: str | None = None
    user: str | None = None
    password: str | None = None
    session_seconds: float = SESSION_SECONDS
    clock: Callable[[], float] = field(default=time.time, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.token is not None and (not isinstance(self.token, str) or len(self.token) < 16):
            raise ConfigError("the dashboard token must be a string of at least 16 characters")
        if (self.user is None) != (self.password is None):
            raise ConfigError("basic auth needs both a user and a password")
        if self.password is not None and len(self.password) < 8:
            raise ConfigError("the dashboard password must be at least 8 characters")

    @classmethod
    def of(cls, token: str | None = None, basic_auth: str | None = None) -> Access:
        """From a token and/or basic credentials given as ``user:password``."""
        if basic_auth is None:
            return cls(token=token)
        user, colon, password = basic_auth.partition(":")
        if not colon or not user:
            raise ConfigError("basic auth credentials must be given as user:password")
        return cls(token=token, user=user, password=password)

    @property
    def required(self) -> bool:
        return self.token is not None or self.user is not None

    def allows(self, authorization: str | None, cookie: str | None) -> bool:
        """Whether a request with this ``Authorization`` header and session cookie may
        pass. Every comparison takes the same time whatever the input."""
        if not self.required:
            return True
        scheme, _, value = (authorization or "").partition(" ")
        ok = False
        if self.token is not None:
            if scheme.lower() == "bearer":
                ok |= _same(value.strip(), self.token)
            if cookie is not None:
                ok |= self._signed_in(cookie)
        if self.user is not None and self.password is not None and scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except ValueError:
                decoded = ""
            user, _, password = decoded.partition(":")
            ok |= _same(user, self.user) & _same(password, self.password)
        return ok

    def session_value(self) -> str:
        """A sign-in cookie's value, issued now: the time, and a MAC of it under the token
        (never the token itself). It is good for ``session_seconds``."""
        issued = str(int(self.clock()))
        return f"{issued}.{self._session_mac(issued)}"

    def _session_mac(self, issued: str) -> str:
        assert self.token is not None
        message = f"qcore-dashboard-session:{issued}".encode()
        return hmac.new(self.token.encode(), message, hashlib.sha256).hexdigest()

    def _signed_in(self, cookie: str) -> bool:
        """Whether ``cookie`` is a sign-in this token issued that has not expired."""
        issued, dot, mac = cookie.partition(".")
        if not dot or not (issued.isascii() and issued.isdigit()) or len(issued) > 12:
            return False
        age = self.clock() - int(issued)
        fresh = -_SESSION_SKEW_SECONDS <= age < self.session_seconds
        return _same(mac, self._session_mac(issued)) and fresh


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


class Csrf:
    """Double-submit tokens: each browser gets a random id in a cookie; its forms carry
    the id's signature under this board's secret, which a forger on another origin can
    neither read nor compute."""

    COOKIE = "qcore_csrf"
    FIELD = "csrf"

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    @staticmethod
    def new_id() -> str:
        return secrets.token_urlsafe(24)

    def token(self, browser_id: str) -> str:
        return hmac.new(self._secret, browser_id.encode(), hashlib.sha256).hexdigest()

    def valid(self, browser_id: str | None, token: str | None) -> bool:
        if not browser_id or not token:
            return False
        return _same(token, self.token(browser_id))


def check_bind(host: str, access: Access) -> None:
    """Refuse to listen beyond this machine without credentials."""
    if not is_loopback(host) and not access.required:
        raise ConfigError(
            f"refusing to listen on {host}: the dashboard can change jobs and instances, so"
            " beyond 127.0.0.1 it needs --token (or QCORE_DASHBOARD_TOKEN) or --basic-auth"
            " user:password"
        )
