"""``wedgewatch view``'s pages and live feed over a ledger written by hand (real SQLite, the real
aiohttp application on a socket of 127.0.0.1): the lanes with every mark (an event kind this
version does not know drawn plainly, with its name), a resumed request with its legs, the header,
the filters; the server-sent events carrying a batch once a row is added, starting from the URL's
cursor or from the browser's Last-Event-ID; the polling fallback's ETag; one line for what is not
there. The browser drives all of it against a real ``serve`` in tests/test_view_browser.py."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from ledger_helpers import add_attempt, add_life, make_run
from wedgewatch.ledger import Ledger
from wedgewatch.testing import eventually_async
from wedgewatch.view.app import View
from wedgewatch.view.cursor import Cursor


def _ledger(path: str) -> Ledger:
    lg = Ledger(path)
    make_run(lg, "r", ["inst-a", "inst-b", "inst-c"])
    add_life(lg, "r", "life-old", "wedge", 40)
    add_life(lg, "r", "life-new", None, 0, start_reason="wedge")
    t = time.time()
    for kind, life, detail in (
        ("wedge", "life-old", {"reason": "no token progress"}),
        ("restart", "life-old", {"reason": "wedge"}),
        ("canary", "life-new", {"ok": False}),
        ("promoted", "life-new", {"from": "standby"}),  # a spare promoted (server.standby)
    ):
        lg.append("events", {"ts": t, "kind": kind, "run_id": "r", "life_id": life, "detail_json": detail})
    add_attempt(lg, "r", "inst-a", 1, "api_error", "stall_ttft", life_id="life-old")
    add_attempt(lg, "r", "inst-a", 2, "submitted", patch="diff", resolved=1, life_id="life-new")
    add_attempt(lg, "r", "inst-b", 1, "submitted", patch="diff", resolved=0, life_id="life-new")
    running = add_attempt(lg, "r", "inst-c", 1, None, life_id="life-old")
    lg.append(
        "requests",
        {"request_id": "aaaa000011112222", "attempt_id": running, "life_id": "life-old", "path": "/v1/chat/completions",
         "client_stream": 1, "started_at": t - 3, "duration": 2.0, "outcome": "resumed", "tokens_out": 0,
         "detail_json": {"cause": "stall_ttft", "resumed_as": "bbbb333344445555"}},
    )  # fmt: skip
    lg.append(
        "request_starts",
        {"request_id": "bbbb333344445555", "attempt_id": running, "life_id": "life-new",
         "path": "/v1/chat/completions", "client_stream": 1, "started_at": t - 1},
    )  # fmt: skip
    lg.append_many(
        "metric_samples",
        [{"ts": t + i * 0.5, "life_id": "life-new", "name": "vllm:num_requests_running", "value": i % 3}
         for i in range(8)],
    )  # fmt: skip
    return lg


@pytest.fixture(params=["sqlite", "postgresql"])
async def view(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, Ledger]]:
    """The view over a SQLite file, or over a database of the session's real PostgreSQL."""
    target = str(tmp_path / "l.sqlite")
    if request.param == "postgresql":
        pytest.importorskip("psycopg")
        target = request.getfixturevalue("pg_url")
    writer = _ledger(target)
    reader = Ledger(target, read_only=True)
    runner = web.AppRunner(View(reader, target).app(), shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", writer
    await runner.cleanup()
    reader.close()
    writer.close()


async def _get(url: str, **headers: str) -> tuple[int, str, Mapping[str, str]]:
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        return r.status, await r.text(), r.headers.copy()


async def test_the_run_page_shows_lanes_marks_legs_and_the_header(view: tuple[str, Ledger]) -> None:
    base, writer = view
    status, page, _ = await _get(base + "/run/r")
    assert status == 200
    assert re.search(r'class="life end-wedge went-wrong"[^>]*data-life="life-old"', page)
    assert re.search(r'class="life alive"[^>]*data-life="life-new"', page)
    for kind, cls in (
        ("wedge", "m-wedge"),
        ("restart", "m-restart"),
        ("canary", "m-canary failed"),
        ("promoted", "m-promoted"),
    ):
        assert re.search(f'class="mark {cls}" data-kind="{kind}"', page), kind
    row = re.search(r'<tr id="rq-aaaa000011112222" class="([^"]*)"', page)
    assert row is not None and "resumed" in row.group(1)
    assert 'class="leg red"' in page and "stall_ttft, resumed" in page
    assert re.search(r'id="h-done">2/3<', page) and re.search(r'id="h-resolved">1<', page)
    assert "1/2 = 50.0%" in page  # honest: resolved over model outcomes
    assert 'data-row="run"' in page  # the engine strip drew the running requests
    assert 'sse-connect="/stream/run/r?c=' in page and '<script src="/static/htmx.min.js">' in page
    _, filtered, _ = await _get(base + "/run/r?status=api_error")
    assert 'data-instance="inst-a"' in filtered and 'data-instance="inst-b"' not in filtered
    _, still, _ = await _get(base + "/run/r?live=off")
    assert "<script" not in still and "sse-connect" not in still
    for path in ("/", "/attempt/r-inst-a-1", "/life/life-old", "/static/htmx.min.js", "/static/sse.min.js"):
        assert (await _get(base + path))[0] == 200, path
    # A wrapped run: its lives and requests, no attempts.
    writer.append(
        "harness_runs",
        {"harness_run_id": "wrap-1", "started_at": time.time(), "argv_json": ["h"], "config_json": {},
         "config_hash": "x", "tool_version": "test"},
    )  # fmt: skip
    add_life(writer, "wrap-1", "life-w", "crash", 3)
    status, wrapped, _ = await _get(base + "/wrap/wrap-1")
    assert status == 200 and "wrapped run" in wrapped and 'data-life="life-w"' in wrapped
    assert 'id="attempts"' not in wrapped
    status, missing, _ = await _get(base + "/run/nope")
    assert status == 404 and "no run &#x27;nope&#x27;" in missing


async def _batches(url: str, want: int, headers: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(id, data) of the first ``want`` batches of the stream at ``url``."""
    found: list[tuple[str, str]] = []
    ident, data = "", []
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers or {}) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        async for raw in r.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("id: "):
                ident = line[4:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and data:
                found.append((ident, "\n".join(data)))
                data = []
                if len(found) >= want:
                    return found
    return found


async def test_the_feed_sends_what_changed_from_the_urls_cursor_or_last_event_id(
    view: tuple[str, Ledger],
) -> None:
    base, writer = view
    _, page, _ = await _get(base + "/run/r")
    stream = re.search(r'sse-connect="([^"]+)"', page)
    assert stream is not None
    url = base + stream.group(1).replace("&amp;", "&")
    start = Cursor.decode(url.split("c=")[1])
    assert start is not None
    writer.append(
        "attempt_ends",
        {"attempt_id": "r-inst-c-1", "ended_at": time.time(), "status": "api_error", "reason": "server_restarted",
         "life_id": "life-old"},
    )  # fmt: skip
    batches = await _batches(url, 1)
    ident, data = batches[0]
    assert 'hx-swap-oob="true"' in data and 'id="header"' in data
    assert 'data-instance="inst-c"' in data and "server_restarted" in data  # the instance's row, redrawn
    assert 'data-instance="inst-b"' not in data  # and no other
    moved = Cursor.decode(ident)
    assert moved is not None and moved != start
    # From the batch's id, as a browser reconnecting by itself sends it: nothing is sent again
    # until something changes; then only that.
    writer.append(
        "events",
        {"ts": time.time(), "kind": "wedge", "run_id": "r", "life_id": "life-new", "detail_json": {}},
    )
    again = await _batches(base + "/stream/run/r", 1, {"Last-Event-ID": ident})
    assert 'data-kind="wedge"' in again[0][1] and "life-new" in again[0][1]
    assert Cursor.decode(again[0][0]) != moved


async def test_polling_answers_304_while_nothing_changed(view: tuple[str, Ledger]) -> None:
    base, writer = view
    status, body, headers = await _get(base + "/poll/run/r?live=poll")
    assert status == 200 and 'hx-swap-oob="true"' in body and "ETag" in headers
    status, _, _ = await _get(base + "/poll/run/r?live=poll", **{"If-None-Match": headers["ETag"]})
    assert status in (200, 304)

    async def unchanged() -> bool:
        first = await _get(base + "/poll/run/r")
        return (await _get(base + "/poll/run/r", **{"If-None-Match": first[2]["ETag"]}))[0] == 304

    await eventually_async(unchanged, timeout=120)  # PostgreSQL's horizon moves with any database's commit
    first = await _get(base + "/poll/run/r")
    writer.append(
        "events",
        {
            "ts": time.time(),
            "kind": "canary",
            "run_id": "r",
            "life_id": "life-new",
            "detail_json": {"ok": True},
        },
    )
    status, body, _ = await _get(base + "/poll/run/r", **{"If-None-Match": first[2]["ETag"]})
    assert status == 200 and body.count('data-kind="canary"') == 2
