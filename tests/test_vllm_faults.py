"""A real vLLM (the CPU build, bundled Gemma 3 270M, the seed's ``hybrid-safe`` flags) wedged the
ways it really wedges, on servers of its own: never the conformance server.

The rig's ``vllm_faults`` server is supervised at wedgewatch's default settings, behind a proxy
with ``on_wedge = "fail"`` (a wedged life's client is released with an error). Each test strikes
the current life and leaves the next one ready, whatever order they run in:

- **SIGSTOP of the EngineCore** mid-stream (``/health`` stays 200, ``/metrics`` freezes: the
  heartbeat rule), with two streams on the life: one through that proxy is released by the
  verdict with an error, and the evidence holds a py-spy dump of every process, the stopped one
  included; one through a second proxy at the default ``on_wedge = "resume"`` goes on on the next
  life from the token ids it kept, and reads as a stream never frozen. One wedge, one restart.
- At the default ``on_wedge = "resume"`` (a second proxy on the same server): **SIGKILL of the
  EngineCore** mid-stream (vLLM's EngineDeadError: the error event, /health 503, the exit), and
  the stream goes on on the next life from the token ids the proxy kept, reading as a stream never
  killed; and a Responses and a Messages stream sampled at temperature 0.8, frozen mid-way, each
  go on from ids rendered on the next life (``--enable-scale-out``) and read whole.

The execute-model timeout (a stopped Worker: the engine gives the begun stream an SSE error event
after its HTTP 200, then exits) needs a short ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``: that test
starts a server of its own with it, and nothing else runs there. A stopped Worker caught by the
heartbeat is the freeze of ``test_vllm_run.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import pytest_asyncio

from engine_rig import NEXT_LIFE, Rig
from vllm_helpers import HELLO, VLLM_GROUP, config, detail, provision, role_pid, state
from wedgewatch.base.vocab import OK, RESUMED, is_infra_outcome
from wedgewatch.config import WatchdogConfig
from wedgewatch.proxy import Proxy
from wedgewatch.supervisor.pool import Pool
from wedgewatch.supervisor.process import group_alive
from wedgewatch.testing import eventually, eventually_async
from wedgewatch.wire.sse import SSEParser

pytestmark = [
    VLLM_GROUP,
    pytest.mark.long,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(900),
]

MODEL = "gemma3-270m"
COUNT = [{"role": "user", "content": "Count from one to twenty in words, separated by commas."}]
ENGINE_TIMEOUT = 30
"""The timeout test's VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS: above a slow first step (7.6 s measured
on a slower CPU, 8 s more with the rig's pause switch), so only the stopped Worker trips it."""


def the_request(rig: Rig, life_id: str, path: str = "/v1/chat/completions") -> dict[str, Any]:
    """The proxy's row of the struck stream: the one streamed request on that life that did not
    end well nor was resumed (the other proxy's, after a freeze)."""

    def one() -> list[dict[str, Any]]:
        return rig.rows(
            "SELECT * FROM requests WHERE life_id = ? AND client_stream = 1 AND path = ? "
            "AND outcome NOT IN ('ok', 'resumed')",
            (life_id, path),
        )

    # The row is written after the client got its error (the proxy writes rows in batches, off
    # its loop): wait for it rather than read once (a fresh clone's CI read it too soon).
    rows = eventually(one, timeout=60, interval=0.2, what=f"the struck row on {life_id}")
    assert len(rows) == 1, rows
    return rows[0]


def life_row(rig: Rig, life_id: str) -> dict[str, Any]:
    [row] = rig.rows("SELECT * FROM server_life_view WHERE life_id = ?", (life_id,))
    return row


def gone(pgid: int, target: int) -> None:
    """No process of the struck life's group is left, the stopped one included."""
    assert not group_alive(pgid)
    assert state(target) is None


