"""A real vLLM (the CPU build, bundled Gemma 3 270M) against what wedgewatch assumes of it when it
is healthy; long because every test here shares one server (an engine start costs about a minute
and most of the machine). One supervised server for the module, started with the seed's
configuration (the ``hybrid-safe`` argument set and a LoRA adapter the tests make with peft: rank
8, B matrices non-zero), behind the watchdog proxy, at wedgewatch's default settings but one:
``on_wedge = "fail"``.

Every series the ``vllm`` profile reads is in the real ``/metrics`` and moves as the profile
assumes, during decode and during a long chunked prefill (where the token counters stand still
and only the heartbeat moves); the adapter is listed, and its answer differs from the base
model's and scores as transformers with peft scores it; a reply cut at the end of a line is
continued exactly from its ids; and the supervisor saw no wedge in any of it.

No test here stops or kills the server: the wedges are tests/test_vllm_faults.py's, on the rig's
server of their own (tests/engine_rig.py). The server keeps vLLM's own engine timeout
(``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``, 300 s): a short one killed a slower machine's engine on
its first request with log probabilities on the adapter (7.6 s), and every test after it.
``--max-num-seqs 2`` so a third request waits; prefill steps of 64 tokens so a long prompt takes
many steps.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from vllm_helpers import ADAPTER, HELLO, VLLM_GROUP, adapter, config, provision
from wedgewatch.base.events import Event, EventBus
from wedgewatch.bench.continuation import PROMPTS, compare
from wedgewatch.config import WatchdogConfig
from wedgewatch.launchers import vllm_env
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
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
CHUNK = 64
"""--max-num-batched-tokens: the tokens of one engine step, so a prompt of N tokens is N/64 steps
(the launcher's default: a step of the LoRA-enabled CPU engine well under the heartbeat window)."""
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
GENERATED, PROMPT = "vllm:generation_tokens_total", "vllm:prompt_tokens_total"
KV, ITERATIONS = "vllm:kv_cache_usage_perc", "vllm:iteration_tokens_total_count"
TIE = 0.3
"""Nats: how far below the reference's top token vLLM's greedy choice may score (a bf16 near-tie)."""
CLOSE = 0.3
"""Nats: how far vLLM's log probability of a token may lie from transformers' (0.11 at most seen
here; the tests' adapter moves them by up to 1.3)."""


@dataclass
class Rig:
    sup: Supervisor
    proxy: Proxy
    ledger: Ledger
    adapter: Path
    base: Path
    events: list[Event] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The current life's own URL (no proxy)."""
        return self.sup.base_url

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.ledger.query(sql, params)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Rig]:
    base = await asyncio.to_thread(provision)
    lora = await asyncio.to_thread(adapter, tmp_path_factory)
    tmp = tmp_path_factory.mktemp("vllm-server")
    ledger = Ledger(tmp / "ledger.sqlite")
    bus = EventBus()
    cfg = config(
        tmp,
        lora_modules={ADAPTER: str(lora)},
        args=[
            "--max-num-seqs",
            "2",
            "--max-num-batched-tokens",
            str(CHUNK),
            "--max-model-len",
            "4096",
        ],
    )
    sup = Supervisor(cfg, ledger=ledger, bus=bus)
    await sup.start()
    detach = sup.attach(bus)
    # on_wedge = "fail": the client of a wedged life is released with an error (what these tests
    # hold the real engine to; how soon is `bench vllm`'s); the default, "resume", would hold it
    # for the next life and continue its stream there (test_vllm_run.py runs with the default).
    proxy = Proxy(sup, WatchdogConfig(on_wedge="fail"), ledger=ledger, bus=bus, feed=sup.feed)
    await proxy.start()
    rig = Rig(sup, proxy, ledger, lora, base)
    bus.subscribe(rig.events.append)
    yield rig
    detach()
    await proxy.stop()
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


