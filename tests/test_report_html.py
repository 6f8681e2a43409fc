"""The HTML report: a real run (echo agent on the simulator, one instance that stalls on every
attempt, verdicts from a SWE-bench report) through ``wedgewatch report --html``; hand-written
ledgers for the empty, in-flight, hostile and big cases."""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path

import pytest

from ledger_helpers import add_attempt, make_run
from wedgewatch.analysis.html import render_html, write_html
from wedgewatch.analysis.import_report import import_report
from wedgewatch.analysis.plots import _lanes
from wedgewatch.cli import main
from wedgewatch.config import validate
from wedgewatch.ledger import Ledger
from wedgewatch.runner import entry as runner_main
from wedgewatch.suites import load_bundled

pytestmark = pytest.mark.timeout(120)

BUNDLED = load_bundled()[:4]
IDS = [i["instance_id"] for i in BUNDLED]
PNG = re.compile(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')


@pytest.fixture(scope="module")
def stalled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 instances; the last one stalls before its first token on every attempt (3 api_errors:
    infra_failed), the others are resolved or not by an imported SWE-bench report."""
    tmp = tmp_path_factory.mktemp("html")
    first_line = str(BUNDLED[3]["problem_statement"]).splitlines()[0]
    (tmp / "stall.toml").write_text(
        f'name = "stall"\n[[fault]]\nwhen.contains = "{first_line}"\naction = "stall_ttft"\n'
    )
    cfg = validate(
        {
            "server": {"profile": "sim", "scenario": str(tmp / "stall.toml"), "scrape_interval": 0.2,
                       "log_dir": str(tmp / "logs"), "warmup": {"count": 1}},
            "watchdog": {"total_timeout": 100.0},  # one answer asked for: 2 s here
            "agent": {"name": "echo"},
            "suite": {"ids": IDS},
            "run": {"concurrency": 2, "evaluate": False, "ledger": str(tmp / "l.sqlite"),
                    "workdir": str(tmp / "work"), "time_scale": 50.0},
        },
        "stall",
    )  # fmt: skip
    assert runner_main.start(cfg, run_id="html-run").end_mark == "finished"
    report = tmp / "report.json"
    report.write_text(json.dumps({"resolved_ids": IDS[:2], "unresolved_ids": IDS[2:3]}))
    with Ledger(cfg.run.ledger) as lg:
        import_report(lg, "html-run", report)
    return Path(cfg.run.ledger)


def _self_contained(html: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script" not in html.lower() and "<link" not in html.lower() and "@import" not in html


@pytest.mark.xdist_group("html-stalled-run")  # one worker makes `stalled_run` once
def test_report_html_of_a_real_run(
    stalled_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sub" / "report.html"
    with pytest.raises(SystemExit) as ex:
        main(["report", "html-run", "--ledger", str(stalled_run), "--html", str(out), "--json"])
    assert ex.value.code == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["run_id"] == "html-run"  # stdout stays the JSON summary
    assert str(out) in captured.err
    html = out.read_text()
    _self_contained(html)
    assert "html-run" in html
    for iid in IDS:
        assert iid in html
    # infra_failed sits in the same line as the score, not folded into it.
    score = re.search(r'<p class="score"[^>]*>(.*?)</p>', html, re.S)
    assert score is not None
    assert "2/4" in score.group(1) and "infra_failed 1" in score.group(1) and "pending 0" in score.group(1)
    assert "2/3 = 66.7%" in html  # resolved over model outcomes, with its interval
    assert "95% CI" in html
    # Every plot drawn (the run has attempts, lives, requests, samples and a failed life), as PNGs.
    imgs = dict(PNG.findall(html))
    assert set(imgs) == {
        "survival of server lives", "attempts over time", "server lives", "request latencies", "token counter",
    }  # fmt: skip
    for data in imgs.values():
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "no data" not in html
    assert "total_timeout" in html and "api_error" in html and "vllm:generation_tokens_total" in html
    # The live view's panels (wedgewatch view), frozen: the same templates, no live connection and
    # no link into the view's other pages.
    assert 'id="header-1"' in html and 'id="lanes-1"' in html and 'id="attempts-1"' in html
    assert re.search(r'class="life end-[a-z_]+" data-life=', html) and 'class="mark m-' in html
    assert "hx-" not in html and "sse-connect" not in html and 'href="/life/' not in html


@pytest.mark.xdist_group("html-stalled-run")  # one worker makes `stalled_run` once
def test_two_runs_side_by_side(stalled_run: Path, tmp_path: Path) -> None:
    with Ledger(stalled_run) as lg:
        make_run(lg, "second", ["x"])
        html = render_html(lg, ["html-run", "second"], labels=["stalled", "empty"])
    _self_contained(html)
    header = re.search(r"<tr><th></th>(.*?)</tr>", html)
    assert header is not None and header.group(1).count("<th>") == 3  # two runs and the note column
    assert "stalled" in html and "(run <code>second</code>)" in html and "(run <code>html-run</code>)" in html


def test_empty_in_flight_and_hostile_runs_render(tmp_path: Path) -> None:
    hostile = '<script>alert("x")</script>&<b>'
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "empty", [])
        make_run(lg, "flight", [hostile, "plain"])
        add_attempt(
            lg, "flight", hostile, 1, "api_error", reason="<img src=x onerror=alert(1)>", duration=2.0
        )
        add_attempt(lg, "flight", hostile, 2, None)  # still running: no end
        lg.append("run_marks", {"run_id": "flight", "ts": time.time(), "kind": "started"})
        empty = render_html(lg, ["empty"])
        html = write_html(lg, tmp_path / "flight.html", ["flight"]).read_text()
    for page in (empty, html):
        _self_contained(page)
        assert page.count("no data") >= 4  # lives, latencies, counter, survival (and timeline when empty)
    assert "no attempt has started" in empty
    assert "<script>" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&lt;b&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "in flight" in html and "running" in html
    assert len(PNG.findall(html)) == 1  # the timeline, with the running attempt


def test_big_run_packs_attempts_into_lanes(tmp_path: Path) -> None:
    ids = [f"inst-{i:04d}" for i in range(150)]
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "big", ids)
        for iid in ids:
            add_attempt(lg, "big", iid, 1, "submitted", patch="x", resolved=1, duration=0.01)
        html = render_html(lg, ["big"])
    assert "attempts over time" in dict(PNG.findall(html))
    assert all(iid in html for iid in ids)
    # Three overlapping intervals need three lanes; one that starts after the first ends reuses it.
    assert _lanes([(0, 5), (1, 6), (2, 7), (5, 9)]) == [0, 1, 2, 0]
    assert _lanes([]) == []
