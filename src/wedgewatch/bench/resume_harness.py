"""The harness ``bench resume`` runs: tasks of an agent, as a harness built on the OpenAI SDK
sends them (its default client: two retries, which the proxy's ``x-should-retry: false`` stops),
some at a time. Each task is two requests, a tool call and the answer that reads the tool's
output, in one of four shapes in turn: chat completions streamed and not, the Responses API
streamed and not; the answers differ in length from task to task (24 to 64 tokens), so the tasks
do not run in step. Every request carries the task's tag (``x-wedgewatch-tag``); a task is lost when
a request of it raised, as a harness that does not retry scores it (the issue measured 8 of 16
tasks lost to one wedge with the OpenAI Agents SDK).

A real small model (``tools=False``, the bundled Gemma on the CPU vLLM) calls no tool: its tasks
are two plain chat requests, streamed and not, in turn.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageFunctionToolCall

SHAPES = ("chat stream", "chat", "responses stream", "responses")
PLAIN = ("chat stream", "chat")
TOOL = "run_tests"
_PARAMS = {"type": "object", "properties": {"path": {"type": "string"}}}


@dataclass
class TaskRun:
    tag: str
    shape: str
    started: float  # time.time()
    ended: float = 0.0
    error: str = ""  # the exception that lost the task ("" when it finished)

    @property
    def lost(self) -> bool:
        return self.error != ""

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def prompt(tag: str) -> str:
    """The task's first message: it names the tool, so the simulator's model calls it."""
    return f"Task {tag}: call {TOOL} on the package, then say what you saw."


def _answer_tokens(tag: str) -> int:
    return 24 + 8 * (int(tag.rsplit("-", 1)[1]) % 6)


async def _chat(client: openai.AsyncOpenAI, tag: str, stream: bool) -> None:
    head = {"x-wedgewatch-tag": tag}
    messages: list[Any] = [{"role": "user", "content": prompt(tag)}]
    tools: Any = [{"type": "function", "function": {"name": TOOL, "parameters": _PARAMS}}]
    call_id, args = "", ""
    if stream:
        async for chunk in await client.chat.completions.create(
            model="sim-model", messages=messages, tools=tools, stream=True, extra_headers=head
        ):
            for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                call_id = piece.id or call_id
                args += (piece.function.arguments or "") if piece.function else ""
    else:
        reply = await client.chat.completions.create(
            model="sim-model", messages=messages, tools=tools, extra_headers=head
        )
        (call,) = reply.choices[0].message.tool_calls or []
        if not isinstance(call, ChatCompletionMessageFunctionToolCall):
            raise ValueError(f"not a function call: {call!r}")
        call_id, args = call.id, call.function.arguments
    messages += [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": TOOL, "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "2 passed"},
    ]
    n = _answer_tokens(tag)
    if stream:
        async for _ in await client.chat.completions.create(
            model="sim-model", messages=messages, tools=tools, max_tokens=n, stream=True, extra_headers=head
        ):
            pass
    else:
        await client.chat.completions.create(
            model="sim-model", messages=messages, tools=tools, max_tokens=n, extra_headers=head
        )


async def _responses(client: openai.AsyncOpenAI, tag: str, stream: bool) -> None:
    head = {"x-wedgewatch-tag": tag}
    tools: Any = [{"type": "function", "name": TOOL, "parameters": _PARAMS}]
    items: list[Any] = [{"role": "user", "content": prompt(tag)}]
    if stream:
        output: list[Any] = []
        async for ev in await client.responses.create(
            model="sim-model", input=items, tools=tools, stream=True, extra_headers=head
        ):
            if ev.type == "response.completed":
                output = list(ev.response.output)
    else:
        output = list(
            (
                await client.responses.create(model="sim-model", input=items, tools=tools, extra_headers=head)
            ).output
        )
    call = next(o for o in output if o.type == "function_call")
    items += [
        {"type": "function_call", "call_id": call.call_id, "name": TOOL, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "2 passed"},
    ]
    n = _answer_tokens(tag)
    if stream:
        async for _ in await client.responses.create(
            model="sim-model", input=items, tools=tools, max_output_tokens=n, stream=True, extra_headers=head
        ):
            pass
    else:
        await client.responses.create(
            model="sim-model", input=items, tools=tools, max_output_tokens=n, extra_headers=head
        )


async def _plain(client: openai.AsyncOpenAI, model: str, tag: str, stream: bool) -> None:
    head = {"x-wedgewatch-tag": tag}
    messages: list[Any] = [
        {"role": "user", "content": f"Task {tag}: write a short story about a lighthouse."}
    ]
    n = _answer_tokens(tag)
    for turn in range(2):
        if stream:
            text = ""
            async for chunk in await client.chat.completions.create(
                model=model, messages=messages, max_tokens=n, stream=True, temperature=0, extra_headers=head
            ):
                text += (chunk.choices[0].delta.content or "") if chunk.choices else ""
        else:
            reply = await client.chat.completions.create(
                model=model, messages=messages, max_tokens=n, temperature=0, extra_headers=head
            )
            text = reply.choices[0].message.content or ""
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": f"Go on ({turn + 1})."},
        ]


async def run(
    base_url: str, tasks: int, concurrency: int, tools: bool = True, model: str = "sim-model"
) -> list[TaskRun]:
    """``tasks`` tasks, ``concurrency`` at a time, against ``base_url`` (the proxy's ``/v1``);
    ``tools=False``: plain chat tasks of ``model``."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench")
    sem = asyncio.Semaphore(concurrency)
    shapes = SHAPES if tools else PLAIN

    async def one(i: int) -> TaskRun:
        tag, shape = f"t-{i:02d}", shapes[i % len(shapes)]
        async with sem:
            out = TaskRun(tag, shape, time.time())
            try:
                if not tools:
                    await _plain(client, model, tag, shape.endswith("stream"))
                elif shape.startswith("chat"):
                    await _chat(client, tag, shape.endswith("stream"))
                else:
                    await _responses(client, tag, shape.endswith("stream"))
            except (openai.OpenAIError, StopIteration, ValueError) as exc:
                out.error = f"{type(exc).__name__}: {exc}"[:300]
            out.ended = time.time()
            return out

    try:
        return list(await asyncio.gather(*(one(i) for i in range(tasks))))
    finally:
        await client.close()
