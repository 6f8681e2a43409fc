"""How one generation request ended, as one value: its ledger row and its event are both read
from it, so the two can never disagree."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from wedgewatch.base.events import RequestEnded, RequestOk, Stalled, UpstreamFailed
from wedgewatch.base.protocols import LifeInfo
from wedgewatch.base.vocab import OK, is_infra_outcome
from wedgewatch.proxy.deadlines import Stall, Watch

# The exchange's logger: a request's line reads as the proxy's, as it always has.
log = logging.getLogger("wedgewatch.proxy.exchange")


class _Ids(TypedDict):
    attempt_id: str | None
    request_id: str
    path: str
    outcome: str
    life_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending:
    request_id: str
    attempt_id: str | None
    life: LifeInfo | None
    path: str
    model: str | None
    client_stream: bool
    started_at: float
    watch: Watch
    duration: float
    outcome: str
    http_status: int | None
    usage: Any
    detail: Mapping[str, Any]
    stall: Stall | None

    def row(self) -> dict[str, Any]:
        """The request's row (the ledger's ``requests`` table, ledger/schema.py; JSONL rows are
        the same)."""
        life, watch = self.life, self.watch
        usage = self.usage if isinstance(self.usage, dict) else {}
        return {
            "request_id": self.request_id,
            "attempt_id": self.attempt_id,
            "life_id": life.life_id if life else None,
            "path": self.path,
            "model": self.model,
            "client_stream": int(self.client_stream),
            "started_at": self.started_at,
            "ttft": watch.ttft,
            "tokens_out": watch.tokens,
            "max_gap": watch.max_gap if watch.tokens > 1 and watch.first is not None else None,
            "duration": self.duration,
            "outcome": self.outcome,
            "http_status": self.http_status,
            # Chat and completions name them so; the Responses API input_tokens and output_tokens.
            "prompt_tokens": usage.get("prompt_tokens", usage.get("input_tokens")),
            "completion_tokens": usage.get("completion_tokens", usage.get("output_tokens")),
            "age_seconds": life.age_seconds if life else None,
            "age_requests": life.age_requests if life else None,
            "age_tokens": life.age_tokens if life else None,
            "detail_json": {k: v for k, v in self.detail.items() if v is not None},
        }

    def log(self) -> None:
        """One line per request: at debug when it went well, at info otherwise."""
        log.log(
            logging.DEBUG if self.outcome == OK else logging.INFO,
            "request %s %s (attempt %s): %s, %d tokens in %.3f s",
            self.request_id,
            self.path,
            self.attempt_id,
            self.outcome,
            self.watch.tokens,
            self.duration,
        )

    def event(self) -> RequestEnded | None:
        """What subscribers hear: a finished request, a stall, or an infrastructure failure (a
        client's own error or disconnect says nothing about the server, so it is not published)."""
        ids: _Ids = {
            "attempt_id": self.attempt_id,
            "request_id": self.request_id,
            "path": self.path,
            "outcome": self.outcome,
            "life_id": self.life.life_id if self.life is not None else None,
        }
        stall, watch = self.stall, self.watch
        if self.outcome == OK:
            return RequestOk(**ids, tokens_out=watch.tokens, ttft=watch.ttft, duration=self.duration)
        if stall is not None and self.outcome == stall.kind:
            return Stalled(
                **ids,
                elapsed=round(stall.elapsed, 3),
                since_last_token=round(stall.since_last_token, 3),
                tokens_out=stall.tokens,
                window=stall.window,
                message=stall.message,
            )
        if is_infra_outcome(self.outcome):
            error = self.detail.get("error")
            return UpstreamFailed(
                **ids, status=self.http_status, message=None if error is None else str(error)
            )
        return None
