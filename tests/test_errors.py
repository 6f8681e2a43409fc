"""The retry policy keys on exception classes, never on message text."""

from __future__ import annotations

from wedgewatch.base import errors as e


def test_only_infrastructure_is_retried() -> None:
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
    final = [e.EarlyStop("step_limit"), e.ConfigError("f", "x", "y"), ValueError("upstream_stalled")]
    assert all(e.is_retried(x) for x in retried)
    assert not any(e.is_retried(x) for x in final)


def test_status_of() -> None:
    assert e.status_of(e.UpstreamStalled("x", reason="stall_midstream")) == ("api_error", "stall_midstream")
    assert e.status_of(e.UpstreamHTTPError("x", 502)) == ("api_error", "upstream_http_502")
    assert e.status_of(e.ServerRestarted("x")) == ("api_error", "server_restarted")
    assert e.status_of(e.SandboxError("x")) == ("harness_error", "sandbox")
    assert e.status_of(e.EarlyStop("format_errors")) == ("early_stop", "format_errors")
    assert e.status_of(KeyError("k")) == ("harness_error", "crash:KeyError")
