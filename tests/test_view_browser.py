"""``wedgewatch view`` in a real browser: Playwright's asyncio API driving Debian's chromium by its
path (Playwright's own browser download is not used), against the view of a ledger that a real
``serve`` in front of a simulator that wedges writes while the page looks; and against the view of
a real ``run`` whose score moves. Playwright's waiting assertions, no sleeps.

- serve: the lane shows the wedge and the new life; the request in flight when the server wedged
  goes red (its life was judged wedged under it), then shows resumed, with its first leg red; the
  header's count of requests moves.
- run: the demo's guarded arm (the story scenario) as one ``run``, the page opened before it
  starts: the worn-out life wedges (drawn healthy up to its last progress, failing from there),
  the next life starts for the wedge, the requests it ended show (red, or resumed), the resolved
  count moves from 0, every instance's row fills in.

The versions of both are in pytest's header (tests/conftest.py). Where no chromium is installed the
tests are skipped, saying so; where Playwright cannot drive the installed one, they fail saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from conftest import RunningServer, launch

pytestmark = [pytest.mark.xdist_group("browser"), pytest.mark.long]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
WAIT = 180_000  # ms: Playwright's waits give up after this (a busy machine is slow, never wrong)
SHOTS = os.environ.get("WEDGEWATCH_VIEW_SHOTS")
"""A directory to leave the pages' screenshots in (``make view-screenshot``); the tests write
nowhere else."""


def chromium_versions() -> str:
    """Playwright's version and the installed chromium's, for pytest's header."""
    from importlib.metadata import version

    if not os.path.exists(CHROMIUM):
        return f"playwright {version('playwright')}; no chromium at {CHROMIUM}"
    out = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    return f"playwright {version('playwright')}; {out or 'chromium (no version printed)'} at {CHROMIUM}"


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM} (Debian: apt-get install chromium; make install does it)")
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        try:
            b = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        except Exception as exc:
            pytest.fail(f"Playwright cannot drive the installed chromium ({chromium_versions()}): {exc}")
        try:
            yield b
        finally:
            await b.close()


def _stop(server: RunningServer) -> None:
    """A stop as a user's Ctrl-C: serve stops its own server first."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGINT)
        try:
            server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(timeout=10)


async def _page(browser: Any, url: str) -> tuple[Any, list[str]]:
    page = await browser.new_page(viewport={"width": 1280, "height": 720})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(url)
    return page, errors


async def _chat(url: str, tag: str, prompt: str) -> list[str]:
    """A streamed chat completion through the proxy, tagged; the text of its chunks."""
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 40,
        "stream": True,
    }
    texts: list[str] = []
    async with aiohttp.ClientSession() as s, s.post(f"{url}/a/{tag}/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        async for raw in r.content:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                for c in json.loads(line[6:]).get("choices") or []:
                    texts.append((c.get("delta") or {}).get("content") or "")
            if line == "data: [DONE]":
                texts.append("[DONE]")
    return texts


async def test_serve_a_wedge_the_new_life_and_a_resumed_request(tmp_path: Path, browser: Any) -> None:
    from playwright.async_api import expect

    (tmp_path / "scenario.toml").write_text(
        f'[[fault]]\nwhen.contains = "WEDGE"\naction = "wedge"\nafter_tokens = 5\nmarker = "{tmp_path / "struck"}"\n'
    )
    ledger = tmp_path / "l.sqlite"
    # restart_backoff: the replaced life's requests stay held (red) for at least this long, longer
    # than one of the view's looks, whatever the machine's speed.
    (tmp_path / "c.toml").write_text(
        f"""
[server]
profile = "sim"
scenario = "{tmp_path / "scenario.toml"}"
scrape_interval = 0.2
heartbeat_window = 1.0
restart_backoff = 2.0
log_dir = "{tmp_path / "logs"}"
[server.warmup]
count = 1
max_tokens = 2
[run]
ledger = "{ledger}"
"""
    )
    py = [sys.executable, "-m", "wedgewatch"]
    serve = launch(
        [*py, "serve", str(tmp_path / "c.toml"), "--port", "0"], tmp_path / "serve.log", timeout=120
    )
    view = launch([*py, "view", str(ledger), "--port", "0"], tmp_path / "view.log", prefix="view on ")
    try:
        page, errors = await _page(browser, view.url + "/serve")
        await expect(page.locator("#conn")).to_have_attribute("data-state", "live", timeout=WAIT)
        await expect(page.locator(".life.alive")).to_have_count(1, timeout=WAIT)
        assert await _chat(serve.url, "warm-tag", "say hello") and (
            await page.locator("#h-requests").inner_text()
        )
        await expect(page.locator("#h-requests")).to_have_text("1", timeout=WAIT)  # the count moves

        wedged = asyncio.ensure_future(_chat(serve.url, "wedge-tag", "WEDGE: tell a long story"))
        row = page.locator("#flight tr[data-request]").filter(has_text="wedge-tag")
        await expect(row).to_have_attribute("data-state", "red", timeout=WAIT)  # its life judged wedged
        await expect(page.locator(".life.end-wedge")).to_have_count(1, timeout=WAIT)
        await expect(page.locator('.mark[data-kind="wedge"]')).to_have_count(1, timeout=WAIT)
        new_life = page.locator(".life.alive")
        await expect(new_life).to_have_count(1, timeout=WAIT)
        await expect(new_life).to_contain_text("wedge→alive", timeout=WAIT)
        await expect(row).to_have_class(re.compile(r"\bresumed\b"), timeout=WAIT)  # then resumed
        await expect(row.locator(".leg.red")).to_have_count(1, timeout=WAIT)  # its first leg
        texts = await wedged
        assert texts[-1] == "[DONE]"  # the client got its whole answer
        await expect(page.locator("#h-requests")).to_have_text("3", timeout=WAIT)  # ok, resumed leg, ok
        assert errors == []
        if SHOTS:
            await page.screenshot(path=str(Path(SHOTS) / "view-serve.png"), full_page=True)
    finally:
        _stop(serve)
        view.stop()


async def test_a_story_run_its_wedge_restart_casualties_and_score(tmp_path: Path, browser: Any) -> None:
    """The demo's guarded arm (the story scenario: a life wears out near its 128th request and
    wedges) as one ``run``, watched from before its start."""
    from playwright.async_api import expect

    ledger = tmp_path / "l.sqlite"
    (tmp_path / "c.toml").write_text(
        f"""
