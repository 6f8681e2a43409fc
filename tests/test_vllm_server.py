"""A real vLLM (the CPU build, bundled Gemma 3 270M) against what wedgewatch assumes of it, and
wedged the ways it really wedges; long because every test here shares one server (an engine
start costs about a minute and most of the machine). One supervised server for the module, started with the seed's
configuration (the ``hybrid-safe`` argument set and a LoRA adapter the tests make with peft: rank
8, B matrices non-zero), behind the watchdog proxy, at wedgewatch's default settings but one:
``on_wedge = "fail"``, so a wedged life's client is released with an error rather than resumed
on the next life.

First, on its first life, conformance: every series the ``vllm`` profile reads is in the real
``/metrics`` and moves as the profile assumes, during decode and during a long chunked prefill
(where the token counters stand still and only the heartbeat moves); the adapter is listed, and
its answer differs from the base model's and scores as transformers with peft scores it.

Then each wedge test wedges the current life and leaves the next one ready: SIGSTOP of the
EngineCore mid-stream (``/health`` stays 200, ``/metrics`` freezes: the heartbeat rule), the
execute-model timeout (a stopped Worker; vLLM gives the begun stream an SSE error event after its
HTTP 200, then exits). A stopped Worker caught by the heartbeat is the freeze of
``test_vllm_run.py``. Last, the default ``on_wedge = "resume"`` through a second proxy on the same
server: SIGKILL of the EngineCore (vLLM's EngineDeadError: the error event, /health 503, the
exit) and the stream goes on on the next life from the token ids the proxy kept, reading as a
stream never killed; and a Responses and a Messages stream sampled at temperature 0.8, frozen
mid-way, each go on from ids rendered on the next life (``--enable-scale-out``) and read whole.

The server runs with ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=4`` (vLLM's default is 300): below the
8 s heartbeat window, so the engine's own timeout speaks first; a stopped EngineCore is not
affected (it is the EngineCore that keeps that timeout). ``--max-num-seqs 2`` so a third request
waits; prefill steps of 256 tokens so a long prompt takes many steps. Five engine starts in all.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import pytest_asyncio

from vllm_helpers import ADAPTER, HELLO, VLLM_GROUP, adapter, config, detail, provision, role_pid, state
from wedgewatch.base.events import Event, EventBus
from wedgewatch.base.vocab import OK, RESUMED, is_infra_outcome
from wedgewatch.bench.continuation import PROMPTS, compare
from wedgewatch.config import WatchdogConfig
from wedgewatch.launchers import vllm_env
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.supervisor import Supervisor, profiles
from wedgewatch.supervisor.pool import Pool
from wedgewatch.supervisor.process import group_alive
from wedgewatch.testing import eventually_async
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
TIE = 0.3
"""Nats: how far below the reference's top token vLLM's greedy choice may score (a bf16 near-tie)."""
CLOSE = 0.3
"""Nats: how far vLLM's log probability of a token may lie from transformers' (0.11 at most seen
here; the tests' adapter moves them by up to 1.3)."""
NEXT_LIFE = 300.0
"""A new life: stop, start (about 30 s here on a quiet machine), warm-up; generous for a loaded one."""


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
        # --enable-scale-out: the render endpoints a begun Responses or Messages stream is
        # continued from (proxy/resume/typed_ids.py).
        args=[
            "--max-num-seqs",
            "2",
            "--max-num-batched-tokens",
            str(CHUNK),
            "--max-model-len",
            "4096",
            "--enable-scale-out",
        ],
        env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "4"},
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
    """About 3,000 prompt tokens in steps of 256: the KV gauge rises step by step while the token
    counters stand still until the first token (vLLM counts prompt tokens when a prefill ends)."""
    words = " ".join(f"w{i % 97}" for i in range(1400))
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


# --- the wedges: each leaves the next life ready ----------------------------------------------


@dataclass
class Wedge:
    """What one wedge did: the life it struck, what the client saw and when, the new life."""

    life_id: str
    pgid: int
    target: int
    error: openai.APIError | None
    chunks: int
    next_life: str


