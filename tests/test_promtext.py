"""The one Prometheus reader, on text shaped like vLLM's and llama.cpp's /metrics."""

from __future__ import annotations

import pytest

from wedgewatch.wire.promtext import parse

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1200.0
vllm:generation_tokens_total{engine="1",model_name="m"} 34.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 5.0
vllm:request_success_total{finished_reason="abort",model_name="m"} 2.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 7.0
vllm:time_to_first_token_seconds_count{model_name="m"} 7.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 1.5
"""

LLAMACPP = """\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 77
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
"""


def test_vllm_names_keep_their_suffixes_and_sum_over_labels() -> None:
    s = parse(VLLM)
    assert s.value("vllm:num_requests_running") == 3.0
    assert s.total("vllm:generation_tokens_total") == 1234.0
    assert s.total("vllm:generation_tokens_total", engine="1") == 34.0
    assert s.total("vllm:request_success_total", finished_reason="abort") == 2.0
    assert s.total("vllm:time_to_first_token_seconds_count") == 7.0
    assert s.total("vllm:absent") is None
    assert "vllm:generation_tokens_total" in s


def test_unlabelled_llamacpp_series() -> None:
    s = parse(LLAMACPP)
    assert s.total("llamacpp:tokens_predicted_total") == 77
    assert s.value("llamacpp:requests_processing") == 1


def test_malformed_text_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse("vllm:x{model_name=} nonsense\n")