async def test_the_seeds_configuration_started_the_real_server(rig: Rig) -> None:
    life = rig.sup.current
    assert life is not None
    argv = life.argv
    for flag in profiles.HYBRID_SAFE_VLLM:
        assert flag in argv
    assert argv[argv.index("--lora-modules") + 1] == f"{ADAPTER}={rig.adapter}"
    async with aiohttp.ClientSession() as s, s.get(rig.url + "/v1/models") as resp:
        names = [m["id"] for m in (await resp.json())["data"]]
    assert names == [MODEL, ADAPTER]


async def test_every_series_the_profile_reads_is_in_the_real_metrics(rig: Rig) -> None:
    sup = rig.sup
    names = profiles.series(sup.cfg, sup.profile).names()
    assert {RUNNING, WAITING, GENERATED, PROMPT, KV, ITERATIONS, "vllm:num_preemptions_total"} <= set(names)
    async with aiohttp.ClientSession() as s:
        samples = await scrape(s, rig.url)
    missing = [n for n in names if samples.total(n) is None]
    assert not missing, f"the vllm profile reads series the real server does not have: {missing}"


async def test_during_decode_tokens_and_heartbeat_move_while_one_runs(rig: Rig) -> None:
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 120, "temperature": 0, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:
        before = await scrape(s, rig.url)
        task = asyncio.create_task(stream(s, rig.url, body))
        seen = await watch(s, rig.url, task)
        tokens = await task
        after = await scrape(s, rig.url)
    # Chunks with text: a token that ends inside a multi-byte character arrives with the next one.
    assert len(tokens) > 60
    busy = [m for t, m in seen if tokens[0] < t < tokens[-1]]
    assert busy, "no scrape landed during the decode"
    assert all(value(m, RUNNING) == 1 and value(m, WAITING) == 0 for m in busy)
    assert len({value(m, GENERATED) for m in busy}) >= 3, "generation_tokens_total did not move during decode"
    assert len({value(m, ITERATIONS) for m in busy}) >= 3, "iteration_tokens_total did not move during decode"
    assert all(value(m, KV) > 0 for m in busy)
    assert value(after, GENERATED) - value(before, GENERATED) == 120
    assert value(after, RUNNING) == 0 and value(after, KV) == 0


async def test_during_a_long_chunked_prefill_only_the_heartbeat_moves(rig: Rig) -> None:
    """About 1,000 prompt tokens in steps of 64: the KV gauge rises step by step while the token
    counters stand still until the first token (vLLM counts prompt tokens when a prefill ends)."""
    words = " ".join(f"w{i % 97}" for i in range(500))
    messages = [{"role": "user", "content": f"Repeat these words: {words}"}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 2, "temperature": 0}
    async with aiohttp.ClientSession() as s:
        before = await scrape(s, rig.url)
        task = asyncio.create_task(stream(s, rig.url, body))
        seen = await watch(s, rig.url, task)
        first = (await task)[0]
        after = await scrape(s, rig.url)
    prompt = value(after, PROMPT) - value(before, PROMPT)
    assert prompt > 8 * CHUNK, f"the prompt was {prompt} tokens, too short to take many steps"
    prefill = [m for t, m in seen if t < first and value(m, RUNNING) == 1]
    assert prefill, "no scrape landed during the prefill"
    assert {value(m, PROMPT) for m in prefill} == {value(before, PROMPT)}
    assert {value(m, GENERATED) for m in prefill} == {value(before, GENERATED)}
    kv = [value(m, KV) for m in prefill]
    assert len(set(kv)) >= 3, f"the heartbeat (KV usage) did not move step by step: {kv}"
    assert kv == sorted(kv)


async def test_a_request_beyond_max_num_seqs_is_in_the_waiting_gauge(rig: Rig) -> None:
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 60, "temperature": 0, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:
        tasks = asyncio.gather(*(stream(s, rig.url, body) for _ in range(3)))
        waiter = asyncio.ensure_future(tasks)
        seen = await watch(s, rig.url, waiter)
        await waiter
    loads = {(value(m, RUNNING), value(m, WAITING)) for _, m in seen}
    assert (2.0, 1.0) in loads, loads