async def wedge(rig: Rig, title: str, act: Callable[[int], None]) -> Wedge:
    """Stream a long answer through the proxy, ``act`` on the process titled ``title`` after a
    few chunks, and wait for the client's release and the next ready life."""
    await rig.sup.wait_ready()
    life = rig.sup.current
    assert life is not None and life.proc.pid is not None
    pgid = life.proc.pid
    target = role_pid(pgid, title)
    assert target is not None, f"no {title} in the server's process group"
    client = openai.AsyncOpenAI(base_url=rig.proxy.url + "/v1", api_key="x", max_retries=0, timeout=120)
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        max_tokens=2000,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks, acted, error = 0, False, None
    try:
        async for _ in stream:
            chunks += 1
            if chunks == 5:
                act(target)
                acted = True
    except openai.APIError as exc:
        error = exc
    assert acted, f"the stream ended after {chunks} chunks, before the act"
    await eventually_async(lambda: rig.sup.life_id not in (None, life.life_id), NEXT_LIFE, what="a new life")
    await asyncio.wait_for(rig.sup.wait_ready(), NEXT_LIFE)
    assert rig.sup.life_id is not None
    return Wedge(life.life_id, pgid, target, error, chunks, rig.sup.life_id)


async def served(rig: Rig) -> None:
    """The next request is served, through the same proxy, by the new life."""
    client = openai.AsyncOpenAI(base_url=rig.proxy.url + "/v1", api_key="x", max_retries=0, timeout=120)
    again = await client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4, temperature=0)
    assert again.usage is not None and again.usage.completion_tokens == 4


def the_request(rig: Rig, life_id: str) -> dict[str, Any]:
    """The proxy's row of the wedged stream (the only long request on that life)."""
    rows = rig.rows("SELECT * FROM requests WHERE life_id = ? AND client_stream = 1", (life_id,))
    assert len(rows) == 1, rows
    return rows[0]


def life_row(rig: Rig, life_id: str) -> dict[str, Any]:
    [row] = rig.rows("SELECT * FROM server_life_view WHERE life_id = ?", (life_id,))
    return row


def gone(w: Wedge) -> None:
    """No process of the wedged life's group is left, the stopped one included."""
    assert not group_alive(w.pgid)
    assert state(w.target) is None


async def test_sigstop_of_the_engine_core_is_a_wedge_with_evidence(rig: Rig) -> None:
    """/health stays 200 and /metrics answers frozen: the heartbeat rule finds it; the proxy ends
    the stream; the evidence holds a py-spy dump of every process, the stopped one included."""
    w = await wedge(rig, "VLLM::EngineCore", lambda pid: os.kill(pid, signal.SIGSTOP))
    # Released by the heartbeat's verdict, not by a request deadline: how soon is `bench vllm`'s to
    # measure (docs/benchmarks.md), not a wall-clock bound here.
    assert w.error is not None
    assert isinstance(w.error.body, dict) and w.error.body.get("code") in ("stall_midstream", "stall_ttft")
    assert "engine stopped" in str(w.error.body.get("message")), w.error.body
    row = the_request(rig, w.life_id)
    assert is_infra_outcome(row["outcome"]), row
    [event] = [
        detail(r) for r in rig.rows("SELECT * FROM events WHERE kind = 'wedge'") if r["life_id"] == w.life_id
    ]
    assert event["source"] == "metrics", event
    assert event["running"] == 1, event
    ended = life_row(rig, w.life_id)
    assert ended["end_reason"] == "wedge"
    gone(w)

    evidence = event["evidence"]
    where = Path(evidence["dir"])
    assert where.parent == Path(ended["log_path"]).parent
    assert w.target in evidence["pids"] and w.pgid in evidence["pids"]
    dumps = {d["pid"]: d for d in evidence["py_spy"]}
    assert set(dumps) == set(evidence["pids"])
    stopped = dumps[w.target]
    assert stopped["ok"] and stopped["state"] == "T", stopped
    assert "Thread" in (where / stopped["file"]).read_text()
    assert evidence["metrics"]["ok"], evidence["metrics"]
    frozen = (where / "metrics.txt").read_text()
    assert 'vllm:num_requests_running{engine="0",model_name="gemma3-270m"} 1.0' in frozen
    tail = (where / "log-tail.txt").read_text()
    assert len(tail.splitlines()) == 200 and tail in Path(ended["log_path"]).read_text()
    await served(rig)


