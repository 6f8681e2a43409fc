"""The vLLM-on-CPU launcher's command line and the profile that builds it, without starting an
engine: `launcher = "vllm-cpu"` runs `python -m wedgewatch.launchers.vllm serve MODEL ...` with
`vllm serve`'s own flags; the bundled model is served under its name with Gemma's turn template;
where vLLM's environment lives; bad input is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vllm_helpers import provision
from wedgewatch.base.errors import ConfigError
from wedgewatch.config import ServerConfig
from wedgewatch.launchers import models, vllm, vllm_env
from wedgewatch.supervisor import profiles


def test_the_vllm_profile_runs_the_cpu_launcher_with_vllm_serves_flags() -> None:
    cfg = ServerConfig(
        profile="vllm",
        launcher="vllm-cpu",
        model="gemma3-270m",
        arg_sets=["hybrid-safe"],
        lora_modules={"a": "/adapters/a"},
        args=["--max-num-seqs", "4"],
    )
    profile = profiles.check(cfg)
    argv = profiles.launch_argv(cfg, profile, "127.0.0.1", 8123)
    assert argv == [
        sys.executable,
        "-m",
        "wedgewatch.launchers.vllm",
        "serve",
        "gemma3-270m",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--enable-lora",
        "--lora-modules",
        "a=/adapters/a",
        "--max-num-seqs",
        "4",
    ]
    # On a GPU machine only the program differs.
    gpu = profiles.launch_argv(cfg.model_copy(update={"launcher": None}), profile, "127.0.0.1", 8123)
    assert gpu[:3] == ["vllm", "serve", "gemma3-270m"] and gpu[3:] == argv[5:]


def test_vllm_cpu_is_a_launcher_of_the_vllm_profile_only() -> None:
    with pytest.raises(ConfigError, match=r"server\.launcher.*vllm-cpu is a launcher of the vllm profile"):
        profiles.check(ServerConfig(profile="sglang", launcher="vllm-cpu", model="m"))


def test_the_bundled_model_is_served_under_its_name_with_gemmas_turns() -> None:
    model = provision()
    argv = vllm.api_server_argv("/venv/bin/python", "gemma3-270m", ["--port", "1"])
    assert argv == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "gemma3-270m",
        "--chat-template",
        str(models.bundled_chat_template_path()),
        "--max-num-batched-tokens",
        "64",
        "--port",
        "1",
    ]
    assert (model / "model.safetensors").is_file() and (model / "config.json").is_file()
    named = vllm.api_server_argv("/p", "gemma3-270m", ["--served-model-name", "g", "--chat-template=t"])
    assert named.count("--served-model-name") == 1 and "--chat-template" not in named
    other = vllm.api_server_argv("/p", "org/other", ["--max-num-batched-tokens=2048"])
    assert other == ["/p", "-m", vllm.API_SERVER, "--model", "org/other", "--max-num-batched-tokens=2048"]
    # Short engine steps by default, never shorter than vLLM allows (--max-num-seqs).
    many = vllm.api_server_argv("/p", "org/other", ["--max-num-seqs", "512"])
    assert many[5:7] == ["--max-num-batched-tokens", "512"]


def test_vllms_environment_is_cached_by_version_and_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WEDGEWATCH_VLLM_ENV", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    where = vllm_env.env_dir()
    assert where.parent == tmp_path / "wedgewatch"
    assert where.name.startswith(f"vllm-cpu-{vllm_env.VLLM_CPU_VERSION}-")
    monkeypatch.setenv("WEDGEWATCH_VLLM_ENV", str(tmp_path / "mine"))
    assert vllm_env.env_dir() == tmp_path / "mine"
    pins = [line for line in vllm_env.LOCK_FILE.read_text().splitlines() if line and not line.startswith("#")]
    assert f"vllm-cpu=={vllm_env.VLLM_CPU_VERSION}" in pins and "torch==2.13.0" in pins
    assert not [p for p in pins if p.split("==")[0] in ("torchvision", "torchaudio", "torchcodec")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve"], "serve: MODEL is required (gemma3-270m for the bundled model)"),
        (["serve", "--port", "1"], "serve: MODEL is required (gemma3-270m for the bundled model)"),
        (["launch"], "unknown command 'launch': serve MODEL ... or provision"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch.launchers.vllm", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == f"wedgewatch.launchers.vllm: error: {message}"
