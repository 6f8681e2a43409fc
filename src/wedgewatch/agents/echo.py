"""The `echo` agent: one request, then a fixed patch. A trivial task for measuring the runner
itself (``wedgewatch bench runner``) and for tests that need an attempt to be cheap.

It asks the model to repeat the problem statement's first line (``max_tokens`` 8), ignores the
answer, and submits ``PATCH`` (which applies to nothing in particular: run it with
``run.evaluate = false``). A failed request raises the ApiError that ``llm_errors`` maps it to,
so the attempt ends ``api_error`` as any agent's would.
"""

from __future__ import annotations

import threading
from typing import Any

from wedgewatch.agents.llm_errors import translate
from wedgewatch.base.protocols import AgentResult, AgentTask
from wedgewatch.base.vocab import SUBMITTED
from wedgewatch.config import AgentConfig

PATCH = "diff --git a/ECHO b/ECHO\nnew file mode 100644\n--- /dev/null\n+++ b/ECHO\n@@ -0,0 +1 @@\n+echo\n"
MAX_TOKENS = 8


_shared: Any = None
_shared_lock = threading.Lock()


def _client(base_url: str, api_key: str, timeout: float) -> Any:
    """One SDK client (one connection pool, one TLS context) for every attempt, re-pointed per
    attempt with ``with_options``: building a client costs milliseconds of CPU, which at 64
    attempts at a time would be most of what this trivial agent does."""
    import openai

    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout)
    return _shared.with_options(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout)


class EchoAgent:
    """One chat completion through the attempt's proxy URL, then ``PATCH``."""

    name = "echo"

    def __init__(self, cfg: AgentConfig | None = None) -> None:
        self.cfg = cfg or AgentConfig()

    def run(self, task: AgentTask) -> AgentResult:
        first = str(task.instance.get("problem_statement", "")).splitlines()[:1] or [""]
        client = _client(task.base_url, task.api_key, self.cfg.timeout)
        try:
            reply: Any = client.chat.completions.create(
                model=task.model,
                messages=[{"role": "user", "content": f"Repeat: {first[0]}"}],
                max_tokens=MAX_TOKENS,
                temperature=0,
            )
        except Exception as exc:
            raise translate(exc) from exc
        tokens = int(reply.usage.total_tokens) if reply.usage is not None else 0
        return AgentResult(status=SUBMITTED, patch=PATCH, steps=1, tokens=tokens)