[server]
profile = "sim"
model = "sim-model"
scenario = "story"
arg_sets = ["hybrid-safe"]
args = ["--policy", "swe"]
wedge_window = 60.0
canary_timeout = 20.0
log_dir = "{tmp_path / "logs"}"
[agent]
name = "bash"
step_limit = 15
[suite]
slice = "0:20"
[run]
concurrency = 4
ledger = "{ledger}"
workdir = "{tmp_path / "work"}"
time_scale = 200.0
seed = 1
"""
    )
    py = [sys.executable, "-m", "wedgewatch"]
    # The view first, waiting for the ledger; the page first, waiting for the run: it sees it all.
    view = launch(
        [*py, "view", str(ledger), "--port", "0", "--wait"], tmp_path / "view.log", prefix="view on "
    )
    run: subprocess.Popen[str] | None = None
    try:
        page, errors = await _page(browser, view.url + "/run/story")
        await expect(page.locator("body")).to_contain_text("waiting for the ledger", timeout=WAIT)
        run = subprocess.Popen(
            [*py, "run", str(tmp_path / "c.toml"), "--run-id", "story", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        resolved = page.locator("#h-resolved")
        await expect(resolved).to_have_text("0", timeout=WAIT)  # the page met the run at its start
        assert await page.evaluate("() => window.location.pathname") == "/run/story"
        await page.evaluate(
            """() => { window.seen = [document.getElementById('h-resolved').textContent];
              new MutationObserver(() => { const e = document.getElementById('h-resolved');
                if (e && window.seen[window.seen.length - 1] !== e.textContent) window.seen.push(e.textContent); })
              .observe(document.getElementById('live'), {subtree: true, childList: true, characterData: true}); }"""
        )
        # The worn-out life wedged: drawn healthy, then failing from its last progress; the next
        # life started for the wedge; the requests it ended are red, or went on (resumed).
        wedged = page.locator(".life.end-wedge.went-wrong")
        await expect(wedged).to_have_count(1, timeout=WAIT)
        await expect(wedged.locator(".failing")).to_have_count(1, timeout=WAIT)
        await expect(page.locator('.mark[data-kind="wedge"]')).to_have_count(1, timeout=WAIT)
        await expect(page.locator(".life", has_text="wedge→")).to_have_count(1, timeout=WAIT)
        casualties = page.locator("#flight tr.resumed, #flight tr.st-red")
        await expect(casualties.first).to_be_visible(timeout=WAIT)
        await expect(page.locator("#header .state")).to_have_attribute("data-state", "finished", timeout=WAIT)
        await expect(resolved).not_to_have_text("0", timeout=WAIT)
        seen = await page.evaluate("() => window.seen")
        assert seen[0] == "0" and int(seen[-1]) > 0, seen  # it moved while the page looked
        assert [int(x) for x in seen] == sorted(int(x) for x in seen)
        await expect(page.locator("#attempts tr[data-instance]")).to_have_count(20, timeout=WAIT)
        await expect(page.locator('#attempts tr[data-outcome="pending"]')).to_have_count(0, timeout=WAIT)
        await expect(page.locator("#h-honest")).to_contain_text(
            f"{await resolved.inner_text()}/", timeout=WAIT
        )
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-2000:]
        assert f"watch it live: wedgewatch view {ledger} --run story" in err  # run says how to watch it
        assert errors == []
        if SHOTS:  # the picture for docs/view.md: once the ends that went well have left the table
            await expect(page.locator("#flight tr.st-done:not(.resumed)")).to_have_count(0, timeout=WAIT)
            await page.screenshot(path=str(Path(SHOTS) / "view-run.png"), full_page=True)
    finally:
        if run is not None and run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.communicate(timeout=120)
        view.stop()
