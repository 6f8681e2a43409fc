"""What a page of the view is about: a run of ``wedgewatch run``, a harness run of ``wrap``, or the
server lives no run owns (``serve``, ``proxy``). Each has a path, so every view has a URL, and the
SQL that picks its server lives."""

from __future__ import annotations

from dataclasses import dataclass

from wedgewatch.base.errors import BadInput
from wedgewatch.ledger.store import Ledger

RUN = "run"
WRAP = "wrap"
SERVE = "serve"
KINDS = (RUN, WRAP, SERVE)


@dataclass(frozen=True)
class Scope:
    kind: str  # RUN, WRAP or SERVE
    id: str  # the run's or harness run's id; "" for SERVE
    started_at: float

    @property
    def path(self) -> str:
        return f"/{self.kind}/{self.id}" if self.id else f"/{self.kind}"

    @property
    def label(self) -> str:
        return self.id or "serve: lives of no run"

    def lives_sql(self, alias: str = "l") -> tuple[str, tuple[str, ...]]:
        """A condition on ``server_lives`` (as ``alias``) that picks this scope's lives."""
        if self.kind == SERVE:
            return f"{alias}.run_id IS NULL", ()
        return f"{alias}.run_id = ?", (self.id,)

    def requests_sql(self, alias: str) -> tuple[str, tuple[str, ...]]:
        """A condition on a request row (``requests`` or ``request_starts``, as ``alias``) that
        picks this scope's: those on its lives, and for SERVE those on no life (a proxy alone)."""
        sub, params = self.life_ids_sql()
        if self.kind == SERVE:
            return f"({alias}.life_id IN ({sub}) OR {alias}.life_id IS NULL)", params
        return f"{alias}.life_id IN ({sub})", params

    def life_ids_sql(self) -> tuple[str, tuple[str, ...]]:
        """A subquery of this scope's life ids, for ``life_id IN (...)``."""
        cond, params = self.lives_sql("sl")
        return f"SELECT sl.life_id FROM server_lives sl WHERE {cond}", params


def scopes(ledger: Ledger) -> list[Scope]:
    """Every scope the ledger holds, oldest first: its runs, its wrapped runs, and the lives of no
    run when there are any."""
    rows = ledger.query(
        "SELECT 'run' AS k, run_id AS id, started_at FROM runs UNION ALL "
        "SELECT 'wrap', harness_run_id, started_at FROM harness_runs ORDER BY started_at, id"
    )
    out = [Scope(str(r[0]), str(r[1]), float(r[2])) for r in rows]
    free = _free_start(ledger)
    if free is not None:
        out.append(Scope(SERVE, "", free))
    return sorted(out, key=lambda s: s.started_at)


def _free_start(ledger: Ledger) -> float | None:
    """When the first life of no run started, or the first request on no life (a proxy alone,
    ``wedgewatch proxy --ledger``) was sent; None when there is neither."""
    firsts = [
        ledger.query("SELECT MIN(started_at) FROM server_lives WHERE run_id IS NULL")[0][0],
        ledger.query("SELECT MIN(started_at) FROM request_starts WHERE life_id IS NULL")[0][0],
    ]
    found = [float(t) for t in firsts if t is not None]
    return min(found) if found else None


def find(ledger: Ledger, kind: str, ident: str) -> Scope:
    """The scope of this kind and id; BadInput naming the id when the ledger has none."""
    started: float | None = None
    if kind == RUN:
        rows = ledger.query("SELECT started_at FROM runs WHERE run_id = ?", (ident,))
        started = float(rows[0][0]) if rows else None
    elif kind == WRAP:
        rows = ledger.query("SELECT started_at FROM harness_runs WHERE harness_run_id = ?", (ident,))
        started = float(rows[0][0]) if rows else None
    elif kind == SERVE:
        started = _free_start(ledger)
    else:
        raise BadInput(f"no such view: {kind!r} (one of {', '.join(KINDS)})")
    if started is None:
        raise BadInput(f"{ledger.path}: no {kind} {ident!r}")
    return Scope(kind, ident, started)


def pick(ledger: Ledger, run_id: str | None) -> Scope | None:
    """The scope ``--run ID`` names (a run or a wrapped run), or None for the index of them all."""
    if run_id is None:
        return None
    for kind in (RUN, WRAP):
        try:
            return find(ledger, kind, run_id)
        except BadInput:
            continue
    known = [s.id for s in scopes(ledger) if s.id][-5:]
    hint = f" (latest: {', '.join(known)})" if known else ""
    raise BadInput(f"--run: {ledger.path} has no run {run_id!r}{hint}")
