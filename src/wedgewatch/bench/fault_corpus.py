"""The fault corpus (docs/faults.md): faults the field reported against inference servers, each
with the public report it comes from, the simulator scenario that reproduces it, what a client
sends to meet it, and what wedgewatch must make of it at its default settings.

``wedgewatch bench faults`` runs each one (``bench/faults.py``); ``tests/test_fault_corpus.py``
holds each to its ``expect`` and ``reactions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from wedgewatch.base import vocab
from wedgewatch.base.events import CanaryAnswered, Crashed, Event, Restarting, Wedged

Rig = Literal["vllm", "sglang", "client"]
"""How the fault is met. ``vllm``: the supervised simulator (profile ``sim``) behind the proxy.
``sglang``: the simulator's SGLang dialect under the real ``sglang`` profile (its argv, series and
``/health_generate`` canary). ``client``: the client's own fault, on a healthy server."""


@dataclass(frozen=True)
class Fault:
    name: str
    """The table's first column: where it was reported."""
    shows: str
    """What the server shows, in a line."""
    source: str
    """The public report, or "" when none was found (docs/faults.md says so)."""
    scenario: str
    """The bundled simulator scenario that reproduces it."""
    prompt: str
    """The last user message: the scenario's keyword."""
    expect: str
    """The request outcome wedgewatch gives it (a word of ``base/vocab.py``): its first row's.
    ``resumed`` when the proxy sent it again to the next life (``[watchdog] on_wedge``), which
    then answered it ``ok``."""
    reactions: tuple[type[Event], ...]
    """The supervisor's events that must follow, each at least once."""
    rig: Rig = "vllm"
    fill: int = 0
    """Filler tokens after the keyword (a long prompt)."""
    time_scale: float = 1.0
    """The simulated server's time scale; wedgewatch's settings stay at their defaults."""
    probe: Literal["", "health", "slots"] = ""
    """What the trial also asks the server while the fault holds: ``health`` (its /health),
    ``slots`` (llama.cpp's /slots)."""
    escaped: str = ""
    """For a resumed request: the failure the resume escaped (its first row's ``cause``)."""


_RESTART = (Wedged, Restarting)
_CANARY = (CanaryAnswered,)

CORPUS: tuple[Fault, ...] = (
    Fault(
        "vLLM #46811",
        "engine stopped mid-stream; /health 200; /metrics says 0 running, 0 waiting",
        "https://github.com/vllm-project/vllm/pull/46811",
        "wedge-gauges-zero",
        "WEDGE now",
        vocab.RESUMED,
        _RESTART,
        probe="health",
        escaped=vocab.STALL_MIDSTREAM,
    ),
    Fault(
        "vLLM #36451",
        "EngineCore hung mid-decode; /health 200; /metrics frozen (1 running)",
        "https://github.com/vllm-project/vllm/pull/36451",
        "wedge-all",
        "WEDGE now",
        vocab.RESUMED,
        _RESTART,
        probe="health",
        escaped=vocab.STALL_MIDSTREAM,
    ),
    Fault(
        "vLLM #45526",
        "engine hung in a prefill, before any token; /health 200",
        "https://github.com/vllm-project/vllm/pull/45526",
        "wedge-in-prefill",
        "WEDGE-PREFILL",
        vocab.OK,  # nothing had reached the client: sent again whole, one row
        _RESTART,
        fill=4000,
        probe="health",
    ),
    Fault(
        "vLLM #48966",
        "EngineCore death: an error event in the stream, then the server exits with status 0",
        "https://github.com/vllm-project/vllm/issues/48966",
        "engine-death-exit-0",
        "ENGINE-DEATH",
        vocab.RESUMED,  # the engine's error held, /health refused: the engine's death, resumed
        (Crashed, Restarting),
        escaped=vocab.STREAM_ERROR_EVENT,
    ),
    Fault(
        "SGLang #22511",
        "/health 503 during a long chunked prefill (no output for 20 s); the server is fine",
        "https://github.com/sgl-project/sglang/issues/22511",
        "long-prefill",
        "summarise",
        vocab.OK,
        (),
        rig="sglang",
        fill=48_000,
        time_scale=4.0,
        probe="health",
    ),
    Fault(
        "mlx-lm #1493",
        "livelock: the engine steps (steps, KV move), no request gets a token; /health 200",
        "https://github.com/ml-explore/mlx-lm/issues/1493",
        "livelock",
        "LIVELOCK",
        vocab.STALL_MIDSTREAM,
        (CanaryAnswered, Wedged, Restarting),
        probe="health",
    ),
    Fault(
        "llama.cpp #27388",
        "generation stops mid-decode; /health OK, /slots hangs; SIGTERM ignored",
        "https://github.com/ggml-org/llama.cpp/issues/27388",
        "wedge-slots-hang",
        "WEDGE now",
        vocab.RESUMED,
        _RESTART,
        probe="slots",
        escaped=vocab.STALL_MIDSTREAM,
    ),
    Fault(
        "engine error event",
        "HTTP 200, tokens, then the server's error object in the stream",
        "https://github.com/vllm-project/vllm/issues/42363",
        "broken-replies",
        "ERROR-EVENT",
        vocab.STREAM_ERROR_EVENT,
        _CANARY,
    ),
    Fault(
        "HTML 200",
        "an HTML error page with HTTP 200 to a stream request",
        "https://github.com/shuv1337/oc-web/issues/143",
        "broken-replies",
        "HTML-200",
        vocab.REPLY_NOT_SSE,
        _CANARY,
    ),
    Fault(
        "non-JSON data line",
        "tokens, then a data: line that is not JSON",
        "https://github.com/mnfst/llm-gateway/issues/2053",
        "broken-replies",
        "NOT-JSON",
        vocab.REPLY_NOT_JSON,
        _CANARY,
    ),
    Fault(
        "stream without a finish",
        "tokens, then a clean end: no finish_reason, no [DONE]",
        "https://github.com/pydantic/pydantic-ai/issues/6610",
        "broken-replies",
        "UNFINISHED",
        vocab.STREAM_UNFINISHED,
        _CANARY,
    ),
    Fault(
        "endless line",
        "tokens, then one data: line that never ends",
        "https://github.com/NousResearch/hermes-agent/issues/58471",
        "broken-replies",
        "ENDLESS-LINE",
        vocab.REPLY_TOO_LARGE,
        _CANARY,
    ),
    Fault(
        "slow client",
        "a client sends half its body, then nothing",
        "",
        "healthy",
        "hello",
        vocab.CLIENT_SLOW_BODY,
        (),
        rig="client",
    ),
)


def by_name(name: str) -> Fault:
    """The corpus entry called ``name``."""
    return next(f for f in CORPUS if f.name == name)
