"""``wedgewatch compare``: two real runs (the echo agent against the simulator, one with an instance
that always stalls), verdicts imported from a SWE-bench report; and the statistics on ledgers
written by hand, where every count is known."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import STATSMODELS
from ledger_helpers import add_attempt, add_life, make_run
from wedgewatch.analysis import stats
from wedgewatch.analysis.compare import compare, render_text
from wedgewatch.analysis.import_report import import_report
from wedgewatch.cli import main
from wedgewatch.config import validate
from wedgewatch.ledger import Ledger
from wedgewatch.runner import entry as runner_main
from wedgewatch.suites import load_bundled

pytestmark = [pytest.mark.timeout(120), STATSMODELS]

BUNDLED = load_bundled()[:4]
IDS = [i["instance_id"] for i in BUNDLED]


def _config(tmp: Path, name: str, faults: str = "") -> Any:
    scenario = tmp / f"{name}.scenario.toml"
    scenario.write_text(f'name = "{name}"\n{faults}')
    return validate(
        {
            "server": {
                "profile": "sim",
                "scenario": str(scenario),
                "scrape_interval": 0.2,
                "log_dir": str(tmp / "logs" / name),
                "warmup": {"count": 1},
            },
            # The echo agent asks for one answer, not a stream: only total_timeout ends a stalled
            # one (docs/proxy.md), 2 s at this time scale.
            "watchdog": {"total_timeout": 100.0},
            "agent": {"name": "echo"},
            "suite": {"ids": IDS},
            "run": {
                "concurrency": 2,
                "evaluate": False,
                "ledger": str(tmp / f"{name}.sqlite"),
                "workdir": str(tmp / "work"),
                "time_scale": 50.0,
            },
        },
        name,
    )


def _report(tmp: Path, name: str, resolved: list[str], unresolved: list[str]) -> Path:
    path = tmp / f"{name}.report.json"
    path.write_text(json.dumps({"resolved_ids": resolved, "unresolved_ids": unresolved}))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run A: healthy, resolves instances 0-2. Run B: instance 3 stalls on every attempt (so it is
    infra_failed after three api_errors), resolves 0 and 1 only."""
    tmp = tmp_path_factory.mktemp("compare")
    first_line = str(BUNDLED[3]["problem_statement"]).splitlines()[0]
    stall = f'[[fault]]\nwhen.contains = "{first_line}"\naction = "stall_ttft"\n'
    out = {}
    for name, faults, resolved in (("a", "", IDS[:3]), ("b", stall, IDS[:2])):
        cfg = _config(tmp, name, faults)
        ex = runner_main.start(cfg, run_id=f"run-{name}")
        assert ex.end_mark == "finished"
        with Ledger(cfg.run.ledger) as lg:
            import_report(
                lg, f"run-{name}", _report(tmp, name, resolved, [i for i in IDS if i not in resolved])
            )
        out[name] = Path(cfg.run.ledger)
    return out


