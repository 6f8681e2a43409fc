"""LoRA adapters as arms: the agent asks for the name in ``agent.model``, the server serves the
adapter under its own name beside the base model, and the ledger's request rows say which one
each request asked for. The run test uses the real simulator, proxy and runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from wedgewatch.analysis.plan import factors as pl
from wedgewatch.base.errors import ConfigError
from wedgewatch.config import ServerConfig, validate
from wedgewatch.ledger import Ledger
from wedgewatch.runner import entry as runner_main
from wedgewatch.supervisor import profiles

pytestmark = pytest.mark.timeout(120)

ADAPTERS = {"story-lora": "/adapters/story-lora", "other": "/adapters/other"}


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (
            "vllm",
            ["--enable-lora", "--lora-modules", "story-lora=/adapters/story-lora", "other=/adapters/other"],
        ),
        (
            "sim",
            ["--enable-lora", "--lora-modules", "story-lora=/adapters/story-lora", "other=/adapters/other"],
        ),
        (
            "sglang",
            ["--enable-lora", "--lora-paths", "story-lora=/adapters/story-lora", "other=/adapters/other"],
        ),
        ("llamacpp", ["--lora", "/adapters/story-lora,/adapters/other"]),
    ],
)
def test_each_profile_serves_adapters_with_its_own_flags(profile: str, expected: list[str]) -> None:
    cfg = ServerConfig(profile=profile, model="m", lora_modules=ADAPTERS)
    argv = profiles.launch_argv(cfg, profiles.check(cfg), "127.0.0.1", 8000)
    i = argv.index(expected[0])
    assert argv[i : i + len(expected)] == expected
    bare = ServerConfig(profile=profile, model="m")
    assert expected[0] not in profiles.launch_argv(bare, profiles.check(bare), "127.0.0.1", 8000)


def test_the_requested_name_must_be_served_where_the_server_routes_by_name() -> None:
    cfg = ServerConfig(profile="sim", model="base", lora_modules={"story-lora": "/a"})
    profiles.check_requested_model(cfg, "story-lora")
    profiles.check_requested_model(cfg, "base")
    profiles.check_requested_model(cfg, None)
    with pytest.raises(ConfigError, match=r"agent\.model: 'story-lra' is neither"):
        profiles.check_requested_model(cfg, "story-lra")
    # llama-server answers to any name: nothing to check there.
    profiles.check_requested_model(ServerConfig(profile="llamacpp", model="f.gguf"), "anything")


def test_plan_lora_factor_sets_the_requested_model_and_reads_it_back() -> None:
    (lora,) = pl.parse(["lora"])
    assert lora.levels == ("base", "adapter")
    cfg: dict[str, object] = {"server": {"profile": "sim"}}
    lora.apply(cfg, "adapter")
    snap = validate(cfg, "t").snapshot()
    assert snap["agent"]["model"] == "story-lora" and "story-lora" in snap["server"]["lora_modules"]
    assert lora.read(snap) == "adapter"
    lora.apply(cfg, "base")
    snap = validate(cfg, "t").snapshot()
    assert snap["agent"]["model"] is None and lora.read(snap) == "base"


def _config(tmp_path: Path, model: str | None) -> dict[str, object]:
    agent: dict[str, object] = {"name": "echo"}
    if model is not None:
        agent["model"] = model
    return {
        "server": {
            "profile": "sim",
            "model": "base-model",
            "lora_modules": {"story-lora": "/adapters/story-lora"},
            "log_dir": str(tmp_path / "logs"),
            "warmup": {"count": 1},
        },
        "agent": agent,
        "suite": {"slice": "0:3"},
        "run": {
            "ledger": str(tmp_path / "l.sqlite"),
            "workdir": str(tmp_path / "work"),
            "evaluate": False,
            "time_scale": 50.0,
            "concurrency": 3,
        },
    }


def test_a_base_arm_and_an_adapter_arm_each_request_row_names_its_model(tmp_path: Path) -> None:
    for run_id, model in (("base", None), ("adapter", "story-lora")):
        cfg = validate(_config(tmp_path, model), run_id)
        assert runner_main.start(cfg, run_id=run_id).end_mark == "finished"
    with Ledger(tmp_path / "l.sqlite") as lg:
        rows = lg.query(
            "SELECT a.run_id, q.model, q.outcome, COUNT(*) AS n FROM requests q "
            "JOIN attempts a ON a.attempt_id = q.attempt_id GROUP BY a.run_id, q.model, q.outcome"
        )
        ends = lg.query("SELECT e.status FROM attempt_ends e")
    got = {(r["run_id"], r["model"], r["outcome"]): r["n"] for r in rows}
    assert got == {("base", "base-model", "ok"): 3, ("adapter", "story-lora", "ok"): 3}
    assert {r["status"] for r in ends} == {"submitted"}


def test_a_name_the_server_does_not_serve_is_refused_before_the_run(tmp_path: Path) -> None:
    cfg = validate(_config(tmp_path, "story-lra"), "typo")
    with pytest.raises(ConfigError, match=r"agent\.model"):
        runner_main.start(cfg, run_id="typo")
    assert not (tmp_path / "l.sqlite").exists()  # refused before the ledger was opened