async def test_the_execute_model_timeout_error_event_is_an_upstream_failure(rig: Rig) -> None:
    """A stopped Worker: after VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS the engine gives up, the begun
    stream gets an error event after its HTTP 200, and the server exits."""
    w = await wedge(rig, "VLLM::Worker", lambda pid: os.kill(pid, signal.SIGSTOP))
    assert w.error is not None, "the client saw no error"
    row = the_request(rig, w.life_id)
    assert row["http_status"] == 200 and is_infra_outcome(row["outcome"]), row
    assert life_row(rig, w.life_id)["end_reason"] in ("crash", "wedge")
    gone(w)
    await served(rig)


# --- resume, the default: a second proxy on the same server -----------------------------------

COUNT = [{"role": "user", "content": "Count from one to twenty in words, separated by commas."}]


async def read_stream(
    url: str, body: dict[str, Any], act: Callable[[], None] | None = None, after: int = 8
) -> tuple[list[dict[str, Any]], int]:
    """A streamed chat answer's chunks, and how many ``[DONE]`` lines came; ``act`` once the
    ``after``-th chunk with text is read. Patient: a resumed stream waits for the next life."""
    chunks, done, texts = [], 0, 0
    parser = SSEParser()
    timeout = aiohttp.ClientTimeout(total=2 * NEXT_LIFE)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.post(url + "/v1/chat/completions", json=body) as resp,
    ):
        assert resp.status == 200, await resp.text()
        async for raw in resp.content.iter_any():
            for ev in parser.feed(raw):
                if ev.data is None:
                    continue
                if ev.is_done:
                    done += 1
                    continue
                chunks.append(ev.json())
                if chunks[-1]["choices"] and chunks[-1]["choices"][0]["delta"].get("content"):
                    texts += 1
                    if texts == after and act is not None:
                        act()
    return chunks, done


