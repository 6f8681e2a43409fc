"""``wedgewatch plan``: designs (full and resolution IV fractions), sample sizes, run order, run
configs that ``wedgewatch run`` accepts (two cells run for real with the echo agent), and the
analysis of a finished design checked against the simulator's ground truth (rows generated from
the seed-used-server scenario's own hazard)."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from conftest import STATSMODELS
from ledger_helpers import add_attempt, make_run
from wedgewatch.analysis import plan as pl
from wedgewatch.analysis.plan import design as dsg
from wedgewatch.base.errors import BadInput
from wedgewatch.cli import main
from wedgewatch.config import Config, load_config, validate
from wedgewatch.ledger import Ledger
from wedgewatch.runner import entry as runner_main
from wedgewatch.sim.scenario import load_scenario
from wedgewatch.sim.wedge import ServerState, probability

pytestmark = [pytest.mark.timeout(120), STATSMODELS]


@pytest.mark.parametrize("k", [4, 5, 6, 7, 8])
def test_fractions_are_balanced_and_keep_main_effects_clear_of_two_factor_interactions(k: int) -> None:
    d = dsg.make(k, fraction=True)
    assert d.cells == (8 if k == 4 else 16)
    assert d.resolution is not None and d.resolution >= 4
    cols = [[r[j] for r in d.rows] for j in range(k)]
    assert len({tuple(r) for r in d.rows}) == d.cells  # no cell twice
    for c in cols:
        assert sum(c) == 0  # each level in half the cells
    for a, b in itertools.combinations(cols, 2):
        assert sum(x * y for x, y in zip(a, b, strict=True)) == 0  # main effects orthogonal
    for main_col in cols:
        for a, b in itertools.combinations(range(k), 2):
            inter = [x * y for x, y in zip(cols[a], cols[b], strict=True)]
            assert inter != main_col and inter != [-v for v in main_col]  # resolution IV


def test_full_design_and_small_k_fraction() -> None:
    d = dsg.make(3, fraction=True)
    assert d.cells == 8 and d.p == 0 and "no resolution IV fraction" in d.note
    assert sorted(map(tuple, dsg.full(4))) == sorted(itertools.product([-1, 1], repeat=4))
    assert dsg.make(4, fraction=True).defining_relation == ["I = ABCD"]
    assert dsg.aliases(dsg.make(4, fraction=True), ["a", "b", "c", "d"]) == [
        "a:b = c:d",
        "a:c = b:d",
        "a:d = b:c",
    ]


def test_sample_size_is_statsmodels_power_spread_over_half_the_cells() -> None:
    from statsmodels.stats.power import NormalIndPower
    from statsmodels.stats.proportion import proportion_effectsize

    plan = pl.make_plan(pl.parse(["fresh,warmup,flags,concurrency"]), baseline=0.1, effect=0.3, power=0.9)
    s = plan["sample_size"]
    n_side = math.ceil(NormalIndPower().solve_power(proportion_effectsize(0.4, 0.1), alpha=0.05, power=0.9))
    assert s["instances_per_level"] == n_side
    assert s["instances_per_cell"] == math.ceil(n_side / 8)
    assert s["instances_total"] == 16 * s["instances_per_cell"]
    assert s["one_at_a_time_total"] == 5 * n_side
    assert all(c["config"]["suite"]["slice"] == f"0:{s['instances_per_cell']}" for c in plan["cells"])
    assert plan["notes"] == []
    small = pl.make_plan(pl.parse(["fresh"]), baseline=0.05, effect=0.05)
    assert any("the bundled suite has 20" in n for n in small["notes"])


def test_run_order_is_a_seeded_permutation() -> None:
    a, b, c = dsg.run_order(16, 1), dsg.run_order(16, 1), dsg.run_order(16, 2)
    assert a == b and a != c and sorted(a) == list(range(16))


def test_configs_map_factors_onto_fields_and_read_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ex:
        main(["plan", "--out", str(tmp_path / "d"), "--seed", "3", "--json"])
    assert ex.value.code == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["cells"]) == 16 and len(set(plan["run_order"])) == 16
    factors = pl.parse(["fresh,warmup,flags,concurrency"])
    for cell in plan["cells"]:
        cfg = load_config(tmp_path / "d" / f"{cell['run_id']}.toml")
        lv = cell["levels"]
        assert cfg.server.fresh == (lv["fresh"] == "on")
        assert ("--preload-age" in cfg.server.args) == (lv["fresh"] == "off")
        assert cfg.server.warmup.count == lv["warmup"]
        assert ("hybrid-safe" in cfg.server.arg_sets) == (lv["flags"] == "hybrid-safe")
        assert cfg.run.concurrency == lv["concurrency"]
        assert cfg.server.scenario == "seed-used-server"
        assert {f.name: f.read(cfg.snapshot()) for f in factors} == lv  # what --analyse reads
    script = (tmp_path / "d" / "run.sh").read_text().splitlines()
    assert script[5] == f"wedgewatch run {plan['run_order'][0]}.toml --run-id {plan['run_order'][0]}"
    assert script[-1].startswith(f"wedgewatch plan --analyse {' '.join(plan['run_order'])}")


def test_a_password_in_the_bases_ledger_url_is_in_no_file_and_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base.toml"
    base.write_text(
        '[run]\nledger = "postgresql://ww:s3cr3t-pw@127.0.0.1:5499/ww"\n'
        '[server]\nprofile = "sim"\nscenario = "seed-used-server"\n'
    )
    for fmt in ([], ["--json"]):
        out_dir = tmp_path / f"d{len(fmt)}"
        with pytest.raises(SystemExit) as ex:
            main(["plan", "--factors", "fresh", "--base", str(base), "--out", str(out_dir), *fmt])
        assert ex.value.code == 0
        printed = capsys.readouterr()
        files = {p.name: p.read_text() for p in out_dir.iterdir()}
        assert set(files) >= {"design.json", "run.sh", "plan-c1.toml", "plan-c2.toml"}
        for where, text in [("stdout", printed.out), ("stderr", printed.err), *files.items()]:
            assert "s3cr3t-pw" not in text, where
        assert "PGPASSWORD" in printed.out  # the note says where the password goes instead
        # The cells still name the ledger (user and host), so run.sh runs them with PGPASSWORD set.
        cell = load_config(out_dir / "plan-c1.toml")
        assert cell.run.ledger == "postgresql://ww@127.0.0.1:5499/ww"
        assert "--ledger postgresql://ww@127.0.0.1:5499/ww" in files["run.sh"]


def test_custom_factor_and_fraction_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--fraction", "--factors", "fresh,warmup,flags,concurrency",
              "--factors", "server.restart_after_api_errors=2/0"])  # fmt: skip
    out = capsys.readouterr().out
    assert "2^(5-1) design, 16 cells, resolution V (E = ABCD; I = ABCDE)" in out
    assert "server.restart_after_api_errors" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--factors", "speed"], "unknown factor 'speed'"),
        (["--factors", "warmup=2/2"], "two different levels"),
        (["--factors", "run.bogus=1/2"], "run.bogus"),
        (["--factors", "flags,eager"], "not both"),
        (["--baseline", "1.5"], "--baseline"),
        (["--effect", "0.99"], "--effect"),
        (["--factors", "fresh", "--name", "no/slash"], "--name"),
    ],
)
def test_bad_plan_input_is_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ex:
        main(["plan", *argv])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_two_cells_run_for_real_and_are_analysed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base.toml"
    base.write_text(
        f"""
