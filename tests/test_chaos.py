"""``wedgewatch bench chaos`` (issue 41): a short seeded schedule of faults on the simulator, and its
parts that need no run: the schedule, the masks, the comparison of replies. The real engine's
short schedule is in tests/test_chaos_real.py; the long schedules are ``make bench``'s, and no
fault's time bound is asserted here (docs/reliability.md has the bench's figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wedgewatch.bench.chaos import checker, kinds
from wedgewatch.bench.chaos.replies import Exchange, compare, mask, of_trajectory, request_key

ROOT = Path(__file__).resolve().parent.parent


def chaos(tmp_path: Path, *args: str, timeout: float = 600) -> dict:
    """``wedgewatch bench chaos ARGS --json`` in a process of its own; its one report."""
    out = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "bench", "chaos", *args, "--json",
         "--control-dir", str(tmp_path / "control"), "--keep", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False,
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stderr[-3000:]
    (report,) = json.loads(out.stdout)["reports"]
    report["exit"] = out.returncode
    return report


@pytest.mark.long
@pytest.mark.timeout(400)
def test_a_short_schedule_on_the_simulator_keeps_the_control_s_outcomes_and_replies(tmp_path: Path) -> None:
    """Two instances, a wedge, a killed server, a full ledger disk, connections reset: each fault
    strikes (the schedule ends with two fifths of the run ahead, ``kinds.SPAN``), the run ends
    with the control's outcomes from the control's replies, nothing lost or left, the ledger
    check clean."""
    report = chaos(
        tmp_path, "--engine", "sim", "--faults", "4", "--seed", "1", "--instances", "2", "--concurrency", "2",
        "--fast", "--kind", "freeze", "--kind", "kill_server", "--kind", "disk_full", "--kind", "conn_reset",
    )  # fmt: skip
    assert report["control"]["holds"], report["control"]
    dealt = report["run"]["dealt"]
    assert sorted(d["kind"] for d in dealt) == ["conn_reset", "disk_full", "freeze", "kill_server"]
    assert all(d["at"] is not None for d in dealt), dealt  # every fault struck
    assert report["run"]["done"]
    fig = report["figures"]
    assert fig["instances"] == 2 and fig["outcomes_equal"] == 2, fig
    assert fig["replies"]["differing"] == 0 and fig["replies"]["unmatched"] == 0, fig
    assert fig["replies"]["equal"] >= report["control"]["replies_equal"], fig
    # The wedge and the killed server each struck a request in flight.
    assert sum(1 for n in fig["struck"].values() if n["requests"]) >= 2, fig["struck"]
    untimed = [b for b in report["broken"] if b["invariant"] != "bounded"]
    assert untimed == [], untimed
    assert report["exit"] == (1 if report["broken"] else 0)


def test_a_schedule_is_the_seed_s_and_deals_half_its_faults_in_flight() -> None:
    names = kinds.kinds_for("vllm-cpu")
    one = kinds.plan(3, 20, names, 5000)
    assert one == kinds.plan(3, 20, names, 5000)
    assert one != kinds.plan(4, 20, names, 5000)
    assert set(names) <= {p.kind for p in one}  # every kind at least once in 20
    assert sum(kinds.KINDS[p.kind].in_flight for p in one) * 2 >= 20
    assert sum(p.gap_tokens for p in one) < 5000  # the schedule ends before the control's run does
    # However few the faults and whatever a seed draws, the last is due with two fifths of the
    # control's tokens ahead (drawn alone, seed 1's four gaps added up to 110% of the run).
    short = ["freeze", "kill_server", "disk_full", "conn_reset"]
    assert (
        max(sum(p.gap_tokens for p in kinds.plan(s, n, short, 949)) for s in range(1, 60) for n in (1, 2, 4))
        <= 0.6 * 949
    )
    only_wedgewatch = kinds.plan(1, 6, ["kill_runner", "disk_full", "freeze"], 600)
    assert sum(kinds.KINDS[p.kind].in_flight for p in only_wedgewatch) >= 3


def test_masks_take_what_varies_run_to_run_out_of_an_observation_only() -> None:
    a = "<returncode>0</returncode>\n<output>\n4 passed in 0.08s\n/w/r-1-1/sandbox/x.py\n12:03:44\n</output>"
    b = "<returncode>0</returncode>\n<output>\n4 passed in 0.15s\n/w/r-2-1/sandbox/x.py\n12:04:01\n</output>"
    assert mask(a, "/w/r-1-1") == mask(b, "/w/r-2-1")
    assert mask("4 passed", "") != mask("5 passed", "")
    user = [{"role": "user", "content": a}]
    assert request_key(user, "/w/r-1-1") == request_key([{"role": "user", "content": b}], "/w/r-2-1")
    # A reply is never masked: a model that says another duration said something else.
    reply = [{"role": "assistant", "content": "took 0.08s"}]
    assert request_key(reply) != request_key([{"role": "assistant", "content": "took 0.15s"}])


def _trajectory(attempt: str, replies: list[str], observation: str = "ok") -> list[Exchange]:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i, r in enumerate(replies):
        messages += [{"role": "assistant", "content": r}, {"role": "user", "content": f"{observation} {i}"}]
    data = {"instance_id": "i1", "attempt_id": attempt, "messages": messages, "turns": []}
    return list(of_trajectory(data))


def test_the_comparison_finds_a_differing_reply_and_a_request_the_control_never_sent() -> None:
    control = _trajectory("c-1", ["a", "b", "c"])
    assert compare(_trajectory("x-1", ["a", "b", "c"]), control).held
    changed = compare(_trajectory("x-1", ["a", "B", "c"]), control)
    # The second reply differs; the third request then is one the control never sent.
    assert [(e.step, c.text) for e, c in changed.differing] == [(2, "b")]
    assert [e.step for e, _ in changed.unmatched] == [3]
    assert "message 5 (assistant) differs at character 0: 'B'" in changed.unmatched[0][1]
    broken = checker.replies_equal(changed, accepted=set())
    assert [b.invariant for b in broken] == ["replies_equal", "replies_equal"]
    assert "'B'" in broken[0].what
    # A differing reply accepted by its margin is not a break; the request after it still is.
    assert len(checker.replies_equal(changed, accepted={changed.differing[0][0].request})) == 1
    observed = compare(_trajectory("x-1", ["a", "b"], observation="other"), control)
    assert [e.step for e, _ in observed.unmatched] == [2]
    assert "message 4 (user)" in observed.unmatched[0][1]


def test_outcomes_are_held_instance_by_instance() -> None:
    assert (
        checker.outcomes_equal({"a": "resolved", "b": "early_stop"}, {"a": "resolved", "b": "early_stop"})
        == []
    )
    broken = checker.outcomes_equal(
        {"a": "resolved", "b": "infra_failed"}, {"a": "resolved", "b": "early_stop"}
    )
    assert [b.what for b in broken] == ["b: infra_failed where the control has early_stop"]


def test_the_scale_study_s_faults_arrive_at_the_field_s_rates_and_replay_by_seed() -> None:
    from wedgewatch.base import vocab
    from wedgewatch.bench import resume_scale

    plan = resume_scale.schedule(1, 8, 3000.0)
    assert plan == resume_scale.schedule(1, 8, 3000.0) and plan != resume_scale.schedule(2, 8, 3000.0)
    assert [t for t, _ in plan] == sorted(t for t, _ in plan) and all(0 < t <= 3000 for t, _ in plan)
    wedges = sum(1 for _, k in plan if k == vocab.WEDGE)
    crashes = sum(1 for _, k in plan if k == vocab.CRASH)
    # 8 servers for 3,000 hours: 8,000 wedges at one per 3 hours, 3,810 crashes at one per 6.3
    # (the field's 6,300 hours, stressed 1,000 times); each Poisson count within 5 deviations.
    assert abs(wedges - 8000) < 5 * 8000**0.5, wedges
    assert abs(crashes - 3810) < 5 * 3810**0.5, crashes