@pytest.mark.xdist_group("compare-runs")  # one worker makes `runs` once
def test_compare_two_real_runs_in_two_ledgers(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ex:
        main(
            ["compare", "run-a", "run-b", "--ledger", str(runs["a"]), "--ledger-b", str(runs["b"]), "--json"]
        )
    assert ex.value.code == 0
    r = json.loads(capsys.readouterr().out)
    assert r["instances"] == {"a": 4, "b": 4, "common": 4, "only_a": 0, "only_b": 0}
    assert r["outcomes"]["a"]["resolved"] == 3 and r["outcomes"]["a"]["unresolved"] == 1
    assert r["outcomes"]["b"]["resolved"] == 2 and r["outcomes"]["b"]["infra_failed"] == 1
    by_id = {p["instance_id"]: p for p in r["per_instance"]}
    # Three budgeted api_errors (its stalls); one more if a restart (after two consecutive
    # api_errors) ended an attempt of it, which is requeued, not counted.
    assert by_id[IDS[3]]["b"] == "infra_failed" and by_id[IDS[3]]["b_api_errors"] >= 3
    with Ledger(runs["b"]) as lg:
        row = lg.query("SELECT n_infra FROM instance_outcomes WHERE instance_id = ?", (IDS[3],))[0]
    assert row["n_infra"] == 3
    assert by_id[IDS[2]]["a"] == "resolved" and by_id[IDS[2]]["b"] == "unresolved"
    # infra_failed stays beside the score: B is 2/3 over model outcomes, 2/4 over all instances.
    assert (r["rates"]["model"]["b"]["k"], r["rates"]["model"]["b"]["n"]) == (2, 3)
    assert (r["rates"]["all"]["b"]["k"], r["rates"]["all"]["b"]["n"]) == (2, 4)
    d = r["difference"]["model"]
    assert d["diff"] == pytest.approx(2 / 3 - 3 / 4)
    assert d["ci95"][0] < 0 < d["ci95"][1]
    # Paired: instance 3 has no model outcome in B, so 3 pairs; only A resolved instance 2.
    assert r["paired"]["instances"] == 3 and r["paired"]["only_a_resolved"] == 1
    assert r["paired"]["only_b_resolved"] == 0 and r["paired"]["mcnemar_exact_p"] == 1.0
    infra_b = r["infrastructure"]["b"]
    assert infra_b["api_error_attempts"] >= 3 and infra_b["stalls"]["total_timeout"] >= 2
    assert r["infrastructure"]["a"]["api_error_attempts"] == 0
    text = " ".join(r["verdict"])
    assert "cannot tell the two runs apart" in text
    assert "Run B lost 1 instance(s) to the infrastructure" in text


@pytest.mark.xdist_group("compare-runs")  # one worker makes `runs` once
def test_compare_text_same_ledger_and_missing_run(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ex:
        main(["compare", "run-a", "run-a", "--ledger", str(runs["a"])])
    assert ex.value.code == 0
    out = capsys.readouterr().out
    assert f"{IDS[0]}  resolved" in out and "B - A  +0.0 pts" in out
    assert "McNemar exact p = 1" in out
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "compare", "run-a", "no-such-run", "--ledger", str(runs["a"])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no run 'no-such-run'" in proc.stderr


def _synthetic(path: Path, results_a: list[int], results_b: list[int], infra_b: int = 0) -> None:
    ids = [f"i{n}" for n in range(len(results_a))]
    with Ledger(path) as lg:
        for run, results in (("A", results_a), ("B", results_b)):
            make_run(lg, run, ids, attempts_max=2)
            for n, (iid, res) in enumerate(zip(ids, results, strict=True)):
                if run == "B" and n < infra_b:
                    add_attempt(lg, run, iid, 1, "api_error", reason="stall_ttft")
                    add_attempt(lg, run, iid, 2, "api_error", reason="stall_ttft")
                else:
                    add_attempt(lg, run, iid, 1, "submitted", patch="diff\n", resolved=res)


def test_a_clear_difference_and_mcnemar_match_statsmodels(tmp_path: Path) -> None:
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.proportion import confint_proportions_2indep

    a = [1] * 16 + [0] * 4
    b = [1] * 4 + [0] * 16  # B resolves 4 of the 16 A resolved, nothing else
    _synthetic(tmp_path / "l.sqlite", a, b)
    with Ledger(tmp_path / "l.sqlite") as lg:
        r = compare(lg, "A", lg, "B")
    d = r["difference"]["model"]
    lo, hi = confint_proportions_2indep(4, 20, 16, 20, method="newcomb", compare="diff")
    assert d["diff"] == pytest.approx(-0.6)
    assert d["ci95"] == pytest.approx([lo, hi], abs=1e-9)
    assert r["paired"]["only_a_resolved"] == 12 and r["paired"]["only_b_resolved"] == 0
    expected_p = mcnemar([[4, 12], [0, 4]], exact=True).pvalue
    assert r["paired"]["mcnemar_exact_p"] == pytest.approx(expected_p)
    assert r["verdict"][0].startswith("Run A resolves more")
    assert "excludes 0" in r["verdict"][0]


def test_infrastructure_is_never_folded_into_the_model_rate(tmp_path: Path) -> None:
    """B's model does better than A's on what it finished; B lost 8 instances to the server. Over
    model outcomes B is ahead, over all instances behind, and the verdict says why."""
    a = [1] * 10 + [0] * 10
    b = [0] * 8 + [1] * 9 + [0] * 3  # the first 8 fail on the infrastructure's side
    _synthetic(tmp_path / "l.sqlite", a, b, infra_b=8)
    with Ledger(tmp_path / "l.sqlite") as lg:
        r = compare(lg, "A", lg, "B")
    assert r["outcomes"]["b"]["infra_failed"] == 8
    assert (r["rates"]["model"]["b"]["k"], r["rates"]["model"]["b"]["n"]) == (9, 12)
    assert (r["rates"]["all"]["b"]["k"], r["rates"]["all"]["b"]["n"]) == (9, 20)
    assert r["difference"]["model"]["diff"] == pytest.approx(0.25)
    assert r["difference"]["all"]["diff"] == pytest.approx(-0.05)
    assert re.search(r"infra_failed instances\s+0\s+8", render_text(r))
    assert r["infrastructure"]["b"]["api_error_attempts"] == 16
    assert any("infrastructure, not the model" in v for v in r["verdict"])
    assert any("Run B lost 8 instance(s)" in v for v in r["verdict"])


def test_small_samples_say_what_they_cannot_tell(tmp_path: Path) -> None:
    _synthetic(tmp_path / "l.sqlite", [1, 1, 0, 0, 1], [1, 0, 0, 0, 1])
    with Ledger(tmp_path / "l.sqlite") as lg:
        r = compare(lg, "A", lg, "B")
    first = r["verdict"][0]
    assert "cannot tell the two runs apart" in first
    detectable = r["difference"]["model"]["detectable"]
    assert detectable == pytest.approx(stats.detectable_difference(5, 5, 5 / 10))
    assert f"{detectable * 100:.0f} pts" in first
    assert any("no p-value below 0.05 is possible" in v for v in r["verdict"])


def test_counts_form_gives_the_storys_fisher_p(capsys: pytest.CaptureFixture[str]) -> None:
    from scipy.stats import fisher_exact

    with pytest.raises(SystemExit) as ex:
        main(["compare", "--counts", "15/15", "0/12", "--json"])
    assert ex.value.code == 0
    g = json.loads(capsys.readouterr().out)
    want = fisher_exact([[15, 0], [0, 12]], alternative="greater").pvalue
    assert g["fisher_p_one_sided"] == pytest.approx(want, rel=1e-9)
    assert g["fisher_p_one_sided"] == pytest.approx(5.75e-8, rel=1e-3)
    assert (g["a"]["k"], g["a"]["n"], g["b"]["k"], g["b"]["n"]) == (15, 15, 0, 12)
    # A table that leans the other way is tested in that direction.
    with pytest.raises(SystemExit):
        main(["compare", "--counts", "2/10", "7/9", "--json"])
    g = json.loads(capsys.readouterr().out)
    assert g["fisher_p_one_sided"] == pytest.approx(
        fisher_exact([[2, 8], [7, 2]], alternative="less").pvalue, rel=1e-9
    )
    assert g["fisher_p_two_sided"] == pytest.approx(fisher_exact([[2, 8], [7, 2]]).pvalue, rel=1e-9)
    for bad in (["15/x", "0/12"], ["16/15", "0/12"], ["1/0", "0/12"]):
        with pytest.raises(SystemExit) as ex:
            main(["compare", "--counts", *bad])
        assert ex.value.code == 2
        assert "--counts" in capsys.readouterr().err


def _configured(lg: Ledger, run_id: str, ids: list[str], data: dict[str, Any], start: str) -> None:
    make_run(lg, run_id, ids, attempts_max=2, cfg=validate(data, run_id))
    add_life(lg, run_id, f"{run_id}-life", "stop", 10, start_reason=start)
    for iid in ids:
        add_attempt(lg, run_id, iid, 1, "submitted", patch="diff\n", resolved=1)


def test_two_factors_changed_together_are_named_as_a_confound(tmp_path: Path) -> None:
    ids = ["i0", "i1", "i2"]
    with Ledger(tmp_path / "l.sqlite") as lg:
        _configured(lg, "fresh-warm", ids, {"server": {"fresh": True, "warmup": {"count": 2}}}, "run_start")
        _configured(
            lg,
            "used-cold",
            ids,
            {"server": {"fresh": False, "warmup": {"count": 0}, "args": ["--enforce-eager"]},
             "run": {"workdir": "/elsewhere"}},
            "adopted",
        )  # fmt: skip
        _configured(lg, "fresh-cold", ids, {"server": {"warmup": {"count": 0}}}, "run_start")
        r = compare(lg, "fresh-warm", lg, "used-cold")
        one = compare(lg, "fresh-warm", lg, "fresh-cold")
    by = {d["factor"]: d for d in r["config_diff"]}
    assert set(by) == {"fresh", "warm-up", "server flag --enforce-eager", "server age at start"}
    assert (by["fresh"]["a"], by["fresh"]["b"]) == (True, False)
    assert (by["warm-up"]["a"], by["warm-up"]["b"]) == (2, 0)
    assert by["server age at start"]["b"] == "adopted, age unknown"
    said = [v for v in r["verdict"] if "cannot be attributed" in v]
    assert len(said) == 1 and "fresh" in said[0] and "warm-up" in said[0] and "4 factors" in said[0]
    text = render_text(r)
    assert re.search(r"server flag --enforce-eager\s+absent\s+present", text)
    # One factor: listed, but no confound sentence.
    assert [d["factor"] for d in one["config_diff"]] == ["warm-up"]
    assert not any("cannot be attributed" in v for v in one["verdict"])


def test_fisher_on_infra_failures_and_wedged_lives_matches_scipy(tmp_path: Path) -> None:
    from scipy.stats import fisher_exact

    _synthetic(tmp_path / "l.sqlite", [1] * 20, [1] * 20, infra_b=8)
    with Ledger(tmp_path / "l.sqlite") as lg:
        for n in range(6):  # A: 6 lives, 1 wedged; B: 9 lives, 8 wedged (one by api errors)
            add_life(lg, "A", f"a{n}", "wedge" if n == 0 else "stop", 5)
        for n in range(9):
            add_life(lg, "B", f"b{n}", "stop" if n == 0 else ("api_errors" if n == 1 else "wedge"), 5)
        add_life(lg, "B", "b-never", "start_failed", 0, ready=False)  # served nothing: left out
        r = compare(lg, "A", lg, "B")
    inf = r["independent"]["infra_failed"]
    assert (inf["a"]["k"], inf["a"]["n"], inf["b"]["k"], inf["b"]["n"]) == (0, 20, 8, 20)
    assert inf["fisher_p_two_sided"] == pytest.approx(fisher_exact([[0, 20], [8, 12]]).pvalue, rel=1e-9)
    assert inf["fisher_p_one_sided"] == pytest.approx(
        fisher_exact([[0, 20], [8, 12]], alternative="less").pvalue, rel=1e-9
    )
    w = r["independent"]["wedged_lives"]
    assert (w["a"]["k"], w["a"]["n"], w["b"]["k"], w["b"]["n"]) == (1, 6, 8, 9)
    assert w["fisher_p_two_sided"] == pytest.approx(fisher_exact([[1, 5], [8, 1]]).pvalue, rel=1e-9)
    assert any(v.startswith("Run B had more infra_failed instances") for v in r["verdict"])
    assert any(v.startswith("Run B had more wedged server lives") for v in r["verdict"])
    assert "Fisher's exact test: p = " in render_text(r)
