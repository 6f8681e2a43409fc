"""The HTTP face of the simulator: vLLM's endpoints on aiohttp, plus /sim/stats."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from wedgewatch import __version__
from wedgewatch.base.errors import BadInput
from wedgewatch.sim import death, sglang, sleep, slots, tokenizer
from wedgewatch.sim.chunks import plan_reply
from wedgewatch.sim.engine import Engine, SimOptions
from wedgewatch.sim.faults import RequestKey
from wedgewatch.sim.generation import Generation
from wedgewatch.sim.metrics import make_registry, render
from wedgewatch.sim.parse import Kind, RequestRejected, error_response, parse
from wedgewatch.sim.policy import PolicyRequest, get_policy
from wedgewatch.sim.scenario import Scenario, load_scenario
from wedgewatch.wire import access

SHAPES = ("logprobs", "response_format", "tools")
"""Request fields /sim/stats counts (``by_shape``): what a warm-up's shapes ask for."""

log = logging.getLogger(__name__)

ENGINE: web.AppKey[Engine] = web.AppKey("engine", Engine)
VLLM_VERSION = "0.21.0"  # the vLLM release the simulator imitates (the story's)


async def health(request: web.Request) -> web.Response:
    if not request.app[ENGINE].ready():
        return web.json_response({}, status=503)
    return web.json_response({})


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": VLLM_VERSION, "simulator": f"wedgewatch {__version__}"})


async def models(request: web.Request) -> web.Response:
    e = request.app[ENGINE]
    created = int(e.started)
    perm = [
        {
            "id": "modelperm-sim",
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
    ]
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": e.opts.model,
            "parent": None,
            "max_model_len": e.opts.max_model_len,
            "permission": perm,
        }
        for name in e.served_names
    ]
    data += [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": path,
            "parent": e.served_names[0],
            "max_model_len": None,
            "permission": perm,
        }
        for name, path in e.opts.lora_modules.items()
    ]
    return web.json_response({"object": "list", "data": data})


async def metrics(request: web.Request) -> web.Response:
    body = render(request.app["registry"])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def sim_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[ENGINE].info())


async def _generate(request: web.Request, kind: Kind) -> web.StreamResponse:
    e = request.app[ENGINE]
    arrived = asyncio.get_running_loop().time()
    if e.dead_at is not None:
        e.stats.rejected += 1
        return death.dead_engine()  # vLLM's answer once its engine is dead
    if not e.ready():
        e.stats.rejected += 1
        return error_response(503, "The server is starting up.")
    if e.asleep:
        e.stats.rejected += 1
        return error_response(503, "The model is sleeping: POST /wake_up first.")
    try:
        body = json.loads(await request.read())
        req = parse(body, kind, e.served_names, e.opts.lora_modules, e.opts.max_model_len)
    except (json.JSONDecodeError, UnicodeDecodeError):
        e.stats.rejected += 1
        return error_response(400, "the request body is not valid JSON")
    except RequestRejected as exc:
        e.stats.rejected += 1
        return exc.response()
    st = e.stats
    st.received += 1
    st.by_path[request.path] = st.by_path.get(request.path, 0) + 1
    st.by_model[req.model] = st.by_model.get(req.model, 0) + 1
    for shape in SHAPES:
        if body.get(shape):
            st.by_shape[shape] = st.by_shape.get(shape, 0) + 1
    fault = e.faults.match(RequestKey(st.received, req.match_text, req.model))
    if fault is not None:
        st.faults[fault.action] = st.faults.get(fault.action, 0) + 1
        if fault.action == "http_error":
            st.http_errors += 1
            e.record_fault("http_error", req.messages, 0)
            return error_response(fault.status, f"simulated fault: HTTP {fault.status}")
    limit = req.max_tokens or max(e.opts.max_model_len - req.prompt_tokens, 1)
    answer = e.policy.reply(
        PolicyRequest(
            kind="completion" if kind == "completion" else "chat",  # a Responses input is a conversation
            model=req.model,
            # A continued reply is the reply to the conversation before its last assistant message.
            messages=req.messages[:-1] if req.continues is not None else req.messages,
            tools=req.tools,
            # The reply's own length, begun text included: a model does not write a different
            # reply because the rest of it was asked for with a smaller limit.
            max_tokens=req.max_tokens + tokenizer.count(req.continues)
            if req.max_tokens is not None and req.continues
            else req.max_tokens,
            seed=e.opts.seed,
            skill=e.scenario.policy.skill,
        )
    )
    reply = plan_reply(answer, limit, req.stop, tools_allowed=req.tools is not None, skip=req.continues)
    return await Generation(e, request, req, reply, fault, arrived).run()


