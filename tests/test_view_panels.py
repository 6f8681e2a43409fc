"""The view's lanes and rows of requests, computed from a ledger written by hand with set times
(real SQLite, no server): a wedged life healthy until its last progress and failing from there;
an ended request whose TTFT is not known (a whole answer) shown ``-``, never 0; a resumed
request's legs with their lives and tokens, its age and TTFT the client's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wedgewatch.analysis.panels import flight
from wedgewatch.analysis.panels.lanes import lanes
from wedgewatch.analysis.panels.scope import SERVE, Scope
from wedgewatch.ledger import Ledger

T = 1_800_000_000.0


def _life(lg: Ledger, life_id: str, start: float, end: float | None, reason: str | None) -> None:
    lg.append(
        "server_lives",
        {"life_id": life_id, "profile": "sim", "base_url": "http://127.0.0.1:1", "start_reason": "run_start",
         "started_at": start},
    )  # fmt: skip
    lg.append("server_life_ready", {"life_id": life_id, "ready_at": start + 1, "ready_seconds": 1.0})
    if end is not None:
        lg.append("server_life_ends", {"life_id": life_id, "ended_at": end, "end_reason": reason})


def _request(lg: Ledger, rid: str, life_id: str, start: float, duration: float, **row: Any) -> None:
    lg.append(
        "requests",
        {"request_id": rid, "life_id": life_id, "path": "/v1/chat/completions", "started_at": start,
         "duration": duration, **row},
    )  # fmt: skip


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(str(tmp_path / "l.sqlite"))


def _bars(lg: Ledger, now: float) -> dict[str, dict[str, Any]]:
    out = lanes(lg, Scope(SERVE, "", T), now, live=False)
    return {lv["id"]: lv for lane in out["lanes"] for lv in lane["lives"]}


def test_a_wedged_life_is_healthy_until_its_last_progress(ledger: Ledger) -> None:
    # Metrics verdict at T+10 after 4 s still: failing from T+6, 50% into a bar of T..T+12.
    _life(ledger, "by-metrics", T, T + 12, "wedge")
    ledger.append(
        "events",
        {"ts": T + 10, "kind": "wedge", "life_id": "by-metrics", "detail_json": {"flat_seconds": 4.0, "samples": []}},
    )  # fmt: skip
    # A canary's verdict at T+10: the readings' tokens last moved at T+3 (25% of T..T+12).
    _life(ledger, "by-canary", T, T + 12, "wedge")
    samples = [[T + 1, 5, 1, 0], [T + 2, 9, 1, 0], [T + 3, 14, 1, 0], [T + 5, 14, 1, 0], [T + 9, 14, 1, 0]]
    ledger.append(
        "events",
        {"ts": T + 10, "kind": "wedge", "life_id": "by-canary", "detail_json": {"source": "canary", "samples": samples}},
    )  # fmt: skip
    _life(ledger, "no-event", T, T + 12, "wedge")  # an older ledger: when is not known
    _life(ledger, "stopped", T, T + 12, "stop")
    bars = _bars(ledger, T + 12)
    assert bars["by-metrics"]["wrong"] == pytest.approx(50.0, abs=0.01)
    assert "4.0 s before the wedge verdict" in bars["by-metrics"]["wrong_note"]
    assert bars["by-canary"]["wrong"] == pytest.approx(25.0, abs=0.01)
    assert bars["no-event"]["wrong"] is None and bars["no-event"]["failed"]
    assert bars["stopped"]["wrong"] is None and not bars["stopped"]["failed"]


def test_unknown_times_are_a_dash_and_a_resumed_request_reads_plainly(ledger: Ledger) -> None:
    _life(ledger, "life-aaaa1111", T, T + 20, "wedge")
    _life(ledger, "life-bbbb2222", T + 20, None, None)
    now = T + 31
    # A whole answer (no stream) of 0.4 s: no TTFT, its age its own duration.
    _request(ledger, "whole00000000001", "life-bbbb2222", T + 28, 0.4, client_stream=0, ttft=None,
             tokens_out=17, outcome="ok")  # fmt: skip
    # Resumed: 12 tokens on the first life (first token after 0.5 s), then 28 on the next.
    _request(ledger, "leg1000000000001", "life-aaaa1111", T + 18, 3.0, client_stream=1, ttft=0.5,
             tokens_out=12, outcome="resumed", detail_json={"cause": "stall_midstream",
             "resumed_as": "leg2000000000002"})  # fmt: skip
    _request(ledger, "leg2000000000002", "life-bbbb2222", T + 23, 2.0, client_stream=1, ttft=0.2,
             tokens_out=28, outcome="ok")  # fmt: skip
    found = flight.pending(ledger, Scope(SERVE, "", T), now)
    rows = {
        r["id"]: r
        for r in flight.rows(ledger, found, {}, flight.watchdog_of(ledger, Scope(SERVE, "", T)), now)
    }
    whole = rows["whole00000000001"]
    assert (whole["ttft"], whole["since"], whole["rate"], whole["age"]) == ("-", "-", "-", "400 ms")
    assert whole["tokens"] == 17
    resumed = rows["leg1000000000001"]
    assert "leg2000000000002" not in rows  # one row for both legs
    assert resumed["age"] == "7.0 s"  # the client's: from the first leg's start to the last's end
    assert resumed["ttft"] == "500 ms"  # the client's first token came on the first leg
    assert resumed["tokens"] == 40
    assert [(leg["life_short"], leg["tokens"], leg["label"]) for leg in resumed["legs"]] == [
        ("aaaa1111", 12, "stall_midstream, resumed"),
        ("bbbb2222", 28, "ok"),
    ]
    assert resumed["resumed_note"] == "resumed: the client got one answer, 2 legs on 2 lives"


def test_a_live_pages_tracker_holds_what_the_ledger_would_say(ledger: Ledger) -> None:
    """The tracker, fed only the rows new at each look, against ``pending`` asked afresh."""
    from wedgewatch.view.tracker import Tracker

    scope = Scope(SERVE, "", T)
    _life(ledger, "life-a", T, None, None)

    def start(rid: str, at: float) -> dict[str, Any]:
        row = {"request_id": rid, "life_id": "life-a", "path": "/v1/chat/completions", "client_stream": 1,
               "started_at": at}  # fmt: skip
        ledger.append("request_starts", row)
        return row

    def end(rid: str, at: float, took: float, outcome: str, **detail: Any) -> dict[str, Any]:
        _request(ledger, rid, "life-a", at, took, client_stream=1, tokens_out=3, outcome=outcome,
                 detail_json=detail or None)  # fmt: skip
        return {"request_id": rid, "life_id": "life-a"}

    def ids(p: flight.Pending) -> tuple[set[str], set[str]]:
        return {str(r["request_id"]) for r in p.starts}, {str(r["request_id"]) for r in p.ends}

    old = [start(f"old{i:013d}", T + 1) for i in range(3)]
    end("old0000000000000", T + 1, 2.0, "ok")
    tracker = Tracker(ledger, scope)
    assert ids(tracker.found({}, T + 4)) == ids(flight.pending(ledger, scope, T + 4))
    # Each look's rows are written just before it (the ledger as a live page meets it).
    steps: list[tuple[float, Callable[[], dict[str, list[Any]]]]] = [
        # one ends well, one is resumed onto a new leg, a new one starts
        (T + 6, lambda: {"requests": [end("old0000000000001", T + 1, 4.0, "ok"),
                                      end("old0000000000002", T + 1, 4.5, "resumed", resumed_as="leg2000000000002",
                                          cause="stall_midstream")],
                         "request_starts": [start("leg2000000000002", T + 5.5), start("new0000000000001", T + 5.8)]}),
        # the new leg ends well; a start comes a look after its own end
        (T + 8, lambda: {"requests": [end("leg2000000000002", T + 5.5, 2.0, "ok"),
                                      end("late000000000001", T + 7, 0.5, "ok")]}),
        (T + 9, lambda: {"request_starts": [start("late000000000001", T + 7)]}),
        # past LINGER_OK: the plain ok ends leave, the resumed chain stays whole
        (T + 14, dict),
        # past LINGER: the chain leaves too
        (T + 70, dict),
    ]  # fmt: skip
    assert old
    seen = []
    for now, write in steps:
        got, want = ids(tracker.found(write(), now)), ids(flight.pending(ledger, scope, now))
        assert got == want, now - T
        seen.append(got)
    assert seen[0] == (
        {"new0000000000001", "leg2000000000002"},
        {"old0000000000000", "old0000000000001", "old0000000000002"},
    )
    assert seen[3] == ({"new0000000000001"}, {"old0000000000002", "leg2000000000002"})
    assert seen[4] == ({"new0000000000001"}, set())


def test_of_the_ends_that_went_well_only_the_latest_few_are_shown(ledger: Ledger) -> None:
    _life(ledger, "life-a", T, None, None)
    for i in range(flight.OK_AT_MOST + 5):
        _request(
            ledger, f"ok{i:014d}", "life-a", T + i * 0.1, 1.0, client_stream=1, tokens_out=3, outcome="ok"
        )
    _request(
        ledger, "bad0000000000001", "life-a", T, 1.0, client_stream=1, tokens_out=0, outcome="stall_ttft"
    )
    scope = Scope(SERVE, "", T)
    found = flight.pending(ledger, scope, T + 3)
    shown = {r["id"] for r in flight.rows(ledger, found, {}, flight.watchdog_of(ledger, scope), T + 3)}
    latest = {f"ok{i:014d}" for i in range(5, flight.OK_AT_MOST + 5)}
    assert shown == latest | {"bad0000000000001"}
