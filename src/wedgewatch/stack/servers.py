"""Supervised servers behind the watchdog proxy, as one object: what ``run``, ``serve`` and
``wrap`` all start. One ``[server]`` is a pool of one; ``[[servers]]`` is a pool of several
(``supervisor/pool.py``), each member supervised on its own, the proxy routing among them.

One event bus carries both sides: the proxy publishes request events on it, the supervisor
listens (``attach``) and publishes its own (``wedge``, ``restart``, ...), and whoever drives the
stack subscribes before ``start``. Start order is proxy, then supervisor: the proxy's URL is known
at once, and a request that arrives before the first life is ready waits for it (the watchdog's
``restart_wait``) instead of failing. Stop order is the reverse of what a client sees: the
supervisor ends the server's process group first (nothing is left running even if the proxy's
shutdown is slow), then the proxy closes its connections and flushes its last rows.

Imports stay one-way: cli and runner import this module; it imports proxy and supervisor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType

from wedgewatch.base.events import EventBus
from wedgewatch.config import ServerConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.stack.address import record_address
from wedgewatch.stack.listen import listen
from wedgewatch.supervisor import Supervisor
from wedgewatch.supervisor.admin import routes as admin_routes
from wedgewatch.supervisor.life import server_key
from wedgewatch.supervisor.pool import Pool
from wedgewatch.wire.access import LISTEN_FLAGS

RESTART_PATH = "/wedgewatch/restart"
"""admin.py's restart route: it checks a bearer token of its own (a pool's ``restart_url`` sends
that one), so the proxy's incoming key does not guard it twice."""


class Stack:
    """``Stack(server, watchdog, ledger=...)``; ``await start()`` (or ``async with``) and
    ``await stop()``, which is safe to call more than once and after a failed start."""

    def __init__(
        self,
        servers: ServerConfig | Sequence[ServerConfig],
        watchdog: WatchdogConfig,
        *,
        ledger: Ledger | None = None,
        run_id: str | None = None,
        admin: bool = False,
        restart_token: str | None = None,
        api_key: str | None = None,
    ) -> None:
        self.bus = EventBus()
        members = [servers] if isinstance(servers, ServerConfig) else list(servers)
        self.pool = Pool([Supervisor(m, ledger=ledger, bus=self.bus, run_id=run_id) for m in members])
        # ``admin``: the proxy also answers /wedgewatch/servers and (with ``restart_token``) POST
        # /wedgewatch/restart, for a pool on another host (``wedgewatch serve``).
        routes = admin_routes(self.pool, restart_token) if admin else []
        # ``api_key``: the proxy's incoming key (wire/access.py); what goes upstream in its place is
        # the servers' own --api-key, when they share one. /wedgewatch/restart checks its own token.
        keys = {server_key(m) for m in members}
        self.proxy = Proxy(
            self.pool,
            watchdog,
            ledger=ledger,
            bus=self.bus,
            feed=self.pool.feed,
            routes=routes,
            api_key=api_key,
            upstream_key=keys.pop() if len(keys) == 1 else None,
            open_paths=[RESTART_PATH] if admin else [],
        )
        self.watchdog = watchdog
        self._ledger, self._run_id = ledger, run_id
        self._detach = self.pool.attach(self.bus)
        # The requests the proxy holds on a life are work, whatever its server's gauges say.
        self.pool.see_proxy(self.proxy.held_on)
        self.proxy_url = ""  # "" when the watchdog is disabled: clients go to the server itself
        self._stopped = False

    @property
    def supervisor(self) -> Supervisor:
        """The first member's supervisor: the only one with ``[server]``."""
        return self.pool.members[0]

    @property
    def url(self) -> str:
        """Where clients send requests (root URL, without ``/v1``): the proxy, or a member's
        current life when the watchdog is disabled."""
        return self.proxy_url or self.pool.base_url

    async def start_proxy(
        self, host: str = "127.0.0.1", port: int = 0, names: tuple[str, str] = LISTEN_FLAGS
    ) -> str:
        """The proxy alone (once): its URL is known before the server is up. A port in use is one
        line naming ``names`` (listen.py)."""
        if self.watchdog.enabled and not self.proxy_url:
            self.proxy_url = await listen(self.proxy, host, port, names)
            self._record_address()
        return self.proxy_url

    def _record_address(self) -> None:
        if self._ledger is not None:
            record_address(self._ledger, self.proxy_url, self._run_id)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Proxy, then a ready and warmed life of every server; returns ``url``. On any failure (or
        cancellation) everything started so far is stopped before the error propagates."""
        try:
            await self.start_proxy(host, port)
            await self.pool.start()
        except BaseException:
            await self.stop()
            raise
        return self.url

    async def stop(self) -> None:
        """Server first (its whole process group), then the proxy. Shielded: a cancelled caller
        cannot leave a server running."""
        if self._stopped:
            return
        self._stopped = True
        await asyncio.shield(self._stop())

    async def _stop(self) -> None:
        try:
            await self.pool.stop()
        finally:
            self._detach()
            await self.proxy.stop()

    async def __aenter__(self) -> Stack:
        await self.start()
        return self

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
