"""A harness nobody here wrote the agent of: the OpenAI Agents SDK (``openai-agents``), with its
default client (``AsyncOpenAI()``: the base URL from ``OPENAI_BASE_URL``, which ``wedgewatch wrap``
sets, and the SDK's own two retries), runs N tasks, 8 at a time. Each task is an agent with one
function tool: the model calls the tool, reads its output, and answers. Every request carries the
task's id in ``x-wedgewatch-tag`` (the SDK's ``extra_headers``), so ``audit`` can attribute it.

    python agents_harness.py chat|responses stream|once N RESULTS.jsonl

One JSON line per task: ``instance_id``, ``outcome`` (``resolved`` when the agent finished,
``error`` with the exception when a request failed it), ``seconds``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI


@function_tool
def run_tests(path: str) -> str:
    """Run the tests under path."""
    return "2 passed"


async def task(client: AsyncOpenAI, api: str, mode: str, tag: str, sem: asyncio.Semaphore) -> dict[str, Any]:
    model_cls = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
    agent = Agent(
        name="fixer",
        instructions="You fix small bugs.",
        model=model_cls(model="sim-model", openai_client=client),
        tools=[run_tests],
        model_settings=ModelSettings(extra_headers={"x-wedgewatch-tag": tag}),
    )
    prompt = f"Task {tag}: call run_tests on the package, then say what you saw."
    async with sem:
        t0 = time.monotonic()
        try:
            if mode == "stream":
                run = Runner.run_streamed(agent, prompt)
                async for _ in run.stream_events():
                    pass
            else:
                await Runner.run(agent, prompt)
            row: dict[str, Any] = {"instance_id": tag, "outcome": "resolved"}
        except Exception as exc:  # a harness records what failed the task, as the did
            row = {"instance_id": tag, "outcome": "error", "error": f"{type(exc).__name__}: {exc}"}
        row["seconds"] = round(time.monotonic() - t0, 3)
        return row


async def main(api: str, mode: str, n: int, out: str) -> None:
    set_tracing_disabled(True)  # no trace export to a service this machine cannot reach
    client = AsyncOpenAI()
    sem = asyncio.Semaphore(8)
    rows = await asyncio.gather(*(task(client, api, mode, f"task-{i:02d}", sem) for i in range(n)))
    with open(out, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
