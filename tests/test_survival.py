"""Survival of server lives: Kaplan–Meier against a hand-computed example and statsmodels, the
classification of lives on a hand-written ledger, and a real run on the simulator where every
server life wedges at its 8th generation request."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import STATSMODELS
from ledger_helpers import make_run
from wedgewatch.analysis.summary import summarise
from wedgewatch.analysis.survival import kaplan_meier, loglog_band, render_text, survival
from wedgewatch.cli import main
from wedgewatch.config import validate
from wedgewatch.ledger import Ledger
from wedgewatch.runner import entry as runner_main
from wedgewatch.suites import load_bundled

pytestmark = [pytest.mark.timeout(120), STATSMODELS]


def test_kaplan_meier_by_hand() -> None:
    # Five lives: failed at 2, censored at 3, failed at 3, failed at 5, censored at 8.
    km = kaplan_meier([2, 3, 3, 5, 8], [True, False, True, True, False])
    assert km["times"] == [2.0, 3.0, 5.0]
    assert km["at_risk"] == [5, 4, 2]  # the life censored at 3 is still at risk at 3
    assert km["failures"] == [1, 1, 1]
    assert km["survival"] == pytest.approx([4 / 5, 4 / 5 * 3 / 4, 4 / 5 * 3 / 4 * 1 / 2])
    # Greenwood: S(t)^2 * sum d / (n (n - d))
    g = np.cumsum([1 / (5 * 4), 1 / (4 * 3), 1 / (2 * 1)])
    assert km["se"] == pytest.approx([0.8 * math.sqrt(g[0]), 0.6 * math.sqrt(g[1]), 0.3 * math.sqrt(g[2])])
    # log(-log) band at t = 2, by hand: 0.8 ** exp(±1.96 * se / (0.8 * |log 0.8|))
    sigma = 0.8 * math.sqrt(0.05) / (0.8 * -math.log(0.8))
    lo, hi = km["ci95"][0]
    assert lo == pytest.approx(0.8 ** math.exp(1.959964 * sigma), rel=1e-5)
    assert hi == pytest.approx(0.8 ** math.exp(-1.959964 * sigma), rel=1e-5)
    assert 0 < lo < 0.8 < hi < 1


def test_kaplan_meier_edges() -> None:
    assert kaplan_meier([3, 4], [False, False])["times"] == []  # nothing failed: S = 1 throughout
    km = kaplan_meier([9, 9, 9], [True, True, True])
    assert km["survival"] == [0.0] and km["se"] == [None] and km["ci95"] == [(None, None)]
    assert loglog_band(1.0, 0.0) == (1.0, 1.0) and loglog_band(0.0, 0.1) == (None, None)


def test_kaplan_meier_matches_statsmodels() -> None:
    from statsmodels.duration.survfunc import SurvfuncRight

    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(2, 40))
        ages = rng.integers(0, 15, n).astype(float)  # integer ages: plenty of ties
        failed = rng.random(n) < 0.6
        if not failed.any():
            continue
        km = kaplan_meier(ages.tolist(), failed.tolist())
        sf = SurvfuncRight(ages, failed.astype(float))
        assert km["times"] == pytest.approx(sf.surv_times)
        assert km["survival"] == pytest.approx(sf.surv_prob)
        assert km["at_risk"] == [int(x) for x in sf.n_risk]
        se = np.array([np.nan if x is None else x for x in km["se"]])
        assert np.allclose(se, sf.surv_prob_se, equal_nan=True)


def _life(lg: Ledger, run_id: str, life_id: str, end: str | None, age: int, ready: bool = True) -> None:
    t = time.time()
    lg.append(
        "server_lives",
        {"life_id": life_id, "run_id": run_id, "profile": "sim", "base_url": "http://127.0.0.1:1",
         "start_reason": "run_start", "started_at": t},
    )  # fmt: skip
    if ready:
        lg.append("server_life_ready", {"life_id": life_id, "ready_at": t + 1, "ready_seconds": 1.0})
    if end is not None:
        lg.append(
            "server_life_ends",
            {"life_id": life_id, "ended_at": t + 5, "end_reason": end, "age_seconds": 5.0,
             "age_requests": age, "age_tokens": age * 100},
        )  # fmt: skip


def test_lives_are_classified_from_the_ledger(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a"])
        _life(lg, "r", "wedged", "wedge", 12)
        _life(lg, "r", "crashed", "crash", 4)
        _life(lg, "r", "api", "api_errors", 6)
        _life(lg, "r", "poison", "api_errors", 25)  # its canary answered: the prompts stalled, not the server
        lg.event("canary", {"ok": False, "error": "timeout"}, run_id="r", life_id="poison")
        lg.event("canary", {"ok": True, "tokens": 1}, run_id="r", life_id="poison")
        lg.event("canary", {"skipped": "at concurrency limit"}, run_id="r", life_id="poison")
        _life(lg, "r", "stopped", "stop", 20)
        _life(lg, "r", "recycled", "recycle_tokens", 30)
        _life(lg, "r", "unwatched", "stop", 15)  # wedged, but restart_on_wedge was off
        _life(lg, "r", "never", "start_failed", 0, ready=False)
        _life(lg, "r", "running", None, 0)
        lg.event(
            "wedge",
            {"age_requests": 10, "age_tokens": 1000, "age_seconds": 2.0},
            run_id="r",
            life_id="wedged",
        )
        lg.event(
            "wedge",
            {"age_requests": 7, "age_tokens": 700, "age_seconds": 1.0},
            run_id="r",
            life_id="unwatched",
        )
        lg.append(
            "requests",
            {"request_id": "q1", "life_id": "running", "path": "/v1/chat/completions", "client_stream": 1,
             "started_at": time.time(), "duration": 0.5, "outcome": "ok", "age_requests": 8, "tokens_out": 5,
             "age_tokens": 50},
        )  # fmt: skip

        sv = survival(lg, ["r"])
        by = {lv.life_id: lv for lv in sv.lives}
        assert "never" not in by and sv.not_ready == {"start_failed": 1}
        # The wedge event's age wins over the end's (detection happens before the restart).
        assert (by["wedged"].age, by["wedged"].failed) == (10, True)
        assert (by["unwatched"].age, by["unwatched"].failed, by["unwatched"].reason) == (
            7,
            True,
            "wedge, then stop",
        )
        assert by["crashed"].failed and by["api"].failed
        assert not by["stopped"].failed and not by["recycled"].failed
        assert (by["running"].age, by["running"].failed, by["running"].reason) == (9, False, "running")
        assert (by["poison"].failed, by["poison"].reason) == (False, "api_errors (canary ok)")
        # Failures at 4, 6, 7, 10 among 8 lives: censored at 9, 20, 25, 30.
        assert sv.times == [4, 6, 7, 10] and sv.at_risk == [8, 7, 6, 4]
        assert sv.survival[-1] == pytest.approx(7 / 8 * 6 / 7 * 5 / 6 * 3 / 4)
        assert sv.median() == 10 and sv.at(8) == pytest.approx(5 / 8)

        cause_specific = survival(lg, ["r"], failures=("wedge", "crash"))
        assert cause_specific.times == [4, 7, 10]
        assert survival(lg, ["r"], axis="tokens").times == [400, 600, 700, 1000]
        text = render_text(sv)
        assert "8 lives, 4 failed" in text and "never ready (left out): start_failed 1" in text
        with pytest.raises(ValueError):
            survival(lg, ["r"], axis="hours")


WEDGE_AT_8 = """
name = "wedge-at-8"
[[fault]]
when.nth = 8
action = "wedge"
after_tokens = 1
"""


@pytest.fixture(scope="module")
def wedging_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """14 bundled instances, echo agent, 2 at a time; every server life wedges at its 8th
    generation request (the readiness canary and two warm-ups are its first three)."""
    tmp = tmp_path_factory.mktemp("survival")
    (tmp / "wedge8.toml").write_text(WEDGE_AT_8)
    cfg = validate(
        {
            "server": {"profile": "sim", "scenario": str(tmp / "wedge8.toml"), "scrape_interval": 0.2,
                       "log_dir": str(tmp / "logs")},
            "agent": {"name": "echo"},
            "suite": {"ids": [i["instance_id"] for i in load_bundled()[:14]]},
            "run": {"concurrency": 2, "evaluate": False, "ledger": str(tmp / "l.sqlite"),
                    "workdir": str(tmp / "work"), "time_scale": 100.0},
        },
        "wedge8",
    )  # fmt: skip
    ex = runner_main.start(cfg, run_id="wedge8")
    assert ex.end_mark == "finished"
    return Path(cfg.run.ledger)


@pytest.mark.xdist_group("survival-run")  # one worker makes `wedging_run` once
def test_every_life_wedges_by_its_twelfth_request(wedging_run: Path) -> None:
    with Ledger(wedging_run) as lg:
        sv = survival(lg, ["wedge8"])
        ends = [r[0] for r in lg.query("SELECT end_reason FROM server_life_view WHERE run_id = 'wedge8'")]
    assert len(sv.lives) >= 3 and sv.n_failed >= 2
    # A life's age is the requests that had ended on it when its wedge was recorded. The wedging
    # request, and at concurrency 2 the one beside it, count only when the proxy's stall deadline
    # ended them before the metrics rule saw the engine stop: both are 1 s at this scale, so a life
    # that wedged at its 8th request is recorded at 6 to 9 (a fresh clone's run: 8, 7, 8).
    failed_ages = [lv.age for lv in sv.lives if lv.failed]
    assert all(6 <= a <= 12 for a in failed_ages), failed_ages
    # Every life that reached its 8th request failed; only the last (stopped at the run's end) is censored.
    assert ends.count("stop") == 1 and len(sv.lives) - sv.n_failed == 1
    assert sv.at(5) == 1.0
    assert sv.survival[-1] == 0.0 and 6 <= sv.times[-1] <= 12
    assert sv.median() is not None and 6 <= sv.median() <= 12  # type: ignore[operator]


@pytest.mark.xdist_group("survival-run")  # one worker makes `wedging_run` once
def test_report_survival_flag(wedging_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ex:
        main(["report", "wedge8", "--ledger", str(wedging_run), "--survival"])
    assert ex.value.code == 0
    out = capsys.readouterr().out
    assert "survival of server lives by age in requests" in out and "median age at failure" in out

    with pytest.raises(SystemExit) as ex:
        main(["report", "wedge8", "--ledger", str(wedging_run), "--survival", "--json"])
    assert ex.value.code == 0
    d = json.loads(capsys.readouterr().out)
    with Ledger(wedging_run) as lg:
        plain = summarise(lg, "wedge8")
    # The existing keys are unchanged; survival is one more key.
    assert set(d) == {*plain, "survival"} and d["outcomes"] == plain["outcomes"]
    curve = d["survival"]["curve"]
    assert curve[-1]["survival"] == 0.0 and curve[-1]["ci95"] == [None, None]
    assert d["survival"]["failed"] == d["survival"]["lives"] - 1
