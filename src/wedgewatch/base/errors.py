"""The exception tree, written down in one place.

Foreign errors (aiohttp, openai, subprocess, sqlite) are translated into these classes at the
boundary where they are caught. Retry decisions key on the class, never on message text:
``status_of(exc)`` is the status an attempt ends with, and the retry rule in base/vocab.py says
what each status means for the instance.

    WedgewatchError
    ├── BadInput                     exit 2: the user's file, field or flag is wrong
    │   ├── ConfigError              a run/serve config file
    │   ├── ScenarioError            a simulator scenario file
    │   └── SuiteError               a suite file or dataset
    ├── InfraError                   not the model's doing: the attempt is retried
    │   ├── ApiError                 the LLM path failed            -> status api_error
    │   │   ├── UpstreamStalled      a stall kind (stall_ttft, stall_midstream, trickle, total_timeout)
    │   │   ├── UpstreamHTTPError    the server answered 5xx (reason upstream_http_<code>)
    │   │   ├── UpstreamConnectionError  connection refused, reset or dropped
    │   │   ├── ServerRestarted      the supervisor restarted the server under the attempt
    │   │   └── ServerDown           no server to talk to
    │   └── HarnessError             sandbox, evaluation or agent crash -> status harness_error
    │       ├── SandboxError
    │       ├── EvaluationError
    │       └── AgentCrash
    ├── ExecutorError                the executor could not run attempts (runner/executors)
    │   └── WorkerLost               the process or node running an attempt died -> interrupted
    ├── RunnerLost                   this runner was found dead by the run's others: it stops
    ├── CarriedError                 an attempt's exception, carried back from another process
    ├── FrameTooLarge                an SSE line or event past the parser's cap (the proxy: reply_too_large)
    ├── BadMetrics                   a /metrics answer that is not Prometheus text (also a ValueError)
    ├── ServerError                  the supervisor could not bring a server up
    │   ├── ServerStartError         exited during start-up or never became ready
    │   ├── PortBusyError            the port is taken by someone else (exit 2, as bad input)
    │   └── WarmupError              warm-up requests failed
    └── EarlyStop                    the agent stopped by its own limits -> status early_stop (final)
"""

from __future__ import annotations

from wedgewatch.base.vocab import (
    API_ERROR,
    CONNECTION,
    EARLY_STOP,
    HARNESS_ERROR,
    SERVER_RESTARTED,
    STALL_MIDSTREAM,
    upstream_http,
)


class WedgewatchError(Exception):
    """Base of every error wedgewatch raises on purpose. The CLI prints ``str(exc)`` on one line
    and exits ``exit_code``."""

    exit_code = 1


# --- bad input -----------------------------------------------------------------------------------


class BadInput(WedgewatchError):
    """The user's input is wrong. The CLI prints ``str(exc)`` on one line and exits 2."""

    exit_code = 2


class LedgerConflict(WedgewatchError):
    """An append that broke a unique key of the ledger: the fact is already there. Several runners
    on one run use it as their claim (the attempt row is the claim; the loser gets this)."""


class ConfigError(BadInput):
    """A config file is missing, unparsable, or has a bad field."""

    def __init__(self, file: str, field: str | None, message: str) -> None:
        self.file = file
        self.field = field
        where = f"{file}: {field}" if field else file
        super().__init__(f"{where}: {message}")


class ScenarioError(ConfigError):
    """A simulator scenario file is missing, unparsable, or has a bad field."""


class SuiteError(BadInput):
    """A suite file (or one line of it) or a dataset cannot be loaded."""


# --- infrastructure --------------------------------------------------------------------------------


class InfraError(WedgewatchError):
    """A failure on our side or the server's side; never the model's. Retried in a fresh sandbox."""

    status = HARNESS_ERROR

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or self.default_reason

    default_reason = "harness"


class ApiError(InfraError):
    """The LLM path failed. ``reason`` is what the ledger stores next to status ``api_error``."""

    status = API_ERROR
    default_reason = "api"


class UpstreamStalled(ApiError):
    """The proxy aborted a request that made no progress; ``reason`` is the stall kind."""

    default_reason = STALL_MIDSTREAM


