"""A small Inspect AI task of ours, for tests/test_wrap_inspect.py: one sample per instance of the
suite in $SUITE (its problem statement as input), one generation after a system message, and a
scorer that counts any non-empty answer as correct (the model is the simulator: what matters
here is which samples the server broke, not what it said)."""

import json
import os

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate, system_message


@scorer(metrics=[accuracy()])
def answered():  # type: ignore[no-untyped-def]
    async def score(state: TaskState, target: Target) -> Score:
        return Score(value=CORRECT if state.output.completion.strip() else INCORRECT)

    return score


@task
def fix_issues() -> Task:
    with open(os.environ["SUITE"], encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return Task(
        dataset=[Sample(id=r["instance_id"], input=r["problem_statement"], target="") for r in rows],
        solver=[
            system_message("You are a careful software engineer. Answer with a unified diff."),
            generate(),
        ],
        scorer=answered(),
    )