[server]
profile = "sim"
scenario = "healthy"
scrape_interval = 0.2
log_dir = "{tmp_path / "logs"}"
[server.warmup]
count = 1
[agent]
name = "echo"
[suite]
slice = "0:3"
[run]
concurrency = 2
evaluate = false
ledger = "{tmp_path / "design.sqlite"}"
workdir = "{tmp_path / "work"}"
time_scale = 50.0
"""
    )
    with pytest.raises(SystemExit):
        main(["plan", "--factors", "fresh", "--base", str(base), "--out", str(tmp_path / "d"), "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert [c["levels"]["fresh"] for c in plan["cells"]] == ["on", "off"]
    for rid in plan["run_order"]:
        ex = runner_main.start(load_config(tmp_path / "d" / f"{rid}.toml"), run_id=rid)
        assert ex.end_mark == "finished"
    with Ledger(tmp_path / "design.sqlite") as lg:
        argv = {
            r["run_id"]: json.loads(r["argv_json"])
            for r in lg.query("SELECT run_id, argv_json FROM server_lives")
        }
    assert "--preload-age" in argv["plan-c2"] and "--preload-age" not in argv["plan-c1"]
    with pytest.raises(SystemExit) as exc:
        main(
            ["plan", "--analyse", "plan-c1", "plan-c2", "--ledger", str(tmp_path / "design.sqlite"), "--json"]
        )
    assert exc.value.code == 0
    r = json.loads(capsys.readouterr().out)
    assert [c["levels"] for c in r["cells"]] == [{"fresh": "on"}, {"fresh": "off"}]
    assert [(c["api_error"], c["attempts"]) for c in r["cells"]] == [(0, 3), (0, 3)]
    assert r["held"]["concurrency"] == 2 and r["held"]["warmup"] == 1
    assert not r["glm"]["fitted"] and "nothing varies" in r["glm"]["why"]
    assert r["verdict"][0].startswith("No factor's effect")


# --- the ground truth ------------------------------------------------------------------------


def _simulate(ledger: Ledger, run_id: str, cfg: Config, rng: random.Random, per_attempt: int = 20) -> None:
    """One cell's attempts drawn from seed-used-server's hazard, as the simulator would draw them:
    each attempt is ``per_attempt`` requests at the cell's concurrency; a wedge ends the attempt
    api_error and restarts the server (a new life: same preload age, warm-up again)."""
    wedge = load_scenario(cfg.server.scenario).wedge
    assert wedge is not None
    args, sets = cfg.server.args, cfg.server.arg_sets
    preload = int(args[args.index("--preload-age") + 1]) if "--preload-age" in args else 0
    prefix_caching = "hybrid-safe" not in sets and "--no-enable-prefix-caching" not in args
    eager = "hybrid-safe" in sets or "--enforce-eager" in args
    ids = [f"i{n}" for n in range(int(str(cfg.suite.slice).split(":")[1]))]
    make_run(ledger, run_id, ids, 3, cfg)
    age = preload + cfg.server.warmup.count
    for iid in ids:
        for no in (1, 2, 3):
            wedged = False
            for _ in range(per_attempt):
                state = ServerState(age, cfg.run.concurrency, prefix_caching, eager, None)
                age += 1
                if rng.random() < probability(wedge, state):
                    wedged = True
                    break
            status = "api_error" if wedged else "submitted"
            add_attempt(
                ledger, run_id, iid, no, status, reason="stall_midstream" if wedged else "", patch="x"
            )
            if not wedged:
                break
            age = preload + cfg.server.warmup.count


@pytest.mark.parametrize("fraction", [False, True])
def test_the_analysis_finds_what_the_scenario_says(tmp_path: Path, fraction: bool) -> None:
    """seed-used-server's ground truth: age x1000 (a used server), then 4-way concurrency x64,
    then the two flags x6; warm-up matters only for the first two requests of a life."""
    truth: dict[str, Any] = load_scenario("seed-used-server").ground_truth["factors"]
    assert truth["age"] > truth["concurrency_4"] > truth["prefix_caching"] * truth["cuda_graphs"]
    plan = pl.make_plan(pl.parse(["fresh,warmup,flags,concurrency"]), fraction=fraction, seed=1)
    rng = random.Random(0)
    with Ledger(tmp_path / "l.sqlite") as lg:
        for cell in plan["cells"]:
            _simulate(lg, cell["run_id"], validate(cell["config"], cell["run_id"]), rng)
        r = pl.analyse(lg, plan["run_order"])
    effects = {e["factor"]: e for e in r["effects"]}
    assert set(effects) == {"fresh", "warmup", "flags", "concurrency"}
    fresh, conc = effects["fresh"], effects["concurrency"]
    assert fresh["ci95"][0] > 0.3  # a used server: far more api_errors
    assert conc["ci95"][1] < 0  # one at a time: far fewer
    assert fresh["hazard_ratio"]["hr"] > 1 / conc["hazard_ratio"]["hr"] > 1  # ranked as the truth
    assert not effects["warmup"]["ci95"][0] > 0  # no claim that skipping warm-up hurts here
    assert r["verdict"][0].startswith("Most of the work is done by fresh: on -> off")
    assert "concurrency" in r["verdict"][1]


def test_analysis_refuses_what_it_cannot_estimate(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        for n, (conc, warm) in enumerate([(4, 2), (1, 0), (2, 2)]):
            cfg = validate({"run": {"concurrency": conc}, "server": {"warmup": {"count": warm}}}, "t")
            make_run(lg, f"r{n}", ["i0"], 3, cfg)
            add_attempt(lg, f"r{n}", "i0", 1, "submitted", patch="x")
        with pytest.raises(BadInput, match="takes 3 levels"):
            pl.analyse(lg, ["r0", "r1", "r2"])
        with pytest.raises(BadInput, match="at least two"):
            pl.analyse(lg, ["r0"])
        with pytest.raises(BadInput, match="given twice"):
            pl.analyse(lg, ["r0", "r0"])
        with pytest.raises(BadInput, match="no run 'zz'"):
            pl.analyse(lg, ["r0", "zz"])
        r = pl.analyse(lg, ["r0", "r1"])  # concurrency and warm-up change together
    assert [e["factor"] for e in r["effects"]] == ["warmup"]
    assert "concurrency changes together with warmup" in " ".join(r["verdict"])
