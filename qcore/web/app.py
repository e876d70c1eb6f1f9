"""The dashboard's ASGI application: :func:`create_app`.

Pages are rendered on the server (Jinja2, autoescaped; charts are SVG drawn by
:mod:`qcore.web.charts`); one small script of the package's own refreshes the parts of
a page marked live and toggles chart series. Every state change is a POST carrying the
browser's CSRF token; ``read_only`` hides every action and refuses every POST. No SQL
travels from the browser: each action is one of the ``Boss``'s verbs.

Two middlewares wrap the routes. :class:`_Shield`, outermost, refuses a request
addressed to a name the board was not given (DNS rebinding) before anything else runs,
and puts the security headers on every answer, a crash's 500 included. :class:`_Guard`
checks credentials (and how often they failed) and gives each browser its CSRF id.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from qcore.boss import Boss
from qcore.errors import (
    ConfigError,
    ConnectionLostError,
    DatabaseError,
    QcoreError,
    QueueNotFoundError,
    ValidationError,
)
from qcore.metrics import LatencyPoint, MetricsHistoryAdmin, MetricsHistoryProvider, WindowHistory
from qcore.web import charts, prometheus
from qcore.web.board import RANGES, STATES, Board, JobFilter
from qcore.web.security import HEADERS, Access, AllowedHosts, Csrf, SignInLimit

__all__ = ["combine", "create_app"]

HERE = Path(__file__).parent
#: how often an open page refreshes its live parts (seconds)
REFRESH_SECONDS = 10
#: what a history purge keeps, by choice on the storage panel
KEEP_CHOICES = {"7d": 7, "30d": 30, "90d": 90}
#: the tabs of the history page
HISTORY_TABS = ("throughput", "latency")
#: methods that only read, so a request may be run again after a lost connection
READS = ("GET", "HEAD")
JOB_ACTIONS = ("cancel", "retry", "resume", "delete")
INSTANCE_ACTIONS = ("pause", "resume", "remove")
SESSION_COOKIE = "qcore_session"

#: what a notice's seal signs, before the notice's text
_NOTICE = "notice:"

Handler = Callable[[Request], Awaitable[Response]]


def _when(value: dt.datetime | None) -> str:
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if value else "–"


def _age(value: dt.datetime | None) -> str:
    if value is None:
        return "–"
    seconds = (dt.datetime.now(dt.timezone.utc) - value).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def _pretty(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["age"] = _age
    env.filters["pretty"] = _pretty
    env.filters["ms"] = lambda v: charts.format_duration_ms(v) if v is not None else "–"
    env.filters["seconds"] = lambda v: charts.format_duration_ms(v * 1000) if v is not None else "–"
    env.filters["bytes"] = _bytes
    env.globals["split_bar"] = lambda c, f, top: Markup(charts.split_bar(c, f, top))
    env.globals["sparkline"] = lambda values: Markup(charts.sparkline(values))
    env.globals["link"] = _link
    return env


def _link(path: str, **params: Any) -> str:
    """``path`` with ``params`` (None left out) as its query, each value encoded."""
    given = {k: str(v) for k, v in params.items() if v is not None}
    return f"{path}?{urllib.parse.urlencode(given)}" if given else path


def _bytes(n: int | None) -> str:
    if n is None:
        return "–"
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _root(scope: Scope) -> str:
    """Where the board is mounted (``""`` when it is the whole app)."""
    return str(scope.get("root_path", "")).rstrip("/")


def _session_cookie(request: Request, response: Response, value: str, seconds: int) -> None:
    """Set the sign-in cookie on ``response``: ``value`` for ``seconds`` (0: dropped)."""
    secure = "; Secure" if request.url.scheme == "https" else ""
    response.headers.append(
        "set-cookie",
        f"{SESSION_COOKIE}={value}; Path=/; Max-Age={seconds}; HttpOnly; SameSite=Strict{secure}",
    )


def _route_path(scope: Scope) -> str:
    """The request's path inside the board, wherever it is mounted."""
    path, root = str(scope["path"]), _root(scope)
    return path[len(root) :] or "/" if root and path.startswith(root) else path


