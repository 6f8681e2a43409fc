"""The one Jinja2 environment of the HTML the analysis makes: the static report and the live view
render the same templates (``analysis/templates``), autoescaped, since instance ids, reasons and
tags come from users' files. ``domid`` turns any key (an instance id, a server's name) into an
element id that is safe in HTML and CSS and the same on every render, so a live update replaces
the element it names."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jinja2 import Environment


def domid(prefix: str, key: object) -> str:
    return f"{prefix}-{hashlib.sha1(str(key).encode()).hexdigest()[:12]}"


@lru_cache(maxsize=1)
def environment() -> Environment:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("wedgewatch.analysis", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["domid"] = domid
    return env