async def long_stream(url: str, after: int, act: Callable[[], None]) -> tuple[int, openai.APIError | None]:
    """A long stream through ``url`` (a proxy); ``act`` once ``after`` chunks are read. Its chunk
    count and the error the client was released with."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=2 * NEXT_LIFE)
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        max_tokens=2000,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks, error = 0, None
    try:
        async for _ in stream:
            chunks += 1
            if chunks == after:
                act()
    except openai.APIError as exc:
        error = exc
    return chunks, error


async def served(rig: Rig) -> None:
    """The next request is served, through the same proxy, by the new life."""
    client = openai.AsyncOpenAI(base_url=rig.proxy_url + "/v1", api_key="x", max_retries=0, timeout=120)
    again = await client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4, temperature=0)
    assert again.usage is not None and again.usage.completion_tokens == 4


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


# --- SIGSTOP of the EngineCore: one wedge, read by two tests ----------------------------------


@dataclass
class Frozen:
    """What one SIGSTOP of the EngineCore did to the two streams on its life."""

    life_id: str
    pgid: int
    target: int
    released: openai.APIError | None  # the stream through the on_wedge = "fail" proxy
    whole: list[dict[str, Any]]  # the resumed stream's reference, read before the freeze
    resumed: list[dict[str, Any]]
    done: int
    next_life: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def frozen(vllm_faults: Rig) -> AsyncIterator[Frozen]:
    rig = vllm_faults
    await rig.ready()
    pool_proxy: list[Proxy] = []

    async def second_proxy() -> str:
        pool = Pool([rig.sup])
        proxy = Proxy(pool, WatchdogConfig(), ledger=rig.ledger, bus=rig.bus, feed=pool.feed)
        await proxy.start()
        pool_proxy.append(proxy)
        return proxy.url

    resume_url = await rig.acall(second_proxy)
    life, pgid = rig.life_id, rig.pgid
    assert life is not None
    target = role_pid(pgid, "VLLM::EngineCore")
    assert target is not None
    body = {
        "model": MODEL,
        "messages": COUNT,
        "max_tokens": 60,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    stop = asyncio.Event()

    def freeze() -> None:
        os.kill(target, signal.SIGSTOP)
        stop.set()

    try:
        whole, _ = await read_stream(resume_url, body)
        # The long stream first; once it is under way, the counted one; the freeze at its 8th text.
        begun = asyncio.Event()
        released = asyncio.ensure_future(long_stream(rig.proxy_url, 5, begun.set))
        await asyncio.wait_for(begun.wait(), 120)
        resumed, done = await read_stream(resume_url, body, freeze)
        _, error = await released
        assert stop.is_set(), "the counted stream ended before its 8th text"
        next_life = await rig.next_life(life)
    finally:
        await rig.acall(pool_proxy[0].stop)
        if state(target) == "T":
            os.kill(target, signal.SIGCONT)
    yield Frozen(life, pgid, target, error, whole, resumed, done, next_life)


async def test_sigstop_of_the_engine_core_is_a_wedge_with_evidence(vllm_faults: Rig, frozen: Frozen) -> None:
    """/health stays 200 and /metrics answers frozen: the heartbeat rule finds it; the proxy ends
    the stream; the evidence holds a py-spy dump of every process, the stopped one included."""
    rig = vllm_faults
    # Released by the heartbeat's verdict, not by a request deadline: how soon is `bench vllm`'s to
    # measure (docs/benchmarks.md), not a wall-clock bound here.
    error = frozen.released
    assert error is not None
    assert isinstance(error.body, dict) and error.body.get("code") in ("stall_midstream", "stall_ttft")
    assert "engine stopped" in str(error.body.get("message")), error.body
    row = the_request(rig, frozen.life_id)
    assert is_infra_outcome(row["outcome"]), row
    [event] = [
        detail(r)
        for r in rig.rows("SELECT * FROM events WHERE kind = 'wedge'")
        if r["life_id"] == frozen.life_id
    ]
    assert event["source"] == "metrics", event
    assert event["running"] == 2, event  # both streams
    ended = life_row(rig, frozen.life_id)
    assert ended["end_reason"] == "wedge"
    gone(frozen.pgid, frozen.target)

    evidence = event["evidence"]
    where = Path(evidence["dir"])
    assert where.parent == Path(ended["log_path"]).parent
    assert frozen.target in evidence["pids"] and frozen.pgid in evidence["pids"]
    dumps = {d["pid"]: d for d in evidence["py_spy"]}
    assert set(dumps) == set(evidence["pids"])
    stopped = dumps[frozen.target]
    assert stopped["ok"] and stopped["state"] == "T", stopped
    assert "Thread" in (where / stopped["file"]).read_text()
    assert evidence["metrics"]["ok"], evidence["metrics"]
    frozen_metrics = (where / "metrics.txt").read_text()
    assert 'vllm:num_requests_running{engine="0",model_name="gemma3-270m"} 2.0' in frozen_metrics
    # The log's last lines, as many as it had up to 200: a quiet life may have written fewer.
    tail = (where / "log-tail.txt").read_text()
    assert tail.strip() and tail in Path(ended["log_path"]).read_text()
    await served(rig)


async def test_a_frozen_stream_resumed_from_its_token_ids_reads_as_never_frozen(
    vllm_faults: Rig, frozen: Frozen
) -> None:
    """The same freeze, through a proxy at the defaults (``on_wedge = "resume"``): the next life
    continues the stream from the token ids the proxy kept (a completion of the prompt's ids and
    the generated ones), and the client reads what an uninterrupted stream gave: each chunk's
    text and finish, the usage, one id, one role chunk, one ``[DONE]``, and no ids it did not ask
    for."""
    rig = vllm_faults
    whole, resumed = frozen.whole, frozen.resumed
    assert said(resumed) == said(whole) and len(said(whole)) > 40
    assert resumed[-1]["usage"] == whole[-1]["usage"] and whole[-1]["usage"]["completion_tokens"] == 60
    assert len({c["id"] for c in resumed}) == 1 and frozen.done == 1
    assert [c for c in said(resumed) if "role" in c[0]] == [({"role": "assistant", "content": ""}, None)]
    # The proxy asked for the ids; the client did not: it reads null, as from vLLM without them.
    assert "prompt_token_ids" in resumed[0] and resumed[0]["prompt_token_ids"] is None
    assert all(c["choices"][0]["token_ids"] is None for c in resumed[1:] if c["choices"])

    legs = rig.rows(
        "SELECT * FROM requests WHERE life_id = ? AND client_stream = 1 AND outcome = ?",
        (frozen.life_id, RESUMED),
    )
    assert len(legs) == 1 and legs[0]["tokens_out"] >= 8, legs
    [after] = [
        q for q in rig.rows("SELECT * FROM requests") if detail(q).get("resumes") == legs[0]["request_id"]
    ]
    assert after["outcome"] == OK and after["life_id"] == frozen.next_life
    assert detail(after)["sent_to"] == "/v1/completions"  # from the ids, not the text


# --- resume, the default: a second proxy on the faults server ---------------------------------


@asynccontextmanager
async def resuming(rig: Rig) -> AsyncIterator[str]:
    """A second proxy on the rig's server at every default, ``on_wedge = "resume"`` included, on
    the rig's loop (its supervisor's); its URL."""
    await rig.ready()
    made: list[Proxy] = []

    async def start() -> str:
        pool = Pool([rig.sup])
        proxy = Proxy(pool, WatchdogConfig(), ledger=rig.ledger, bus=rig.bus, feed=pool.feed)
        await proxy.start()
        made.append(proxy)
        return proxy.url

    url = await rig.acall(start)
    try:
        yield url
    finally:
        await rig.acall(made[0].stop)


def legs_of(rig: Rig, life_id: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each request resumed off ``life_id``: its row there and the row of the leg that ended it."""
    rows = rig.rows("SELECT * FROM requests")
    out = []
    for cut in (r for r in rows if r["life_id"] == life_id and r["outcome"] == RESUMED):
        [after] = [r for r in rows if detail(r).get("resumes") == cut["request_id"]]
        out.append((cut, after))
    return out