def _text(status: int, text: str, headers: Mapping[str, str] | None = None) -> Response:
    return Response(text, status_code=status, media_type="text/plain", headers=headers)


class _Shield:
    """ASGI middleware, outermost: a request addressed to a name the board does not
    answer to is refused (400) before anything else looks at it, and every answer
    carries the security headers, whichever part of the stack made it (a page, a 404 of
    the router, a refusal, the 500 of a crash). A crash is answered here, then raised
    on, so the server (or the application the board is mounted in) logs it."""

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
            await _text(400, self.hosts.refusal(host))(scope, receive, with_headers)
            return
        try:
            await self.app(scope, receive, with_headers)
        except Exception:
            if not started:
                crashed = _text(500, "the dashboard failed to answer; its log says why\n")
                await crashed(scope, receive, with_headers)
            raise


class _Guard:
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
        path = _route_path(scope)
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
        """None when the request may pass, else its refusal. Credentials sent in the
        ``Authorization`` header are a sign-in: one from a client that failed too often
        lately is not even looked at, and a wrong one counts as a failure (a signed-in
        browser's cookie is not a guess: it is neither limited nor counted)."""
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
            return _text(401, "authentication required\n", {"www-authenticate": challenge})
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(f"{_root(request.scope)}/login", status_code=303)
        return _text(401, "authentication required\n")


def _too_many(wait: int) -> Response:
    return _text(
        429,
        f"too many failed sign-ins from this address: try again in {wait} s\n",
        {"retry-after": str(wait)},
    )


