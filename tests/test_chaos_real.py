"""``wedgewatch bench chaos`` on a real engine, short: the real llama.cpp (in-process, one slot, no
prompt cache) with the bundled Gemma 3 270M and the bash agent on one bundled instance, two
fault-free runs that must match request by request, then a run whose engine is frozen (SIGSTOP)
under a request and then killed (SIGKILL) under another. The run ends with the control's outcome
from the control's replies, nothing lost or left, the ledger check clean. No fault's time bound is
asserted here: a test's heartbeat window on a loaded machine is not the bench's (``make bench``
runs the long schedules, docs/reliability.md).

Marked ``bench``, out of ``make test`` (``make test-chaos-real``): about a minute on an idle
machine, but at a test's 2 s heartbeat window (``--fast``) a starved llama.cpp is judged wedged,
and beside two ``yes > /dev/null`` its fault-free control had 18 false wedges in 6 minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_chaos import chaos

pytestmark = [
    pytest.mark.bench,
    pytest.mark.long,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("chaos-real"),
]


def test_a_short_schedule_on_the_real_llama_cpp_keeps_the_control_s_outcome_and_replies(
    tmp_path: Path,
) -> None:
    report = chaos(
        tmp_path, "--engine", "llamacpp", "--faults", "2", "--seed", "1", "--instances", "1", "--concurrency", "1",
        "--steps", "2", "--max-tokens", "24", "--fast", "--kind", "freeze", "--kind", "kill_server",
    )  # fmt: skip
    control = report["control"]
    assert control["holds"], control  # greedy, one slot, no prompt cache: two runs, the same replies
    assert control["replies_equal"] >= 1, control
    dealt = report["run"]["dealt"]
    assert sorted(d["kind"] for d in dealt) == ["freeze", "kill_server"]
    assert all(d["at"] is not None for d in dealt), dealt
    fig = report["figures"]
    assert fig["struck"] and all(n["requests"] == 1 for n in fig["struck"].values()), fig["struck"]
    assert fig["outcomes_equal"] == fig["instances"] == 1, fig
    assert fig["replies"]["unmatched"] == 0, fig
    assert fig["replies"]["differing"] == fig["replies"]["accepted"], fig
    untimed = [b for b in report["broken"] if b["invariant"] != "bounded"]
    assert untimed == [], untimed
