"""The proxy's listening socket, opened the one way every command that binds it shares (``proxy``,
``serve``, ``wrap``, ``run``): a port someone else holds, or an address this machine does not
have, is one line naming the flag (``wire.access.cannot_listen``, exit 2), never a traceback.
"""

from __future__ import annotations

from wedgewatch.proxy import Proxy
from wedgewatch.wire.access import LISTEN_FLAGS, cannot_listen


async def listen(proxy: Proxy, host: str, port: int, names: tuple[str, str] = LISTEN_FLAGS) -> str:
    """``proxy.start(host, port)``; its URL. The caller stops the proxy on the way out, as it does
    after any failed start."""
    try:
        return await proxy.start(host, port)
    except OSError as exc:
        raise cannot_listen(exc, host, port, names) from None
