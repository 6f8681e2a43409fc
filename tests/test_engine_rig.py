"""The rig's robustness switch on stand-in processes (no engine): ``FirstStepPause`` finds a process
titled ``VLLM::EngineCore`` under this test, waits for its parent's ``/health`` (on the ``--port``
of the parent's command line), stops it then, and continues it the given seconds later, once: the
first request sent to the engine waits that long. The real-engine group is run with the switch on
to prove the rig robust to a slow first step (docs/real-servers.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from engine_rig import FirstStepPause
from vllm_helpers import state
from wedgewatch.testing import eventually

# The parent: starts the child titled as vLLM titles its engine, then, once the go file is there,
# answers /health 200 on --port (an API server whose engine is ready).
PARENT = textwrap.dedent(
    """
    import http.server, os, subprocess, sys, time
    go = sys.argv[2]
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    child = subprocess.Popen(["VLLM::EngineCore", "-c", sys.argv[1]], executable=sys.executable)
    while not os.path.exists(go):
        time.sleep(0.05)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)
# The child: an engine idling on its queue.
CHILD = "import time\nwhile True:\n    time.sleep(0.01)\n"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child_of(pid: int) -> int | None:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                return int(proc.name)
    return None


def test_an_engine_core_is_stopped_once_its_server_answers_health_and_continued(tmp_path: Path) -> None:
    go = tmp_path / "go"
    pause = FirstStepPause(2.0)
    pause.start()
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(go), "--port", str(_free_port())])
    engine: int | None = None
    try:
        engine = eventually(lambda: _child_of(parent.pid), what="the stand-in EngineCore")
        # Found, but its server does not answer /health yet: left alone.
        eventually(lambda: pause._seen == {engine}, what="the pause found the engine")
        assert state(engine) in ("R", "S") and pause.paused == []
        go.touch()  # the server answers /health: the engine is ready for its first request
        eventually(lambda: state(engine) == "T", what="the engine stopped")
        assert pause.paused == [engine]
        eventually(lambda: state(engine) in ("R", "S"), timeout=30, what="the engine continued")
        assert pause.paused == [engine]  # once: its later steps run as they come
    finally:
        pause.close()
        if engine is not None:
            os.kill(engine, signal.SIGKILL)
        parent.kill()
        parent.wait()
