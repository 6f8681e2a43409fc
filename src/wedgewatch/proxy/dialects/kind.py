"""The APIs the proxy watches, by one word each (``app.GENERATIONS`` maps the paths to them)."""

from __future__ import annotations

from typing import Literal

Kind = Literal["chat", "completion", "responses", "messages"]  # the API of a watched generation