async def test_the_lora_adapter_answers_as_transformers_with_peft_does(rig: Rig) -> None:
    """vLLM's greedy ids and log probabilities, base and adapter, scored by transformers (+ peft)
    on the same ids: the adapter changes the distribution, and vLLM applies it as peft does.

    Greedy ids alone are not compared: two bf16 implementations may break a near-tie differently
    (once in a fresh clone's CI, at the 5th of 12 tokens), and the texts then part for good. So
    each token vLLM chose must be the reference's top token or within ``TIE`` of it, and vLLM's
    log probability of it within ``CLOSE`` of the reference's, both well below what the adapter
    moves (asserted, so the tolerances can tell an adapter applied from one ignored or mangled).
    """
    prompt = [2, 105, 2364, 107, 6974, 23391, 1902, 236761, 106, 107, 105, 4368, 107]
    n = 12

    async def ids(model: str) -> tuple[list[int], list[float]]:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": n,
            "temperature": 0,
            "return_token_ids": True,
            "logprobs": 1,
        }
        async with aiohttp.ClientSession() as s, s.post(rig.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
            choice = (await resp.json())["choices"][0]
            return list(choice["token_ids"]), list(choice["logprobs"]["token_logprobs"])

    (base_ids, base_lp), (lora_ids, lora_lp) = await ids(MODEL), await ids(ADAPTER)
    assert base_lp != lora_lp, "the adapter changed nothing"

    def score(chosen: list[int], *extra: str) -> list[dict[str, float]]:
        out = vllm_env.tool(
            "score", str(rig.base), "--prompt-ids", json.dumps(prompt), "--ids", json.dumps(chosen), *extra
        )
        return list(json.loads(out))

    adapter = ("--adapter", str(rig.adapter))
    for chosen, got, extra in ((base_ids, base_lp, ()), (lora_ids, lora_lp, adapter)):
        ref = await asyncio.to_thread(score, chosen, *extra)
        gaps = [r["top_logprob"] - r["logprob"] for r in ref]
        assert max(gaps) <= TIE, f"vLLM chose a token the reference ranks far below its top: {gaps}"
        diffs = [abs(g - r["logprob"]) for g, r in zip(got, ref, strict=True)]
        assert max(diffs) <= CLOSE, f"vLLM's log probabilities part from the reference's: {diffs}"
    # What the adapter moves, on the adapter's ids: far beyond the tolerances above.
    plain = await asyncio.to_thread(score, lora_ids)
    moved = max(abs(g - r["logprob"]) for g, r in zip(lora_lp, plain, strict=True))
    assert moved > 2 * CLOSE, f"the adapter moves log probabilities by {moved} only"


async def test_a_reply_cut_at_the_end_of_a_line_is_continued_exactly_from_its_ids(rig: Rig) -> None:
    """The proxy's two ways of continuing a begun reply, called as the proxy calls them
    (bench/continuation.py): from the token ids, the client reads the one-go text and usage,
    after 7 tokens and where the text read so far ends in a newline (which the chat template
    trims from a text continuation's last message: ``bench continuation`` counts those)."""
    figures = await compare(rig.url, prompts=PROMPTS[1:2], splits=(7,), tokens=30)
    for group in ("at_splits", "at_newlines"):
        assert figures[group]["cases"] == 1, figures
        assert figures[group]["ids"] == {"exact": 1, "usage_exact": 1}, figures


async def test_no_false_wedge_in_all_of_the_above(rig: Rig) -> None:
    """The supervisor watched every test of this module at its default windows."""
    kinds = [r["kind"] for r in rig.ledger.query("SELECT kind FROM events")]
    assert "wedge" not in kinds and "restart" not in kinds, kinds
