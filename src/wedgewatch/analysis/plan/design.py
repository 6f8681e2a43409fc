"""Two-level factorial designs: the full 2^k, or the smallest 2^(k-p) fraction of resolution IV
(main effects clear of every two-factor interaction), and a seeded random run order.

Columns are coded -1 (a factor's first, reference level) and +1 (its second level).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from wedgewatch.base.errors import BadInput

LETTERS = "ABCDEFGHJK"  # I is left out, as in the design tables (it reads as the identity)
# Generators of the minimum-run resolution IV (or better) fractions, as words over the base
# factors' letters (Montgomery, Design and Analysis of Experiments, table of 2^(k-p) designs).
GENERATORS: dict[int, tuple[str, ...]] = {
    4: ("ABC",),  # 2^(4-1), 8 runs, IV
    5: ("ABCD",),  # 2^(5-1), 16 runs, V
    6: ("ABC", "BCD"),  # 2^(6-2), 16 runs, IV
    7: ("ABC", "BCD", "ACD"),  # 2^(7-3), 16 runs, IV
    8: ("BCD", "ACD", "ABC", "ABD"),  # 2^(8-4), 16 runs, IV
}
MAX_CELLS = 256


@dataclass
class Design:
    k: int
    p: int
    rows: list[list[int]]  # one row per cell (standard order), one -1/+1 column per factor
    generators: list[str] = field(default_factory=list)  # e.g. "D = ABC"
    defining_relation: list[str] = field(default_factory=list)
    resolution: int | None = None  # None for a full factorial (no aliasing at all)
    note: str = ""

    @property
    def cells(self) -> int:
        return len(self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": f"2^{self.k}" if self.p == 0 else f"2^({self.k}-{self.p})",
            "cells": self.cells,
            "generators": self.generators,
            "defining_relation": self.defining_relation,
            "resolution": _roman(self.resolution),
            "note": self.note,
        }


def _roman(r: int | None) -> str | None:
    return None if r is None else {3: "III", 4: "IV", 5: "V", 6: "VI"}.get(r, str(r))


def full(k: int) -> list[list[int]]:
    """Standard (Yates) order: the first factor alternates fastest."""
    return [[-1 if (i >> j) & 1 == 0 else 1 for j in range(k)] for i in range(2**k)]


def _word_product(a: str, b: str) -> str:
    return "".join(sorted(set(a) ^ set(b), key=LETTERS.index))


def defining_relation(words: list[str]) -> list[str]:
    """Every product of the generator words (I = ...): the full defining relation."""
    out: set[str] = set()
    for r in range(1, len(words) + 1):
        for combo in itertools.combinations(words, r):
            w = ""
            for x in combo:
                w = _word_product(w, x)
            out.add(w)
    return sorted(out, key=lambda w: (len(w), w))


def make(k: int, fraction: bool) -> Design:
    if k < 1:
        raise BadInput("--factors: at least one factor")
    if k > len(LETTERS):
        raise BadInput(f"--factors: {k} factors; at most {len(LETTERS)}")
    if not fraction or k < 4:
        if 2**k > MAX_CELLS:
            raise BadInput(f"--factors: a full 2^{k} design has {2**k} cells; use --fraction")
        note = "no resolution IV fraction of fewer than 2^k runs exists for k < 4" if fraction else ""
        return Design(k, 0, full(k), note=note)
    if k not in GENERATORS:
        raise BadInput(f"--fraction: resolution IV fractions are tabled for 4 to 8 factors, not {k}")
    gens = GENERATORS[k]
    p = len(gens)
    base = k - p
    rows = []
    for row in full(base):
        extra = [_product(row, g) for g in gens]
        rows.append(row + extra)
    words = [g + LETTERS[base + n] for n, g in enumerate(gens)]
    words = ["".join(sorted(w, key=LETTERS.index)) for w in words]
    relation = defining_relation(words)
    return Design(
        k,
        p,
        rows,
        generators=[f"{LETTERS[base + n]} = {g}" for n, g in enumerate(gens)],
        defining_relation=[f"I = {w}" for w in relation],
        resolution=min(len(w) for w in relation),
    )


def _product(row: list[int], word: str) -> int:
    v = 1
    for ch in word:
        v *= row[LETTERS.index(ch)]
    return v


def run_order(cells: int, seed: int) -> list[int]:
    """A random order of the cells (0-based), reproducible from the seed: so that drift in the
    machine, the server or the model endpoint over the session does not line up with a factor."""
    order = list(range(cells))
    random.Random(seed).shuffle(order)
    return order


def aliases(design: Design, names: list[str]) -> list[str]:
    """Two-factor interactions that share a column (``fresh:warmup = flags:concurrency``)."""
    if design.p == 0:
        return []
    cols: dict[tuple[int, ...], list[str]] = {}
    for a, b in itertools.combinations(range(design.k), 2):
        key = tuple(r[a] * r[b] for r in design.rows)
        cols.setdefault(key, []).append(f"{names[a]}:{names[b]}")
    return [" = ".join(v) for v in cols.values() if len(v) > 1]
