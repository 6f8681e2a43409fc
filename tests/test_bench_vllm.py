"""`wedgewatch bench vllm`'s summary: medians over the trials, every trial kept beside them (the
real measurement is the command itself, docs/benchmarks.md)."""

from __future__ import annotations

from typing import Any

from wedgewatch.bench.vllm import WEDGES, summarise


def _trial(ready: float, rate: float, release: float, outcome: str) -> dict[str, Any]:
    wedge = {
        "release_s": release,
        "next_ready_s": release + 30,
        "client_error": "stall_midstream",
        "request_outcome": outcome,
        "end_reason": "wedge",
    }
    return {"ready_s": ready, "tokens_per_s": rate, **{kind: dict(wedge) for kind in WEDGES}}


def test_the_summary_is_the_median_of_each_figure_and_keeps_every_trial() -> None:
    trials = [
        _trial(40.0, 20.0, 9.0, "stall_midstream"),
        _trial(30.0, 30.0, 12.0, "stall_midstream"),
        _trial(90.0, 10.0, 10.0, "stream_error_event"),
    ]
    out = summarise(trials)
    assert out["trials"] == 3 and out["each"] == trials
    assert out["ready_s"] == 40.0 and out["tokens_per_s"] == 20.0
    for kind in WEDGES:
        assert out[kind]["release_s"] == 10.0 and out[kind]["next_ready_s"] == 40.0
        assert out[kind]["request_outcome"] == ["stall_midstream", "stream_error_event"]
        assert out[kind]["end_reason"] == ["wedge"]
