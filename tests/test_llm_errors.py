"""How an LLM client's exception becomes one of ours (``agents.llm_errors.translate``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import httpx

from wedgewatch.agents.llm_errors import translate
from wedgewatch.base import errors

_CLEAN_PROCESS = textwrap.dedent(
    """
    import sys
    import httpx2, openai
    from wedgewatch.base import errors
    from wedgewatch.agents.llm_errors import translate

    req = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    body = {"error": {"type": "upstream_error", "code": "upstream_http_503", "message": "down"}}
    res = httpx2.Response(503, request=req, json=body)
    got = [
        translate(openai.APIConnectionError(request=req)),
        translate(openai.APITimeoutError(request=req)),
        translate(openai.APIStatusError("down", response=res, body=body)),
        translate(ValueError("a bug of ours")),
    ]
    print([(type(e).__name__, e.reason) for e in got])
    print("httpx" in sys.modules)
    """
)


def test_translate_needs_no_httpx_and_never_imports_it() -> None:
    # httpx is not our dependency (the SDK uses httpx2), and importing it from an agent thread
    # once raced the SDK's own lookup of it in sys.modules: translate must work without it.
    proc = subprocess.run([sys.executable, "-c", _CLEAN_PROCESS], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    kinds, httpx_loaded = proc.stdout.strip().splitlines()
    assert kinds == str(
        [
            ("UpstreamConnectionError", "connection"),
            ("UpstreamConnectionError", "client_timeout"),
            ("UpstreamHTTPError", "upstream_http_503"),
            ("AgentCrash", "agent_crash"),
        ]
    )
    assert httpx_loaded == "False"


def test_httpx_errors_are_recognised_once_a_client_loaded_httpx() -> None:
    # litellm (mini-swe-agent's client) raises httpx's own exceptions, sometimes wrapped.
    req = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    try:
        try:
            raise httpx.ReadTimeout("read timed out", request=req)
        except httpx.ReadTimeout as inner:
            raise RuntimeError("litellm wrapped it") from inner
    except RuntimeError as outer:
        got = translate(outer)
    assert isinstance(got, errors.UpstreamConnectionError) and got.reason == "client_timeout"
    got = translate(httpx.ConnectError("refused", request=req))
    assert isinstance(got, errors.UpstreamConnectionError) and got.reason == "connection"
