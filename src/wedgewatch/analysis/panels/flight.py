"""The requests in flight: one row per request, its legs included (a request resumed on the next
server life is one row with a leg per life), the slowest first.

What is in flight comes from the ledger (a ``request_starts`` row without its ``requests`` row);
how it is going (time to first token, tokens so far, seconds since the last token, a stall the
proxy found) from the proxy's ``/wedgewatch/status`` when the view can reach it (``progress``),
else those cells are blank. A row turns amber at half of a deadline (the first token's, the next
token's or the whole request's, whichever is nearest), and red when the proxy ends it (a stall it
found, or an end that is the infrastructure's); requests that ended within ``LINGER`` seconds stay,
so an ending is seen, not missed between two looks."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wedgewatch.analysis.panels.axis import duration
from wedgewatch.analysis.panels.scope import RUN, Scope
from wedgewatch.base.vocab import LIFE_FAILURES, OK, RESUMED, TOTAL_TIMEOUT, is_infra_outcome, sql_list
from wedgewatch.config import WatchdogConfig
from wedgewatch.ledger.store import Ledger

LINGER = 60.0
"""Seconds a request that ended badly (red, or resumed) stays in the table."""
LINGER_OK = 5.0
"""Seconds a request that ended well stays: long enough to be seen ending, short enough that a
busy server's hundreds of ends a minute do not bury what is in flight."""
ENDED_AT_MOST = 50
"""Ended requests shown at most, the latest."""
OK_AT_MOST = 10
"""Of those, the ends that went well shown at most, the latest: enough to see requests ending; a
busy proxy ends hundreds a minute, and each row is drawn again every second."""
HORIZON = 6 * 3600.0
"""Ended requests are looked for among those started this long ago at most (an index range)."""

# The row's states (docs/view.md): CSS classes, never stored.
LIVE, AMBER, RED, DONE, ENDED = "live", "amber", "red", "done", "ended"


def watchdog_of(ledger: Ledger, scope: Scope) -> dict[str, Any]:
    """The watchdog settings of a run as it was created, else the defaults; the proxy's own
    (its status) take their place when the view reaches it."""
    if scope.kind == RUN:
        rows = ledger.query("SELECT config_json FROM runs WHERE run_id = ?", (scope.id,))
        try:
            cfg = json.loads(rows[0][0]) if rows else {}
            return dict(WatchdogConfig(**(cfg.get("watchdog") or {})).model_dump())
        except (ValueError, TypeError):
            pass
    return dict(WatchdogConfig().model_dump())


