"""A real vLLM (the CPU build, bundled Gemma 3 270M) against what the ``vllm`` profile assumes of
it, started by the supervisor with the seed's configuration: the ``hybrid-safe`` argument set and
a LoRA adapter the tests make with peft (rank 8, B matrices non-zero).

Conformance: every series the profile reads is in the real ``/metrics`` and moves as the profile
assumes, during decode and during a long chunked prefill (where the token counters stand still
and only the heartbeat moves). LoRA: the adapter is listed, and its greedy answer differs from
the base model's and equals what transformers with peft computes.

One server for the module (``--max-num-seqs 2`` so a third request waits, prefill chunks of 256
tokens so a long prompt takes many steps).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from vllm_helpers import ADAPTER, HELLO, VLLM_GROUP, adapter, config, provision
from wedgewatch.base.events import EventBus
from wedgewatch.launchers import vllm_env
from wedgewatch.ledger import Ledger
from wedgewatch.supervisor import Supervisor, profiles
from wedgewatch.wire import promtext
from wedgewatch.wire.sse import SSEParser

pytestmark = [
    VLLM_GROUP,
    pytest.mark.long,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(900),  # the first run on a machine also installs vLLM (minutes)
]

MODEL = "gemma3-270m"
CHUNK = 256
"""--max-num-batched-tokens: the tokens of one engine step, so a prompt of N tokens is N/256 steps."""
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
GENERATED, PROMPT = "vllm:generation_tokens_total", "vllm:prompt_tokens_total"
KV, ITERATIONS = "vllm:kv_cache_usage_perc", "vllm:iteration_tokens_total_count"


@dataclass
class Served:
    sup: Supervisor
    url: str
    ledger: Ledger
    adapter: Path
    base: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    base = await asyncio.to_thread(provision)
    lora = await asyncio.to_thread(adapter, tmp_path_factory)
    tmp = tmp_path_factory.mktemp("vllm-server")
    ledger = Ledger(tmp / "ledger.sqlite")
    cfg = config(
        tmp,
        arg_sets=["hybrid-safe"],
        lora_modules={ADAPTER: str(lora)},
        args=["--max-num-seqs", "2", "--max-num-batched-tokens", str(CHUNK), "--max-model-len", "4096"],
    )
    sup = Supervisor(cfg, ledger=ledger, bus=EventBus())
    await sup.start()
    yield Served(sup, sup.base_url, ledger, lora, base)
    await sup.stop()
    ledger.close()


async def scrape(s: aiohttp.ClientSession, url: str) -> promtext.Samples:
    async with s.get(url + "/metrics") as resp:
        assert resp.status == 200
        return promtext.parse(await resp.text())


async def stream(s: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[float]:
    """A streamed chat answer; the loop times of its chunks with text."""
    times: list[float] = []
    loop = asyncio.get_running_loop()
    parser = SSEParser()
    async with s.post(url + "/v1/chat/completions", json={**body, "stream": True}) as resp:
        assert resp.status == 200
        async for raw in resp.content.iter_any():
            for ev in parser.feed(raw):
                if ev.data is not None and not ev.is_done:
                    choices = ev.json().get("choices") or [{}]
                    if (choices[0].get("delta") or {}).get("content"):
                        times.append(loop.time())
    return times


async def watch(
    s: aiohttp.ClientSession, url: str, until: asyncio.Task[Any]
) -> list[tuple[float, promtext.Samples]]:
    """Scrapes every 50 ms until ``until`` is done, with their loop times."""
    loop = asyncio.get_running_loop()
    seen: list[tuple[float, promtext.Samples]] = []
    while not until.done():
        seen.append((loop.time(), await scrape(s, url)))
        await asyncio.sleep(0.05)
    return seen


def value(samples: promtext.Samples, name: str) -> float:
    found = samples.total(name)
    assert found is not None, f"{name} is not in /metrics"
    return found


async def test_the_seeds_configuration_started_the_real_server(served: Served) -> None:
    life = served.sup.current
    assert life is not None
    argv = life.argv
    for flag in profiles.HYBRID_SAFE_VLLM:
        assert flag in argv
    assert argv[argv.index("--lora-modules") + 1] == f"{ADAPTER}={served.adapter}"
    async with aiohttp.ClientSession() as s, s.get(served.url + "/v1/models") as resp:
        names = [m["id"] for m in (await resp.json())["data"]]
    assert names == [MODEL, ADAPTER]


async def test_every_series_the_profile_reads_is_in_the_real_metrics(served: Served) -> None:
    sup = served.sup
    names = profiles.series(sup.cfg, sup.profile).names()
    assert {RUNNING, WAITING, GENERATED, PROMPT, KV, ITERATIONS, "vllm:num_preemptions_total"} <= set(names)
    async with aiohttp.ClientSession() as s:
        samples = await scrape(s, served.url)
    missing = [n for n in names if samples.total(n) is None]
    assert not missing, f"the vllm profile reads series the real server does not have: {missing}"


async def test_during_decode_tokens_and_heartbeat_move_while_one_runs(served: Served) -> None:
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 120, "temperature": 0, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:
        before = await scrape(s, served.url)
        task = asyncio.create_task(stream(s, served.url, body))
        seen = await watch(s, served.url, task)
        tokens = await task
        after = await scrape(s, served.url)
    assert len(tokens) == 120
    busy = [m for t, m in seen if tokens[0] < t < tokens[-1]]
    assert busy, "no scrape landed during the decode"
    assert all(value(m, RUNNING) == 1 and value(m, WAITING) == 0 for m in busy)
    assert len({value(m, GENERATED) for m in busy}) >= 3, "generation_tokens_total did not move during decode"
    assert len({value(m, ITERATIONS) for m in busy}) >= 3, "iteration_tokens_total did not move during decode"
    assert all(value(m, KV) > 0 for m in busy)
    assert value(after, GENERATED) - value(before, GENERATED) == 120
    assert value(after, RUNNING) == 0 and value(after, KV) == 0


async def test_during_a_long_chunked_prefill_only_the_heartbeat_moves(served: Served) -> None:
    """About 3,000 prompt tokens in steps of 256: the KV gauge rises step by step while the token
    counters stand still until the first token (vLLM counts prompt tokens when a prefill ends)."""
    words = " ".join(f"w{i % 97}" for i in range(1400))
    messages = [{"role": "user", "content": f"Repeat these words: {words}"}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 2, "temperature": 0}
    async with aiohttp.ClientSession() as s:
        before = await scrape(s, served.url)
        task = asyncio.create_task(stream(s, served.url, body))
        seen = await watch(s, served.url, task)
        first = (await task)[0]
        after = await scrape(s, served.url)
    prompt = value(after, PROMPT) - value(before, PROMPT)
    assert prompt > 8 * CHUNK, f"the prompt was {prompt} tokens, too short to take many steps"
    prefill = [m for t, m in seen if t < first and value(m, RUNNING) == 1]
    assert prefill, "no scrape landed during the prefill"
    assert {value(m, PROMPT) for m in prefill} == {value(before, PROMPT)}
    assert {value(m, GENERATED) for m in prefill} == {value(before, GENERATED)}
    kv = [value(m, KV) for m in prefill]
    assert len(set(kv)) >= 3, f"the heartbeat (KV usage) did not move step by step: {kv}"
    assert kv == sorted(kv)


async def test_a_request_beyond_max_num_seqs_is_in_the_waiting_gauge(served: Served) -> None:
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 60, "temperature": 0, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:
        tasks = asyncio.gather(*(stream(s, served.url, body) for _ in range(3)))
        waiter = asyncio.ensure_future(tasks)
        seen = await watch(s, served.url, waiter)
        await waiter
    loads = {(value(m, RUNNING), value(m, WAITING)) for _, m in seen}
    assert (2.0, 1.0) in loads, loads


async def test_the_lora_adapter_answers_as_transformers_with_peft_does(served: Served) -> None:
    """Greedy token ids from vLLM, base and adapter, against transformers (+ peft) on the same
    prompt ids: the adapter changes the answer, and vLLM applies it exactly."""
    prompt = [2, 105, 2364, 107, 6974, 23391, 1902, 236761, 106, 107, 105, 4368, 107]
    n = 12

    async def ids(model: str) -> list[int]:
        body = {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "return_token_ids": True}
        async with aiohttp.ClientSession() as s, s.post(served.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
            return list((await resp.json())["choices"][0]["token_ids"])

    base_ids, lora_ids = await ids(MODEL), await ids(ADAPTER)
    assert base_ids != lora_ids, "the adapter changed nothing"

    def reference(*extra: str) -> list[int]:
        out = vllm_env.tool(
            "greedy", str(served.base), "--prompt-ids", json.dumps(prompt), "--max-tokens", str(n), *extra
        )
        return list(json.loads(out))

    assert base_ids == await asyncio.to_thread(reference)
    assert lora_ids == await asyncio.to_thread(reference, "--adapter", str(served.adapter))


async def test_no_false_wedge_in_all_of_the_above(served: Served) -> None:
    """The supervisor watched every test of this module at its default windows."""
    kinds = [r["kind"] for r in served.ledger.query("SELECT kind FROM events")]
    assert "wedge" not in kinds and "restart" not in kinds, kinds
