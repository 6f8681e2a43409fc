"""The simulator's pure parts: tokenizer, reply planning, fault matching, scenarios, the hazard."""

from __future__ import annotations

import pytest

from wedgewatch.base.errors import ScenarioError
from wedgewatch.cli.sim import _leftovers
from wedgewatch.sim import tokenizer
from wedgewatch.sim.chunks import ChatEncoder, plan_reply
from wedgewatch.sim.faults import FaultBook, RequestKey
from wedgewatch.sim.filler import FillerPolicy
from wedgewatch.sim.policy import PolicyReply, PolicyRequest
from wedgewatch.sim.scenario import Fault, Wedge, bundled_names, load_scenario, parse_scenario
from wedgewatch.sim.wedge import ServerState, WedgeDice, Workload, hazard, wedge_probability


def test_tokenizer_is_lossless_and_about_four_chars_per_token() -> None:
    text = "def parse(x):\n    return x.split(',')  # café, naïve résumé\n"
    toks = tokenizer.tokenize(text)
    assert "".join(toks) == text
    prose = "The quick brown fox jumps over the lazy dog near the riverbank today. " * 20
    assert 3.0 < len(prose) / tokenizer.count(prose) < 6.0


def test_filler_is_deterministic_and_exactly_the_requested_length() -> None:
    req = PolicyRequest(kind="chat", model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=37)
    a, b = FillerPolicy().reply(req), FillerPolicy().reply(req)
    assert a.text == b.text and tokenizer.count(a.text) == 37
    req.seed = 1
    assert FillerPolicy().reply(req).text != a.text


def test_plan_reply_limits_stop_and_tools() -> None:
    r = plan_reply(PolicyReply(text=" a b c d e"), max_tokens=3, stop=[], tools_allowed=False)
    assert [u.text for u in r.units] == [" a", " b", " c"] and r.finish_reason == "length"
    r = plan_reply(PolicyReply(text=" a b c d e"), max_tokens=10, stop=[" d", " b"], tools_allowed=False)
    assert [u.text for u in r.units] == [" a"] and r.finish_reason == "stop" and r.stop_reason == " b"
    r = plan_reply(PolicyReply(text=" a b"), max_tokens=10, stop=[], tools_allowed=False)
    assert r.finish_reason == "stop"
    call = {"id": "call-1", "name": "run", "arguments": '{"cmd": "ls -la"}'}
    r = plan_reply(PolicyReply(tool_calls=[call]), max_tokens=100, stop=[], tools_allowed=True)
    assert r.finish_reason == "tool_calls" and r.units[0].kind == "tool_head"
    assert "".join(u.text for u in r.units[1:]) == call["arguments"]
    body = ChatEncoder("m", r).body(5)
    assert body["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "run",
        "arguments": call["arguments"],
    }
    assert body["usage"]["completion_tokens"] == len(r.units)
    r = plan_reply(PolicyReply(tool_calls=[call]), max_tokens=100, stop=[], tools_allowed=False)
    assert r.units == [] and r.finish_reason == "stop"


def test_fault_book_conditions_and_times() -> None:
    book = FaultBook(
        [
            Fault.model_validate({"when": {"nth": 2}, "action": "http_error"}),
            Fault.model_validate(
                {"when": {"contains": "X", "model": "a"}, "times": 1, "action": "stall_ttft"}
            ),
        ]
    )
    assert book.match(RequestKey(1, "X", "b")) is None
    assert book.match(RequestKey(2, "", "b")).action == "http_error"  # type: ignore[union-attr]
    assert book.match(RequestKey(3, "has X", "a")).action == "stall_ttft"  # type: ignore[union-attr]
    assert book.match(RequestKey(4, "has X", "a")) is None  # times = 1 used up


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[[fault]]\naction = "explode"\n', "fault[0].action"),
        ('[[fault]]\naction = "trickle"\nrate = 0\n', "fault[0].rate"),
        ('[[fault]]\nwhen.nth = 0\naction = "drop"\n', "fault[0].when.nth"),
        ("[server]\ntokens_per_s = -1\n", "server.tokens_per_s"),
        ("[startup]\nbogus = 1\n", "startup.bogus"),
        ("[wedge]\nage_multiplier = 0.5\n", "wedge.age_multiplier"),
    ],
)
def test_bad_scenarios_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ScenarioError) as e:
        parse_scenario(text, "f.toml")
    assert e.value.field == field and str(e.value).startswith(f"f.toml: {field}: ")


