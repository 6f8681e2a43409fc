"""Suites: SWE-bench JSONL and JSON lists, a datasets directory, the bundled suite, filters, and
one-line errors naming the file and line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wedgewatch.base.errors import SuiteError
from wedgewatch.config import SuiteConfig
from wedgewatch.suites.load import load_dataset, load_file, load_suite, parse_slice


def record(iid: str, **extra: Any) -> dict[str, Any]:
    base = {
        "instance_id": iid,
        "repo": "owner/proj",
        "base_commit": "0" * 40,
        "problem_statement": f"fix {iid}",
        # SWE-bench stores the test lists as JSON strings
        "FAIL_TO_PASS": json.dumps([f"tests/test_x.py::test_{iid}"]),
        "PASS_TO_PASS": "[]",
        "patch": "",
        "test_patch": "",
    }
    base.update(extra)
    return base


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_with_swebench_fields(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "s.jsonl", [record("a__b-1"), record("a__b-2", PASS_TO_PASS=["t::p"])])
    insts = load_file(p)
    assert [i["instance_id"] for i in insts] == ["a__b-1", "a__b-2"]
    assert insts[0]["FAIL_TO_PASS"] == ["tests/test_x.py::test_a__b-1"]
    assert insts[0]["PASS_TO_PASS"] == []
    assert insts[1]["PASS_TO_PASS"] == ["t::p"]


def test_json_list(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text(json.dumps([record("x-1"), record("x-2")], indent=2))
    assert [i["instance_id"] for i in load_file(p)] == ["x-1", "x-2"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"instance_id": "c-3", "repo": ', r"s\.jsonl:3: not valid JSON"),
        ('{"instance_id": "c-3"}', r"s\.jsonl:3: missing field\(s\) repo, base_commit, problem_statement"),
        ("[1, 2]", r"s\.jsonl:3: expected a JSON object"),
        (json.dumps(record("c-1")), r"s\.jsonl:3: duplicate instance_id 'c-1' \(first at .*s\.jsonl:1\)"),
        (
            json.dumps(record("c-3", FAIL_TO_PASS="[oops")),
            r"s\.jsonl:3: FAIL_TO_PASS is a string but not a JSON list",
        ),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    p = write_jsonl(tmp_path / "s.jsonl", [record("c-1"), "", line, record("c-4")])
    with pytest.raises(SuiteError, match=message) as info:
        load_file(p)
    assert "\n" not in str(info.value)


def test_filters_ids_regex_slice(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "s.jsonl", [record(f"proj-{n}") for n in range(10)])
    pick = lambda **kw: [i["instance_id"] for i in load_suite(SuiteConfig(path=str(p), **kw)).instances]  # noqa: E731
    assert pick(ids=["proj-7", "proj-2"]) == ["proj-2", "proj-7"]  # suite order
    assert pick(regex=r"-[13]$") == ["proj-1", "proj-3"]
    assert pick(slice="2:4") == ["proj-2", "proj-3"]
    assert pick(slice="3") == ["proj-0", "proj-1", "proj-2"]
    assert pick(regex=r"[02468]$", slice="1:3") == ["proj-2", "proj-4"]
    with pytest.raises(SuiteError, match=r"suite\.ids: not in the suite: nope"):
        pick(ids=["nope"])
    with pytest.raises(SuiteError, match=r"suite\.regex"):
        pick(regex="(")
    with pytest.raises(SuiteError, match="no instance left"):
        pick(regex="zzz")
    with pytest.raises(SuiteError, match=r"suite\.slice"):
        parse_slice("a:b")


def test_missing_file_is_a_suite_error(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match=r"^suite\.path: .*nope\.jsonl: no such file$"):
        load_suite(SuiteConfig(path=str(tmp_path / "nope.jsonl")))


def test_bundled_suite_loads_when_no_path(tmp_path: Path) -> None:
    suite = load_suite(SuiteConfig(slice="0:3"))
    assert suite.source == "bundled"
    assert len(suite.instances) == 3
    for inst in suite.instances:
        assert inst["FAIL_TO_PASS"] and isinstance(inst["FAIL_TO_PASS"], list)
        assert "wedgewatch" not in inst  # only SWE-bench fields reach the runner


def test_datasets_directory_is_loaded_through_datasets(tmp_path: Path) -> None:
    import datasets  # type: ignore[import-untyped]

    rows = [record("ds-1"), record("ds-2")]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    insts = load_dataset(str(tmp_path / "ds"), "test")
    assert [i["instance_id"] for i in insts] == ["ds-1", "ds-2"]
    assert insts[0]["FAIL_TO_PASS"] == ["tests/test_x.py::test_ds-1"]


def test_hub_dataset_offline_gives_one_clear_line(tmp_path: Path) -> None:
    """The hub cannot be reached from here: the loading code is real and its failure is one line."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[suite]\ndataset = "princeton-nlp/SWE-bench_Lite"\n[run]\nledger = "{tmp_path / "l.sqlite"}"\n'
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("wedgewatch: error:")]
    assert len(lines) == 1
    assert "suite.dataset 'princeton-nlp/SWE-bench_Lite'" in lines[0] and "cannot load" in lines[0]
    assert not (tmp_path / "l.sqlite").exists()  # nothing written for a suite that did not load