def detail(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass
class Pending:
    """What ``rows`` turns into the table: the starts without an end, the ends of the last
    ``LINGER`` seconds, and the lives that failed or ended under requests still on them."""

    starts: list[Any]
    ends: list[Any]
    doomed: set[str]


START_COLS = "s.request_id, s.attempt_id, s.life_id, s.started_at, s.client_stream"
END_COLS = (
    "q.request_id, q.attempt_id, q.life_id, q.started_at, q.duration, q.outcome, q.ttft, q.tokens_out, "
    "q.client_stream, q.detail_json"
)


def pending(ledger: Ledger, scope: Scope, now: float) -> Pending:
    """The scope's requests in flight and just ended, and their lives' verdicts: every start
    without an end; the ends of the last ``LINGER`` seconds that went badly or were resumed, the
    latest ``OK_AT_MOST`` of the last ``LINGER_OK`` seconds that went well (no more are shown),
    and the legs that continue a resumed one. A live page keeps this up to date from the rows
    that come (``view/tracker.py``) rather than asking for it again every second."""
    mine, params = scope.requests_sql("s")
    starts = ledger.query(
        f"SELECT {START_COLS} FROM request_starts s "
        f"WHERE {mine} AND NOT EXISTS (SELECT 1 FROM requests q WHERE q.request_id = s.request_id)",
        params,
    )
    mine, params = scope.requests_sql("q")
    window = f"FROM requests q WHERE {mine} AND q.started_at >= ? AND q.started_at + q.duration >= ?"
    bad = ledger.query(
        f"SELECT {END_COLS} {window} AND q.outcome != ?", (*params, now - HORIZON, now - LINGER, OK)
    )
    good = ledger.query(
        f"SELECT {END_COLS} {window} AND q.outcome = ? ORDER BY q.started_at + q.duration DESC LIMIT ?",
        (*params, now - HORIZON, now - LINGER_OK, OK, OK_AT_MOST),
    )
    ends = [*bad, *good]
    ends += continuations(ledger, ends)
    return Pending(list(starts), ends, doomed_lives(ledger, starts))


def continuations(ledger: Ledger, ends: list[Any]) -> list[Any]:
    """The legs that resumed ones among ``ends`` went on to, ended and not among them already (a
    chain's last leg may have ended well long enough ago to be left out by itself)."""
    have = {str(r["request_id"]) for r in ends}
    out: list[Any] = []
    todo = {
        str(d["resumed_as"]) for d in (detail(r["detail_json"]) for r in ends) if d.get("resumed_as")
    } - have
    while todo:  # a chain of several legs: follow it, a step at a time
        marks = ", ".join("?" * len(todo))
        found = ledger.query(
            f"SELECT {END_COLS} FROM requests q WHERE q.request_id IN ({marks})", tuple(sorted(todo))
        )
        out += found
        have |= todo
        todo = {
            str(d["resumed_as"]) for d in (detail(r["detail_json"]) for r in found) if d.get("resumed_as")
        } - have
    return out


def doomed_lives(ledger: Ledger, starts: list[Any]) -> set[str]:
    """The lives of requests still in flight that ended, or were judged wedged or crashed: such a
    request is being ended (or held for a resume), though its own row has not come yet."""
    lives = sorted({str(r["life_id"]) for r in starts if r["life_id"]})
    if not lives:
        return set()
    marks = ", ".join("?" * len(lives))
    return {
        str(r[0])
        for r in ledger.query(
            f"SELECT life_id FROM server_life_ends WHERE life_id IN ({marks}) UNION "
            f"SELECT life_id FROM events WHERE life_id IN ({marks}) AND kind IN ({sql_list(LIFE_FAILURES)})",
            (*lives, *lives),
        )
    }


def rows(
    ledger: Ledger,
    found: Pending,
    progress: Mapping[str, Mapping[str, Any]],
    watchdog: Mapping[str, Any],
    now: float,
    rates: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The table's rows, slowest first, then those that ended, latest first."""
    starts, ends = found.starts, found.ends
    legs: dict[str, dict[str, Any]] = {}
    prev_of: dict[str, str] = {}
    for r in ends:
        d = detail(r["detail_json"])
        legs[str(r["request_id"])] = {**dict(r), "ended": True, "cause": d.get("cause")}
        if r["outcome"] == RESUMED and d.get("resumed_as"):
            prev_of[str(d["resumed_as"])] = str(r["request_id"])
    for s in starts:
        rid = str(s["request_id"])
        legs[rid] = {**dict(s), "ended": False}
        earlier = list((progress.get(rid) or {}).get("legs") or [])
        for a, b in itertools.pairwise([*earlier, rid]):
            prev_of.setdefault(b, a)
    heads: dict[str, list[str]] = {}
    for rid in legs:
        chain = [rid]
        while chain[0] in prev_of and len(chain) < 64:
            chain.insert(0, prev_of[chain[0]])
        head = chain[0]
        if len(chain) > len(heads.get(head, [])):
            heads[head] = chain
    # Only whole chains: a leg that another chain continues is not a row of its own.
    tails = {c[-1] for c in heads.values()}
    attempts = _attempts(ledger, {str(legs[c[-1]]["attempt_id"]) for c in heads.values() if c[-1] in legs})
    out = []
    for head, chain in heads.items():
        if chain[-1] not in tails or chain[-1] not in legs:
            continue
        row = _row(head, chain, legs, progress, watchdog, now, attempts, rates or {}, found.doomed)
        if row["ended"] and row["state"] == DONE and not row["went_on"] and row["ended_at"] < now - LINGER_OK:
            continue
        out.append(row)
    out.sort(key=lambda r: (r["ended"], -r["slowness"]))
    live = [r for r in out if not r["ended"]]
    return live + [r for r in out if r["ended"]][:ENDED_AT_MOST]


def _attempts(ledger: Ledger, ids: set[str]) -> dict[str, tuple[str, int]]:
    ids.discard("None")
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    found = ledger.query(
        f"SELECT attempt_id, instance_id, attempt_no FROM attempts WHERE attempt_id IN ({marks})", tuple(ids)
    )
    return {str(r[0]): (str(r[1]), int(r[2])) for r in found}


def seconds(x: float | None) -> str:
    """A request's time as the table shows it: ``-`` when it is not known (never a made-up 0),
    milliseconds below a second, tenths below ten seconds, then as ``duration``."""
    if x is None:
        return "-"
    if x < 1.0:
        return f"{max(0.0, x) * 1000:.0f} ms"
    return f"{x:.1f} s" if x < 10.0 else duration(x)


def _row(
    head: str,
    chain: list[str],
    legs: Mapping[str, dict[str, Any]],
    progress: Mapping[str, Mapping[str, Any]],
    wd: Mapping[str, Any],
    now: float,
    attempts: Mapping[str, tuple[str, int]],
    rates: Mapping[str, float],
    doomed: set[str],
) -> dict[str, Any]:
    last = legs[chain[-1]]
    first = legs.get(chain[0], last)
    live = not last["ended"]
    p = progress.get(chain[-1]) or {}
    # A leg's stream: the row's, else the proxy's status says. Without a stream (one whole answer)
    # no token times exist: TTFT, tokens so far, the rate and the gap are unknown, shown "-".
    stream_flag = last.get("client_stream")
    streamed = bool(p.get("client_stream", True) if stream_flag is None else stream_flag)
    leg_tokens = [_leg_tokens(legs.get(c), progress.get(c)) for c in chain]
    known = [t for t in leg_tokens if t is not None]
    started = float(first["started_at"])
    ended_at = float(last["started_at"]) + float(last.get("duration") or 0.0)
    age = (now if live else ended_at) - started
    ttft = _client_ttft(chain, legs, progress, started)
    since = p.get("seconds_since_last_token") if live and streamed and p.get("ttft") is not None else None
    leg_start = float(last["started_at"])
    fraction = _fraction(now - leg_start, p.get("ttft"), since, wd, streamed) if live else 0.0
    if live:
        ending = p.get("stall") or str(last.get("life_id")) in doomed
        state = RED if ending else AMBER if fraction >= 0.5 else LIVE
    else:
        state = DONE if last["outcome"] == OK else RED if is_infra_outcome(str(last["outcome"])) else ENDED
    tag = str(last.get("attempt_id") or "")
    instance = attempts.get(tag)
    lives = len({str(legs[c].get("life_id")) for c in chain if c in legs})
    return {
        "id": head,
        "short": head[-8:],
        "tag": tag,
        "instance": instance[0] if instance else None,
        "attempt_no": instance[1] if instance else None,
        "life": last.get("life_id"),
        "life_short": str(last.get("life_id") or "-")[-8:],
        "age": seconds(age),
        "ttft": seconds(ttft),
        "tokens": sum(known) if known else "-",
        "rate": "-" if chain[-1] not in rates or not streamed else f"{rates[chain[-1]]:.1f}",
        "since": seconds(since),
        "state": state,
        "went_on": len(chain) > 1,  # resumed on a next life
        "resumed_note": _resumed_note(len(chain), lives, live, None if live else str(last["outcome"])),
        "ended": not live,
        "outcome": None if live else last["outcome"],
        "stall": p.get("stall"),
        "legs": [
            _leg(c, legs.get(c), progress.get(c), doomed, t) for c, t in zip(chain, leg_tokens, strict=True)
        ],
        # Live rows: the nearest deadline's share used; then the age, so the slowest lead.
        "slowness": fraction * 1e6 + age if live else -ended_at,
        "ended_at": ended_at if not live else now,
    }


def _leg_tokens(leg: Mapping[str, Any] | None, p: Mapping[str, Any] | None) -> int | None:
    """The tokens one leg sent the client: its row's once it ended; the proxy's count while it
    streams; unknown (None) for a whole answer not yet come, or without the proxy's status."""
    if leg is None:
        return None
    if leg["ended"]:
        return None if leg.get("tokens_out") is None else int(leg["tokens_out"])
    if not p or not p.get("client_stream", True):
        return None
    return int(p.get("tokens_out") or 0)


def _client_ttft(
    chain: list[str],
    legs: Mapping[str, Mapping[str, Any]],
    progress: Mapping[str, Mapping[str, Any]],
    t0: float,
) -> float | None:
    """The client's time to its first token: from the first leg's start to the first token of
    whichever leg gave one (a leg resumed before its first token leaves it to the next). None
    when no leg streamed a token (a whole answer has none, docs/proxy.md)."""
    for c in chain:
        leg = legs.get(c)
        if leg is None:
            continue
        ttft = leg.get("ttft") if leg["ended"] else (progress.get(c) or {}).get("ttft")
        if ttft is not None:
            return float(leg["started_at"]) + float(ttft) - t0
    return None


def _resumed_note(legs: int, lives: int, live: bool, outcome: str | None) -> str:
    """What a resumed row means for its client, in words: one answer, whatever the legs."""
    over = f"{legs} legs on {lives} {'life' if lives == 1 else 'lives'}"
    if live:
        return f"resumed: one answer in progress, {over}"
    if outcome == OK:
        return f"resumed: the client got one answer, {over}"
    return f"resumed, {over}, then {outcome}"


def _fraction(elapsed: float, ttft: Any, since: Any, wd: Mapping[str, Any], streamed: bool = True) -> float:
    """The share of its nearest deadline a live leg has used (0 in record-only mode, which ends none).
    A whole answer (no stream) has only ``total_timeout`` (docs/proxy.md, "Non-streaming answers")."""
    if wd.get("record_only") or not wd.get("enabled", True):
        return 0.0
    parts = [elapsed / float(wd[TOTAL_TIMEOUT])]
    if not streamed:
        return parts[0]
    if ttft is None:
        parts.append(elapsed / float(wd["ttft_timeout"]))
    elif since is not None:
        parts.append(float(since) / float(wd["stall_timeout"]))
    return max(parts)


def _leg(
    rid: str, leg: Mapping[str, Any] | None, p: Mapping[str, Any] | None, doomed: set[str], tokens: int | None
) -> dict[str, Any]:
    """One leg as the row shows it: the life it was on, the tokens it sent, how it ended."""
    if leg is None:
        return {"id": rid, "short": rid[-8:], "life": None, "life_short": "?", "tokens": "-",
                "label": "an earlier leg", "cls": ENDED}  # fmt: skip
    base = {
        "id": rid,
        "short": rid[-8:],
        "life": leg.get("life_id"),
        "life_short": str(leg.get("life_id") or "-")[-8:],
        "tokens": "-" if tokens is None else tokens,
    }
    if not leg["ended"]:
        stall = (p or {}).get("stall")
        if stall or str(leg.get("life_id")) in doomed:
            return {**base, "label": stall or "its life ended", "cls": RED}
        return {**base, "label": "in flight", "cls": LIVE}
    outcome = str(leg["outcome"])
    if outcome == RESUMED:
        return {**base, "label": f"{leg.get('cause') or outcome}, resumed", "cls": RED}
    cls = DONE if outcome == OK else RED if is_infra_outcome(outcome) else ENDED
    return {**base, "label": outcome, "cls": cls}
