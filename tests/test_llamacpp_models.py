"""The bundled Gemma GGUF is joined once, even when several processes ask at the same moment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wedgewatch.launchers import models

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
from wedgewatch.launchers import models
print(models.bundled_model_path())
print(models.bundled_chat_template_path())
"""


def test_parallel_first_use_assembles_once(tmp_path: Path) -> None:
    env = {**os.environ, "WEDGEWATCH_MODEL_CACHE": str(tmp_path / "cache")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    model = tmp_path / "cache" / models.MODEL_FILE
    assert {o[0].splitlines()[0] for o in outs} == {str(model)}
    assert sum(o[1].count("assembling") for o in outs) == 1
    with model.open("rb") as f:
        assert f.read(4) == b"GGUF"
    assert not list((tmp_path / "cache").glob("*.partial"))
    template = Path(outs[0][0].splitlines()[1])
    assert "<start_of_turn>" in template.read_text()

    # A later start reuses the file as it is.
    stamp = model.stat().st_mtime_ns
    assert models.bundled_model_path(tmp_path / "cache") == model
    assert model.stat().st_mtime_ns == stamp


def test_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WEDGEWATCH_MODEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models.cache_dir() == tmp_path / "wedgewatch" / "models"
