"""The vocabulary: every word wedgewatch stores for a request, an attempt or an instance, and which
of them are the infrastructure's doing. The runner, the proxy, the ledger's queries and analysis all
import these names from here; the ledger's SQL views spell the same words (a test holds them to
this module).

    request outcome   ok | client_disconnect | client_error | client_slow_body    nothing against the infrastructure
                      stall_ttft | stall_midstream | trickle | total_timeout | connection
                      | upstream_http_<code> | reply_not_sse | reply_not_json | reply_not_api
                      | reply_too_large | stream_error_event | stream_unfinished   the infrastructure's (retried)
    attempt status    submitted | early_stop                          the model's (final)
                      api_error | harness_error | interrupted         ours or the server's (retried)
    instance outcome  resolved | unresolved | empty_patch | early_stop  the model's
                      infra_failed | pending                          never counted against the model
"""

from __future__ import annotations

# --- request outcomes (the proxy's rows) --------------------------------------------------------

OK = "ok"
CLIENT_DISCONNECT = "client_disconnect"
CLIENT_ERROR = "client_error"
CONNECTION = "connection"
UPSTREAM_HTTP_PREFIX = "upstream_http_"

STALL_TTFT = "stall_ttft"
STALL_MIDSTREAM = "stall_midstream"
TRICKLE = "trickle"
TOTAL_TIMEOUT = "total_timeout"
STALL_KINDS = (STALL_TTFT, STALL_MIDSTREAM, TRICKLE, TOTAL_TIMEOUT)
"""The ways one request can stop making progress; the proxy ends it with that kind."""

# A reply that is not a well-formed answer of the API asked for is the server's failure, never the
# model's: an evaluation that scored an HTML page or a cut stream as the model's answer would make the
# very mistake wedgewatch exists to prevent. Each kind has its own name.
REPLY_NOT_SSE = "reply_not_sse"
"""A stream request answered with something that is neither SSE nor the API's JSON (an HTML page)."""
REPLY_NOT_JSON = "reply_not_json"
"""A ``data:`` line, or a whole body, that is not JSON."""
REPLY_NOT_API = "reply_not_api"
"""JSON that is not the API's answer: a chunk without ``choices``, a stream with no answer in it."""
REPLY_TOO_LARGE = "reply_too_large"
"""One SSE line or frame, or a whole body, past the proxy's cap (``max_frame_bytes``, ``max_body_bytes``)."""
STREAM_ERROR_EVENT = "stream_error_event"
"""The server reported an error inside its stream after HTTP 200 (vLLM's engine death, llama.cpp's
full context), once tokens began or with a 5xx code."""
STREAM_UNFINISHED = "stream_unfinished"
"""The stream ended (the connection closed cleanly) without the API's end: no ``[DONE]``, no finish."""
REPLY_FAULTS = (
    REPLY_NOT_SSE,
    REPLY_NOT_JSON,
    REPLY_NOT_API,
    REPLY_TOO_LARGE,
    STREAM_ERROR_EVENT,
    STREAM_UNFINISHED,
)

CLIENT_SLOW_BODY = "client_slow_body"
"""The client did not send its whole request body within ``body_timeout``: the upstream never had
the request, so nothing is held against the server."""

INFRA_OUTCOMES = frozenset({*STALL_KINDS, CONNECTION, *REPLY_FAULTS})
"""Request outcomes that are the infrastructure's fault, besides every ``upstream_http_<code>``."""
OTHER_OUTCOMES = frozenset({OK, CLIENT_DISCONNECT, CLIENT_ERROR, CLIENT_SLOW_BODY})
"""Request outcomes that say nothing against the infrastructure."""


def upstream_http(status: int) -> str:
    """The outcome of a request the server answered with HTTP ``status`` (5xx)."""
    return f"{UPSTREAM_HTTP_PREFIX}{status}"


def is_infra_outcome(outcome: str) -> bool:
    """True for a stall kind, ``connection`` and ``upstream_http_<code>``."""
    return outcome in INFRA_OUTCOMES or outcome.startswith(UPSTREAM_HTTP_PREFIX)


# --- attempt statuses (the runner's rows) -------------------------------------------------------

