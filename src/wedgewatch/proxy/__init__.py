"""The watchdog proxy: sees a stuck request in seconds, aborts it upstream, and answers the client
with an error it will not retry. See docs/proxy.md."""

from wedgewatch.proxy.app import GENERATIONS, Proxy
from wedgewatch.proxy.deadlines import Stall, Watch
from wedgewatch.proxy.upstream import StaticUpstream

__all__ = [
    "GENERATIONS",
    "Proxy",
    "Stall",
    "StaticUpstream",
    "Watch",
]
