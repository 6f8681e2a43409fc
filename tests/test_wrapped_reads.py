"""``report``, ``lives`` and ``export`` of a wrapped run by the id ``wrap`` printed, on a ledger
written by hand (real SQLite, rows as ``wrap`` writes them, fingerprints by the proxy's own
function): requests by outcome, stalls, the harness's successful retries (``recovered``),
restarts, lives and their ages, the requests by tag; and each refusal one line, exit 2."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from wedgewatch.base import vocab
from wedgewatch.cli import main
from wedgewatch.ledger import Ledger
from wedgewatch.wire import fingerprint

RUN = "wrap-20260101-120000-ab12"
T0 = time.time() - 1000


def msgs(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You solve tasks."}, {"role": "user", "content": text}]


def add_request(
    lg: Ledger, n: int, life: str | None, outcome: str, tag: str | None, text: str, at: float
) -> None:
    lg.append(
        "requests",
        {
            "request_id": f"q{n:03d}",
            "attempt_id": tag,
            "life_id": life,
            "path": "/v1/chat/completions",
            "client_stream": 1,
            "started_at": T0 + at,
            "duration": 2.0,
            "tokens_out": 10 if outcome == vocab.OK else 3,
            "outcome": outcome,
            "detail_json": {"fp": fingerprint.of_messages(msgs(text))},
        },
    )


def add_life(lg: Ledger, life: str, reason: str, at: float, end: str | None, age: int) -> None:
    lg.append(
        "server_lives",
        {"life_id": life, "run_id": RUN, "profile": "sim", "base_url": "http://127.0.0.1:1",
         "start_reason": reason, "started_at": T0 + at},
    )  # fmt: skip
    lg.append("server_life_ready", {"life_id": life, "ready_at": T0 + at + 1.5, "ready_seconds": 1.5})
    if end is not None:
        lg.append(
            "server_life_ends",
            {"life_id": life, "ended_at": T0 + at + 30, "end_reason": end, "age_seconds": 30.0,
             "age_requests": age, "age_tokens": age * 10},
        )  # fmt: skip


def wrapped_ledger(path: Path, tags: bool = True) -> None:
    """One harness run, two lives (the first wedged and replaced), and requests: i-1 two ok and
    one resumed; i-2 a stall on the wedged life, then the same request ok on the next one; i-3 a
    503 sent again that failed again; one untagged ok."""
    with Ledger(path) as lg:
        lg.append(
            "harness_runs",
            {"harness_run_id": RUN, "started_at": T0, "argv_json": ["python", "eval.py", "--key", "***"],
             "cwd": "/tmp", "base_url": "http://127.0.0.1:9/v1", "config_json": {}, "config_hash": "cfg1",
             "tool_version": "t"},
        )  # fmt: skip
        add_life(lg, "life-1", vocab.RUN_START, 0, vocab.WEDGE, 4)
        lg.event(vocab.WEDGE, {"source": "canary", "age_requests": 3}, run_id=RUN, life_id="life-1")
        add_life(lg, "life-2", vocab.WEDGE, 31, vocab.STOP, 4)

        def tag(t: str) -> str | None:
            return t if tags else None

        add_request(lg, 1, "life-1", vocab.OK, tag("i-1"), "task one: sort the list", 2)
        add_request(lg, 2, "life-1", vocab.STALL_MIDSTREAM, tag("i-2"), "task two: fix the parser", 5)
        add_request(lg, 3, "life-1", vocab.RESUMED, tag("i-1"), "task one: now test it", 6)
        add_request(lg, 4, "life-2", vocab.OK, tag("i-1"), "task one: now test it", 33)
        add_request(lg, 5, "life-2", vocab.OK, tag("i-2"), "task two: fix the parser", 34)
        add_request(lg, 6, "life-2", vocab.upstream_http(503), tag("i-3"), "task three: rename", 40)
        add_request(lg, 7, "life-2", vocab.upstream_http(503), tag("i-3"), "task three: rename", 45)
        add_request(lg, 8, "life-2", vocab.OK, None, "an untagged question", 50)
        lg.append(
            "harness_run_ends",
            {"harness_run_id": RUN, "ended_at": T0 + 61, "exit_code": 0, "end_reason": vocab.EXITED},
        )


def cli(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> tuple[str, str]:
    with pytest.raises(SystemExit) as ex:
        main(list(args))
    out = capsys.readouterr()
    assert ex.value.code == code, out.err
    return out.out, out.err


def test_report_of_a_wrapped_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "l.sqlite")
    wrapped_ledger(tmp_path / "l.sqlite")
    out, _ = cli(capsys, "report", RUN, "--ledger", db, "--json")
    s = json.loads(out)
    assert s["run_id"] == RUN and s["wrapped"] is True and s["state"] == vocab.EXITED
    assert s["exit_code"] == 0 and s["wall_seconds"] == pytest.approx(61.0)
    req = s["requests"]
    assert req["total"] == 8 and req["untagged"] == 1
    assert req["by_outcome"] == {
        vocab.OK: 4, vocab.RESUMED: 1, vocab.STALL_MIDSTREAM: 1, vocab.upstream_http(503): 2
    }  # fmt: skip
    assert req["failed"] == 3 and req[vocab.RECOVERED] == 1 and req[vocab.RESUMED] == 1
    assert s["stalls"][vocab.STALL_MIDSTREAM] == 1 and sum(s["stalls"].values()) == 1
    srv = s["server"]
    assert (srv["lives"], srv["restarts"], srv["restart_reasons"], srv["wedges"]) == (
        2,
        1,
        {vocab.WEDGE: 1},
        1,
    )
    assert [(lv["life_id"], lv["start_reason"], lv["end_reason"], lv["age_requests"]) for lv in s["lives"]] == [
        ("life-1", vocab.RUN_START, vocab.WEDGE, 4), ("life-2", vocab.WEDGE, vocab.STOP, 4)
    ]  # fmt: skip
    tags = {t["tag"]: t for t in s["tags"]}
    assert list(tags) == ["i-1", "i-2", "i-3"], "in the order of each tag's first request"
    assert (tags["i-1"]["requests"], tags["i-1"][vocab.RESUMED], tags["i-1"]["infra"]) == (3, 1, None)
    assert tags["i-2"]["stalls"] == 1 and tags["i-2"]["restarts"] == 1, "in flight on the wedged life"
    assert tags["i-2"][vocab.RECOVERED] == 1 and tags["i-2"]["infra"] == vocab.RECOVERED
    assert tags["i-3"]["upstream_errors"] == 2 and tags["i-3"]["infra"] == vocab.INFRA_FAILED
    assert s["by_infra"] == {vocab.INFRA_FAILED: 1, vocab.RECOVERED: 1}
    assert s["infra_time"] == {"failed_request_seconds": 6.0, "restart_seconds": 1.5}

    text, _ = cli(capsys, "report", "--ledger", db)  # the latest run or wrapped run: this one
    assert f"wrapped run {RUN}  (exited, exit 0)" in text
    assert "failed on the infrastructure 3, of them sent again with success (recovered) 1; resumed 1" in text
    assert 'server lives 2, restarts 1 ({"wedge": 1}), wedges 1' in text
    assert "infra_failed 1, recovered 1 (of 3 tags)" in text and "1 requests untagged" in text
    out, _ = cli(capsys, "report", RUN, "--ledger", db, "--survival", "--json")
    assert json.loads(out)["survival"]["lives"] == 2 and json.loads(out)["survival"]["failed"] == 1
    _, err = cli(capsys, "report", RUN, "--ledger", db, "--html", str(tmp_path / "r.html"), code=2)
    assert err.count("\n") == 1 and "--html" in err and RUN in err
    assert not (tmp_path / "r.html").exists()


def test_lives_of_a_wrapped_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "l.sqlite")
    wrapped_ledger(tmp_path / "l.sqlite")
    out, _ = cli(capsys, "lives", RUN, "--ledger", db, "--json")
    r = json.loads(out)
    assert r["runs"] == [RUN] and r["survival"]["axis"] == "requests", "a wrapped run has no attempts"
    assert r["survival"]["lives"] == 2 and r["survival"]["failed"] == 1
    assert [c["age"] for c in r["survival"]["curve"]] == [3.0], "the age the wedge event recorded"
    out, _ = cli(capsys, "lives", RUN, "--ledger", db, "--by", "tokens", "--json")
    assert json.loads(out)["survival"]["axis"] == "tokens"
    _, err = cli(capsys, "lives", RUN, "--ledger", db, "--by", "instances", code=2)
    assert err.count("\n") == 1 and "--by instances" in err and "--by requests" in err


def test_export_of_a_wrapped_run_by_tag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "l.sqlite")
    wrapped_ledger(tmp_path / "l.sqlite")
    out, _ = cli(capsys, "export", RUN, "--ledger", db)
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["instance_id"] for r in rows] == ["i-1", "i-2", "i-3"]
    assert [r["infra"] for r in rows] == [None, vocab.RECOVERED, vocab.INFRA_FAILED]
    assert rows[1]["lives"] == ["life-1", "life-2"] and rows[2]["lives"] == ["life-2"]
    assert all(r["harness_run"] == RUN for r in rows)
    out, _ = cli(capsys, "export", RUN, "--ledger", db, "--format", "csv")
    table = list(csv.DictReader(io.StringIO(out)))
    assert [(r["instance_id"], r["infra"], r["requests"]) for r in table] == [
        ("i-1", "", "3"), ("i-2", vocab.RECOVERED, "2"), ("i-3", vocab.INFRA_FAILED, "2")
    ]  # fmt: skip
    _, err = cli(capsys, "export", RUN, "--ledger", db, "--format", "swebench", code=2)
    assert err.count("\n") == 1 and "wrapped run" in err and "results or csv" in err


def test_an_untagged_wrapped_run_exports_nothing_and_says_what_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "l.sqlite")
    wrapped_ledger(tmp_path / "l.sqlite", tags=False)
    _, err = cli(capsys, "export", RUN, "--ledger", db, code=2)
    assert err.count("\n") == 1 and "no request carried a tag" in err and "--suite" in err
    text, _ = cli(capsys, "report", RUN, "--ledger", db)
    assert "no request carried a tag" in text and "requests 8:" in text
    # Without tags the harness's retry is still the same request: recovered in the counts.
    s = json.loads(cli(capsys, "report", RUN, "--ledger", db, "--json")[0])
    assert s["requests"][vocab.RECOVERED] == 1 and s["tags"] == []


def test_commands_that_read_runs_only_name_a_wrapped_run_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "l.sqlite")
    wrapped_ledger(tmp_path / "l.sqlite")
    _, err = cli(capsys, "compare", RUN, RUN, "--ledger", db, code=2)
    assert err.count("\n") == 1 and "is a wrapped run" in err
    _, err = cli(capsys, "report", "wrap-nope", "--ledger", db, code=2)
    assert "no run 'wrap-nope'" in err and RUN in err, "the latest ids named, wrapped ones too"


def test_wrap_prints_a_line_when_a_replacing_life_is_ready() -> None:
    from wedgewatch.base.events import Restarting, ServerReady, ServerStarting
    from wedgewatch.wrap.lines import LifeLines

    out = io.StringIO()
    lines = LifeLines(out)

    def starting(life: str, reason: str) -> ServerStarting:
        return ServerStarting(
            member=None, life_id=life, reason=reason, profile="sim", argv=[], flags={},
            base_url="u", pid=None, log_path=None,
        )  # fmt: skip

    lines.on_event(starting("L1", vocab.RUN_START))
    lines.on_event(ServerReady(member=None, life_id="L1", base_url="u", ready_seconds=2.0, ts=100.0))
    assert out.getvalue() == "", "the first life: wrap's start line says the server is up"
    lines.on_event(Restarting(member=None, life_id="L1", reason=vocab.WEDGE, ts=110.0))
    lines.on_event(starting("L2", vocab.WEDGE))
    lines.on_event(ServerReady(member=None, life_id="L2", base_url="u", ready_seconds=2.5, ts=114.0))
    assert out.getvalue() == (
        "wedgewatch wrap: server life 2 ready (L2), replacing life 1 after a wedge: "
        "4.0 s from the restart (2.5 s starting and warming up)\n"
    )


def summary_of(path: Path) -> dict[str, Any]:
    from wedgewatch.analysis import wrapped

    with Ledger(path, read_only=True) as lg:
        return wrapped.summarise(lg, RUN)


def test_wraps_last_line_counts_what_the_ledger_holds(tmp_path: Path) -> None:
    from wedgewatch.analysis import wrapped

    wrapped_ledger(tmp_path / "l.sqlite")
    assert wrapped.end_line(summary_of(tmp_path / "l.sqlite")) == (
        "8 requests (3 failed on the infrastructure, 1 of them sent again with success), 1 stall, "
        "1 resumed, 1 restart (wedge 1)"
    )