def said(chunks: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
    """Each chunk's delta and finish reason: what a client reads of a stream, chunk by chunk."""
    return [(c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in chunks if c["choices"]]


@asynccontextmanager
async def resuming(rig: Rig) -> AsyncIterator[Proxy]:
    """A second proxy on the module's server at every default, ``on_wedge = "resume"`` included."""
    await rig.sup.wait_ready()
    pool = Pool([rig.sup])
    proxy = Proxy(pool, WatchdogConfig(), ledger=rig.ledger, bus=rig.proxy.bus, feed=pool.feed)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


def legs_of(rig: Rig, life_id: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each request resumed off ``life_id``: its row there and the row of the leg that ended it."""
    rows = rig.rows("SELECT * FROM requests")
    out = []
    for cut in (r for r in rows if r["life_id"] == life_id and r["outcome"] == RESUMED):
        [after] = [r for r in rows if detail(r).get("resumes") == cut["request_id"]]
        out.append((cut, after))
    return out


async def test_a_sigkilled_engine_cores_stream_reads_whole_on_the_next_life(rig: Rig) -> None:
    """SIGKILL of the EngineCore mid-stream at temperature 0, at the defaults: vLLM gives the begun
    stream its EngineDeadError event, answers /health 503 and exits. The proxy holds the event,
    /health says the engine died, and the stream goes on on the next life from the token ids the
    proxy kept (a completion of the prompt's ids and the generated ones): the client reads what an
    uninterrupted stream gave, each chunk's text and finish, the usage, one id, one role chunk,
    one ``[DONE]``, and no ids it did not ask for."""
    body = {
        "model": MODEL,
        "messages": COUNT,
        "max_tokens": 60,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with resuming(rig) as proxy:
        life = rig.sup.current
        assert life is not None and life.proc.pid is not None
        target = role_pid(life.proc.pid, "VLLM::EngineCore")
        assert target is not None
        whole, _ = await read_stream(proxy.url, body)
        killed, done = await read_stream(proxy.url, body, lambda: os.kill(target, signal.SIGKILL))
        await asyncio.wait_for(rig.sup.wait_ready(), NEXT_LIFE)
    assert said(killed) == said(whole) and len(said(whole)) > 40
    assert killed[-1]["usage"] == whole[-1]["usage"] and whole[-1]["usage"]["completion_tokens"] == 60
    assert len({c["id"] for c in killed}) == 1 and done == 1
    assert [c for c in said(killed) if "role" in c[0]] == [({"role": "assistant", "content": ""}, None)]
    # The proxy asked for the ids; the client did not: it reads null, as from vLLM without them.
    assert "prompt_token_ids" in killed[0] and killed[0]["prompt_token_ids"] is None
    assert all(c["choices"][0]["token_ids"] is None for c in killed[1:] if c["choices"])
    [(cut, after)] = legs_of(rig, life.life_id)
    assert detail(cut)["blame"] == "engine_death" and cut["tokens_out"] >= 8, detail(cut)
    assert after["outcome"] == OK and after["life_id"] not in (None, life.life_id)
    assert detail(after)["sent_to"] == "/v1/completions"  # from the ids, not the text
    assert life_row(rig, life.life_id)["end_reason"] in ("crash", "wedge")
    assert not group_alive(life.proc.pid)


async def _responses(
    url: str, body: dict[str, Any], begun: asyncio.Event
) -> tuple[list[dict[str, Any]], openai.types.responses.Response]:
    """A Responses stream read by the OpenAI SDK's accumulator: its events, and the final response
    the SDK assembled; ``begun`` is set once it has five text deltas."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=2 * NEXT_LIFE)
    events: list[dict[str, Any]] = []
    async with client.responses.stream(**body) as s:
        async for ev in s:
            events.append(ev.model_dump())
            if sum(e["type"] == "response.output_text.delta" for e in events) == 5:
                begun.set()
        final = await s.get_final_response()
    return events, final


async def _messages(url: str, body: dict[str, Any], begun: asyncio.Event) -> tuple[list[dict[str, Any]], Any]:
    """A Messages stream read by Anthropic's SDK: its events and the message it assembled."""
    import anthropic  # imported here: every worker imports this module to collect it

    client = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0, timeout=2 * NEXT_LIFE)
    events: list[dict[str, Any]] = []
    async with client.messages.stream(**body) as s:
        async for ev in s:
            events.append(ev.model_dump())
            if sum(e["type"] == "content_block_delta" for e in events) == 5:
                begun.set()
        final = await s.get_final_message()
    return events, final


LIMIT = 120  # the sampled streams' output limit


def delivered(counted: int, ended: bool, ids: list[int], limit: int) -> None:
    """The usage counts the tokens the client got over both legs. Stopped at the limit, that is the
    limit exactly (one leg's count lost, or the moved ids counted as output, and it is not). Ended
    by the model, it is the text's tokens and the end-of-turn token (counted, not shown); sampled
    tokens need not be the text's own tokenization (vLLM's /tokenize of the text read back), so
    there a few tokens either way are allowed, far fewer than the first leg's (at least 5)."""
    if not ended:
        assert counted == limit, (counted, limit)
    else:
        assert abs(counted - (len(ids) + 1)) <= 3, (counted, len(ids))


async def test_sampled_responses_and_messages_streams_frozen_midway_read_whole(rig: Rig) -> None:
    """SIGSTOP of the EngineCore with a Responses and a Messages stream in flight, both sampled
    at temperature 0.8: the heartbeat rule finds the frozen engine, and on the next life each goes
    on from ids (the request rendered there, the text read so far read back as ids, generated by
    /inference/v1/generate) re-encoded as the client's own events. Whole, as each SDK reads it:
    the deltas concatenate to the final text, the sequence numbers run on without a gap under one
    response and item id (one message id and block), the prompt is counted as the request's own,
    the output as the tokens of the text delivered."""
    text = "Count from one to one hundred in words, separated by commas."
    responses = {"model": MODEL, "input": text, "max_output_tokens": LIMIT, "temperature": 0.8}
    # Anthropic's SDK (2.x) has no `temperature` argument any more: it goes in the body as sent.
    messages = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": LIMIT,
        "extra_body": {"temperature": 0.8},
    }
    async with resuming(rig) as proxy:
        life = rig.sup.current
        assert life is not None and life.proc.pid is not None
        target = role_pid(life.proc.pid, "VLLM::EngineCore")
        assert target is not None
        began = asyncio.Event(), asyncio.Event()
        tasks = (
            asyncio.ensure_future(_responses(proxy.url, responses, began[0])),
            asyncio.ensure_future(_messages(proxy.url, messages, began[1])),
        )
        try:
            # Both begun (or one failed: its exception, not a timeout, is what the test reports).
            waits = [asyncio.ensure_future(b.wait()) for b in began]
            pending: set[asyncio.Future[Any]] = {*waits, *tasks}
            while not all(w.done() for w in waits):
                done, pending = await asyncio.wait(
                    pending, timeout=NEXT_LIFE, return_when=asyncio.FIRST_COMPLETED
                )
                assert done, "the streams did not begin"
                for t in tasks:
                    if t.done():
                        t.result()  # raises what failed it
                        raise AssertionError("a stream ended before the freeze")
            os.kill(target, signal.SIGSTOP)
            (r_events, r_final), (m_events, m_final) = await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()  # no-op once done; else a stream left behind fails quietly
            if state(target) == "T":
                os.kill(target, signal.SIGCONT)
        await asyncio.wait_for(rig.sup.wait_ready(), NEXT_LIFE)
        async with aiohttp.ClientSession() as s:
            clean = await (
                await s.post(proxy.url + "/v1/responses", json={**responses, "max_output_tokens": 1})
            ).json()
            # Each API renders its own prompt (a Responses and a Messages render of one input need
            # not count alike): each is held to a clean request of its own.
            m_clean = await (
                await s.post(
                    proxy.url + "/v1/messages",
                    json={"model": MODEL, "messages": messages["messages"], "max_tokens": 1},
                )
            ).json()
            async with s.post(
                rig.url + "/tokenize",
                json={"model": MODEL, "prompt": r_final.output_text, "add_special_tokens": False},
            ) as t:
                r_ids = (await t.json())["tokens"]
            m_text = "".join(b.text for b in m_final.content if b.type == "text")
            async with s.post(
                rig.url + "/tokenize", json={"model": MODEL, "prompt": m_text, "add_special_tokens": False}
            ) as t:
                m_ids = (await t.json())["tokens"]

    deltas = "".join(e["delta"] for e in r_events if e["type"] == "response.output_text.delta")
    assert deltas == r_final.output_text and len(deltas) > 20
    assert [e["sequence_number"] for e in r_events] == list(range(len(r_events)))
    assert {e["item_id"] for e in r_events if "item_id" in e} == {r_final.output[0].id}
    assert {e["response"]["id"] for e in r_events if "response" in e} == {r_final.id}
    assert r_final.usage is not None and r_final.usage.input_tokens == clean["usage"]["input_tokens"]
    delivered(r_final.usage.output_tokens, r_final.status == "completed", r_ids, LIMIT)

    m_deltas = "".join(e["delta"]["text"] for e in m_events if e["type"] == "content_block_delta")
    assert m_deltas == m_text and len(m_text) > 20
    assert [e["type"] for e in m_events].count("message_start") == 1
    assert {e["index"] for e in m_events if "index" in e} == {0}
    assert m_final.usage.input_tokens == m_clean["usage"]["input_tokens"], m_clean
    delivered(m_final.usage.output_tokens, m_final.stop_reason == "end_turn", m_ids, LIMIT)

    legs = legs_of(rig, life.life_id)
    assert len(legs) == 2, legs
    for cut, after in legs:
        assert after["outcome"] == OK and detail(after)["sent_to"] == "/inference/v1/generate", detail(after)
        assert cut["tokens_out"] >= 5
