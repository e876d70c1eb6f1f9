"""One board for several databases: :func:`combine`."""

from __future__ import annotations

import re
from collections.abc import Mapping

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route

from qcore.errors import ConfigError
from qcore.web.app import Dashboard
from qcore.web.middleware import Shield, board_root
from qcore.web.security import AllowedHosts

__all__ = ["combine"]

#: a database's name on a combined board (it is part of the board's paths)
_DATABASE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def combine(boards: Mapping[str, Starlette]) -> Starlette:
    """One board for several databases, switching between them.

    Each of ``boards`` (apps from :func:`create_app`, by a name of letters, digits, ``-``
    and ``_``) is served under ``/db/<name>/``, ``/`` leading to the first, and every
    board's sidebar switching between them. Each keeps its own credentials, read-only
    setting, allowed hosts and CSRF secret; what lies outside every board answers only to
    a name one of them does, with the same headers.
    """
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
        return RedirectResponse(f"{board_root(request.scope)}/db/{names[0]}/", status_code=303)

    routes: list[Route | Mount] = [Route("/", first)]
    routes += [Mount(f"/db/{name}", app=boards[name]) for name in names]
    app = Starlette(routes=routes)
    app.add_middleware(Shield, hosts=AllowedHosts(n for ui in uis.values() for n in ui.hosts.names))
    return app
