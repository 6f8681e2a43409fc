"""The two routes a ``wedgewatch serve`` adds to its proxy for a pool on another host: the state
of its servers, and a restart.

- ``GET /wedgewatch/servers``: each member's name, current life, whether it takes new work, its
  ready spare life (``server.standby``), and why it gave up, if it did. Read-only, like ``/wedgewatch/status``.
- ``POST /wedgewatch/restart`` (``Authorization: Bearer TOKEN``; body ``{"member": NAME}``
  optional, default every member): restarts, counted against each member's ``max_restarts``,
  and answers once the new lives are ready, so the caller (a pool's ``restart_url``) can go on
  at once. Without a token configured the route refuses every request (403): a restart must
  never be one unauthenticated POST away on an address others can reach.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import Any

from aiohttp import web

from wedgewatch.base.vocab import GAVE_UP, REMOTE_RESTART
from wedgewatch.supervisor.pool import Pool
from wedgewatch.supervisor.supervisor import Supervisor

REASON = REMOTE_RESTART
"""The restart reason recorded for a restart asked over HTTP."""


def _error(status: int, code: str, message: str) -> web.Response:
    body = {"error": {"type": "wedgewatch_admin", "code": code, "message": message}}
    return web.json_response(body, status=status)


def _state(m: Supervisor) -> dict[str, Any]:
    life = m.current
    return {
        "member": m.cfg.name,
        "life_id": life.life_id if life is not None else None,
        "ready": Pool.takes_work(m),
        "failure": str(m.failure) if m.failure is not None else None,
        # The spare life (server.standby) once ready: the next restart is its promotion.
        "spare_life": m.standby.spare.life_id
        if m.standby is not None and m.standby.ready() and m.standby.spare
        else None,
    }


def routes(pool: Pool, token: str | None) -> list[web.RouteDef]:
    """The routes, for ``Proxy(routes=...)``. ``token`` None or empty: restarts are refused."""
    expected = f"Bearer {token}".encode() if token else None

    async def servers(request: web.Request) -> web.Response:
        return web.json_response({"servers": [_state(m) for m in pool.members]})

    async def restart(request: web.Request) -> web.Response:
        if expected is None:
            return _error(403, "restart_disabled", "this server was started without a restart token")
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return _error(401, "unauthorized", "a restart needs the server's bearer token")
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            return _error(400, "bad_body", 'the body must be JSON, for example {"member": "s0"}')
        name = body.get("member") if isinstance(body, dict) else None
        targets = [m for m in pool.members if name is None or m.cfg.name == name]
        if not targets:
            named = [m.cfg.name for m in pool.members if m.cfg.name is not None]
            # a one-[server] serve has one unnamed member: restart it by sending no member
            known = ", ".join(named) if named else "one unnamed server; send {} to restart it"
            return _error(404, "unknown_member", f"no member {name!r} (members: {known})")
        await asyncio.gather(*(m.restart(REASON) for m in targets))
        failed = [m for m in targets if m.failure is not None]
        if failed:
            return _error(503, GAVE_UP, f"{failed[0].cfg.name}: {failed[0].failure}")
        return web.json_response({"restarted": [_state(m) for m in targets]})

    return [web.get("/wedgewatch/servers", servers), web.post("/wedgewatch/restart", restart)]
