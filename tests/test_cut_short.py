"""A stream that fails after HTTP 200 ends with its error event and then no last chunk, so a client
that reads no event sees a failure too: curl (the ``wedgewatch proxy`` CLI on uvloop in front of
the keywords simulator, a real curl) exits 18 with ``--fail-with-body`` as without it, having
printed the error event; a stream that ends well exits 0. A shell harness under ``wrap``
(``set -o pipefail``) sees the failed request as failed, not as a short answer (docs/wrap.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from conftest import RunningServer, launch

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")


@pytest.fixture(scope="module")
def proxied(keywords_sim: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("proxy")
    argv = [sys.executable, "-m", "wedgewatch", "proxy", "--upstream", keywords_sim.url, "--port", "0"]
    argv += ["--stall-timeout", "1", "--records", str(tmp / "rows.jsonl")]
    proxy = launch(argv, tmp / "proxy.log")
    yield proxy.url
    proxy.stop()


def _curl(url: str, word: str, *flags: str) -> subprocess.CompletedProcess[str]:
    body = {
        "model": "sim-model",
        "stream": True,
        "max_tokens": 12,
        "messages": [{"role": "user", "content": word}],
    }
    argv = ["curl", "-sS", "-N", *flags, url + "/v1/chat/completions", "-H", "content-type: application/json"]
    return subprocess.run([*argv, "-d", json.dumps(body)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("flags", [(), ("--fail-with-body",)], ids=["plain", "fail-with-body"])
def test_curl_exits_non_zero_on_a_stream_that_failed_after_200(proxied: str, flags: tuple[str, ...]) -> None:
    done = _curl(proxied, "STALL-MID now", *flags)
    assert done.returncode == 18, done.stderr
    assert "transfer closed with outstanding read data remaining" in done.stderr
    last = [line for line in done.stdout.splitlines() if line.startswith("data: ")][-1]
    assert json.loads(last[6:])["error"]["code"] == "stall_midstream"


def test_curl_exits_0_on_a_stream_that_ended_well(proxied: str) -> None:
    done = _curl(proxied, "hello", "--fail-with-body")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("data: [DONE]")