def test_malformed_suite_line_on_the_cli_leaves_the_ledger_as_it_was(tmp_path: Path) -> None:
    from ledger_helpers import add_attempt, dump, make_run
    from wedgewatch.ledger import Ledger

    ledger = tmp_path / "l.sqlite"
    with Ledger(ledger) as lg:  # an earlier run's facts
        make_run(lg, "earlier", ["a"])
        add_attempt(lg, "earlier", "a", 1, "submitted", patch="x", resolved=1)
        before = dump(lg)
    suite = write_jsonl(tmp_path / "s.jsonl", [record("ok-1"), '{"instance_id": "bad", ', record("ok-3")])
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[suite]\npath = "{suite}"\n[run]\nledger = "{ledger}"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wedgewatch: error: {suite}:2: not valid JSON"), lines
    with Ledger(ledger) as lg:
        assert dump(lg) == before


def test_an_instance_without_a_repository_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    from ledger_helpers import add_attempt, dump, make_run
    from wedgewatch.ledger import Ledger

    ledger = tmp_path / "l.sqlite"
    with Ledger(ledger) as lg:
        make_run(lg, "earlier", ["a"])
        add_attempt(lg, "earlier", "a", 1, "submitted", patch="x", resolved=1)
        before = dump(lg)
    mirrors = tmp_path / "mirrors"
    (mirrors / "owner__proj").mkdir(parents=True)  # owner/proj has a mirror; other/gone has none
    suite = write_jsonl(
        tmp_path / "s.jsonl",
        [record("ok-1"), record("gone-1", repo="other/gone"), record("gone-2", repo="other/gone")],
    )
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[suite]\npath = "{suite}"\nrepos_dir = "{mirrors}"\n[run]\nledger = "{ledger}"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"wedgewatch: error: {suite}: 2 instance(s) have no repository, the first gone-1"
    )
    assert str(mirrors / "other__gone") in lines[0]
    with Ledger(ledger) as lg:
        assert dump(lg) == before  # no run started, nothing rewritten


def test_the_suite_command_writes_the_suite_a_run_would_load(tmp_path: Path) -> None:
    """`wedgewatch suite` (the quick tour's `suite.jsonl`): the bundled suite as a file that loads
    back as the same instances; with a config, its [suite] selection."""

    def suite(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "wedgewatch", "suite", *args], capture_output=True, text=True, timeout=120
        )

    done = suite("--out", str(tmp_path / "suite.jsonl"))
    assert done.returncode == 0, done.stderr
    bundled = load_suite(SuiteConfig()).instances
    assert load_file(tmp_path / "suite.jsonl") == bundled and len(bundled) == 20
    cfg = tmp_path / "run.toml"
    cfg.write_text('[suite]\nregex = "toylib"\nslice = "1:3"\n')
    chosen = suite(str(cfg))
    assert [json.loads(line)["instance_id"] for line in chosen.stdout.splitlines()] == [
        "wedgewatch__toylib-0002",
        "wedgewatch__toylib-0003",
    ]
    bad = suite("--out", str(tmp_path / "no" / "such" / "dir" / "s.jsonl"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--out" in bad.stderr