class UpstreamHTTPError(ApiError):
    """The server answered with a 5xx (or an unexpected status)."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message, reason=upstream_http(status_code))
        self.status_code = status_code


class UpstreamConnectionError(ApiError):
    """The connection to the server was refused, reset, or dropped mid-answer."""

    default_reason = CONNECTION


class ServerRestarted(ApiError):
    """The supervisor restarted the server while the attempt was in flight."""

    default_reason = SERVER_RESTARTED


class ServerDown(ApiError):
    """No server is available to serve the attempt."""

    default_reason = "server_down"


class HarnessError(InfraError):
    """Sandbox, evaluation or agent machinery failed; not the model's doing."""

    status = HARNESS_ERROR
    default_reason = "harness"


class SandboxError(HarnessError):
    default_reason = "sandbox"


class EvaluationError(HarnessError):
    default_reason = "evaluation"


class AgentCrash(HarnessError):
    default_reason = "agent_crash"


# --- executors ---------------------------------------------------------------------------------


class RunnerLost(WedgewatchError):
    """Another runner of the run (or a resume) found this one dead, its lease run out (a hung
    process, a host cut off from the database), and ended its attempts: their work is theirs now.
    The runner stops (aborted), rather than go on with attempts the others would end again."""


class ExecutorError(WedgewatchError):
    """The executor could not run attempts: Ray did not start or could not be joined, or a
    cluster that keeps losing its workers (the run stops, aborted, and can be resumed)."""


class WorkerLost(ExecutorError):
    """The worker process or node that ran an attempt died under it (a Ray worker killed, a
    node lost). Not the attempt's doing nor the model's: it ends ``interrupted`` and the
    instance is attempted again, as after a stopped run."""


class CarriedError(WedgewatchError):
    """The exception that ended an attempt in another process, carried back as what the runner
    needs of it: its (status, reason) and its text. Exceptions do not all survive pickling, and
    one with a custom ``__init__`` would come back with its default reason, so the worker
    decides these where the exception was raised."""

    def __init__(self, status: str, reason: str, type_name: str, text: str) -> None:
        super().__init__(status, reason, type_name, text)
        self.status, self.reason, self.type_name, self.text = status, reason, type_name, text

    @classmethod
    def of(cls, exc: BaseException) -> CarriedError:
        if isinstance(exc, CarriedError):
            return exc
        status, reason = status_of(exc)
        return cls(status, reason, type(exc).__name__, str(exc)[:2000])

    def __str__(self) -> str:
        return self.text


# --- server management ---------------------------------------------------------------------------


class FrameTooLarge(WedgewatchError):
    """An SSE line or event grew past the parser's cap before it ended (``wire/sse.py``): a broken
    server's endless line. The proxy translates it into the request outcome ``reply_too_large``."""


class BadMetrics(WedgewatchError, ValueError):
    """A /metrics answer that is not Prometheus text (``wire/promtext.py``); a ``ValueError`` too,
    as the scrapers that skip an unparsable scrape catch."""


class ServerError(WedgewatchError):
    """The supervisor could not bring up a healthy server."""


class ServerStartError(ServerError):
    """The server exited during start-up or did not become ready before its deadline."""


class PortBusyError(ServerError):
    """The port the server should listen on is already taken: the config's port (``server.port``)
    is the user's to change, so the CLI exits 2, as for any busy port a command is given."""

    exit_code = 2


class WarmupError(ServerError):
    """The warm-up requests did not all succeed."""


# --- model-side stop -----------------------------------------------------------------------------


class EarlyStop(WedgewatchError):
    """The agent stopped by its own limits. Final: retrying would inflate the score.

    ``reason`` is one of step_limit, token_limit, context_window, format_errors, agent_exit.
    """

    status = EARLY_STOP

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason


def status_of(exc: BaseException) -> tuple[str, str]:
    """Map an exception that ended an attempt to the ledger's (status, reason)."""
    if isinstance(exc, CarriedError | EarlyStop):
        return exc.status, exc.reason
    if isinstance(exc, InfraError):
        return exc.status, exc.reason
    return HARNESS_ERROR, f"crash:{type(exc).__name__}"


def describe(exc: BaseException) -> str:
    """``Type: message`` of the exception that ended an attempt, as its end row keeps it (a
    carried one under its original type's name)."""
    name = exc.type_name if isinstance(exc, CarriedError) else type(exc).__name__
    return f"{name}: {str(exc)[:2000]}"
