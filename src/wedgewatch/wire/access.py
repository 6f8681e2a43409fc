"""Who may talk to what wedgewatch serves (``serve``, ``proxy``, ``sim``): no open door.

Bound to loopback (127.0.0.0/8, ::1, ``localhost``), a server answers anyone on this machine, as
vLLM does. Bound anywhere else it must have an incoming API key (``--api-key``, or the environment
variable ``KEY_ENV``), and without one the command refuses to start (``require_key``). With a key,
every route but ``/health`` (and the routes that check a token of their own) answers 401 to a
request that does not carry it, as ``Authorization: Bearer KEY`` (the OpenAI SDK) or ``x-api-key:
KEY`` (Anthropic's), compared in constant time.

The incoming key is the proxy's own, so it is not what the upstream server gets: the proxy takes
it off. The upstream's own key, when the proxy knows one (``upstream_key``: the supervised
server's ``--api-key`` from ``[server] args``, as the supervisor's probes send it, or ``proxy
--upstream-api-key``), is the proxy's to present: it replaces whatever key a request that got in
carried, so an agent of ``run`` or a harness under ``wrap`` needs no key of the server's. A vLLM
user who keeps vLLM's ``--api-key`` and gives the proxy the same key sees what they expect:
clients send the one key and the server gets it. With neither key nothing is taken off or added:
a client's ``Authorization`` reaches the server as it came.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
from collections.abc import Iterable, Mapping

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from multidict import CIMultiDict

from wedgewatch.base.errors import BadInput

KEY_ENV = "WEDGEWATCH_API_KEY"
"""The environment variable ``serve`` and ``proxy`` read the incoming key from when ``--api-key``
is not given (a flag shows in ``ps``; the environment does not)."""

OPEN_PATHS = frozenset({"/health"})
"""Routes that answer without the key: a load balancer's or a supervisor's liveness check."""

_KEY_HEADERS = ("authorization", "x-api-key")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` exposes nothing beyond this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name (resolved by the bind: anything) or "" (every interface)


def require_key(host: str, key: str | None, env: str = KEY_ENV) -> None:
    """BadInput unless ``host`` is loopback or there is a key: the one line says how to go on."""
    if key or is_loopback(host):
        return
    raise BadInput(
        f"--host {host}: a server reachable beyond this machine needs an API key: give "
        f"--api-key KEY or set {env} (clients then send 'Authorization: Bearer KEY'), "
        "or bind --host 127.0.0.1"
    )


def presented(headers: Mapping[str, str]) -> str | None:
    """The key a request carries: ``Authorization: Bearer KEY`` or ``x-api-key: KEY`` (headers
    are case-insensitive: aiohttp's, or a ``CIMultiDict``)."""
    scheme, _, value = (headers.get("Authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("x-api-key") or None


def matches(given: str | None, key: str) -> bool:
    """Constant-time comparison: how long a wrong key took to refuse says nothing of the right one."""
    return given is not None and hmac.compare_digest(given.encode(), key.encode())


def _refused() -> web.Response:
    body = {
        "error": {
            "message": "a valid API key is required (Authorization: Bearer KEY or x-api-key: KEY)",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "param": None,
        }
    }
    return web.json_response(body, status=401, headers={"WWW-Authenticate": "Bearer"})


def forwarded_headers(headers: Mapping[str, str], upstream_key: str | None) -> CIMultiDict[str]:
    """A request's headers with the incoming key taken off, and the upstream's own put on each
    header the client used (``Authorization`` when neither), when there is one."""
    out = CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _KEY_HEADERS)
    if upstream_key:
        used = [h for h in _KEY_HEADERS if h in headers] or ["authorization"]
        for h in used:
            out[h] = f"Bearer {upstream_key}" if h == "authorization" else upstream_key
    return out


def middleware(
    key: str | None,
    *,
    upstream_key: str | None = None,
    forwards: bool = False,
    open_paths: Iterable[str] = (),
) -> Middleware:
    """An aiohttp middleware: with ``key``, 401 on every route but ``OPEN_PATHS`` and
    ``open_paths`` for a request without it; ``forwards`` (the proxy): the client's key is taken
    off every request let in, and ``upstream_key`` put on, before any handler forwards it, but on
    ``open_paths``, which check a token of their own in the same header."""
    own = frozenset(open_paths)  # routes with a token of their own: neither checked nor rewritten
    free = OPEN_PATHS | own
    rewrites = forwards and (key is not None or upstream_key is not None)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if key is not None and request.path not in free and not matches(presented(request.headers), key):
            return _refused()
        if rewrites and request.path not in own:
            request = request.clone(headers=forwarded_headers(request.headers, upstream_key))
        return await handler(request)

    return check


def bound_url(sockname: tuple[object, ...]) -> str:
    """``http://HOST:PORT`` of the address a socket really bound (``0.0.0.0`` stays ``0.0.0.0``:
    every interface), an IPv6 one in brackets."""
    host, port = str(sockname[0]), int(str(sockname[1]))
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


LISTEN_FLAGS = ("--host", "--port")
"""What a command calls the address and the port it listens on."""


def cannot_listen(exc: OSError, host: str, port: int, names: tuple[str, str] = LISTEN_FLAGS) -> BadInput:
    """The one line every server wedgewatch starts (``sim``, ``proxy``, ``serve``, ``wrap``,
    ``run``) says when it cannot listen: a port someone else holds, or an address this machine
    does not have, is the user's to change (exit 2), never an OSError's traceback."""
    host_name, port_name = names
    if exc.errno == errno.EADDRINUSE:
        return BadInput(
            f"{port_name}: {host}:{port} is already in use: stop what holds it, "
            "or give another port (0 picks a free one)"
        )
    return BadInput(f"{host_name}: cannot listen on {host}:{port}: {exc.strerror or exc}")