class Dashboard:
    """The routes, bound to one :class:`~qcore.web.board.Board`."""

    def __init__(
        self,
        board: Board,
        *,
        read_only: bool,
        access: Access,
        hosts: AllowedHosts,
        title: str,
    ) -> None:
        self.board = board
        self.read_only = read_only
        self.access = access
        self.hosts = hosts
        self.title = title
        #: failed sign-ins, by client (the form here, credentials in headers in _Guard)
        self.sign_ins = SignInLimit()
        #: the databases of a combined board (:func:`combine`) and which one this is
        self.databases: list[str] = []
        self.database: str | None = None
        self.csrf = Csrf()
        self.env = _environment()

    # -- rendering ---------------------------------------------------------------------

    def render(self, request: Request, template: str, status: int = 200, **values: Any) -> Response:
        browser = request.scope.get("state", {}).get("browser", "")
        html = self.env.get_template(template).render(
            request=request,
            title=self.title,
            databases=self.databases,
            database=self.database,
            read_only=self.read_only,
            history_on=self.board.history is not None,
            csrf_field=Csrf.FIELD,
            csrf_token=self.csrf.token(browser),
            refresh_seconds=REFRESH_SECONDS,
            notice=self.notice(request),
            signed_in=SESSION_COOKIE in request.cookies,
            root=_root(request.scope),
            path=_route_path(request.scope),
            **values,
        )
        return HTMLResponse(html, status_code=status)

    def error(self, request: Request, exc: Exception, status: int) -> Response:
        return self.render(request, "error.html", status=status, message=str(exc))

    async def form(self, request: Request, *, changes_data: bool = True) -> dict[str, str]:
        """A POST's fields, once the request is allowed: same origin (when the browser
        says), carrying this browser's token, and, if it ``changes_data``, not on a
        read-only board."""
        if changes_data and self.read_only:
            raise _Refused("this dashboard is read-only")
        origin = request.headers.get("origin")  # the host only: a proxy may end TLS
        if origin is not None and urllib.parse.urlsplit(origin).netloc != request.headers.get(
            "host", ""
        ):
            raise _Refused("cross-origin request refused")
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        browser = request.cookies.get(Csrf.COOKIE)
        if not self.csrf.valid(browser, fields.get(Csrf.FIELD)):
            raise _Refused("missing or invalid CSRF token: reload the page and try again")
        return fields

    def handle(self, handler: Handler) -> Handler:
        """``handler`` with qcore's errors shown as pages (bad input 400, missing 404,
        refused 403, no history store a page that says how to get one) instead of
        tracebacks. A read that lost its connection (a server restart leaves the pool's
        connections dead; the pool drops them on the first failure) is run once more."""

        async def run(request: Request) -> Response:
            try:
                _check_query(request)
                try:
                    return await handler(request)
                except DatabaseError as exc:
                    if request.method not in READS or not (
                        exc.retryable or isinstance(exc, ConnectionLostError)
                    ):
                        raise
                    return await handler(request)
            except _Refused as exc:
                return self.error(request, exc, 403)
            except _NoHistory as exc:
                return self.render(
                    request,
                    "no_history.html",
                    status=200 if exc.configured else 404,
                    configured=exc.configured,
                    message=exc.message,
                )
            except QueueNotFoundError as exc:
                return self.error(request, exc, 404)
            except ValidationError as exc:
                return self.error(request, exc, 400)
            except QcoreError as exc:
                return self.error(request, exc, 500)

        return run

    def back(self, request: Request, to: str, done: str, **params: str) -> Response:
        """A redirect after an action to ``to``, which shows ``done`` as its notice (sealed
        under this board's secret: a link made elsewhere cannot put words on the board)."""
        seal = self.csrf.token(_NOTICE + done)
        query = urllib.parse.urlencode({**params, "done": done, "seal": seal})
        return RedirectResponse(f"{_root(request.scope)}{to}?{query}", status_code=303)

    def notice(self, request: Request) -> str | None:
        """The notice an action's redirect carries, if this board sealed it."""
        done = request.query_params.get("done")
        if done is None or not self.csrf.valid(_NOTICE + done, request.query_params.get("seal")):
            return None
        return done

    # -- pages -------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        return self.render(request, "overview.html", overview=await self.board.overview())

    async def queues(self, request: Request) -> Response:
        return self.render(request, "queues.html", queues=await self.board.queues())

    async def queue(self, request: Request) -> Response:
        query = request.query_params
        name, span = query.get("name", ""), _one_of(query, "range", RANGES, "60m")
        wanted = JobFilter(
            state=query.get("state") or None,
            key=query.get("key") or None,
            data=query.get("data") or None,
        )
        page = await self.board.queue(name, filter=wanted, before=query.get("before"))
        try:
            history = await _from_store(self.board.queue_history(name, span))
        except _NoHistory:  # none, or no store yet (a read-only board creates none): no charts
            history = None
        return self.render(
            request,
            "queue.html",
            q=page.queue,
            page=page.page,
            states=STATES,
            ranges=RANGES,
            range=span,
            depth_chart=Markup(_depth_chart(page.depth)) if len(page.depth) > 1 else None,
            charts=_history_charts(history, name) if history else None,
            dead_letter_for=page.dead_letter_for,
        )

    async def job(self, request: Request) -> Response:
        name, ident = request.query_params.get("queue", ""), request.query_params.get("id", "")
        job, parents, children = await self.board.job(name, ident)
        return self.render(request, "job.html", job=job, parents=parents, children=children)

    async def instances(self, request: Request) -> Response:
        return self.render(request, "instances.html", instances=await self.board.instances())

    async def warnings(self, request: Request) -> Response:
        rows, more = await self.board.warnings(before=request.query_params.get("before"))
        return self.render(request, "warnings.html", warnings=rows, next_before=more)

    async def schedules(self, request: Request) -> Response:
        return self.render(request, "schedules.html", schedules=await self.board.schedules())

    async def history(self, request: Request) -> Response:
        span = _one_of(request.query_params, "range", RANGES, "7d")
        tab = _one_of(request.query_params, "tab", HISTORY_TABS, HISTORY_TABS[0])
        history = await _from_store(self.board.queue_history(None, span))
        busiest = max((t.completed + t.failed for t in history.breakdown), default=0)
        return self.render(
            request,
            "history.html",
            history=history,
            ranges=RANGES,
            range=span,
            busiest=busiest,
            charts=_history_charts(history, "all queues"),
            tab=tab,
        )

    async def storage(self, request: Request) -> Response:
        usage = await _from_store(self.board.storage())
        return self.render(request, "storage.html", usage=usage, keeps=KEEP_CHOICES)

    async def confirm_purge(self, request: Request) -> Response:
        keep = request.query_params.get("keep", "")
        cutoff = _cutoff(keep)
        usage = await _from_store(self.board.storage())
        return self.render(request, "purge.html", keep=keep, cutoff=cutoff, usage=usage)

    async def metrics(self, request: Request) -> Response:
        text = await prometheus.exposition(self.board)
        return Response(text, media_type=prometheus.CONTENT_TYPE)

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self.render(request, "login.html", failed=False)
        client = request.client.host if request.client else None
        wait = self.sign_ins.wait(client)
        if wait:  # the form is not even read: a right guess now would tell nothing
            page = self.render(request, "login.html", status=429, failed=False, wait=wait)
            page.headers["retry-after"] = str(wait)
            return page
        form = await request.form()
        given = form.get("token")
        if (
            self.access.token is None
            or not isinstance(given, str)
            or not self.access.allows(f"Bearer {given}", None)
        ):
            self.sign_ins.failed(client)
            return self.render(request, "login.html", status=401, failed=True)
        response = RedirectResponse(f"{_root(request.scope)}/", status_code=303)
        lasts = int(self.access.session_seconds)
        _session_cookie(request, response, self.access.session_value(), lasts)
        return response

    async def logout(self, request: Request) -> Response:
        """Sign out: the session cookie dropped (a POST carrying this browser's CSRF
        token, allowed on a read-only board too)."""
        await self.form(request, changes_data=False)
        response = RedirectResponse(f"{_root(request.scope)}/login", status_code=303)
        _session_cookie(request, response, "", 0)
        return response

    # -- actions -----------------------------------------------------------------------

    async def job_action(self, request: Request) -> Response:
        fields = await self.form(request)
        name, ident, action = (
            fields.get("queue", ""),
            fields.get("id", ""),
            fields.get("action", ""),
        )
        if action not in JOB_ACTIONS:
            raise ValidationError(
                f"unknown job action {action!r}; actions: {', '.join(JOB_ACTIONS)}"
            )
        verb = {"delete": self.board.boss.delete_job}.get(action) or getattr(
            self.board.boss, action
        )
        result = await verb(name, [ident])
        done = f"{action}: {result.affected} job(s)"
        if action == "delete":
            return self.back(request, "/queue", done, name=name)
        return self.back(request, "/job", done, queue=name, id=ident)

    async def create_job(self, request: Request) -> Response:
        fields = await self.form(request)
        name = fields.get("queue", "")
        text = fields.get("data", "").strip()
        try:
            data = json.loads(text) if text else None
        except ValueError as exc:
            raise ValidationError(f"data must be JSON: {exc}") from None
        except RecursionError:  # the decoder's own limit, far past what a job may hold
            raise ValidationError("data nests lists and objects too deep") from None
        options: dict[str, Any] = {}
        if fields.get("priority"):
            options["priority"] = _integer("priority", fields["priority"])
        if fields.get("start_after"):
            options["start_after"] = _integer("start_after (seconds)", fields["start_after"])
        if fields.get("singleton_key"):
            options["singleton_key"] = fields["singleton_key"]
        job = await self.board.boss.send(name, data, **options)
        if job is None:
            return self.back(
                request, "/queue", "not created: the queue's policy refused it", name=name
            )
        return self.back(request, "/job", "created", queue=name, id=str(job))

    async def redrive(self, request: Request) -> Response:
        name = (await self.form(request)).get("queue", "")
        moved = await self.board.boss.redrive(name)
        return self.back(request, "/queue", f"redrove {moved} job(s)", name=name)

    async def instance_action(self, request: Request) -> Response:
        fields = await self.form(request)
        action, key = fields.get("action", ""), fields.get("key", "")
        if action not in INSTANCE_ACTIONS:
            raise ValidationError(
                f"unknown instance action {action!r}; actions: {', '.join(INSTANCE_ACTIONS)}"
            )
        verb = getattr(self.board.boss, f"{action}_instance")
        await verb(key)
        return self.back(request, "/instances", f"{action}d {key}")

    async def purge(self, request: Request) -> Response:
        cutoff = _cutoff((await self.form(request)).get("keep", ""))
        if self.board.admin is None:
            raise _NoHistory(configured=False)
        with _store_state():
            await self.board.admin.purge(before=cutoff)
        what = "all history" if cutoff is None else f"history before {cutoff.isoformat()}"
        return self.back(request, "/history/storage", f"purged {what}")