SUBMITTED = "submitted"
EARLY_STOP = "early_stop"
API_ERROR = "api_error"
HARNESS_ERROR = "harness_error"
INTERRUPTED = "interrupted"
RUNNING = "running"
"""Not stored: an attempt with no end row yet, as the ledger's views show it."""

ATTEMPT_STATUSES = (SUBMITTED, EARLY_STOP, API_ERROR, HARNESS_ERROR, INTERRUPTED, RUNNING)
MODEL_SIDE = frozenset({SUBMITTED, EARLY_STOP})
"""Final: the model's own doing. Retrying would inflate the score."""
RETRIED = frozenset({API_ERROR, HARNESS_ERROR, INTERRUPTED})
"""Not the model's doing: the instance gets another attempt in a fresh sandbox."""
BUDGETED = frozenset({API_ERROR, HARNESS_ERROR})
"""Retried statuses that use up the ``run.attempts`` budget. ``interrupted`` does not: the run was
stopped (Ctrl-C, SIGKILL, a crash of wedgewatch), nothing about the instance failed, and a resume
must end with the outcome the run would have had without the stop. Nor does an ``api_error`` the
server caused: reason ``server_restarted`` (a restart or recycle ended it), or on a server life with
a ``wedge`` event. Those are requeued, counted against ``run.max_requeues`` (the ledger view
``attempt_budget`` spells this rule)."""
STATUSES = MODEL_SIDE | RETRIED
"""Every status an attempt's end row can hold."""

# Reasons the runner itself gives an attempt's end (the others come from the agent, the proxy's
# outcomes and the exception tree).
SERVER_RESTARTED = "server_restarted"
RUN_STOPPED = "run_stopped"
WORKER_LOST = "worker_lost"
"""The executor's worker (a Ray worker process, or its node) died under the attempt: it ends
``interrupted`` and the instance is attempted again (runner/executors)."""
ATTEMPT_TIMEOUT = "attempt_timeout"
FOUND_ON_RESUME = "found_on_resume"
"""A resume found the attempt in flight, its runner dead (a crash, SIGKILL)."""
RUNNER_LOST = "runner_lost"
"""Another runner of the run found the attempt's runner dead (its process gone, or its lease run
out): it ends ``interrupted`` and the instance is attempted again (docs/scale-out.md)."""

# --- instance outcomes (derived by the ledger's views, never stored) ----------------------------

RESOLVED = "resolved"
UNRESOLVED = "unresolved"
EMPTY_PATCH = "empty_patch"
INFRA_FAILED = "infra_failed"
PENDING = "pending"
OUTCOMES = (RESOLVED, UNRESOLVED, EMPTY_PATCH, EARLY_STOP, INFRA_FAILED, PENDING)
MODEL_OUTCOMES = (RESOLVED, UNRESOLVED, EMPTY_PATCH, EARLY_STOP)
"""Outcomes that are the model's: a score is taken over these, with the rest beside it."""

# --- run states (the last run mark, as `report` shows it) -----------------------------------------

RUN_ENDED = ("finished", "interrupted", "aborted")
"""Marks an execution of a run ends with (``run_marks.kind``)."""
RUNNING = "running"
"""Not a mark: the state `report` gives a run whose last mark ended one runner's execution while
another runner of it still holds a live lease (several runners on PostgreSQL)."""
IN_FLIGHT = ("created", "started", "resumed", "joined", RUNNING)
"""States of a run still at work: its timelines reach "now"."""

# --- event kinds (the ``events`` table's rows, and the typed events' ``kind``: base/events.py) ----

WEDGE = "wedge"
CRASH = "crash"
RESTART = "restart"
RESTART_SKIPPED = "restart_skipped"
GAVE_UP = "gave_up"
START_FAILED = "start_failed"
WARMUP_FAILED = "warmup_failed"
CANARY = "canary"
DRAIN = "drain"
DRAINED = "drained"
API_ERRORS = "api_errors"
EVENT_KINDS = frozenset(
    {
        WEDGE,
        CRASH,
        RESTART,
        RESTART_SKIPPED,
        GAVE_UP,
        START_FAILED,
        WARMUP_FAILED,
        CANARY,
        DRAIN,
        DRAINED,
        API_ERRORS,
    }
)
"""The supervisor's facts that are ``events`` rows (supervisor/recorder.py writes them)."""
