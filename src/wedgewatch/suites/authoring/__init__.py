"""The sources of the bundled suite (one module per repository) and the builder that turns them
into the JSON files under ``suites/bundled/``. Not needed at run time."""

from __future__ import annotations

from wedgewatch.suites.authoring import datekit, shopkit, textkit, toylib
from wedgewatch.suites.authoring.spec import RepoSpec

REPOS: list[RepoSpec] = [toylib.REPO, textkit.REPO, datekit.REPO, shopkit.REPO]
