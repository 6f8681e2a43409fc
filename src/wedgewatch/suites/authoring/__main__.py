"""``python -m wedgewatch.suites.authoring``: rebuild the bundled suite's JSON files."""

from __future__ import annotations

import logging

from wedgewatch.suites.authoring.build import build_all

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for iid in build_all():
        logging.getLogger(__name__).info("built %s", iid)
