"""The vocabulary: every word wedgewatch stores for a request, an attempt, an instance, a run or a
server life, which of them are the infrastructure's doing, and the retry rule over them. Every
module imports these names from here, and the ledger's SQL views and queries are built from them:
tests/test_vocab.py fails on a word spelled anywhere else in src/.

    request outcome   ok | client_disconnect | client_error | client_slow_body    nothing against the infrastructure
                      stall_ttft | stall_midstream | trickle | total_timeout | connection
                      | upstream_http_<code> | reply_not_sse | reply_not_json | reply_not_api
                      | reply_too_large | stream_error_event | stream_unfinished   the infrastructure's (retried)
    attempt status    submitted | early_stop                          the model's (final)
                      api_error | harness_error | interrupted         ours or the server's (retried)
    instance outcome  resolved | unresolved | empty_patch | early_stop  the model's
                      infra_failed | pending                          never counted against the model
                      recovered                                       a wrapped harness's: failed, sent again, ok
    run mark          started | resumed | joined                      an execution begins
                      finished | interrupted | aborted                it ends (and the run's state:
                                                                      created, running before/between)
    event kind        wedge | crash | restart | restart_skipped | gave_up | start_failed
                      | warmup_failed | canary | drain | drained | api_errors   the supervisor's events rows
                      proxy_started                                   the stack's: where a proxy listens
    start reason      run_start | adopted                             an execution's first life
                      start_failed | warmup_failed                    after a failed start
                      wedge | crash | api_errors | recycle_instances | recycle_tokens | remote_restart
    end reason        the restart reasons, start_failed | warmup_failed, and
                      stop | detached | port_busy | orphaned | lost | elsewhere
"""

from __future__ import annotations

from collections.abc import Iterable

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

INTERRUPTED = "interrupted"
"""Stopped from outside, nothing failed: an attempt's status, a run's end mark, a harness run's
end (``wedgewatch wrap``), and a request whose proxy was killed (its start without an end, found by
the next process to open the ledger). One word for one thing, in four tables."""

RESUMABLE = frozenset({*STALL_KINDS, CONNECTION, STREAM_UNFINISHED, STREAM_ERROR_EVENT})
"""Request outcomes (besides ``upstream_http_<code>``) that a request escapes by a resume when
the supervisor is replacing the life under it (``[watchdog] on_wedge``); its row for that life then
says ``resumed`` (the run mark's word: it went on after a stop) and names the leg that continues it."""

ENGINE_DEATH = "engine_death"
"""Whose failure it was (a request row's ``blame``, when the proxy asked): the server life's. The
request failed as a dying server fails one (the engine's error event, a 5xx, a cut connection)
and the server's ``/health`` said it was dead or gone: the request is held for the next life
(docs/proxy.md, "Resume")."""
OWN_ERROR = "own_error"
"""Whose failure it was: the request's own. The server's ``/health`` answered 200 when the request
failed: the life serves others, and the error goes to the client as the server sent it."""

INFRA_OUTCOMES = frozenset({*STALL_KINDS, CONNECTION, *REPLY_FAULTS})
"""Request outcomes that are the infrastructure's fault, besides every ``upstream_http_<code>``."""
# The others (ok, client_disconnect, client_error, client_slow_body, interrupted) say nothing
# against it.


def upstream_http(status: int) -> str:
    """The outcome of a request the server answered with HTTP ``status`` (5xx)."""
    return f"{UPSTREAM_HTTP_PREFIX}{status}"


def is_infra_outcome(outcome: str) -> bool:
    """True for a stall kind, ``connection`` and ``upstream_http_<code>``."""
    return outcome in INFRA_OUTCOMES or outcome.startswith(UPSTREAM_HTTP_PREFIX)


# --- attempt statuses (the runner's rows: ``attempt_ends.status``) --------------------------------

SUBMITTED = "submitted"
EARLY_STOP = "early_stop"
API_ERROR = "api_error"
HARNESS_ERROR = "harness_error"
RUNNING = "running"
"""Not stored: an attempt with no end row yet, as the ledger's views show it; and a run whose last
mark ended one runner's execution while another runner of it still holds a live lease (several
runners on PostgreSQL), as `report` shows it."""

ATTEMPT_STATUSES = (SUBMITTED, EARLY_STOP, API_ERROR, HARNESS_ERROR, INTERRUPTED, RUNNING)
"""Every status an attempt can show, in the order reports list them."""

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
RECOVERED = "recovered"
"""A wrapped harness's instance (``audit``, and ``report``/``export`` of a wrapped run by its tags)
whose every request that failed on the infrastructure the harness sent again, the same request
(the same content fingerprints), and that later one ended ``ok``: the server cost it time, not its
outcome. Not ``infra_failed``, never on a rerun list; shown beside ``infra_failed``. Not one of
``OUTCOMES``: the runner's instances retry in a fresh sandbox instead (``instances_retried``)."""

# --- run marks (``run_marks.kind``) and run states (the last mark, as `report` shows it) ----------

