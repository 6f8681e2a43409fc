"""A begun reply continued from its token ids (proxy/resume/token_ids.py), piece by piece, on the bytes a
real vLLM 0.32 sent (captured from the CPU build with the bundled Gemma 3 270M, one stream with
``return_token_ids`` and one without): what the proxy asks, what the client gets while the stream
is healthy, what a resume reads back and sends, and how the continuation's completion chunks
become the client's chat chunks. The whole path on the real server: tests/test_vllm_server.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from wedgewatch.config import WatchdogConfig
from wedgewatch.proxy.body import Asked, rewrite
from wedgewatch.proxy.deadlines import Watch
from wedgewatch.proxy.dialects.chat import Relay
from wedgewatch.proxy.dialects.chat_bytes import hide_ids
from wedgewatch.proxy.resume.continuation import Relayed, Splice, continuation
from wedgewatch.proxy.resume.token_ids import ask, with_budget
from wedgewatch.wire.sse import SSEEvent

HEAD = b'{"id":"chatcmpl-bf5","object":"chat.completion.chunk","created":1796538561,"model":"gemma3-270m",'
# A chat stream with return_token_ids, as vLLM sent it (five tokens; ids shortened to one list each).
WITH_IDS = [
    HEAD + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
    b'"finish_reason":null}],"prompt_token_ids":[2,105,2364,107,37889,5631,236761,106,107,105,4368,107],'
    b'"prompt_text":null}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":"Say"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":[37889]}]}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":" hi"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":[5631]}]}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finish_reason":null,'
    b'"token_ids":[236761]}]}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":" mendatang"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":[217716]}]}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":"user"},"logprobs":null,"finish_reason":"length",'
    b'"stop_reason":null,"token_ids":[2364]}]}',
    HEAD + b'"choices":[],"usage":{"prompt_tokens":12,"total_tokens":17,"completion_tokens":5},'
    b'"system_fingerprint":"vllm-0.32.0-bb82e715"}',
]
PROMPT_IDS = [2, 105, 2364, 107, 37889, 5631, 236761, 106, 107, 105, 4368, 107]
# The same stream as vLLM sends it to a client that did not ask for ids.
WITHOUT = [
    HEAD + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
    b'"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":"Say"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":null}]}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":" hi"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":null}]}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finish_reason":null,'
    b'"token_ids":null}]}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":" mendatang"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":null}]}',
    HEAD + b'"choices":[{"index":0,"delta":{"content":"user"},"logprobs":null,"finish_reason":"length",'
    b'"stop_reason":null,"token_ids":null}]}',
    WITH_IDS[6],
]


def _completion(text: str, ids: list[int], first: bool = False, finish: str | None = None) -> bytes:
    """A chunk of vLLM's completion stream with return_token_ids (the continuation's shape)."""
    choice = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": None,
        "prompt_token_ids": [*PROMPT_IDS, 37889, 5631] if first else None,
        "token_ids": ids,
    }
    chunk = {
        "id": "cmpl-83e",
        "object": "text_completion",
        "created": 1796538999,
        "model": "gemma3-270m",
        "choices": [choice],
    }
    return json.dumps(chunk, separators=(",", ":")).encode()


BODY: dict[str, Any] = {
    "model": "gemma3-270m",
    "messages": [{"role": "user", "content": "Say hi."}],
    "max_tokens": 5,
    "temperature": 0,
    "stream": True,
    "stream_options": {"include_usage": True},
    "return_token_ids": True,
}


def test_hidden_ids_are_what_vllm_sends_a_client_that_did_not_ask() -> None:
    assert [hide_ids(d) for d in WITH_IDS] == WITHOUT
    assert hide_ids(WITH_IDS[6]) is WITH_IDS[6]  # no ids: not even copied
    spaced = b'{"choices":[{"text":"a","token_ids": [1, 2]}],"prompt_token_ids" : [3]}'
    assert hide_ids(spaced) == b'{"choices":[{"text":"a","token_ids": null}],"prompt_token_ids" : null}'
    inside = b'{"choices":[{"delta":{"content":"say \\"token_ids\\":[1]"}}]}'  # a key in a string
    assert hide_ids(inside) == inside
    other = b'{"logprob_token_ids":[5],"x":{"token_ids":[4]}}'  # another key ending the same way
    assert hide_ids(other) == b'{"logprob_token_ids":[5],"x":{"token_ids":null}}'


def _asked(body: dict[str, Any]) -> Asked:
    asked = rewrite(json.dumps(body).encode())
    assert isinstance(asked, Asked)
    return asked


def test_the_proxy_asks_for_the_ids_by_bytes_and_knows_whether_the_client_did() -> None:
    plain = {k: v for k, v in BODY.items() if k != "return_token_ids"}
    asked, own = ask(_asked(plain))
    assert not own and json.loads(asked.payload) == {**asked.body, "return_token_ids": True}
    assert asked.body["return_token_ids"] is True
    mine, own = ask(_asked(BODY))
    assert own and json.loads(mine.payload)["return_token_ids"] is True
    said_no, own = ask(_asked({**plain, "return_token_ids": False}))
    assert not own and json.loads(said_no.payload)["return_token_ids"] is True


def test_the_relay_keeps_the_ids_and_the_client_gets_the_chunks_without_them() -> None:
    relay = Relay(Watch(WatchdogConfig(), 0.0), "chat")
    relay.sent, relay.hide_ids, relay.want_usage = [], True, True
    frames = relay.frames([SSEEvent(data=d) for d in WITH_IDS], 1.0, True, True)
    assert frames == [b"data: " + d + b"\n\n" for d in WITHOUT]
    assert relay.sent == WITH_IDS  # undecoded, with their ids: what a resume reads back
    assert relay.finish == "length" and relay.usage == {
        "prompt_tokens": 12,
        "total_tokens": 17,
        "completion_tokens": 5,
    }


def test_a_resume_reads_the_ids_back_and_continues_with_a_completion_of_them() -> None:
    relayed = Relayed.read("chat", WITH_IDS[:3], 2)
    assert relayed.prompt_ids == PROMPT_IDS and relayed.token_ids == [37889, 5631]
    body = {**BODY, "max_tokens": None, "max_completion_tokens": 5, "min_tokens": 4, "echo": False}
    out, why = continuation("chat", body, relayed, "token_ids")
    assert why == "" and out is not None and relayed.by_ids
    assert out["prompt"] == [*PROMPT_IDS, 37889, 5631]
    assert out["max_tokens"] == 3 and out["min_tokens"] == 2
    assert out["return_token_ids"] is True and out["temperature"] == 0 and out["stream"] is True
    assert not {"messages", "max_completion_tokens", "echo"} & set(out)


def test_without_a_limit_a_chat_continuation_waits_for_the_servers_context() -> None:
    relayed = Relayed.read("chat", WITH_IDS[:3], 2)
    out, _ = continuation("chat", {k: v for k, v in BODY.items() if k != "max_tokens"}, relayed, "token_ids")
    assert out is not None and "max_tokens" not in out  # a completion's default (16) is not chat's
    completion, _ = continuation("completion", {"model": "m", "prompt": "x"}, relayed, "token_ids")
    assert completion is not None and completion["max_tokens"] == 14  # 16 less the 2 generated


@pytest.mark.parametrize(
    ("payloads", "body", "why"),
    [
        # a chunk with text but no ids (a server that did not send them): the text route
        ([WITH_IDS[0], WITH_IDS[1], WITHOUT[2]], BODY, "ids missing"),
        ([WITH_IDS[1], WITH_IDS[2]], BODY, "no prompt ids"),
        (WITH_IDS[:3], {**BODY, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ],
)
def test_what_the_ids_cannot_continue_goes_by_its_text(
    payloads: list[bytes], body: dict[str, Any], why: str
) -> None:
    relayed = Relayed.read("chat", payloads, 2)
    out, _ = continuation("chat", body, relayed, "token_ids")
    assert out is not None and not relayed.by_ids, why
    assert out["messages"][-1] == {"role": "assistant", "content": "Say hi"}
    assert out["continue_final_message"] is True and out["add_generation_prompt"] is False


def test_the_completion_chunks_become_the_clients_chat_chunks_as_vllm_writes_them() -> None:
    relayed = Relayed.read("chat", WITH_IDS[:3], 2)
    continuation("chat", BODY, relayed, "token_ids")
    splice = Splice(relayed)
    usage = {
        "id": "cmpl-83e",
        "object": "text_completion",
        "created": 1796538999,
        "model": "gemma3-270m",
        "choices": [],
        "usage": {"prompt_tokens": 14, "total_tokens": 17, "completion_tokens": 3},
        "system_fingerprint": "vllm-0.32.0-bb82e715",
    }
    rest = [
        _completion(".", [236761], first=True),
        _completion(" mendatang", [217716]),
        _completion("user", [2364], finish="length"),
        json.dumps(usage, separators=(",", ":")).encode(),
    ]
    # Byte for byte the chunks of the stream no resume touched (the prompt's ids on the first
    # only), and its usage: the two tokens the continuation was given were generated, not prompt.
    assert [splice.rewrite(d) for d in rest] == WITH_IDS[3:]


def test_a_completion_client_keeps_its_shape_and_loses_the_continuations_prompt_ids() -> None:
    first = json.loads(_completion("Say", [37889], first=True))
    first["choices"][0]["prompt_token_ids"] = PROMPT_IDS
    relayed = Relayed.read("completion", [json.dumps(first).encode()], 1)
    out, _ = continuation("completion", {"model": "m", "prompt": "x", "max_tokens": 5}, relayed, "token_ids")
    assert out is not None and out["prompt"] == [*PROMPT_IDS, 37889] and out["max_tokens"] == 4
    chunk = json.loads(Splice(relayed).rewrite(_completion(" hi", [5631], first=True)) or b"")
    assert chunk["object"] == "text_completion" and chunk["id"] == "cmpl-83e"
    assert chunk["choices"][0] == {**json.loads(_completion(" hi", [5631]))["choices"][0]}


@pytest.fixture
async def models() -> AsyncIterator[str]:
    """A server that answers /v1/models as vLLM does (its ``max_model_len`` per model)."""

    async def listing(request: web.Request) -> web.Response:
        data = [
            {"id": "gemma3-270m", "object": "model", "max_model_len": 4096},
            {"id": "tiny-lora", "object": "model", "max_model_len": 2048},
        ]
        return web.json_response({"object": "list", "data": data})

    app = web.Application()
    app.router.add_get("/v1/models", listing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}"
    await runner.cleanup()


async def test_the_budget_is_what_the_context_leaves_after_the_prompt(models: str) -> None:
    async with aiohttp.ClientSession() as s:
        lora = json.dumps({"model": "tiny-lora", "prompt": [1] * 100}).encode()
        budgeted = await with_budget(s, models, {}, lora)
        assert budgeted is not None and json.loads(budgeted)["max_tokens"] == 2048 - 100
        limited = json.dumps({"model": "gemma3-270m", "prompt": [1], "max_tokens": 7}).encode()
        assert await with_budget(s, models, {}, limited) is limited
        # A server that does not say (no /v1/models): None, and the proxy takes the text route.
        assert await with_budget(s, models + "/nowhere", {}, lora) is None