async def test_a_sigkilled_engine_cores_stream_reads_whole_on_the_next_life(vllm_faults: Rig) -> None:
    """SIGKILL of the EngineCore mid-stream at temperature 0, at the defaults: vLLM gives the begun
    stream its EngineDeadError event, answers /health 503 and exits. The proxy holds the event,
    /health says the engine died, and the stream goes on on the next life from the token ids the
    proxy kept (a completion of the prompt's ids and the generated ones): the client reads what an
    uninterrupted stream gave, each chunk's text and finish, the usage, one id, one role chunk,
    one ``[DONE]``, and no ids it did not ask for."""
    rig = vllm_faults
    body = {
        "model": MODEL,
        "messages": COUNT,
        "max_tokens": 60,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with resuming(rig) as proxy_url:
        life = rig.sup.current
        assert life is not None and life.proc.pid is not None
        target = role_pid(life.proc.pid, "VLLM::EngineCore")
        assert target is not None
        whole, _ = await read_stream(proxy_url, body)
        killed, done = await read_stream(proxy_url, body, lambda: os.kill(target, signal.SIGKILL))
        await rig.ready()
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


async def test_sampled_responses_and_messages_streams_frozen_midway_read_whole(vllm_faults: Rig) -> None:
    """SIGSTOP of the EngineCore with a Responses and a Messages stream in flight, both sampled
    at temperature 0.8: the heartbeat rule finds the frozen engine, and on the next life each goes
    on from ids (the request rendered there, the text read so far read back as ids, generated by
    /inference/v1/generate) re-encoded as the client's own events. Whole, as each SDK reads it:
    the deltas concatenate to the final text, the sequence numbers run on without a gap under one
    response and item id (one message id and block), the prompt is counted as the request's own,
    the output as the tokens of the text delivered."""
    rig = vllm_faults
    text = "Count from one to one hundred in words, separated by commas."
    responses = {"model": MODEL, "input": text, "max_output_tokens": LIMIT, "temperature": 0.8}
    # Anthropic's SDK (2.x) has no `temperature` argument any more: it goes in the body as sent.
    messages = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": LIMIT,
        "extra_body": {"temperature": 0.8},
    }
    async with resuming(rig) as proxy_url:
        life = rig.sup.current
        assert life is not None and life.proc.pid is not None
        target = role_pid(life.proc.pid, "VLLM::EngineCore")
        assert target is not None
        began = asyncio.Event(), asyncio.Event()
        tasks = (
            asyncio.ensure_future(_responses(proxy_url, responses, began[0])),
            asyncio.ensure_future(_messages(proxy_url, messages, began[1])),
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
        await rig.ready()
        async with aiohttp.ClientSession() as s:
            clean = await (
                await s.post(proxy_url + "/v1/responses", json={**responses, "max_output_tokens": 1})
            ).json()
            # Each API renders its own prompt (a Responses and a Messages render of one input need
            # not count alike): each is held to a clean request of its own.
            m_clean = await (
                await s.post(
                    proxy_url + "/v1/messages",
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


# --- the execute-model timeout: a server of its own ------------------------------------------


async def test_the_execute_model_timeout_error_event_is_an_upstream_failure(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A stopped Worker: after VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS the engine gives up, the begun
    stream gets an error event after its HTTP 200, and the server exits. The heartbeat window is
    longer than that timeout, so the engine's own timeout speaks first."""
    await asyncio.to_thread(provision)
    tmp = tmp_path_factory.mktemp("vllm-timeout")
    cfg = config(
        tmp,
        env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": str(ENGINE_TIMEOUT)},
        heartbeat_window=4.0 * ENGINE_TIMEOUT,
        max_restarts=0,
    )
    rig = await asyncio.to_thread(Rig.start, cfg, WatchdogConfig(on_wedge="fail"), tmp / "ledger.sqlite")
    try:
        life, pgid = rig.life_id, rig.pgid
        assert life is not None
        target = role_pid(pgid, "VLLM::Worker")
        assert target is not None
        chunks, error = await long_stream(rig.proxy_url, 5, lambda: os.kill(target, signal.SIGSTOP))
        assert chunks >= 5 and error is not None, "the client saw no error"
        row = the_request(rig, life)
        assert row["http_status"] == 200 and is_infra_outcome(row["outcome"]), row
        await eventually_async(
            lambda: life_row(rig, life)["end_reason"] is not None, timeout=NEXT_LIFE, what="the life's end"
        )
        assert life_row(rig, life)["end_reason"] in ("crash", "wedge")
        gone(pgid, target)
    finally:
        await asyncio.to_thread(rig.stop)
