"""The dashboard's two ASGI middlewares and the request helpers they share.

:class:`Shield`, outermost, refuses a request addressed to a name the board was not
given (DNS rebinding) before anything else runs, and puts the security headers on every
answer, a crash's 500 included. :class:`Guard` checks credentials (and how often they
failed) and gives each browser its CSRF id.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from qcore.web.security import HEADERS, Access, AllowedHosts, Csrf, SignInLimit

__all__ = [
    "SESSION_COOKIE",
    "Guard",
    "Shield",
    "board_root",
    "route_path",
    "set_session_cookie",
    "text_response",
]

SESSION_COOKIE = "qcore_session"


def board_root(scope: Scope) -> str:
    """Where the board is mounted (``""`` when it is the whole app)."""
    return str(scope.get("root_path", "")).rstrip("/")


def set_session_cookie(request: Request, response: Response, value: str, seconds: int) -> None:
    """Set the sign-in cookie on ``response``: ``value`` for ``seconds`` (0: dropped)."""
    secure = "; Secure" if request.url.scheme == "https" else ""
    response.headers.append(
        "set-cookie",
        f"{SESSION_COOKIE}={value}; Path=/; Max-Age={seconds}; HttpOnly; SameSite=Strict{secure}",
    )


def route_path(scope: Scope) -> str:
    """The request's path inside the board, wherever it is mounted."""
    path, root = str(scope["path"]), board_root(scope)
    return path[len(root) :] or "/" if root and path.startswith(root) else path


def text_response(status: int, text: str, headers: Mapping[str, str] | None = None) -> Response:
    return Response(text, status_code=status, media_type="text/plain", headers=headers)


class Shield:
    """ASGI middleware, outermost: host check first, security headers on every answer.

    A request addressed to a name the board does not answer to is refused (400) before
    anything else looks at it, and every answer carries the security headers, whichever
    part of the stack made it (a page, a 404 of the router, a refusal, the 500 of a
    crash). A crash is answered here, then raised on, so the server (or the application
    the board is mounted in) logs it.
    """

    def __init__(self, app: ASGIApp, hosts: AllowedHosts) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                names = {k.encode() for k in HEADERS}
                headers = [h for h in message.get("headers", []) if h[0].lower() not in names]
                headers += [(k.encode(), v.encode()) for k, v in HEADERS.items()]
                message["headers"] = headers
            await send(message)

        host = Request(scope).headers.get("host")
        if not self.hosts.allows(host):
            await text_response(400, self.hosts.refusal(host))(scope, receive, with_headers)
            return
        try:
            await self.app(scope, receive, with_headers)
        except Exception:
            if not started:
                crashed = text_response(500, "the dashboard failed to answer; its log says why\n")
                await crashed(scope, receive, with_headers)
            raise


class Guard:
    """ASGI middleware: credentials, how often they failed, and the browser's CSRF id."""

    def __init__(self, app: ASGIApp, access: Access, sign_ins: SignInLimit) -> None:
        self.app = app
        self.access = access
        self.sign_ins = sign_ins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = route_path(scope)
        open_path = path == "/login" or path.startswith("/static/")
        if not open_path and self.access.required:
            refusal = self._check(request)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        browser = request.cookies.get(Csrf.COOKIE)
        fresh = None
        if not browser:
            browser = fresh = Csrf.new_id()
        scope.setdefault("state", {})["browser"] = browser

        async def with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start" and fresh is not None:
                cookie = f"{Csrf.COOKIE}={fresh}; Path=/; HttpOnly; SameSite=Strict"
                message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie.encode())]
            await send(message)

        await self.app(scope, receive, with_cookie)

    def _check(self, request: Request) -> Response | None:
        """None when the request may pass, else its refusal.

        Credentials sent in the ``Authorization`` header are a sign-in: one from a
        client that failed too often lately is not even looked at, and a wrong one
        counts as a failure (a signed-in browser's cookie is not a guess: it is neither
        limited nor counted).
        """
        authorization = request.headers.get("authorization")
        client = request.client.host if request.client else None
        if authorization is not None:
            wait = self.sign_ins.wait(client)
            if wait:
                return _too_many(wait)
        if self.access.allows(authorization, request.cookies.get(SESSION_COOKIE)):
            return None
        if authorization is not None:
            self.sign_ins.failed(client)
        return self._refuse(request)

    def _refuse(self, request: Request) -> Response:
        if self.access.user is not None:
            challenge = 'Basic realm="qcore dashboard", charset="UTF-8"'
            return text_response(401, "authentication required\n", {"www-authenticate": challenge})
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(f"{board_root(request.scope)}/login", status_code=303)
        return text_response(401, "authentication required\n")


def _too_many(wait: int) -> Response:
    return text_response(
        429,
        f"too many failed sign-ins from this address: try again in {wait} s\n",
        {"retry-after": str(wait)},
    )
