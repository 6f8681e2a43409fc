"""llama.cpp's ``GET /slots`` on the simulator, for the fault of llama.cpp #27388: generation stops
mid-decode, ``/health`` still answers ``{"status": "ok"}``, and ``/slots`` hangs (llama-server
answers it from its task queue, which the stuck main loop no longer serves).

While the engine runs, ``/slots`` lists one slot per ``--max-num-seqs`` (at most 64) with the
fields a monitor reads; once the engine is wedged it never answers, whatever the dialect.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from wedgewatch.sim.engine import Engine

MAX_SLOTS = 64  # enough for a monitor to read; vLLM's default of 256 sequences would be noise


def routes(engine: Engine) -> list[web.RouteDef]:
    """``GET /slots``."""

    async def slots(request: web.Request) -> web.Response:
        if engine.wedged:
            await asyncio.get_running_loop().create_future()  # until the client gives up
        busy = engine.m.running
        n_ctx = engine.opts.max_model_len
        listing = [
            {"id": i, "n_ctx": n_ctx, "is_processing": i < busy}
            for i in range(min(engine.max_num_seqs, MAX_SLOTS))
        ]
        return web.json_response(listing)

    return [web.get("/slots", slots)]
