"""The arithmetic a standby is refused or kept by (supervisor/room.py), on given machines: the
story's DGX Spark (one memory for CPU and GPU, 128 GB), a discrete GPU, this CPU. Weights are
files on disk, as the check reads them (sparse files: their size costs no disk)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wedgewatch.config import ServerConfig
from wedgewatch.supervisor import room
from wedgewatch.supervisor.room import GB, Machine

SPARK = Machine(
    available=120 * GB, total=128 * GB, cpus=tuple(range(20)), gpu_total=128 * GB, gpu_used=0, unified=True
)
"""A DGX Spark as nvidia-smi and /proc/meminfo show it: no GPU memory of its own."""


def weights(tmp_path: Path, gb: float, name: str = "model") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    with (folder / "model-00001-of-00001.safetensors").open("wb") as f:
        f.truncate(int(gb * GB))
    return folder


def vllm(model: Path | str, *args: str, **over: Any) -> ServerConfig:
    return ServerConfig(profile="vllm", model=str(model), args=list(args), standby=1, **over)


def test_two_bf16_copies_of_a_35b_model_do_not_fit_a_spark(tmp_path: Path) -> None:
    got = room.check(vllm(weights(tmp_path, 70.0), "--gpu-memory-utilization", "0.45"), SPARK)
    assert not got.on
    assert "70.0 GB of weights do not fit in one engine's 57.6 GB" in got.line
    assert "memory shared by CPU and GPU" in got.line


def test_two_fp8_copies_fit_a_spark_and_the_line_says_the_kv_cache_left(tmp_path: Path) -> None:
    got = room.check(vllm(weights(tmp_path, 35.0), "--gpu-memory-utilization=0.45"), SPARK)
    assert got.on and got.figures["kv_gb"] == 22.6
    assert got.line.startswith("standby on: 2 engines x --gpu-memory-utilization 0.45 of 128.0 GB")
    assert "35.0 GB of weights and up to 22.6 GB of KV cache" in got.line


def test_vllms_default_share_leaves_no_room_for_a_second_engine(tmp_path: Path) -> None:
    got = room.check(vllm(weights(tmp_path, 18.0)), SPARK)
    assert not got.on and got.figures["utilization"] == 0.9
    assert "= 230.4 GB" in got.line and "--gpu-memory-utilization 0.50 or less" in got.line
    # What others hold on the device lowers the share two engines may take.
    busy = Machine(gpu_total=80 * GB, gpu_used=8 * GB)
    got = room.check(vllm(weights(tmp_path, 18.0, "b"), "--gpu-memory-utilization", "0.5"), busy)
    assert not got.on and "8.0 GB held by others" in got.line and "0.45 or less" in got.line


def test_asleep_a_spare_frees_its_kv_cache_and_on_a_discrete_gpu_its_weights(tmp_path: Path) -> None:
    model = weights(tmp_path, 35.0)
    spark = room.check(vllm(model, "--gpu-memory-utilization", "0.45", standby_sleep=True), SPARK)
    assert spark.on and "keeps its weights in the same memory" in spark.line
    h100 = Machine(gpu_total=80 * GB, gpu_used=0)
    got = room.check(
        vllm(weights(tmp_path, 14.0, "b"), "--gpu-memory-utilization", "0.45", standby_sleep=True), h100
    )
    assert got.on and "the spare's 14.0 GB of weights wait in host memory" in got.line


def test_no_gpu_to_read_keeps_the_spare_and_says_it_is_unchecked(tmp_path: Path) -> None:
    got = room.check(vllm(weights(tmp_path, 35.0)), Machine())
    assert got.on and got.line.startswith("standby unchecked: no GPU memory to read")


def test_the_weights_of_a_hub_name_are_read_from_the_hugging_face_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-30B-A3B-FP8" / "snapshots"
    snapshot.mkdir(parents=True)
    weights(snapshot, 31.0, "abc123")
    cfg = vllm("Qwen/Qwen3-30B-A3B-FP8")
    assert room.weights_bytes(cfg) == 31 * GB
    assert room.weights_bytes(vllm("Qwen/not-downloaded")) is None


CPU = Machine(available=int(17.1 * GB), total=24 * GB, cpus=(0, 1))


def cpu(**over: Any) -> ServerConfig:
    return ServerConfig(profile="vllm", launcher="vllm-cpu", model="gemma3-270m", standby=1, **over)


def test_two_cpu_engines_fit_this_machine_on_a_core_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(room.KV_ENV, raising=False)
    monkeypatch.delenv(room.BIND_ENV, raising=False)
    got = room.cpu_room(cpu(), CPU, int(0.54 * GB))
    assert got.on and got.cores == ("0", "1")
    # 2 x (0.54 + 1.07 (1 GiB) + 2.8) = 8.8 GB
    assert got.figures["need_gb"] == 8.8 and got.figures["available_gb"] == 17.1
    assert "VLLM_CPU_KVCACHE_SPACE=1" in got.line and "cores 0 and 1" in got.line


def test_a_large_kv_cache_is_refused_with_the_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(room.BIND_ENV, raising=False)
    got = room.cpu_room(cpu(env={room.KV_ENV: "8"}), CPU, int(0.54 * GB))
    assert not got.on and got.cores is None
    assert got.line == (
        "standby refused: 2 engines x (0.5 GB weights + 8.6 GB KV cache (VLLM_CPU_KVCACHE_SPACE=8) "
        "+ 2.8 GB runtime) = 23.9 GB > 17.1 GB available; running without a spare"
    )


def test_one_cpu_cannot_hold_two_engines_and_a_users_binding_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(room.BIND_ENV, raising=False)
    one = Machine(available=17 * GB, cpus=(3,))
    assert not room.cpu_room(cpu(), one, GB).on
    many = Machine(available=64 * GB, cpus=(0, 1, 2, 3, 8, 9, 10, 11))
    assert room.cpu_room(cpu(), many, GB).cores == ("0-3", "8-11")
    mine = room.cpu_room(cpu(env={room.BIND_ENV: "0-7"}), many, GB)
    assert mine.on and mine.cores is None and "VLLM_CPU_OMP_THREADS_BIND=0-7" in mine.line


def test_unknown_weights_or_memory_keep_the_spare_unchecked() -> None:
    got = room.cpu_room(cpu(), CPU, None)
    assert got.on and got.line.startswith("standby unchecked: the model's size is unknown")
    got = room.cpu_room(cpu(), Machine(cpus=(0, 1)), GB)
    assert got.on and "memory available unknown" in got.line


def test_the_simulator_and_other_profiles_are_not_refused() -> None:
    assert room.check(ServerConfig(standby=1)).on
    llama = room.check(ServerConfig(profile="llamacpp", model="m.gguf", standby=1), CPU)
    assert llama.on and "not checked for profile llamacpp" in llama.line