STARTED = "started"
RESUMED = "resumed"
JOINED = "joined"
"""A second runner joined the run (several runners on PostgreSQL)."""
FINISHED = "finished"
ABORTED = "aborted"
RUN_STARTS = (STARTED, RESUMED, JOINED)
"""Marks an execution of a run begins with."""
RUN_ENDED = (FINISHED, INTERRUPTED, ABORTED)
"""Marks an execution of a run ends with; a runner's ``runner_ends.how`` is one of these, or
``lost``."""
CREATED = "created"
"""Not a mark: the state of a run with no mark yet."""
IN_FLIGHT = (CREATED, *RUN_STARTS, RUNNING)
"""States of a run still at work: its timelines reach "now"."""
LOST = "lost"
"""Found dead by someone else: a runner's end (``runner_ends.how``, its lease run out), or a
server life's (its process was already gone when a resume looked for it)."""

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
PROMOTED = "promoted"
"""A spare life (``server.standby``) took the place of the serving one: the replaced life, why, and
how long the spare had been ready."""
STANDBY_ROOM = "standby_room"
"""At start: whether memory holds a spare engine beside the serving one, with the arithmetic."""
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
        PROMOTED,
        STANDBY_ROOM,
    }
)
"""The supervisor's facts that are ``events`` rows (supervisor/recorder.py writes them)."""
PROXY_STARTED = "proxy_started"
"""An ``events`` row of the stack's own (not the supervisor's): a watchdog proxy began to listen,
its address in ``detail_json.url`` and its process in ``pid``, so a reader of the ledger
(``wedgewatch view``) finds the proxy's read-only ``/wedgewatch/status``: the progress of the
requests in flight, which the ledger does not hold."""

# --- why a server life started (``server_lives.start_reason``) and ended (``server_life_ends``) --
# A life starts for an execution's start (FIRST_LIFE), after a failed start (start_failed,
# warmup_failed), or to replace one: wedge, crash, api_errors, the recycles, remote_restart, which
# are then also the replaced life's end reason; or as a spare, whose promotion replaces
# one (the replaced life ends with the promotion's reason). A life also ends with stop, detached, port_busy,
# start_failed, warmup_failed, crash (with restart_on_crash off), and, left by a dead runner,
# orphaned, lost or elsewhere.

RUN_START = "run_start"
ADOPTED = "adopted"
"""A server we did not start (``fresh = false``, or an ``external`` one without a restart hook)."""
FIRST_LIFE = (RUN_START, ADOPTED)
"""Start reasons of an execution's first life: every other start is a restart."""
SPARE = "spare"
"""A spare life started beside the serving one (``server.standby``): no restart by itself; its
promotion is one (a ``promoted`` event, whose reason the replaced life ends with)."""
RECYCLE_INSTANCES = "recycle_instances"
"""A planned restart after ``recycle_every_instances`` instances: not counted against
``max_restarts``, and no failure of the life."""
RECYCLE_TOKENS = "recycle_tokens"
"""A planned restart after ``recycle_every_tokens`` generated tokens, likewise."""
REMOTE_RESTART = "remote_restart"
"""A restart asked over HTTP (``POST /wedgewatch/restart``, supervisor/admin.py)."""

STOP = "stop"
"""The supervisor was stopped, or a start was cancelled: the life ended, nothing failed."""
DETACHED = "detached"
"""The supervisor stopped and left a server it did not start running, as it found it."""
PORT_BUSY = "port_busy"
ORPHANED = "orphaned"
"""Left alive by a dead runner, stopped by a resume or another runner (runner/orphans.py)."""
ELSEWHERE = "elsewhere"
"""Left by a dead runner on another host (or pid namespace): its pid means nothing here."""
LIFE_FAILURES = (WEDGE, CRASH, API_ERRORS)
"""Endings that are the life's failure, for its survival: the others censor it."""

# --- a harness run's end (``harness_run_ends.end_reason``, ``wedgewatch wrap``) ------------------

EXITED = "exited"
"""The harness exited by itself (its exit code beside); else ``interrupted``, or why it did not
start."""

# --- the retry rule ------------------------------------------------------------------------------
# The runner decides an attempt's status (runner/retry.py) and, with ``requeued``, which endings
# to tell the supervisor; the ledger's views (ledger/schema.py), which say what the runner does
# next, are built from these same sets, so the two cannot drift apart (tests/test_vocab.py).

MODEL_SIDE = frozenset({SUBMITTED, EARLY_STOP})
"""Final: the model's own doing. Retrying would inflate the score."""
RETRIED = frozenset({API_ERROR, HARNESS_ERROR, INTERRUPTED})
"""Not the model's doing: the instance gets another attempt in a fresh sandbox."""
BUDGETED = frozenset({API_ERROR, HARNESS_ERROR})
"""Retried statuses that use up the ``run.attempts`` budget. ``interrupted`` does not: the run was
stopped (Ctrl-C, SIGKILL, a crash of wedgewatch), nothing about the instance failed, and a resume
must end with the outcome the run would have had without the stop. Nor does a requeued attempt
(``requeued``)."""
REQUEUE_REASONS = frozenset({SERVER_RESTARTED})
"""Reasons of an ``api_error`` the server caused by its own end (a restart or a recycle)."""
REQUEUE_KINDS = frozenset({WEDGE})
"""Events that make every ``api_error`` on their server life the server's doing."""


def sql_list(words: Iterable[str]) -> str:
    """Words as the list of an SQL ``IN (...)``, in a fixed order: the ledger's views and every
    query that names a word are built from the sets here, never spelled by hand."""
    return ", ".join(f"'{w}'" for w in sorted(words))


def requeued(status: str, reason: str, on_wedged_life: bool = False) -> bool:
    """Whether an ended attempt was the server's doing, so it is requeued: counted against
    ``run.max_requeues``, not ``run.attempts`` (with ``max_requeues = 0`` nothing is, as in a harness
    without wedgewatch). That is an ``api_error`` with a reason in ``REQUEUE_REASONS``, or one on a
    server life with an event in ``REQUEUE_KINDS`` (``on_wedged_life``), which the ledger knows
    and the runner, at the attempt's end, may not yet."""
    return status == API_ERROR and (reason in REQUEUE_REASONS or on_wedged_life)
