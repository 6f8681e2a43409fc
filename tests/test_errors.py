"""The exception tree keys the retry rule on classes, never on message text: an exception that
ends an attempt gives its status (``status_of``), and the vocabulary's retry rule what the status
means for the instance."""

from __future__ import annotations

from wedgewatch.base import errors as e
from wedgewatch.base.vocab import MODEL_SIDE, RETRIED


def test_only_what_is_not_the_models_doing_is_retried() -> None:
    retried = [
        e.UpstreamStalled("x", reason="stall_ttft"),
        e.UpstreamHTTPError("x", 503),
        e.UpstreamConnectionError("x"),
        e.ServerRestarted("x"),
        e.ServerDown("x"),
        e.SandboxError("x"),
        e.EvaluationError("x"),
        e.AgentCrash("x"),
    ]
    # A crash of our own harness (any other exception) is not the model's doing either, whatever its
    # message says.
    retried += [e.ConfigError("f", "x", "y"), ValueError("early_stop")]
    assert all(e.status_of(x)[0] in RETRIED for x in retried)
    assert e.status_of(e.EarlyStop("step_limit"))[0] in MODEL_SIDE


def test_status_of() -> None:
    assert e.status_of(e.UpstreamStalled("x", reason="stall_midstream")) == ("api_error", "stall_midstream")
    assert e.status_of(e.UpstreamHTTPError("x", 502)) == ("api_error", "upstream_http_502")
    assert e.status_of(e.ServerRestarted("x")) == ("api_error", "server_restarted")
    assert e.status_of(e.SandboxError("x")) == ("harness_error", "sandbox")
    assert e.status_of(e.EarlyStop("format_errors")) == ("early_stop", "format_errors")
    assert e.status_of(KeyError("k")) == ("harness_error", "crash:KeyError")