def test_unparsable_or_missing_scenario() -> None:
    with pytest.raises(ScenarioError, match="not valid TOML"):
        parse_scenario("[[fault]\n", "f.toml")
    with pytest.raises(ScenarioError, match="bundled"):
        load_scenario("no-such-scenario")


def test_every_bundled_scenario_loads_and_states_its_ground_truth() -> None:
    names = bundled_names()
    for expected in ("healthy", "seed-used-server", "seed-lora", "keywords", "stall-all", "wedge-under-load"):
        assert expected in names
    for name in names:
        s = load_scenario(name)
        assert s.name == name and s.description and s.ground_truth.get("description"), name


def test_ground_truth_checks_match_the_hazard_model() -> None:
    """The probabilities written in the scenario files are what the model computes."""
    checked = 0
    for name in bundled_names():
        s = load_scenario(name)
        for check in s.ground_truth.get("check", []):
            assert s.wedge is not None
            load = Workload(**{k: v for k, v in check.items() if k not in ("what", "p_wedge")})
            assert wedge_probability(s.wedge, load) == pytest.approx(check["p_wedge"], abs=0.002), check[
                "what"
            ]
            checked += 1
    assert checked >= 10


def test_story_claims_hold_in_seed_used_server() -> None:
    w = load_scenario("seed-used-server").wedge
    assert w is not None
    safe = {"prefix_caching": False, "eager": True}
    used = wedge_probability(w, Workload(requests=40, concurrency=4, preload_age=3000, **safe))
    fresh = wedge_probability(w, Workload(requests=120, concurrency=4, warmup=2, **safe))
    fresh_noflags = wedge_probability(w, Workload(requests=120, concurrency=4, warmup=2))
    assert used > 0.99 and fresh < 0.05
    assert fresh < fresh_noflags < used  # the flags help, freshness helps far more

    def h(**kw: object) -> float:
        base: dict[str, object] = {
            "age_requests": 100,
            "running": 1,
            "prefix_caching": False,
            "eager": True,
            "adapter_requests": None,
        }
        base.update(kw)
        return hazard(w, ServerState(**base))  # type: ignore[arg-type]

    assert h(prefix_caching=True, eager=False) / h() == pytest.approx(6.0)
    assert 900 < h(age_requests=5000) / h() <= 1000  # the age ramp is already x1.09 at 100 requests
    assert h(running=4) / h() == pytest.approx(64.0)
    assert h(age_requests=0) / h(age_requests=2) == pytest.approx(300.0, rel=0.01)


def test_seed_lora_wears_out_near_fourteen_instances() -> None:
    w = load_scenario("seed-lora").wedge
    assert w is not None
    p = [
        wedge_probability(w, Workload(requests=n, adapter=True, warmup=2, prefix_caching=False, eager=True))
        for n in (140, 280, 420)
    ]
    assert p[0] < 0.1 and 0.35 < p[1] < 0.65 and p[2] > 0.95


def test_dice_are_deterministic_given_the_seed() -> None:
    w = Wedge(base_hazard=0.3)
    state = ServerState(0, 1, True, False, None)
    dice = [WedgeDice(w, seed) for seed in (7, 7, 8)]
    runs = [[d.roll(state, 100) for _ in range(50)] for d in dice]
    assert runs[0] == runs[1] != runs[2]
    assert any(r is not None for r in runs[0]) and any(r is None for r in runs[0])


def test_vllm_leftover_arguments() -> None:
    pos, loras, ignored = _leftovers(
        ["Qwen/Qwen3", "--gpu-memory-utilization", "0.9", "b=/p/b", "--trust-remote-code", "--x=1"]
    )
    assert pos == ["Qwen/Qwen3"] and loras == ["b=/p/b"]
    assert ignored == ["--gpu-memory-utilization", "0.9", "--trust-remote-code", "--x=1"]
