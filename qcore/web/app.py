"""The dashboard's ASGI application: :func:`create_app`.

Pages are rendered on the server (Jinja2, autoescaped; charts are SVG drawn by
:mod:`qcore.web.charts`); one small script of the package's own refreshes the parts of
a page marked live and toggles chart series. Every state change is a POST carrying the
browser's CSRF token; ``read_only`` hides every action and refuses every POST. No SQL
travels from the browser: each action is one of the ``Boss``'s verbs.

Two middlewares of :mod:`qcore.web.middleware` wrap the routes: ``Shield`` (hosts and
security headers) outermost, then ``Guard`` (credentials and the CSRF id). The pages'
look, filters and charts are :mod:`qcore.web.render`'s.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from qcore.boss import Boss
from qcore.errors import (
    ConfigError,
    ConnectionLostError,
    DatabaseError,
    QcoreError,
    QueueNotFoundError,
    ValidationError,
)
from qcore.metrics import MetricsHistoryAdmin, MetricsHistoryProvider
from qcore.verbs import audit as audit_ops
from qcore.web import prometheus
from qcore.web.board import (
    INSTANCE_SHOWN,
    INSTANCE_STATES,
    RANGES,
    STATES,
    Board,
    InstanceFilter,
    JobFilter,
)
from qcore.web.middleware import (
    SESSION_COOKIE,
    Guard,
    Shield,
    board_root,
    route_path,
    set_session_cookie,
)
from qcore.web.query import (
    HISTORY_TABS,
    KEEP_CHOICES,
    chart_tab,
    check_query,
    integer,
    one_of,
    purge_cutoff,
)
from qcore.web.render import depth_chart, environment, history_charts, link
from qcore.web.security import Access, AllowedHosts, Csrf, SignInLimit

__all__ = ["Dashboard", "create_app"]

HERE = Path(__file__).parent
#: how often an open page refreshes its live parts (seconds)
REFRESH_SECONDS = 10
#: methods that only read, so a request may be run again after a lost connection
READS = ("GET", "HEAD")
JOB_ACTIONS = ("cancel", "retry", "resume", "delete")
INSTANCE_ACTIONS = ("pause", "resume", "remove")

#: what a notice's seal signs, before the notice's text
_NOTICE = "notice:"

Handler = Callable[[Request], Awaitable[Response]]


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
        #: failed sign-ins, by client (the form here, credentials in headers in Guard)
        self.sign_ins = SignInLimit()
        #: the databases of a combined board (:func:`combine`) and which one this is
        self.databases: list[str] = []
        self.database: str | None = None
        self.csrf = Csrf()
        self.env = environment()

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
            root=board_root(request.scope),
            path=route_path(request.scope),
            **values,
        )
        return HTMLResponse(html, status_code=status)

    def error(self, request: Request, exc: Exception, status: int) -> Response:
        return self.render(request, "error.html", status=status, message=str(exc))

    async def form(self, request: Request, *, changes_data: bool = True) -> dict[str, str]:
        """A POST's fields, once the request is allowed.

        Allowed: same origin (when the browser says), carrying this browser's token,
        and, if it ``changes_data``, not on a read-only board.
        """
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
        """``handler`` with qcore's errors shown as pages instead of tracebacks.

        Bad input is 400, missing 404, refused 403, no history store a page that says
        how to get one. A read that lost its connection (a server restart leaves the
        pool's connections dead; the pool drops them on the first failure) is run once
        more.
        """

        async def run(request: Request) -> Response:
            try:
                check_query(request)
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
        """A redirect after an action to ``to``, which shows ``done`` as its notice.

        The notice is sealed under this board's secret: a link made elsewhere cannot put
        words on the board.
        """
        seal = self.csrf.token(_NOTICE + done)
        query = urllib.parse.urlencode({**params, "done": done, "seal": seal})
        return RedirectResponse(f"{board_root(request.scope)}{to}?{query}", status_code=303)

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
        name, span = query.get("name", ""), one_of(query, "range", RANGES, "60m")
        chart = chart_tab(query)
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
            depth_chart=Markup(depth_chart(page.depth)) if len(page.depth) > 1 else None,
            charts=history_charts(history, name) if history else None,
            history=history,
            chart=chart,
            chart_links={
                t: link("/queue", name=name, range=span, chart=t, **wanted.params()) + "#history"
                for t in HISTORY_TABS
            },
            dead_letter_for=page.dead_letter_for,
            patterns=page.patterns,
        )

    async def job(self, request: Request) -> Response:
        name, ident = request.query_params.get("queue", ""), request.query_params.get("id", "")
        view = await self.board.job(name, ident)
        return self.render(
            request,
            "job.html",
            job=view.job,
            parents=view.parents,
            children=view.children,
            origin=view.origin,
        )

    async def instances(self, request: Request) -> Response:
        query = request.query_params
        shown = InstanceFilter(
            show=one_of(query, "show", INSTANCE_SHOWN, INSTANCE_SHOWN[0]),
            state=one_of(query, "state", INSTANCE_STATES, INSTANCE_STATES[0]),
            search=query.get("q") or None,
        )
        page = await self.board.instances(shown, after=query.get("after") or None)
        return self.render(request, "instances.html", page=page, shown=shown)

    async def warnings(self, request: Request) -> Response:
        rows, more = await self.board.warnings(before=request.query_params.get("before"))
        return self.render(request, "warnings.html", warnings=rows, next_before=more)

    async def schedules(self, request: Request) -> Response:
        return self.render(request, "schedules.html", schedules=await self.board.schedules())

    async def history(self, request: Request) -> Response:
        span = one_of(request.query_params, "range", RANGES, "7d")
        chart = chart_tab(request.query_params)
        history = await _from_store(self.board.queue_history(None, span))
        busiest = max((t.completed + t.failed for t in history.breakdown), default=0)
        return self.render(
            request,
            "history.html",
            history=history,
            ranges=RANGES,
            range=span,
            busiest=busiest,
            charts=history_charts(history, "all queues"),
            chart=chart,
            chart_links={t: link("/history", range=span, chart=t) for t in HISTORY_TABS},
        )

    async def storage(self, request: Request) -> Response:
        usage = await _from_store(self.board.storage())
        # the range charted on the page that linked here (an unknown one: none)
        charted = request.query_params.get("range", "")
        return self.render(
            request,
            "storage.html",
            usage=usage,
            keeps=KEEP_CHOICES,
            charted=charted if charted in RANGES else None,
        )

    async def confirm_purge(self, request: Request) -> Response:
        keep = request.query_params.get("keep", "")
        cutoff = purge_cutoff(keep)
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
        response = RedirectResponse(f"{board_root(request.scope)}/", status_code=303)
        lasts = int(self.access.session_seconds)
        set_session_cookie(request, response, self.access.session_value(), lasts)
        return response

    async def logout(self, request: Request) -> Response:
        """Sign out: the session cookie dropped.

        It takes a POST carrying this browser's CSRF token, allowed on a read-only board
        too.
        """
        await self.form(request, changes_data=False)
        response = RedirectResponse(f"{board_root(request.scope)}/login", status_code=303)
        set_session_cookie(request, response, "", 0)
        return response

    # -- actions -----------------------------------------------------------------------

    def actor(self, request: Request) -> str:
        """Who asks, as the board knows them, and from where.

        The host application's signed-in user (an ``AuthenticationMiddleware`` in front
        of a mounted board), else the basic-auth user, else the token's holder, else
        ``anonymous``; with the client's address.
        """
        user = request.scope.get("user")
        name = (
            getattr(user, "display_name", None)
            if getattr(user, "is_authenticated", False)
            else None
        )
        if not name:
            scheme = request.headers.get("authorization", "").partition(" ")[0].lower()
            if scheme == "basic" and self.access.user is not None:
                name = self.access.user
            elif self.access.token is not None:
                name = "token holder"
        host = request.client.host if request.client is not None else "unknown host"
        return f"{name or 'anonymous'} ({host})"

    async def audit(self, request: Request, action: str, target: str, **detail: Any) -> None:
        """Record an action carried out in the audit log.

        A record that fails is an ``error`` event: the action stands and says so.
        """
        try:
            ctx = self.board.boss.context()
            await audit_ops.record(ctx, self.actor(request), action, target, detail or None)
        except QcoreError as exc:
            self.board.boss.events.emit("error", exc)

    async def audit_log(self, request: Request) -> Response:
        after = request.query_params.get("after") or None
        page = await audit_ops.list_audit(self.board.boss.context(), after=after)
        return self.render(request, "audit.html", entries=page, next_after=page.next)

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
        await self.audit(request, f"job {action}", f"{name}/{ident}", affected=result.affected)
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
            options["priority"] = integer("priority", fields["priority"])
        if fields.get("start_after"):
            options["start_after"] = integer("start_after (seconds)", fields["start_after"])
        if fields.get("singleton_key"):
            options["singleton_key"] = fields["singleton_key"]
        job = await self.board.boss.send(name, data, **options)
        await self.audit(request, "job create", f"{name}/{job}", created=job is not None)
        if job is None:
            return self.back(
                request, "/queue", "not created: the queue's policy refused it", name=name
            )
        return self.back(request, "/job", "created", queue=name, id=str(job))

    async def redrive(self, request: Request) -> Response:
        name = (await self.form(request)).get("queue", "")
        moved = await self.board.boss.redrive(name)
        await self.audit(request, "redrive", name, moved=moved)
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
        await self.audit(request, f"instance {action}", key)
        return self.back(request, "/instances", f"{action}d {key}")

    async def purge(self, request: Request) -> Response:
        cutoff = purge_cutoff((await self.form(request)).get("keep", ""))
        if self.board.admin is None:
            raise _NoHistory(configured=False)
        with _store_state():
            await self.board.admin.purge(before=cutoff)
        await self.audit(request, "history purge", "metrics history", before=cutoff)
        what = "all history" if cutoff is None else f"history before {cutoff.isoformat()}"
        return self.back(request, "/history/storage", f"purged {what}")


class _Refused(Exception):
    """A request the board will not carry out (403)."""


class _NoHistory(Exception):
    """The board has no metrics history, or its store cannot be used yet.

    No history: ``configured`` False; a store not usable yet: ``message`` says why (not
    set up, a read-only board may not create it).
    """

    def __init__(self, *, configured: bool, message: str | None = None) -> None:
        super().__init__(message)
        self.configured = configured
        self.message = message


T = TypeVar("T")


@contextlib.contextmanager
def _store_state() -> Iterator[None]:
    """Turn the metrics store's refusal of its configuration into :class:`_NoHistory`.

    Inside, the store refuses when it is not set up and a read-only board may not create
    it.
    """
    try:
        yield
    except ValidationError:
        raise
    except ConfigError as exc:
        if isinstance(exc, DatabaseError):  # the server refused us: not the store's state
            raise
        raise _NoHistory(configured=True, message=str(exc)) from exc


async def _from_store(read: Awaitable[T | None]) -> T:
    """What a read of the metrics history gave.

    :class:`_NoHistory` when the board has none (the read gave None) or its store cannot
    be used yet.
    """
    with _store_state():
        value = await read
    if value is None:
        raise _NoHistory(configured=False)
    return value


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
    """The dashboard as an ASGI app, for ``boss``'s job schema.

    It uses the boss's verbs only (the boss need not run workers), with the
    metrics-history views when ``history`` (and the storage panel when ``admin``) is
    given. ``token`` or ``basic_auth`` (``user:password``) guard every page;
    ``read_only`` hides and refuses every action. ``allowed_hosts``: the DNS names
    browsers reach the board by (``ops.example.com``, or ``.example.com`` for every name
    under it); ``localhost`` and addresses written as digits always pass, any other name
    is refused (see :class:`~qcore.web.security.AllowedHosts`). Mount it in a Starlette
    or FastAPI app, or serve it with ``qcore dashboard``.
    """
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
        Route("/audit", h(ui.audit_log)),
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
    app.add_middleware(Guard, access=access, sign_ins=ui.sign_ins)
    app.add_middleware(Shield, hosts=hosts)  # added last: outermost
    app.state.dashboard = ui
    return app
