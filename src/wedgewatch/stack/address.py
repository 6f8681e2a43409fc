"""Where a stack's proxy listens, recorded in the ledger: one ``proxy_started`` event row (its URL and
pid), by which a reader of the ledger (``wedgewatch view``) finds the proxy's read-only
``/wedgewatch/status``, the progress of the requests in flight. Written once per proxy start, by
``Stack`` (``serve``, ``run``, ``wrap``) and ``ProxiedServer`` (``proxy --ledger``)."""

from __future__ import annotations

import logging
import os

from wedgewatch.base.vocab import PROXY_STARTED
from wedgewatch.ledger import Ledger

log = logging.getLogger(__name__)


def record_address(ledger: Ledger, url: str, run_id: str | None) -> None:
    try:
        ledger.event(PROXY_STARTED, {"url": url, "pid": os.getpid()}, run_id=run_id)
    except Exception:  # the proxy serves whether or not a viewer can find it
        log.exception("could not record the proxy's address")
