"""The engine's compile and kernel caches, shared by every life: a fresh process, never cold caches.

A restart is for the engine's state (its KV cache, its scheduler, whatever wedged it), not for what
it compiled: a life that compiles again what the last one compiled pays minutes on the story's
hardware (torch.compile about 39 s of a DGX Spark's start, vLLM #44881) for nothing. Each variable
below points the engine's cache into ``server.cache_dir`` (a persistent directory, one folder per
cache), so every life of every run finds what an earlier one built:

- ``VLLM_CACHE_ROOT``: vLLM's own (its torch.compile artefacts under ``torch_compile_cache``),
  default ``~/.cache/vllm`` (``vllm/envs.py``);
- ``TORCHINDUCTOR_CACHE_DIR``: torch inductor's, default ``/tmp/torchinductor_$USER``, which a
  container or a reboot loses;
- ``TRITON_CACHE_DIR``: Triton's kernels, default ``~/.triton/cache``;
- ``FLASHINFER_WORKSPACE_BASE``: FlashInfer's JIT kernels go under ``BASE/.cache/flashinfer``,
  default the home directory.

A variable set in ``server.env`` or in wedgewatch's own environment wins: it is the user's word.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from wedgewatch.config import ServerConfig

_TORCH = (("TORCHINDUCTOR_CACHE_DIR", "torchinductor"), ("TRITON_CACHE_DIR", "triton"))
VARIABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm": (("VLLM_CACHE_ROOT", "vllm"), *_TORCH, ("FLASHINFER_WORKSPACE_BASE", "flashinfer")),
    "sglang": (*_TORCH, ("FLASHINFER_WORKSPACE_BASE", "flashinfer")),
}
"""Profile -> (variable, folder under ``cache_dir``): the engines that compile (llama.cpp and the
simulator do not)."""


def env(cfg: ServerConfig, outer: Mapping[str, str] | None = None) -> dict[str, str]:
    """The cache variables a life of ``cfg`` gets (none set already in ``cfg.env`` or ``outer``,
    wedgewatch's environment); the folders are made here, so each engine finds its own."""
    if not cfg.cache_dir:
        return {}
    outer = os.environ if outer is None else outer
    root = Path(cfg.cache_dir).expanduser()
    out: dict[str, str] = {}
    for name, folder in VARIABLES.get(cfg.profile, ()):
        if name in cfg.env or name in outer:
            continue
        path = root / folder
        path.mkdir(parents=True, exist_ok=True)
        out[name] = str(path)
    return out
