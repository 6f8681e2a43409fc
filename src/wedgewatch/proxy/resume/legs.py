"""A request that goes on, leg by leg: when the server life under it is replaced, the failure it
would have been becomes the end of one leg (a row: ``resumed``) and the next leg is set up on the
next ready life, whole, continued from its text or its token ids (``continuation.py``,
``token_ids.py``), or replayed up to what the client has (``replay.py``, ``chat_replay.py``).
docs/proxy.md, "Resume", says what goes on and what fails and why.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

from wedgewatch.base.events import LifeInDoubt
from wedgewatch.base.protocols import Resumable, Router
from wedgewatch.base.vocab import (
    ENGINE_DEATH,
    OWN_ERROR,
    RESUMABLE,
    RESUMED,
    STALL_KINDS,
    UPSTREAM_HTTP_PREFIX,
)
from wedgewatch.proxy.answers import Answers
from wedgewatch.proxy.deadlines import Watch
from wedgewatch.proxy.dialects import make_relay
from wedgewatch.proxy.dialects.chat import Relay
from wedgewatch.proxy.dialects.typed import TypedRelay
from wedgewatch.proxy.http import forward_headers
from wedgewatch.proxy.resume.blame import judge
from wedgewatch.proxy.resume.chat_replay import ChatReplay, refused
from wedgewatch.proxy.resume.continuation import Relayed, Splice, continuation
from wedgewatch.proxy.resume.keepalive import KeepAlive
from wedgewatch.proxy.resume.reencode import Reencoder
from wedgewatch.proxy.resume.replay import Replay
from wedgewatch.proxy.resume.token_ids import COMPLETIONS, TOKEN_IDS, with_budget
from wedgewatch.proxy.resume.typed_ids import GENERATE, Begun, inexact, prepare


class Resume(Exception):
    """The life under this request is being replaced and the request goes on, on the next one:
    the failure it would have been, and what to send there."""

    def __init__(
        self, outcome: str, message: str, extra: dict[str, Any], payload: bytes, relayed: Relayed | None
    ):
        super().__init__(message)
        self.outcome, self.message, self.extra = outcome, message, extra
        self.payload = payload
        self.relayed = relayed  # None: sent again whole (or replayed)


class Legs(Answers):
    """The resume of one request (see the module's docstring)."""

    resumes: int
    prior_tokens: int
    hide_ids: bool
    keep: KeepAlive  # a held stream's comments (keepalive.py)
    replayed: str | None = None  # why this leg replays rather than continues (its row says so)

    async def _quiet(self) -> None:
        await self.keep.stop()

    def _record(self, outcome: str, status: int | None, detail: dict[str, Any]) -> asyncio.Future[None]:
        if self.keep.sent:  # the comments the client had while its stream was held
            detail = {**detail, "keepalives": self.keep.sent}
        if self.replayed is not None:  # a replayed leg: why it was not continued instead
            detail = {**detail, "replayed": self.replayed}
        return super()._record(outcome, status, detail)

    def _by_ids_here(self) -> bool:
        """Whether this request's server continues a reply from its token ids (the profile's
        ``continuation``), so the ids are asked for as the reply is relayed."""
        router = self.router
        return isinstance(router, Resumable) and router.continuation(self.upstream) == TOKEN_IDS

    async def _resumable(self, outcome: str, message: str, extra: dict[str, Any]) -> Resume | None:
        """The resume of a request whose life is being replaced, or None (then ``extra`` may say
        why a replaced life's request was not resumed). A stall is resumed only when the verdict
        on its life is in already: one request stuck while its server serves others fails."""
        turn = await self._decide(outcome, message, extra)
        if turn is None:
            self.holding = False  # not held after all: the failure goes to the client
        return turn

    async def _decide(self, outcome: str, message: str, extra: dict[str, Any]) -> Resume | None:
        cfg, router, life = self.ctx.cfg, self.router, self.life
        splice = self.relay.splice if isinstance(self.relay, Relay | TypedRelay) else None
        if splice is not None and splice.departed is not None:
            extra["not_resumed"] = splice.departed  # a replay that is not the reply the client has
            return None
        if (
            cfg.on_wedge != "resume"
            or not isinstance(router, Resumable)
            or life is None
            or self.asked is None
        ):
            return None
        if not self._start_written or not (outcome in RESUMABLE or outcome.startswith(UPSTREAM_HTTP_PREFIX)):
            return None
        self.waiting, self.holding = False, True
        if self.out is not None:
            self.keep.start(self.out)  # held: the client's stream is kept alive meanwhile
        if not await self._replaced(outcome, router, life.life_id, extra):
            return None
        if self.resumes >= cfg.max_resumes:
            # It met a wedge on every life it reached: a suspect, not something to retry for ever.
            extra.update(suspect=True, not_resumed=f"resumed {self.resumes} time(s) already (max_resumes)")
            return None
        if self.out is None:  # the client has received nothing: the request goes again whole
            return Resume(outcome, message, extra, self.asked.payload, None)
        if isinstance(self.relay, TypedRelay):
            # A begun Responses or Messages stream: sent again whole too, and replayed up to what
            # the client has (``_turn`` sets the splice; replay.py).
            if self.relay.sent is None:
                extra["not_resumed"] = "what the client received was not kept"
                return None
            return Resume(outcome, message, extra, self.asked.payload, None)
        sent = self.relay.sent if isinstance(self.relay, Relay) else None
        relayed = Relayed.read(self.kind, sent or [], self.prior_tokens + self.watch.tokens)
        body, why = continuation(self.kind, self.asked.body, relayed, router.continuation(self.upstream))
        if body is None:
            # Text cannot continue it exactly (a tool call or reasoning begun, a server that
            # cannot continue a reply): replayed instead, and held to what the client has.
            refusal = refused(self.asked.body) if sent is not None else why
            if refusal is not None:
                extra["not_resumed"] = refusal
                return None
            return Resume(outcome, message, extra, self.asked.payload, None)
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        return Resume(outcome, message, extra, payload, relayed)

    async def _replaced(self, outcome: str, router: Resumable, life_id: str, extra: dict[str, Any]) -> bool:
        """Whether the life under the request is being replaced: the supervisor's verdict. A stall
        takes the verdict as it stands; any other failure asks the server whose it is first
        (``blame.py``): its own error goes on to the client at once, an engine's death waits up
        to ``verdict_wait`` for the verdict the proxy asks the supervisor for."""
        if outcome in STALL_KINDS:
            return await router.replacing(life_id, 0.0)
        if await router.replacing(life_id, 0.0):
            extra.update(blame=ENGINE_DEATH, blame_why="the supervisor's verdict on the life was in")
            return True
        blame = await judge(self.ctx.session, self.base_url)
        extra.update(blame.detail())
        if blame.who == OWN_ERROR:
            return False
        if blame.who == ENGINE_DEATH:
            doubt = LifeInDoubt(
                attempt_id=self.attempt_id,
                life_id=life_id,
                request_id=self.request_id,
                outcome=outcome,
                health=blame.health,
            )
            self.ctx.bus.publish(doubt)
        if await router.replacing(life_id, self.ctx.cfg.verdict_wait):
            return True
        if blame.who == ENGINE_DEATH:
            extra["not_resumed"] = (
                f"no verdict on the life within verdict_wait ({self.ctx.cfg.verdict_wait:g} s)"
            )
        return False

    async def _turn(self, turn: Resume) -> bytes | web.StreamResponse:
        """End this leg (its row: ``resumed``, naming the next) and set up the next one on the next
        ready life; the payload to send there, or the failure when no life came."""
        router = self.router
        assert isinstance(router, Resumable) and isinstance(router, Router) and self.life is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._resp is not None:
            self._resp.release()
            self._resp = None
        try:
            await router.after(self.life.life_id, self.ctx.cfg.restart_wait)
        except Exception as exc:  # no life within restart_wait, or the supervisor gave up
            self._no_resume = True  # no second try at resuming
            why = f"no next life: {exc}"
            return await self._fail(
                turn.outcome, 502, "upstream_error", turn.message, {**turn.extra, "not_resumed": why}
            )
        next_id = f"{self.ctx.ids.getrandbits(64):016x}"
        cause = {"cause": turn.outcome, "error": turn.message, **turn.extra, "resumed_as": next_id}
        await self._end(RESUMED, None, cause)
        if self.out is not None:
            self.keep.start(self.out)  # until the next leg's first byte (exchange._stream)
        member = router.route(self.attempt_id)
        router.release(self.upstream)
        self.upstream, self.life = member, member.life()
        self.base_url = member.base_url.rstrip("/")
        self.legs.append(self.request_id)
        self.request_id, self.resumes = next_id, self.resumes + 1
        self.prior_tokens += self.watch.tokens
        self.started_at, self.t0 = time.time(), self.ctx.clock()
        self.watch = Watch(self.ctx.cfg, self.t0, self.ctx.metrics.itl, engine=self.ctx.engine)
        sent = self.relay.sent if isinstance(self.relay, Relay | TypedRelay) else None
        self.relay = make_relay(self.kind, self.watch)
        self.relay.want_usage = self.asked.want_usage if self.asked is not None else False
        if turn.relayed is not None and isinstance(self.relay, Relay):
            self.relay.sent, self.relay.splice = sent, Splice(turn.relayed)
        elif sent is not None and self.out is None:
            self.relay.sent = []  # nothing received: sent again whole, what it relays kept anew
        elif sent is not None:
            # A replay (replay.py): what the client has is swallowed, the rest goes on under the
            # first leg's ids; the list goes on growing with what this leg forwards, for a further
            # resume. The replay's tokens are the whole reply's, so none are counted before it.
            cause = (turn.outcome, turn.message)
            if isinstance(self.relay, TypedRelay):
                self.relay.sent, self.relay.splice = sent, Replay(list(sent), cause)
            elif isinstance(self.relay, Relay):
                self.relay.sent, self.relay.splice = sent, ChatReplay(self.kind, list(sent), cause)
            self.prior_tokens = 0
        self.stall, self._ended, self._start_written, self.holding = None, False, False, False
        self._held, self._tail = [], []
        if isinstance(self.relay, Relay):
            self.relay.hide_ids = self.hide_ids
        self.leg_path, self.replayed = None, None
        if turn.relayed is not None and turn.relayed.by_ids:
            return await self._from_ids(turn.relayed, turn.payload)
        if isinstance(self.relay, TypedRelay) and isinstance(self.relay.splice, Replay):
            return await self._typed_from_ids(self.relay, turn.payload)
        return turn.payload

    async def _typed_from_ids(self, relay: TypedRelay, payload: bytes) -> bytes:
        """A begun Responses or Messages stream goes on from ids where the next life renders the
        API (vLLM with ``--enable-scale-out``: typed_ids.py), its continuation re-encoded as the
        client's events (reencode.py); else it stays a replay, and its row says why."""
        assert self.asked is not None and relay.sent is not None
        begun = Begun.read(self.kind, relay.sent)
        router = self.router
        why = inexact(self.kind, self.asked.body) or begun.blocker
        if not isinstance(router, Resumable) or router.continuation(self.upstream) != TOKEN_IDS:
            why = "the server's profile does not continue from token ids"
        if why is None:
            headers = forward_headers(self.request.headers, drop=("accept-encoding", "content-encoding"))
            body = await prepare(self.ctx.session, self.base_url, headers, self.asked.body, begun)
            if isinstance(body, dict):
                relay.splice, relay.source, self.leg_path = None, Reencoder(begun), GENERATE
                return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            why = body
        self.replayed = why
        return payload

    async def _from_ids(self, relayed: Relayed, payload: bytes) -> bytes:
        """A continuation from token ids goes to /v1/completions, with the token budget a chat
        request without a limit had (what the next life's context leaves: token_ids.py); by its
        text, as on a server without ids, when that life does not say its context."""
        assert self.asked is not None
        headers = forward_headers(self.request.headers, drop=("accept-encoding", "content-encoding"))
        budgeted = await with_budget(self.ctx.session, self.base_url, headers, payload)
        if budgeted is not None:
            self.leg_path = COMPLETIONS
            return budgeted
        relayed.by_ids = False
        body, _ = continuation(self.kind, self.asked.body, relayed, "continue")
        if body is None:  # the text route refuses what the ids took (a prompt of ids): as it is
            return payload
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
