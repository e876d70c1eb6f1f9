"""What keeps a board that can change production data safe.

Who may see it (:class:`Access`: a bearer token, or HTTP basic credentials, compared in
constant time), how fast a stranger may guess (:class:`SignInLimit`: a few failed
sign-ins a minute per address), where it may listen (:func:`check_bind`: loopback only
without credentials), which names it answers to (:class:`AllowedHosts`: a page of a
rebound DNS name is not the board's), forged requests (:class:`Csrf`: a signed token per
browser, checked on every POST, and the ``Origin`` header when a browser sends one) and
the headers every answer carries (a Content-Security-Policy with no inline script or
style, framing denied).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import math
import re
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from qcore.errors import ConfigError

__all__ = [
    "HEADERS",
    "SESSION_SECONDS",
    "Access",
    "AllowedHosts",
    "Csrf",
    "SignInLimit",
    "check_bind",
    "is_loopback",
    "is_wildcard",
]

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


def is_wildcard(host: str) -> bool:
    """Whether listening on ``host`` means every address of the machine."""
    return host.strip("[]") in ("", "0.0.0.0", "::")


#: a DNS name as a browser sends it in ``Host`` (ASCII: an IDN arrives as xn--)
_DNS_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_](?:[a-z0-9_-]{0,62}))*")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class AllowedHosts:
    """The names a board answers to, against DNS rebinding.

    A page served from a name its owner points at this machine is, to the browser, of
    the same origin as the board it then reaches, so it could read the board and post to
    it with its own CSRF token. Its requests carry that name in ``Host``; the board
    refuses any name it was not given.

    An address written as digits (``127.0.0.1``, ``[::1]``, ``10.0.0.5``) and
    ``localhost`` always pass, on any port: no DNS answer stands behind them, so no one
    can rebind them, and they are how a machine's own tools, a tunnel, a container's
    port or a scraper reach the board. A DNS name passes when it is in ``names``
    exactly, or is under an entry written with a leading dot (``.example.com``: that
    name and every name under it). The port is never compared: a proxy may change it.
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        if isinstance(names, str):
            names = [names]
        self.names: tuple[str, ...] = tuple(names)
        self._exact: set[str] = set()
        self._domains: list[str] = []
        for given in self.names:
            name = given.strip().lower() if isinstance(given, str) else ""
            domain = name.startswith(".")
            bare = name.strip("[]") if name.startswith("[") else name.lstrip(".").rstrip(".")
            if _is_address(bare) and not domain:
                continue  # an address passes anyway
            if not _DNS_NAME.fullmatch(bare):
                raise ConfigError(
                    f"allowed host {given!r} is not a host name: give a name as the browser"
                    " sends it (board.example.com: no scheme, port or path; an"
                    " international name in its xn-- form), or .example.com for that name"
                    " and every name under it"
                )
            if domain:
                self._domains.append(bare)
            else:
                self._exact.add(bare)

    def allows(self, host: str | None) -> bool:
        """Whether a request whose ``Host`` header is ``host`` is addressed to this board."""
        name = _host_name(host or "")
        if name is None:
            return False
        if name == "localhost" or _is_address(name) or name in self._exact:
            return True
        return any(name == d or name.endswith("." + d) for d in self._domains)

    def refusal(self, host: str | None) -> str:
        """What a refused request is told: what was refused and what passes."""
        named = ", ".join(self.names) if self.names else "none"
        shown = repr(host[:100]) if host is not None else "no Host header"
        return (
            f"this dashboard does not answer to {shown}: it answers to localhost, to"
            f" addresses written as digits, and to the names it was given ({named});"
            " add a name with --allowed-host NAME, or allowed_hosts=[...] in create_app()\n"
        )


def _host_name(header: str) -> str | None:
    """The name or address in a ``Host`` header, normalised; None when the header is not one.

    Lower case, without its port or a final dot (brackets taken off an IPv6 address).
    """
    header = header.strip().lower()
    if header.startswith("["):
        name, bracket, port = header[1:].partition("]")
        if not bracket or ":" not in name or not _is_address(name):
            return None
    else:
        name, colon, number = header.partition(":")
        port = colon + number
        name = name[:-1] if name.endswith(".") else name
    if not name:
        return None
    if port and not (port[0] == ":" and 1 < len(port) <= 6):
        return None
    if port and not (port[1:].isascii() and port[1:].isdigit()):
        return None
    return name


class SignInLimit:
    """At most ``attempts`` failed sign-ins in any ``seconds`` from one client.

    A client is an IPv4 address, or an IPv6 /64 (one machine's usual share), so a
    password cannot be guessed at the speed of the network; the next is told how long to
    wait. A client that stopped failing is forgotten once its window has passed.
    ``clock``: seconds, moving forward (tests move it by hand).
    """

    #: clients tracked at most; past it, those whose window has passed are dropped
    TRACKED = 10_000

    def __init__(
        self,
        attempts: int = 5,
        seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.attempts = attempts
        self.seconds = seconds
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}

    def __len__(self) -> int:
        """How many clients failures are kept for."""
        return len(self._failures)

    def wait(self, client: str | None) -> int:
        """Whole seconds before ``client`` may try again (0: it may now)."""
        failures = self._recent(_client_key(client))
        if len(failures) < self.attempts:
            return 0
        return max(1, math.ceil(failures[0] + self.seconds - self.clock()))

    def failed(self, client: str | None) -> None:
        """Count a failed sign-in of ``client``."""
        key = _client_key(client)
        if key not in self._failures and len(self._failures) >= self.TRACKED:
            for other in list(self._failures):
                self._recent(other)
            while len(self._failures) >= self.TRACKED:  # all recent: the stalest goes
                del self._failures[min(self._failures, key=lambda k: self._failures[k][-1])]
        self._failures.setdefault(key, deque(maxlen=self.attempts)).append(self.clock())

    def _recent(self, key: str) -> deque[float]:
        """``key``'s failures inside the window (the entry dropped when none are)."""
        failures = self._failures.get(key)
        if failures is None:
            return deque()
        since = self.clock() - self.seconds
        while failures and failures[0] <= since:
            failures.popleft()
        if not failures:
            del self._failures[key]
        return failures


def _client_key(client: str | None) -> str:
    """Whom a failure counts against: the address, an IPv6 one by its /64."""
    try:
        address = ipaddress.ip_address(client or "")
    except ValueError:
        return client or ""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # an IPv4 client of a dual-stack socket
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


@dataclass(frozen=True)
class Access:
    """Who may use the board.

    Anyone who reaches it (neither set), the holder of ``token`` (``Authorization:
    Bearer``, or the sign-in form, whose cookie lasts ``session_seconds``), or ``user``
    with ``password`` (HTTP basic). ``clock``: the time in seconds (tests move it).
    """

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
        """Whether a request with this ``Authorization`` header and session cookie may pass.

        Every comparison takes the same time whatever the input.
        """
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
        """A sign-in cookie's value, issued now.

        The time, and a MAC of it under the token (never the token itself). It is good for
        ``session_seconds``.
        """
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
    """Double-submit tokens against forged requests.

    Each browser gets a random id in a cookie; its forms carry the id's signature under
    this board's secret, which a forger on another origin can neither read nor compute.
    """

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
