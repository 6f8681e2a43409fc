"""The watchdog proxy: sees a stuck request in seconds, aborts it upstream, and answers the client
with an error it will not retry. See docs/proxy.md."""

from wedgewatch.proxy.app import GENERATIONS, Proxy
from wedgewatch.proxy.records import (
    CLIENT_DISCONNECT,
    CLIENT_ERROR,
    CONNECTION,
    INFRA_OUTCOMES,
    OK,
    OTHER_OUTCOMES,
    is_infra_outcome,
)
from wedgewatch.proxy.upstream import StaticUpstream
from wedgewatch.proxy.watch import STALL_KINDS, Stall, Watch

__all__ = [
    "CLIENT_DISCONNECT",
    "CLIENT_ERROR",
    "CONNECTION",
    "GENERATIONS",
    "INFRA_OUTCOMES",
    "OK",
    "OTHER_OUTCOMES",
    "STALL_KINDS",
    "Proxy",
    "Stall",
    "StaticUpstream",
    "Watch",
    "is_infra_outcome",
]