class _Refused(Exception):
    """A request the board will not carry out (403)."""


def _integer(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValidationError(f"{name} must be a whole number, got {text!r}") from None


def _cutoff(keep: str) -> dt.date | None:
    """The first day a purge keeping ``keep`` leaves (None: it keeps nothing)."""
    if keep == "all":
        return None
    if keep not in KEEP_CHOICES:
        raise ValidationError(f"keep must be one of {', '.join(KEEP_CHOICES)} or all")
    return dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=KEEP_CHOICES[keep])


def _one_of(query: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    """Query parameter ``name``, which must be one of ``allowed`` (``default`` when absent)."""
    value = query.get(name, default)
    if value not in allowed:
        raise ValidationError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _check_query(request: Request) -> None:
    """Refuse a query parameter no database can hold (a NUL character) whatever the page
    does with it, so it reads as the bad input it is."""
    for name, value in request.query_params.multi_items():
        if "\x00" in name or "\x00" in value:
            raise ValidationError(
                f"query parameter {name.replace(chr(0), '')!r} holds a NUL character"
            )


class _NoHistory(Exception):
    """The board has no metrics history (``configured`` False), or its store cannot be
    used yet (``message`` says why: not set up, a read-only board may not create it)."""

    def __init__(self, *, configured: bool, message: str | None = None) -> None:
        super().__init__(message)
        self.configured = configured
        self.message = message


T = TypeVar("T")


@contextlib.contextmanager
def _store_state() -> Iterator[None]:
    """Inside: the metrics store refusing its configuration (not set up, and a
    read-only board may not create it) becomes :class:`_NoHistory`."""
    try:
        yield
    except ValidationError:
        raise
    except ConfigError as exc:
        if isinstance(exc, DatabaseError):  # the server refused us: not the store's state
            raise
        raise _NoHistory(configured=True, message=str(exc)) from exc


async def _from_store(read: Awaitable[T | None]) -> T:
    """What a read of the metrics history gave; :class:`_NoHistory` when the board has
    none (the read gave None) or its store cannot be used yet."""
    with _store_state():
        value = await read
    if value is None:
        raise _NoHistory(configured=False)
    return value


def _depth_chart(depth: list[dict[str, Any]]) -> str:
    def series(name: str, column: str, css: str) -> charts.Series:
        return charts.Series(
            name, [(row["captured_on"], float(row.get(column) or 0)) for row in depth], css=css
        )

    return charts.line_chart(
        [
            series("queued", "queued_count", "s1"),
            series("active", "active_count", "s2"),
            series("failed", "failed_count", "failed"),
        ],
        title="depth",
    )


def _history_charts(history: WindowHistory, label: str) -> dict[str, Markup]:
    points = history.throughput
    latency = history.latency
    filling = bool(latency) and latency[-1].filling

    def line(
        name: str, pick: Callable[[LatencyPoint], float | None], css: str, hidden: bool = False
    ) -> charts.Series:
        return charts.Series(
            name, [(p.start, pick(p)) for p in latency], css=css, hidden=hidden, filling=filling
        )

    return {
        "throughput": Markup(
            charts.throughput_chart(
                [(p.start, p.completed, p.failed, p.filling) for p in points],
                title=f"throughput, {label}",
            )
        ),
        "latency": Markup(
            charts.line_chart(
                [
                    line("p95 run", lambda p: p.run.p95, "s1"),
                    line("p95 wait", lambda p: p.wait.p95, "s2"),
                    line("queue age", lambda p: p.age * 1000 if p.age is not None else None, "s3"),
                    line("p50 run", lambda p: p.run.p50, "s4", hidden=True),
                    line("p99 run", lambda p: p.run.p99, "s5", hidden=True),
                    line("p50 wait", lambda p: p.wait.p50, "s6", hidden=True),
                    line("p99 wait", lambda p: p.wait.p99, "s6", hidden=True),
                ],
                title=f"latency, {label}",
                unit="ms",
                log_scale=True,
            )
        ),
    }


def create_app(
    boss: Boss,
    *,
    history: MetricsHistoryProvider | None = None,
    admin: MetricsHistoryAdmin | None = None,
    read_only: bool = False,
    token: str | None = None,
    basic_auth: str | None = None,
    allowed_hosts: Iterable[str] = (),
    title: str = "qcore",
) -> Starlette:
    """The dashboard as an ASGI app, for ``boss``'s job schema (its verbs only; the
    boss need not run workers), with the metrics-history views when ``history`` (and
    the storage panel when ``admin``) is given. ``token`` or ``basic_auth``
    (``user:password``) guard every page; ``read_only`` hides and refuses every action.
    ``allowed_hosts``: the DNS names browsers reach the board by (``ops.example.com``,
    or ``.example.com`` for every name under it); ``localhost`` and addresses written
    as digits always pass, any other name is refused (see
    :class:`~qcore.web.security.AllowedHosts`). Mount it in a Starlette or FastAPI app,
    or serve it with ``qcore dashboard``."""
    access = Access.of(token, basic_auth)
    hosts = AllowedHosts(allowed_hosts)
    board = Board(boss, history=history, admin=admin)
    ui = Dashboard(board, read_only=read_only, access=access, hosts=hosts, title=title)
    h = ui.handle
    routes = [
        Route("/", h(ui.overview)),
        Route("/queues", h(ui.queues)),
        # a queue name may hold "/": queues and jobs are named in the query, not the path
        Route("/queue", h(ui.queue)),
        Route("/queue/create", h(ui.create_job), methods=["POST"]),
        Route("/queue/redrive", h(ui.redrive), methods=["POST"]),
        Route("/job", h(ui.job)),
        Route("/job/action", h(ui.job_action), methods=["POST"]),
        Route("/instances", h(ui.instances)),
        Route("/instances", h(ui.instance_action), methods=["POST"]),
        Route("/warnings", h(ui.warnings)),
        Route("/schedules", h(ui.schedules)),
        Route("/history", h(ui.history)),
        Route("/history/storage", h(ui.storage)),
        Route("/history/purge", h(ui.confirm_purge)),
        Route("/history/purge", h(ui.purge), methods=["POST"]),
        Route("/metrics", h(ui.metrics)),
        Route("/login", h(ui.login), methods=["GET", "POST"]),
        Route("/logout", h(ui.logout), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(_Guard, access=access, sign_ins=ui.sign_ins)
    app.add_middleware(_Shield, hosts=hosts)  # added last: outermost
    app.state.dashboard = ui
    return app


#: a database's name on a combined board (it is part of the board's paths)
_DATABASE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def combine(boards: Mapping[str, Starlette]) -> Starlette:
    """One board for several databases: each of ``boards`` (apps from :func:`create_app`,
    by a name of letters, digits, ``-`` and ``_``) under ``/db/<name>/``, ``/`` leading to
    the first, and every board's sidebar switching between them. Each keeps its own
    credentials, read-only setting, allowed hosts and CSRF secret; what lies outside
    every board answers only to a name one of them does, with the same headers."""
    if not boards:
        raise ConfigError("combine() needs at least one board")
    names = list(boards)
    uis: dict[str, Dashboard] = {}
    for name in names:  # every board checked before any is told about the others
        if not _DATABASE_NAME.fullmatch(name):
            raise ConfigError(
                f"a database's name on the board may hold letters, digits, - and _, got {name!r}"
            )
        ui = getattr(getattr(boards[name], "state", None), "dashboard", None)
        if not isinstance(ui, Dashboard):
            raise ConfigError(f"board {name!r} is not an app of qcore.web.create_app")
        uis[name] = ui
    for name, ui in uis.items():
        ui.databases, ui.database = names, name

    async def first(request: Request) -> Response:
        return RedirectResponse(f"{_root(request.scope)}/db/{names[0]}/", status_code=303)

    routes: list[Route | Mount] = [Route("/", first)]
    routes += [Mount(f"/db/{name}", app=boards[name]) for name in names]
    app = Starlette(routes=routes)
    app.add_middleware(
        _Shield, hosts=AllowedHosts(n for ui in uis.values() for n in ui.hosts.names)
    )
    return app