async def chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


async def responses(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "responses")


async def anthropic_messages(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "messages")


def build_app(engine: Engine) -> web.Application:
    app = web.Application(
        client_max_size=64 * 1024 * 1024, middlewares=[access.middleware(engine.opts.api_key)]
    )
    app[ENGINE] = engine
    if engine.opts.dialect == "sglang":
        app["registry"] = sglang.make_registry(engine)
        app.router.add_routes(sglang.routes(engine))
    else:
        app["registry"] = make_registry(engine)
        app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/sim/stats", sim_stats)
    app.router.add_routes(slots.routes(engine))  # llama.cpp's /slots: hangs once wedged
    if sleep.enabled(engine):
        app.router.add_routes(sleep.routes(engine))
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/messages", anthropic_messages)
    return app


def check_options(opts: SimOptions) -> None:
    if opts.lora_modules and not opts.enable_lora:
        raise BadInput("--lora-modules: needs --enable-lora")
    if opts.time_scale <= 0:
        raise BadInput("--time-scale: must be > 0")
    if opts.dialect not in ("vllm", "sglang"):
        raise BadInput(f"--dialect: vllm or sglang, not {opts.dialect!r}")
    if not 0 <= opts.port <= 65535:
        raise BadInput(f"--port: must be in 0..65535, got {opts.port}")
    access.require_key(opts.host, opts.api_key, env="VLLM_API_KEY")


async def _serve(opts: SimOptions, scenario: Scenario, on_listening: Callable[[str], None]) -> int:
    engine = Engine(opts, scenario, get_policy(opts.policy))
    loop = asyncio.get_running_loop()
    # Signal handlers go in before the socket listens: a supervisor may signal right after the line.
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, stop.set)  # a closed terminal stops it, as SIGTERM does
    if scenario.startup.ignore_sigterm:
        loop.add_signal_handler(signal.SIGTERM, lambda: log.warning("sim: SIGTERM ignored (scenario)"))
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    runner = web.AppRunner(
        build_app(engine), handler_cancellation=True, access_log=None, shutdown_timeout=0.5
    )
    await runner.setup()
    site = web.TCPSite(runner, opts.host, opts.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise access.cannot_listen(exc, opts.host, opts.port) from None
    server = site._server
    assert isinstance(server, asyncio.base_events.Server)
    port = server.sockets[0].getsockname()[1]
    engine.listener = server
    engine.ready_at = loop.time() + scenario.startup.unready_seconds / opts.time_scale
    on_listening(access.bound_url(server.sockets[0].getsockname()))  # the address really bound
    log.warning(
        "sim: listening on port %d: scenario %s, model %s, max_num_seqs %d, time scale %g",
        port,
        scenario.name,
        engine.served_names[0],
        engine.max_num_seqs,
        opts.time_scale,
    )
    await stop.wait()
    log.warning("sim: shutting down")
    try:
        await asyncio.wait_for(runner.cleanup(), 3.0)
    except TimeoutError:
        log.warning("sim: shutdown timed out; exiting anyway")
    return 0


def serve(opts: SimOptions, on_listening: Callable[[str], None]) -> int:
    """Run the simulator until SIGTERM/SIGINT; return the exit code. ``on_listening(url)`` is
    called once the socket listens (the CLI prints it as the first line of stdout)."""
    check_options(opts)
    scenario = load_scenario(opts.scenario)
    if scenario.startup.exit_code is not None:
        log.error(
            "sim: scenario %s exits with code %d before listening", scenario.name, scenario.startup.exit_code
        )
        return scenario.startup.exit_code
    get_policy(opts.policy)  # an unknown policy is bad input before anything listens
    return asyncio.run(_serve(opts, scenario, on_listening))
