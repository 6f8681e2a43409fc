"""Every word in the vocabulary, and nowhere else: a status, an outcome, a run mark, an event kind, a
life's start or end reason that ``src/`` spells as a string literal outside ``base/vocab.py`` fails
here (a literal equal to a word, or a word quoted as an SQL literal inside a query). The words that
mean something else where they stand (an OpenAI field named ``created``, a probe result's ``ok``)
are listed below, each with how often it occurs and why, so a new use of the word there is caught
too. And the retry rule is one: the ledger's views, built from vocab's sets, decide what vocab's
``requeued`` and ``BUDGETED`` say, for every status and reason.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

from ledger_helpers import add_attempt, make_run
from wedgewatch.base import vocab
from wedgewatch.ledger import Ledger

SRC = Path(__file__).resolve().parents[1] / "src" / "wedgewatch"
VOCAB = SRC / "base" / "vocab.py"

_OPENAI_FIELD = "an OpenAI reply's field (`created`) or finish reason (`stop`), not ours"
_CLIENT_ERROR = "a benchmark's measure: when the client saw its error, not the request outcome"
_OK = "a result's field (`ok`: the probe or check passed), not the request outcome"
_TOTAL_TIMEOUT = "the watchdog setting `total_timeout` (a config field), not the outcome it causes"
_SIM = "the simulator is a server: a scenario action it plays, named after what the proxy then sees"

# (file under src/wedgewatch, word): (how many literals, why the word means something else there)
HOMONYMS: dict[tuple[str, str], tuple[int, str]] = {
    ("analysis/html.py", "started"): (1, "the page's field: when the run started"),
    ("analysis/plan/ablation.py", "recovered"): (5, "whether an ablation found the ground truth again"),
    ("analysis/scan/readers.py", "resolved"): (2, "the field of SWE-bench's per-instance report"),
    ("analysis/survival.py", "ok"): (2, _OK),
    ("bench/detection.py", "client_error"): (4, _CLIENT_ERROR),
    ("bench/detection.py", "ok"): (5, "a benchmark's count of good replies"),
    ("bench/detection.py", "total_timeout"): (1, _TOTAL_TIMEOUT),
    ("bench/detection_llamacpp.py", "client_error"): (4, _CLIENT_ERROR),
    ("bench/detection_llamacpp.py", "ok"): (1, _OK),
    ("bench/proxy.py", "aborted"): (1, "the simulator's count of aborted requests"),
    ("bench/proxy.py", "total_timeout"): (3, _TOTAL_TIMEOUT),
    ("bench/sandbox.py", "ok"): (1, "what a shell's `echo ok` printed"),
    ("bench/vllm.py", "client_error"): (3, _CLIENT_ERROR),
    ("cli/__init__.py", "aborted"): (1, "the message printed when the user aborts a prompt"),
    ("cli/__init__.py", "interrupted"): (1, "the message printed on Ctrl-C"),
    ("cli/bench/detection.py", "client_error"): (1, _CLIENT_ERROR),
    ("cli/bench/vllm.py", "client_error"): (1, _CLIENT_ERROR),
    ("cli/ledger.py", "ok"): (1, "the JSON key of `ledger check --json`: whether every invariant holds"),
    ("cli/proxy.py", "total_timeout"): (3, _TOTAL_TIMEOUT),
    ("ledger/checks.py", "ok"): (1, "SQLite's integrity_check answer"),
    ("ledger/pg/migrations/env.py", "connection"): (1, "Alembic's attribute holding the connection"),
    ("ledger/pg/store.py", "connection"): (1, "Alembic's attribute holding the connection"),
    ("ledger/pg/store.py", "ok"): (1, "SQLite's integrity_check answer, which PostgreSQL's check mimics"),
    ("proxy/app.py", "total_timeout"): (1, _TOTAL_TIMEOUT),
    ("proxy/dialects/chat.py", "created"): (1, _OPENAI_FIELD),
    ("proxy/resume/chat_replay.py", "created"): (1, _OPENAI_FIELD),
    ("proxy/resume/continuation.py", "created"): (2, _OPENAI_FIELD),
    ("proxy/dialects/messages.py", "api_error"): (1, "Anthropic's error type"),
    ("proxy/resume/reencode.py", "api_error"): (1, "Anthropic's error type"),
    ("proxy/http.py", "connection"): (1, "the HTTP header"),
    ("proxy/passthrough.py", "connection"): (1, "the code in the error body a client gets"),
    ("runner/attempt.py", "stop"): (1, "who ended the attempt (`by`): the run's stop"),
    ("config/scaled.py", "total_timeout"): (1, _TOTAL_TIMEOUT),
    ("runner/official.py", "resolved"): (1, "the field of the SWE-bench harness's report"),
    ("sim/anthropic.py", "stop"): (1, _OPENAI_FIELD),
    ("sim/chunks.py", "created"): (4, _OPENAI_FIELD),
    ("sim/chunks.py", "stop"): (1, _OPENAI_FIELD),
    ("sim/engine.py", "aborted"): (1, "vLLM's metric label for a request the engine aborted"),
    ("sim/engine.py", "running"): (1, "vLLM's gauge of running requests"),
    ("sim/engine.py", "stop"): (1, _OPENAI_FIELD),
    ("sim/generation.py", "aborted"): (1, "a simulated request's own end"),
    ("sim/generation.py", "crash"): (2, _SIM),
    ("sim/generation.py", "stall_ttft"): (1, _SIM),
    ("sim/generation.py", "stop"): (1, _OPENAI_FIELD),
    ("sim/generation.py", "trickle"): (2, _SIM),
    ("sim/generation.py", "wedge"): (3, _SIM),
    ("sim/parse.py", "stop"): (2, "the OpenAI request's field `stop`"),
    ("sim/scenario.py", "crash"): (1, _SIM),
    ("sim/scenario.py", "engine_death"): (1, _SIM),
    ("sim/scenario.py", "stall_ttft"): (1, _SIM),
    ("sim/scenario.py", "trickle"): (1, _SIM),
    ("sim/scenario.py", "wedge"): (1, _SIM),
    ("sim/server.py", "created"): (3, _OPENAI_FIELD),
    ("supervisor/detector.py", "running"): (1, "a reading's field: the server's running requests"),
    ("supervisor/evidence.py", "ok"): (5, _OK),
    ("supervisor/life.py", "running"): (1, "a reading's field: the server's running requests"),
    ("supervisor/watcher.py", "canary"): (2, "the wedge evidence's source and field: the probe"),
    ("testing/upstream.py", "api_error"): (1, "Anthropic's error type"),
    ("testing/upstream.py", "created"): (2, _OPENAI_FIELD),
    ("testing/upstream.py", "stop"): (5, _OPENAI_FIELD),
}


def words() -> dict[str, str]:
    """Every word of the vocabulary -> the name it has there."""
    out: dict[str, str] = {}
    for name, value in vars(vocab).items():
        if not name.isupper():
            continue
        if isinstance(value, str):
            out.setdefault(value, name)
        elif isinstance(value, tuple | frozenset):
            out.update({w: name for w in value if isinstance(w, str) and w not in out})
    return out


def spelled(source: str, vocabulary: dict[str, str]) -> list[tuple[int, str]]:
    """(line, word) for each word of ``vocabulary`` ``source`` spells: a string literal equal to one,
    or one quoted as an SQL literal inside a longer string. Docstrings do not count."""
    tree = ast.parse(source)
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    alternatives = "|".join(map(re.escape, sorted(vocabulary, key=len, reverse=True)))
    quoted = re.compile(f"'({alternatives})'")
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
            continue
        if node.value in vocabulary:
            found.append((node.lineno, node.value))
        else:
            found += [(node.lineno, m.group(1)) for m in quoted.finditer(node.value)]
    return found


def test_no_word_of_the_vocabulary_is_spelled_outside_it() -> None:
    vocabulary = words()
    counts: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if path == VOCAB:
            continue
        rel = path.relative_to(SRC).as_posix()
        for line, word in spelled(path.read_text(), vocabulary):
            counts[rel, word] += 1
            where.setdefault((rel, word), []).append(line)
    wrong = [
        f"{rel}:{sorted(where[rel, word])} spells {word!r} {n} times: use vocab.{vocabulary[word]}"
        + (
            f" (allowed {HOMONYMS[rel, word][0]}: {HOMONYMS[rel, word][1]})"
            if (rel, word) in HOMONYMS
            else ""
        )
        for (rel, word), n in sorted(counts.items())
        if n != HOMONYMS.get((rel, word), (0, ""))[0]
    ]
    stale = [f"{rel}: {word!r} no longer there" for rel, word in HOMONYMS if (rel, word) not in counts]
    assert not wrong + stale, "\n".join(wrong + stale)


def test_the_check_finds_a_literal_and_a_quoted_word_and_skips_docstrings_and_names() -> None:
    source = '''"""A module about the wedge."""
from wedgewatch.base.vocab import WEDGE

KIND = "wedge"
SQL = "SELECT * FROM events WHERE kind = 'crash' AND kind != 'wedged'"
SEEN = WEDGE


def f() -> str:
    """Says 'crash'."""
    return f"{WEDGE}: gave_up"
'''
    assert spelled(source, words()) == [(4, "wedge"), (5, "crash")]


def test_each_word_is_one_name_defined_once() -> None:
    assigned = Counter(
        t.id
        for node in ast.parse(VOCAB.read_text()).body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    )
    assert [name for name, n in assigned.items() if n > 1] == []
    names = Counter(v for k, v in vars(vocab).items() if k.isupper() and isinstance(v, str))
    assert [word for word, n in names.items() if n > 1] == []


def test_the_groups_hold_named_words_only() -> None:
    # A group (a tuple or set) names its members: a word spelled only inside a group would be a
    # word without a name for the rest of src/ to use.
    named = {v for k, v in vars(vocab).items() if k.isupper() and isinstance(v, str)}
    loose = {
        w
        for k, v in vars(vocab).items()
        if k.isupper() and isinstance(v, tuple | frozenset)
        for w in v
        if isinstance(w, str) and w not in named
    }
    assert loose == set()


REASONS = sorted({"", vocab.SERVER_RESTARTED, vocab.STALL_TTFT, vocab.RUN_STOPPED, "sandbox"})


@pytest.mark.parametrize("status", sorted(vocab.RETRIED | vocab.MODEL_SIDE))
def test_the_views_follow_the_retry_rule(tmp_path: Path, status: str) -> None:
    """For each status, reason, and life wedged or not: the ledger's attempt_budget view requeues
    exactly what ``vocab.requeued`` says, and charges the budget exactly for BUDGETED statuses
    that are not requeued."""
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", [f"{reason}-{wedged}" for reason in REASONS for wedged in (0, 1)], attempts_max=5)
        for reason in REASONS:
            for wedged in (0, 1):
                life = f"life-{reason}-{wedged}"
                add_attempt(lg, "r", f"{reason}-{wedged}", 1, status, reason=reason, life_id=life)
                if wedged:
                    lg.event(vocab.WEDGE, {}, run_id="r", life_id=life)
        got = {
            (r["reason"], r["instance_id"].endswith("-1")): r["requeued"]
            for r in lg.query("SELECT instance_id, reason, requeued FROM attempt_budget WHERE run_id = 'r'")
        }
        infra = {
            r["instance_id"]: (r["n_infra"], r["n_requeued"])
            for r in lg.query(
                "SELECT instance_id, n_infra, n_requeued FROM instance_outcomes WHERE run_id = 'r'"
            )
        }
    for reason in REASONS:
        for wedged in (False, True):
            requeued = vocab.requeued(status, reason, on_wedged_life=wedged)
            assert got[reason, wedged] == int(requeued), (status, reason, wedged)
            charged = status in vocab.BUDGETED and not requeued
            assert infra[f"{reason}-{int(wedged)}"] == (int(charged), int(requeued)), (status, reason, wedged)
