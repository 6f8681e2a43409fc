"""``wedgewatch lives``: server lives until a wedge on ledgers with known lifetimes (real SQLite,
rows written by hand), the recycling interval against statsmodels' SurvfuncRight on the same
data and by hand, ages in finished instances, and bad flags."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import STATSMODELS
from ledger_helpers import make_run
from wedgewatch.cli import main
from wedgewatch.ledger import Ledger

pytestmark = STATSMODELS

# Twelve lives: ages in requests when they wedged (True) or were censored (False: recycled, or
# stopped at the end of the run).
LIVES = [
    (4, True), (6, True), (6, False), (9, True), (11, False), (12, True),
    (15, True), (18, False), (20, True), (25, False), (30, False), (30, True),
]  # fmt: skip
CENSOR_REASONS = ("recycle_instances", "stop")


def _life(lg: Ledger, run: str, n: int, age: int, wedged: bool, t0: float, instances: int = 0) -> None:
    lid = f"{run}-life-{n}"
    lg.append(
        "server_lives",
        {"life_id": lid, "run_id": run, "profile": "sim", "base_url": "http://127.0.0.1:1",
         "start_reason": "run_start", "started_at": t0},
    )  # fmt: skip
    lg.append("server_life_ready", {"life_id": lid, "ready_at": t0 + 0.5, "ready_seconds": 0.5})
    ages = {"age_seconds": float(age), "age_requests": age, "age_tokens": age * 1000}
    if wedged:
        lg.event("wedge", {"source": "canary", **ages}, run_id=run, life_id=lid)
    end = "wedge" if wedged else CENSOR_REASONS[n % 2]
    lg.append(
        "server_life_ends",
        {"life_id": lid, "ended_at": t0 + age + 1, "end_reason": end, **ages, "age_seconds": age + 1.0},
    )
    # Finished instances: one model-side attempt ending each second of the life's first seconds.
    for k in range(instances):
        aid = f"{lid}-a{k}"
        lg.append(
            "attempts",
            {"attempt_id": aid, "run_id": run, "instance_id": f"i{k}", "attempt_no": n + 1,
             "started_at": t0 + k + 0.1, "life_id": lid},
        )  # fmt: skip
        lg.append(
            "attempt_ends",
            {
                "attempt_id": aid,
                "ended_at": t0 + k + 0.9,
                "status": "submitted",
                "reason": "",
                "life_id": lid,
            },
        )


def _ledger(path: Path) -> None:
    t0 = time.time() - 10_000
    with Ledger(path) as lg:
        make_run(lg, "r1", ["i0"])
        make_run(lg, "r2", ["i0"])
        for n, (age, wedged) in enumerate(LIVES):
            _life(lg, "r1" if n < 6 else "r2", n, age, wedged, t0 + n * 100)


def _lives(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    with pytest.raises(SystemExit) as ex:
        main(["lives", *args])
    out = capsys.readouterr()
    assert ex.value.code == 0, out.err
    return json.loads(out.out) if "--json" in args else out.out


def test_the_interval_is_statsmodels_quantile_on_the_same_lives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from statsmodels.duration.survfunc import SurvfuncRight

    _ledger(tmp_path / "l.sqlite")
    ages = np.array([a for a, _ in LIVES], dtype=float)
    failed = np.array([f for _, f in LIVES], dtype=float)
    sf = SurvfuncRight(ages, failed)
    for risk in (0.1, 0.25, 0.5):
        r = _lives(capsys, "r1", "r2", "--ledger", str(tmp_path / "l.sqlite"), "--by", "requests",
                   "--risk", str(risk), "--json")  # fmt: skip
        assert r["survival"]["lives"] == 12 and r["survival"]["failed"] == 7
        assert r["survival"]["curve"][0]["survival"] == pytest.approx(sf.surv_prob[0])
        assert r["recycling"]["interval"] == pytest.approx(sf.quantile(risk))
        lo, hi = sf.quantile_ci(risk)
        assert r["recycling"]["ci95"][0] == pytest.approx(lo)
        assert r["recycling"]["ci95"][1] == (None if np.isinf(hi) else pytest.approx(hi))
    # By hand at 25%: S = 11/12 after 4, x 10/11 after 6 (= 0.833), x 8/9 after 9 (= 0.741 < 0.75).
    r = _lives(capsys, "r1", "r2", "--ledger", str(tmp_path / "l.sqlite"), "--by", "requests",
               "--risk", "0.25", "--json")  # fmt: skip
    assert r["recycling"]["interval"] == 9
    assert "No setting recycles by requests" in r["sentence"]
    # One run alone is its own six lives: a different curve.
    one = _lives(capsys, "r1", "--ledger", str(tmp_path / "l.sqlite"), "--by", "requests", "--json")
    assert one["survival"]["lives"] == 6


def test_by_tokens_gives_the_config_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _ledger(tmp_path / "l.sqlite")
    text = _lives(
        capsys, "r1", "r2", "--ledger", str(tmp_path / "l.sqlite"), "--by", "tokens", "--risk", "0.25"
    )
    assert "server lives until a wedge by age in tokens: 12 lives, 7 failed" in text
    # By hand: S = 11/12 after 4000, x 10/11 after 6000 (0.833), x 8/9 after 9000 (0.741 < 0.75).
    assert "By 9000 tokens, 25.9% of lives had wedged, 16.7% before it: the first age at which the" in text
    assert "passes 25%; 95% CI" in text
    assert "recycle_every_tokens = 9000" in text


def test_ages_in_instances_count_the_instances_a_life_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t0 = time.time() - 10_000
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["i0"])
        # (age in seconds at the wedge or end, wedged, instances finished in its first seconds)
        for n, (age, wedged, done) in enumerate([(3, True, 5), (8, True, 5), (2, True, 2), (20, False, 9)]):
            _life(lg, "r", n, age, wedged, t0 + n * 100, instances=done)
    r = _lives(capsys, "--ledger", str(tmp_path / "l.sqlite"), "--risk", "0.2", "--json")  # latest run
    # Wedged at 3 s with 5 finished in its life: only the 3 that ended before the wedge count.
    assert [c["age"] for c in r["survival"]["curve"]] == [2.0, 3.0, 5.0]
    assert r["survival"]["censored"] == 1 and r["survival"]["curve"][0]["at_risk"] == 4
    assert r["recycling"]["interval"] == 2
    assert "recycle_every_instances = 2" in r["sentence"]


def test_too_few_wedges_and_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.time() - 10_000
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["i0"])
        for n in range(3):
            _life(lg, "r", n, 10, False, t0 + n * 100)
    text = _lives(capsys, "r", "--ledger", str(tmp_path / "l.sqlite"), "--by", "requests")
    assert "no recycling interval at that risk" in text and "oldest life reached 10 requests" in text
    for bad, flag in ((["--risk", "1.5"], "--risk"), (["--by", "seconds"], "--by"), (["nope"], "no run")):
        with pytest.raises(SystemExit) as ex:
            main(["lives", *bad, "--ledger", str(tmp_path / "l.sqlite")])
        assert ex.value.code == 2
        assert flag in capsys.readouterr().err
