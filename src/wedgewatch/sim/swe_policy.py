"""The ``swe`` policy: the simulator plays a coding model on the bundled suite.

It reads the conversation, finds the bundled instance whose problem statement the first user
message holds, and answers as a model working through it would: look around, read the files the
bug is in, run the tests, edit, run the tests again, submit. One command per reply, in the format
the agent asked for: the built-in agent's ```bash block, mini-swe-agent's ```mswea_bash_command
block, or a ``bash`` tool call when the request offers that tool (mini-swe-agent 2.x's default).

Stateless: the next step is the number of assistant turns already in the conversation. Whether
the model solves an instance is decided from (instance_id, seed, skill) alone, so a replay with
the same seed gives the same outcomes and a higher skill solves a superset of instances.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from wedgewatch.sim.policy import PolicyReply, PolicyRequest
from wedgewatch.suites.bundled import bundled_extras, load_bundled
from wedgewatch.suites.testrun import heredoc

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
Behaviour = Literal["solve", "wrong", "wander", "babble"]
Format = Literal["bash", "mswea", "tool"]

# Among the instances a model does not solve: share that get a wrong patch, then wandering until
# the step limit; the rest get replies without exactly one command block (format errors).
WRONG_SHARE = 0.5
WANDER_SHARE = 0.35


def _uniform(*parts: object) -> float:
    """A stable uniform number in [0, 1) from ``parts`` (not Python's salted hash)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def behaviour(instance_id: str, seed: int, skill: float) -> Behaviour:
    """How the simulated model handles ``instance_id``: solved when a stable draw is below
    ``skill``; otherwise a second draw picks a wrong patch, wandering or format errors."""
    if _uniform("solve", instance_id, seed) < skill:
        return "solve"
    v = _uniform("failure", instance_id, seed)
    if v < WRONG_SHARE:
        return "wrong"
    return "wander" if v < WRONG_SHARE + WANDER_SHARE else "babble"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


@lru_cache(maxsize=1)
def _statements() -> list[tuple[str, dict[str, Any]]]:
    return [(inst["problem_statement"].strip(), inst) for inst in load_bundled()]


def find_instance(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The bundled instance whose problem statement the first user message contains."""
    first = next((m for m in messages if m.get("role") == "user"), None)
    if first is None:
        return None
    text = _text(first.get("content"))
    for statement, inst in _statements():
        if statement and statement in text:
            return inst
    return None


def _format(request: PolicyRequest) -> Format:
    for tool in request.tools or ():
        if (tool.get("function") or {}).get("name") == "bash":
            return "tool"
    head = " ".join(_text(m.get("content")) for m in request.messages[:2])
    return "mswea" if "```mswea_bash_command" in head else "bash"


@dataclass(frozen=True, slots=True)
class Step:
    thought: str
    command: str | None  # None: a reply with no command at all
    double: str | None = None  # a second command block (a format error on purpose)


def _files(patch: str) -> list[str]:
    return re.findall(r"^diff --git a/(\S+) b/", patch, re.MULTILINE)


def _function(inst: dict[str, Any]) -> str | None:
    """The function the gold patch first changes: the last ``def`` at or above its first changed
    line in the base file (a hunk header names the function *before* the hunk, not the one in it)."""
    patch = inst["patch"]
    m = re.search(r"^diff --git a/(\S+) b/.*?^@@ -(\d+)", patch, re.MULTILINE | re.DOTALL)
    if m is None:
        return None
    hunk = patch[m.end() :].split("\n")[1:]
    offset = next((i for i, line in enumerate(hunk) if line[:1] in "+-"), 0)
    changed = int(m.group(2)) + offset
    lines = bundled_extras(inst).files.get(m.group(1), "").splitlines()[:changed]
    names = [d.group(1) for line in lines if (d := re.match(r"\s*(?:def|class) (\w+)", line))]
    return names[-1] if names else None


def _look(inst: dict[str, Any]) -> list[Step]:
    gold = inst["patch"]
    files = _files(gold)
    tests = _files(inst["test_patch"])
    steps = [
        Step(
            "I start by looking at the repository's layout.",
            "find . -name '*.py' -not -path './.git/*' | sort",
        )
    ]
    func = _function(inst)
    extra = int(_uniform("look", inst["instance_id"]) * 3)  # 0-2 extra looking steps
    if extra >= 1 and func:
        steps.append(
            Step(
                f"The issue is about `{func}`; let me find where it is defined.",
                f"grep -rn 'def {func}' --include='*.py' .",
            )
        )
    if extra >= 2:
        steps.append(Step("The README may say how the package is meant to behave.", "cat README.md"))
    for f in files:
        steps.append(Step(f"Let me read {f}, where the code in question lives.", f"nl -ba {f}"))
    target = "".join(f" {t}" for t in tests)
    steps.append(
        Step(
            "Before changing anything, I run the existing tests to see where they stand.",
            f"python -m pytest -q{target} 2>&1 | tail -n 15",
        )
    )
    return steps


def _edit(patch: str, files: list[str], right: bool) -> Step:
    names = ", ".join(files)
    thought = (
        f"I see the cause now and will fix it in {names} with a small patch."
        if right
        else f"I think I see the problem in {names}; this change should handle the case from the issue."
    )
    return Step(thought, heredoc("git apply --whitespace=nowarn", patch).rstrip("\n"))


def plan(inst: dict[str, Any], how: Behaviour) -> list[Step]:
    """The steps played for ``inst``; a wandering or babbling model's plan is open-ended (see
    ``step_at``)."""
    steps = _look(inst)
    if how in ("solve", "wrong"):
        patch = inst["patch"] if how == "solve" else bundled_extras(inst).wrong_patch
        tests = " ".join(_files(inst["test_patch"]))
        steps.append(_edit(patch, _files(patch), how == "solve"))
        steps.append(
            Step(
                "Now I run the tests again to check the change.",
                f"python -m pytest -q {tests} 2>&1 | tail -n 15",
            )
        )
        if _uniform("review", inst["instance_id"]) < 0.5:
            steps.append(Step("Let me review the whole change once more.", "git diff"))
        steps.append(Step("The change is done and the tests pass, so I submit.", f"echo {SENTINEL}"))
    return steps


def _wander(inst: dict[str, Any], n: int) -> Step:
    files = _files(inst["patch"])
    tests = _files(inst["test_patch"])
    options = [
        Step("Let me look at the files once more.", "ls -la"),
        Step("I want to re-read the code before deciding anything.", f"nl -ba {files[0]}"),
        Step(
            "Let me check the tests to understand the expected behaviour.", f"nl -ba {tests[0]} | head -n 40"
        ),
        Step("Let me check the state of the working tree.", "git status"),
        Step(
            "I run the tests again to see whether anything changed.", "python -m pytest -q 2>&1 | tail -n 5"
        ),
        Step("Let me look at the history for hints.", "git log --oneline -5"),
        Step("Maybe other modules use this code.", "grep -rn 'import' --include='*.py' . | head -n 20"),
    ]
    return options[n % len(options)]


def _babble(inst: dict[str, Any], n: int) -> Step:
    f = _files(inst["patch"])[0]
    if n % 2:
        return Step(
            f"The bug must be somewhere in {f}. I could either read it or run the tests, so I will do both.",
            f"nl -ba {f}",
            double="python -m pytest -q",
        )
    return Step(
        f"I believe the problem is in {f}: the condition there does not cover every case. I should think about it more before running anything.",
        None,
    )


def step_at(inst: dict[str, Any], how: Behaviour, n: int) -> Step:
    """What the model does on its ``n``-th turn (0-based)."""
    steps = plan(inst, how)
    if how == "wander":
        return steps[n] if n < len(steps) else _wander(inst, n)
    if how == "babble":
        return steps[0] if n == 0 else _babble(inst, n)
    return steps[min(n, len(steps) - 1)]  # past the end: submit again


GENERIC = [
    Step("I do not recognise this task, so I start by looking at the working directory.", "ls -la"),
    Step("Let me check the state of the repository.", "git status"),
    Step("There is nothing I can usefully change here, so I submit.", f"echo {SENTINEL}"),
]


def render(step: Step, fmt: Format, n: int) -> PolicyReply:
    """A reply in the agent's format: THOUGHT, then the command as a fenced block or a tool call."""
    thought = f"THOUGHT: {step.thought}"
    if step.command is None:
        return PolicyReply(text=thought)
    if fmt == "tool":
        call = {
            "id": f"call_{n}_{hashlib.sha256(step.command.encode()).hexdigest()[:12]}",
            "name": "bash",
            "arguments": json.dumps({"command": step.command}),
        }
        return PolicyReply(text=thought, tool_calls=[call] if step.double is None else [])
    fence = "mswea_bash_command" if fmt == "mswea" else "bash"
    text = f"{thought}\n\n```{fence}\n{step.command}\n```"
    if step.double is not None:
        text += f"\n\n```{fence}\n{step.double}\n```"
    return PolicyReply(text=text)


class SwePolicy:
    """Plays a model of the scenario's skill on the bundled suite (module docstring)."""

    def reply(self, request: PolicyRequest) -> PolicyReply:
        n = sum(1 for m in request.messages if m.get("role") == "assistant")
        fmt = _format(request)
        inst = find_instance(request.messages)
        if inst is None:
            return render(GENERIC[min(n, len(GENERIC) - 1)], fmt, n)
        how = behaviour(inst["instance_id"], request.seed, request.skill)
        return render(step_at(inst, how, n), fmt, n)
