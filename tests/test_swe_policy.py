"""The simulator's `swe` policy, called directly: deterministic decisions, the three reply formats
(the built-in agent's, mini-swe-agent's text and tool-call formats), and trajectories played in a
real sandbox that resolve (or fail to resolve) the instance for real."""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import StrictUndefined, Template

from wedgewatch.agents import prompts
from wedgewatch.sandbox import LocalSandbox
from wedgewatch.sim.policy import PolicyRequest, get_policy
from wedgewatch.sim.swe_policy import SwePolicy, behaviour, find_instance
from wedgewatch.suites import evaluate, load_bundled

MINI = Path(__import__("minisweagent").__file__).parent / "config"
MINI_ACTION_RE = r"```mswea_bash_command\s*\n(.*?)\n```"  # LitellmTextbasedModelConfig.action_regex


def bash_agent_messages(inst: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": prompts.system_prompt()},
        {"role": "user", "content": prompts.instance_prompt(inst["repo"], inst["problem_statement"], 50)},
    ]


def mini_messages(inst: dict[str, Any], config: str = "default.yaml") -> list[dict[str, Any]]:
    agent = yaml.safe_load((MINI / config).read_text())["agent"]
    env = platform.uname()._asdict() | {"task": inst["problem_statement"]}
    render = lambda t: Template(t, undefined=StrictUndefined).render(**env)  # noqa: E731
    return [
        {"role": "system", "content": render(agent["system_template"])},
        {"role": "user", "content": render(agent["instance_template"])},
    ]


def ask(messages: list[dict[str, Any]], skill: float = 1.0, seed: int = 0, tools: Any = None) -> Any:
    return SwePolicy().reply(
        PolicyRequest("chat", "sim-model", messages, tools=tools, seed=seed, skill=skill)
    )


def find(how: str, seed: int = 0, skill: float = 0.0) -> dict[str, Any]:
    for inst in load_bundled():
        if behaviour(inst["instance_id"], seed, skill) == how:
            return inst
    raise AssertionError(f"no instance behaves {how!r} at seed {seed}")


def test_registered_as_swe() -> None:
    assert isinstance(get_policy("swe"), SwePolicy)


def test_behaviour_is_deterministic_and_monotonic_in_skill() -> None:
    ids = [i["instance_id"] for i in load_bundled()]
    for seed in range(5):
        assert all(behaviour(i, seed, 1.0) == "solve" for i in ids)
        assert all(behaviour(i, seed, 0.0) != "solve" for i in ids)
        solved_low = {i for i in ids if behaviour(i, seed, 0.4) == "solve"}
        solved_high = {i for i in ids if behaviour(i, seed, 0.8) == "solve"}
        assert solved_low <= solved_high
        assert [behaviour(i, seed, 0.6) for i in ids] == [behaviour(i, seed, 0.6) for i in ids]
    # Over many draws the solved share tracks skill, and every failure kind occurs.
    draws = [behaviour(i, seed, 0.7) for i in ids for seed in range(50)]
    assert 0.62 < draws.count("solve") / len(draws) < 0.78
    assert {"wrong", "wander", "babble"} <= set(draws)
    # Different seeds give different outcome sets (a seed matters).
    assert len({tuple(behaviour(i, s, 0.5) for i in ids) for s in range(5)}) > 1


@pytest.mark.parametrize("messages", [bash_agent_messages, mini_messages])
def test_finds_the_instance_in_either_agents_prompt(messages: Any) -> None:
    for inst in load_bundled():
        found = find_instance(messages(inst))
        assert found is not None and found["instance_id"] == inst["instance_id"]


def test_reply_formats() -> None:
    inst = load_bundled()[3]
    bash = ask(bash_agent_messages(inst)).text
    assert bash.startswith("THOUGHT: ") and len(prompts.actions(bash)) == 1
    mini_text = ask(mini_messages(inst)).text
    assert len(re.findall(MINI_ACTION_RE, mini_text, re.DOTALL)) == 1
    assert "```bash" not in mini_text
    bash_tool = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    tool = ask(mini_messages(inst), tools=bash_tool)
    assert len(tool.tool_calls) == 1 and tool.tool_calls[0]["name"] == "bash"
    assert json.loads(tool.tool_calls[0]["arguments"])["command"]
    assert tool.text.startswith("THOUGHT: ")


def test_unknown_conversation_gets_a_generic_reply_then_submits() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Write hello world."}]
    first = ask(messages)
    assert first.text and len(prompts.actions(first.text)) == 1
    completion = SwePolicy().reply(PolicyRequest("completion", "m", [{"role": "user", "content": "x"}]))
    assert completion.text
    for _ in range(3):
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "output"}]
    assert prompts.actions(ask(messages).text) == [f"echo {prompts.SENTINEL}"]


def test_no_reply_is_ever_empty() -> None:
    for inst in load_bundled():
        messages = bash_agent_messages(inst)
        for skill in (0.0, 1.0):
            for n in range(0, 60, 7):
                history = (
                    messages + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}] * n
                )
                assert ask(history, skill=skill).text.strip()


def play(inst: dict[str, Any], skill: float, root: Path, turns: int = 25) -> tuple[str, int, str]:
    """The built-in agent's loop, minus HTTP: (ending, replies, patch)."""
    box = LocalSandbox.create(inst, root)
    messages = bash_agent_messages(inst)
    bad = 0
    try:
        for n in range(1, turns + 1):
            text = ask(messages, skill=skill).text
            messages.append({"role": "assistant", "content": text})
            found = prompts.actions(text)
            if len(found) != 1:
                bad += 1
                if bad == 3:
                    return "format_errors", n, ""
                messages.append({"role": "user", "content": prompts.format_error(len(found))})
                continue
            bad = 0
            res = box.run(found[0], timeout=60)
            if prompts.is_submission(res.output, res.exit_code):
                return "submitted", n, box.diff()
            messages.append(
                {"role": "user", "content": prompts.observation(res.exit_code, res.output, 10_000)}
            )
        return "step_limit", turns, box.diff()
    finally:
        box.close()


def resolved(inst: dict[str, Any], patch: str, root: Path) -> bool:
    box = LocalSandbox.create(inst, root)
    try:
        return evaluate(box, inst, patch, timeout=60).resolved
    finally:
        box.close()


def test_a_solving_model_resolves_the_instance(tmp_path: Path) -> None:
    inst = next(i for i in load_bundled() if i["patch"].count("diff --git") > 1)  # a two-file fix
    ending, n, patch = play(inst, 1.0, tmp_path)
    assert ending == "submitted" and 5 <= n <= 12
    assert resolved(inst, patch, tmp_path)


def test_a_wrong_patch_does_not_resolve(tmp_path: Path) -> None:
    inst = find("wrong")
    ending, _, patch = play(inst, 0.0, tmp_path)
    assert ending == "submitted" and patch.strip()
    assert not resolved(inst, patch, tmp_path)


def test_a_wandering_model_never_submits_or_edits(tmp_path: Path) -> None:
    ending, n, patch = play(find("wander"), 0.0, tmp_path, turns=20)
    assert (ending, n, patch) == ("step_limit", 20, "")


def test_a_babbling_model_makes_format_errors(tmp_path: Path) -> None:
    ending, n, _ = play(find("babble"), 0.0, tmp_path)
    assert ending == "format_errors" and n == 4  # one look, then three bad replies in a row
