"""The watchdog proxy: sees a stuck request in seconds, aborts it upstream, and answers the client
with an error it will not retry. See docs/proxy.md."""

from wedgewatch.proxy.app import GENERATIONS, Proxy
from wedgewatch.proxy.upstream import StaticUpstream
from wedgewatch.proxy.watch import Stall, Watch

__all__ = [
    "GENERATIONS",
    "Proxy",
    "Stall",
    "StaticUpstream",
    "Watch",
]
