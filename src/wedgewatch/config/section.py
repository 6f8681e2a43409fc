"""The base of every settings section: unknown fields are errors, each field's docstring is its
description, and defaults are validated too."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Every settings section: unknown fields are errors, and each field's docstring is its
    description (every section of the config package derives from it)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)
