"""The proxy's core without sockets: deadlines on an injected clock, and progress classification of
SSE payloads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wedgewatch.base.vocab import INFRA_OUTCOMES, STALL_KINDS, is_infra_outcome
from wedgewatch.config import WatchdogConfig
from wedgewatch.proxy import Stall, Watch
from wedgewatch.proxy.deadlines import Buckets
from wedgewatch.proxy.dialects.chat_bytes import (
    error_code,
    finish_reason,
    has_usage,
    is_error,
    is_progress,
    progress_of,
)

CFG = WatchdogConfig(ttft_timeout=10, stall_timeout=5, min_rate=1.0, rate_window=4, total_timeout=100)


def _stall(result: Stall | float) -> Stall:
    assert isinstance(result, Stall), result
    return result


# --- deadlines -----------------------------------------------------------------------------------


def test_no_first_token_is_stall_ttft_exactly_at_the_deadline() -> None:
    w = Watch(CFG, start=1000.0)
    assert w.deadline() == (1010.0, "stall_ttft")
    assert w.check(1009.99) == 1010.0
    s = _stall(w.check(1010.0))
    assert s.kind == "stall_ttft" and s.tokens == 0 and s.window == 10
    assert "ttft_timeout 10 s" in s.message and "10.0 s" in s.message


def test_after_the_first_token_the_stall_window_runs_from_the_last_token() -> None:
    w = Watch(CFG.model_copy(update={"min_rate": 0.0}), start=0.0)
    for t in (1.0, 1.5, 2.0):
        w.progress(t)
    assert w.ttft == 1.0 and w.tokens == 3 and w.max_gap == pytest.approx(0.5)
    assert w.deadline() == (7.0, "stall_midstream")
    assert w.check(6.9) == 7.0
    s = _stall(w.check(7.2))
    assert s.kind == "stall_midstream" and s.tokens == 3
    assert s.since_last_token == pytest.approx(5.2)
    assert "after 3 tokens" in s.message and "stall_timeout 5 s" in s.message


def test_a_late_first_token_moves_the_deadline_off_ttft() -> None:
    w = Watch(CFG, start=0.0)
    w.progress(9.9)
    when = w.check(10.5)
    assert isinstance(when, float) and when > 10.5


def test_trickle_is_fewer_than_min_rate_tokens_over_the_window() -> None:
    # min_rate 1/s over 4 s needs 4 tokens in any 4 s window; one token every 1.5 s is a trickle.
    w = Watch(CFG, start=0.0)
    for t in (1.0, 2.5, 4.0):
        w.progress(t)
    # fewer than 4 tokens so far: the window runs from the first token
    assert w.deadline() == (5.0, "trickle")
    w.progress(4.9)
    # 4 tokens at 1.0, 2.5, 4.0, 4.9: the 4th most recent (1.0) leaves the window at 5.0
    assert w.deadline() == (5.0, "trickle")
    s = _stall(w.check(5.0))
    assert s.kind == "trickle" and s.window == 4
    assert "below min_rate 1 tokens/s" in s.message


def test_a_steady_stream_above_min_rate_never_trickles() -> None:
    w = Watch(CFG, start=0.0)
    t = 0.5
    while t < 90:
        w.progress(t)
        assert isinstance(w.check(t), float)
        t += 0.9  # 1.1 tokens/s > 1.0
    assert w.deadline()[1] == "trickle"


def test_min_rate_zero_turns_the_trickle_check_off() -> None:
    w = Watch(CFG.model_copy(update={"min_rate": 0.0}), start=0.0)
    for i in range(20):
        w.progress(1.0 + i * 4.0)  # 0.25 tokens/s, but never 5 s without a token
    assert w.deadline()[1] == "stall_midstream"


def test_total_timeout_ends_a_healthy_but_endless_request() -> None:
    w = Watch(CFG.model_copy(update={"total_timeout": 20.0}), start=0.0)
    t = 0.1
    while t < 19.95:
        w.progress(t)
        t += 0.1
    s = _stall(w.check(20.0))
    assert s.kind == "total_timeout" and "past total_timeout 20 s" in s.message


def test_the_earliest_deadline_wins() -> None:
    w = Watch(CFG.model_copy(update={"total_timeout": 3.0}), start=0.0)
    assert w.deadline() == (3.0, "total_timeout")


def test_a_whole_answer_is_watched_by_the_total_deadline_alone() -> None:
    """A request for one answer, not a stream, has no tokens to watch: no first-token, mid-stream
    or trickle deadline (each would fire on a long answer), only ``total_timeout``."""
    w = Watch(CFG, start=0.0)
    w.whole = True
    assert w.deadline() == (100.0, "total_timeout")
    assert w.check(99.9) == 100.0
    assert _stall(w.check(100.0)).kind == "total_timeout"
    w.answered(42)
    assert w.tokens == 42 and w.ttft is None


def test_under_engine_time_a_whole_answer_counts_no_stepping_and_its_queue_extends_total() -> None:
    w = Watch(CFG, start=0.0, engine=True)
    w.whole = True
    # Far past engine_ttft_timeout (120 s) of engine stepping: a long generation, not a stall.
    for t in range(1, 200):
        assert w.charge(float(t), 1.0, stepping=True, queued=False) is None
    assert w.charge(200.0, 30.0, stepping=True, queued=True) is None
    assert w.deadline() == (130.0, "total_timeout")
    stopped = w.engine_stopped(140.0, 12.0, 10.0)
    assert stopped.kind == "stall_ttft" and "engine stopped" in stopped.message


def test_inter_token_gaps_are_counted_without_a_lock() -> None:
    b = Buckets((0.01, 0.1, 1.0))
    w = Watch(CFG, start=0.0, itl=b)
    for t in (1.0, 1.005, 1.05, 1.5, 3.0):
        w.progress(t)
    assert b.counts == [1, 1, 1, 1] and b.count == 4
    assert b.sum == pytest.approx(2.0)


def test_outcome_sets_classify_infrastructure() -> None:
    assert set(STALL_KINDS) <= INFRA_OUTCOMES
    assert is_infra_outcome("upstream_http_503") and is_infra_outcome("connection")
    assert not is_infra_outcome("ok") and not is_infra_outcome("client_error")
    assert not is_infra_outcome("client_disconnect")


# --- progress ------------------------------------------------------------------------------------


def _chunk(delta: dict[str, Any] | None = None, **extra: Any) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": None}
    choice.update(extra)
    obj = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
    return json.dumps(obj, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_chunk({"role": "assistant", "content": ""}), False),
        (_chunk({}), False),
        (_chunk({"content": None}), False),
        (_chunk({"content": "Hi"}), True),
        (_chunk({"content": '"quoted"'}), True),
        (_chunk({"content": "", "reasoning_content": "hmm"}), True),
        (_chunk({"reasoning": "hmm"}), True),
        (
            _chunk({"tool_calls": [{"index": 0, "id": "t", "type": "function", "function": {"name": "f"}}]}),
            True,
        ),
        (_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a'}}]}), True),
        (_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}), False),
        (_chunk({"content": ""}, finish_reason="stop"), False),
        (b'{"id":"x","object":"text_completion","choices":[{"index":0,"text":"tok"}]}', True),
        (b'{"id":"x","object":"text_completion","choices":[{"index":0,"text":""}]}', False),
        (b'{"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}', False),
        # Pretty-printed JSON takes the decoding path and gets the same answers.
        (b'{"choices": [{"delta": {"content": "x"}}]}', True),
        (b'{"choices": [{"delta": {"content": ""}}]}', False),
        # A string that merely mentions a key is escaped, so it cannot fool the byte test.
        (_chunk({"content": None, "role": 'say \\"content\\":\\"x'}), False),
        (b"not json", False),
    ],
)
def test_progress_is_tokens_only(data: bytes, expected: bool) -> None:
    assert is_progress(data) is expected
    try:
        obj = json.loads(data)
    except ValueError:
        return
    assert progress_of(obj) is expected


def test_errors_usage_and_finish_reason_are_read_from_the_bytes() -> None:
    err = b'{"error": {"object": "error", "message": "boom", "type": "InternalServerError", "code": 503}}'
    assert is_error(err) and not is_error(_chunk({"content": "x"}))
    assert error_code(json.loads(err)) == 503
    assert error_code({"error": {"code": "upstream_stalled"}}) == 500
    assert has_usage(b'{"choices":[],"usage":{"prompt_tokens":1}}')
    assert not has_usage(b'{"choices":[],"usage":null}')
    assert finish_reason(_chunk({"content": ""}, finish_reason="length")) == "length"
    assert finish_reason(_chunk({"content": "x"})) is None
    assert finish_reason(b'{"choices": [{"delta": {}, "finish_reason" : "stop"}]}') == "stop"  # spaced JSON
