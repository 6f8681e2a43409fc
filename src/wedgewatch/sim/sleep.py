"""vLLM's sleep mode on the simulator: ``POST /sleep?level=N``, ``POST /wake_up`` and
``GET /is_sleeping``, served as vLLM serves them, only with ``--enable-sleep-mode`` and
``VLLM_SERVER_DEV_MODE=1`` (vLLM's dev routes: docs/features/sleep_mode.md in vllm-project/vllm).
While asleep a generation is answered 503, as vLLM answers its endpoints that need the weights.

So the supervisor's sleeping spare (supervisor/standby.py) is tested here where no GPU is: the
simulator holds no weights, and sleeping and waking cost it nothing.
"""

from __future__ import annotations

import os

from aiohttp import web

from wedgewatch.sim.engine import Engine

DEV_MODE = "VLLM_SERVER_DEV_MODE"


def enabled(engine: Engine) -> bool:
    return engine.opts.sleep_mode and os.environ.get(DEV_MODE) == "1"


def routes(engine: Engine) -> list[web.RouteDef]:
    async def sleep(request: web.Request) -> web.Response:
        level = request.query.get("level", "1")
        if level not in ("1", "2"):
            return web.json_response({"error": f"level must be 1 or 2, not {level!r}"}, status=400)
        engine.asleep = True
        engine.stats.sleeps += 1
        return web.Response(status=200)

    async def wake_up(request: web.Request) -> web.Response:
        engine.asleep = False
        engine.stats.wakes += 1
        return web.Response(status=200)

    async def is_sleeping(request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": engine.asleep})

    return [web.post("/sleep", sleep), web.post("/wake_up", wake_up), web.get("/is_sleeping", is_sleeping)]
