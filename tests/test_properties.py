"""No input makes a loader or parser raise anything but wedgewatch's own errors (base/errors.py):
the config and suite loaders, the SSE parser, the Prometheus reader, and the readers of ``scan``
and ``audit``, fed what hypothesis makes of bytes, text and JSON shaped like their real inputs.
The CLI turns those errors into one line and exit 2; anything else would be a traceback."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wedgewatch.analysis.audit.results import read_results
from wedgewatch.analysis.audit.signatures import suite_statements
from wedgewatch.analysis.scan import render_text, scan
from wedgewatch.base.errors import WedgewatchError
from wedgewatch.config import Config, load_config
from wedgewatch.suites.load import load_file
from wedgewatch.wire import promtext
from wedgewatch.wire.sse import SSEParser

EXAMPLES = settings(
    # 150 each in the suite; WEDGEWATCH_EXAMPLES=5000 for a longer search.
    max_examples=int(os.environ.get("WEDGEWATCH_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NOT_A_NUMBER = re.compile(r"(?<![\w.])-?(nan|inf)(?![\w])", re.IGNORECASE)
"""A NaN or an infinity printed as a number ("nan–nan s"), not the word "infrastructure"."""


@contextmanager
def a_file(suffix: str, data: bytes) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"input{suffix}"
        path.write_bytes(data)
        yield path


def only_ours(call: Any, *args: Any) -> Any:
    """``call(*args)``; a WedgewatchError is a fine answer, anything else fails the test."""
    try:
        return call(*args)
    except WedgewatchError:
        return None


# --- values shaped like the real inputs --------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["", "1", "-1", "nan", "inf", "600", "600s", "true", "false", "TimeoutError", "null"]),
)
RESULT_KEYS = [
    "instance_id", "id", "resolved", "duration", "elapsed", "latency", "start", "end", "started_at",
    "ended_at", "status", "exit_status", "error", "exception", "info", "messages", "history",
    "trajectory", "model_patch", "patch", "resolved_ids", "unresolved_ids", "completed_ids",
    "error_ids", "empty_patch_ids", "submitted_ids", "eval", "samples", "scores", "timestamp",
    "api_error", "early_stop", "outcome", "attempts", "problem_statement", "input", "role", "content",
    "metadata", "agent_result", "verifier_result", "exception_info", "trial_name", "task_name",
]  # fmt: skip
keys = st.one_of(st.sampled_from(RESULT_KEYS), st.text(max_size=12))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=6)),
    max_leaves=30,
)
rows = st.dictionaries(keys, json_values, max_size=8)


def _dump(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


files = st.one_of(
    st.binary(max_size=400),
    st.text(max_size=400).map(str.encode),
    json_values.map(_dump),
    st.lists(rows, max_size=6).map(_dump),
    st.lists(rows, max_size=6).map(lambda rs: b"\n".join(_dump(r) for r in rs)),
    rows.map(_dump),
    st.integers(min_value=1, max_value=100_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(min_value=1, max_value=100_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
)
suffixes = st.sampled_from([".json", ".jsonl", ".csv", ".tsv", ".traj.json", ".traj", ".txt", ".eval"])


# --- scan and audit ------------------------------------------------------------------------------


@EXAMPLES
@given(data=files, suffix=suffixes)
def test_scan_reads_any_file_or_says_which_is_wrong(data: bytes, suffix: str) -> None:
    with a_file(suffix, data) as path:
        result = only_ours(scan, [path], [600.0])
        if result is not None:
            render_text(result)


@EXAMPLES
@given(data=files, suffix=suffixes)
def test_audit_reads_any_results_and_suite_or_says_which_is_wrong(data: bytes, suffix: str) -> None:
    with a_file(suffix, data) as path:
        only_ours(read_results, [path])
        only_ours(suite_statements, path)


@EXAMPLES
@given(durations=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=8))
def test_scan_never_prints_a_nan_or_infinite_duration(durations: list[float]) -> None:
    rows = [
        {"instance_id": f"i{n}", "duration": d, "status": "error: Request timed out."}
        for n, d in enumerate(durations)
    ]
    with a_file(".json", _dump(rows)) as path:
        result = scan([path], [600.0])
    text = render_text(result)
    assert NOT_A_NUMBER.search(text) is None, text
    json.dumps(result, allow_nan=False, default=str)  # raises on a NaN or an infinity anywhere


# --- suites --------------------------------------------------------------------------------------

SUITE_KEYS = ["instance_id", "repo", "base_commit", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS",
              "test_patch", "patch", "version", "environment_setup_commit", "hints_text"]  # fmt: skip
suite_rows = st.dictionaries(
    st.one_of(st.sampled_from(SUITE_KEYS), st.text(max_size=8)), json_values, max_size=9
)


@EXAMPLES
@given(
    data=st.one_of(
        files,
        st.lists(suite_rows, max_size=5).map(_dump),
        st.lists(suite_rows, max_size=5).map(lambda rs: b"\n".join(_dump(r) for r in rs)),
    ),
    suffix=st.sampled_from([".json", ".jsonl", ".txt", ".parquet"]),
)
def test_the_suite_loader_takes_any_file_or_says_which_line_is_wrong(data: bytes, suffix: str) -> None:
    with a_file(suffix, data) as path:
        only_ours(load_file, path)


# --- config --------------------------------------------------------------------------------------

SECTIONS = {
    name: sorted(field.annotation.model_fields)  # type: ignore[union-attr]
    for name, field in Config.model_fields.items()
    if name != "servers"
}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return (
            "{"
            + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items() if x is not None)
            + "}"
        )
    return '""'


@st.composite
def configs(draw: st.DrawFn) -> bytes:
    """A TOML file of the real sections and fields with values of any type."""
    out = []
    for section in draw(st.lists(st.sampled_from([*SECTIONS, "servers", "nope"]), max_size=4, unique=True)):
        header = "[[servers]]" if section == "servers" else f"[{section}]"
        names = SECTIONS.get(section, SECTIONS["server"])
        fields = draw(
            st.dictionaries(st.one_of(st.sampled_from(names), st.text(max_size=6)), json_values, max_size=6)
        )
        body = "\n".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in fields.items() if v is not None)
        out.append(f"{header}\n{body}\n")
    return "\n".join(out).encode()


@EXAMPLES
@given(data=st.one_of(configs(), st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_the_config_loader_takes_any_file_or_names_the_field(data: bytes) -> None:
    with a_file(".toml", data) as path:
        cfg = only_ours(load_config, path)
        if cfg is not None:
            cfg.snapshot(), cfg.hash()  # what every command does next with a config it loaded


# --- the wire ------------------------------------------------------------------------------------

sse_bytes = st.one_of(
    st.binary(max_size=600),
    st.lists(
        st.sampled_from(
            [
                b"data: ",
                b"data:",
                b"event: x",
                b": ping",
                b"\n",
                b"\r",
                b"\r\n",
                b"{}",
                b"[DONE]",
                b"id: 1",
                b"retry: 5",
                b"\xff\xfe",
                b"x" * 50,
            ]
        ),
        max_size=60,
    ).map(b"".join),
)


def _events(chunks: list[bytes], max_frame: int) -> list[tuple[bytes | None, list[bytes], str | None]] | None:
    parser = SSEParser(max_frame)
    out = []
    try:
        for c in chunks:
            out += parser.feed(c)
        out += parser.close()
    except WedgewatchError:
        return None
    return [(e.data, e.comments, e.event) for e in out]


@EXAMPLES
@given(body=sse_bytes, cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=8),
       max_frame=st.sampled_from([16, 64, 1 << 20]))  # fmt: skip
def test_the_sse_parser_takes_any_bytes_however_cut(body: bytes, cuts: list[int], max_frame: int) -> None:
    points = sorted({min(c, len(body)) for c in cuts})
    chunks = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    whole, cut = _events([body], max_frame), _events(chunks, max_frame)
    if whole is not None and cut is not None:
        assert whole == cut, "the events do not depend on where the bytes were cut"


prom_text = st.one_of(
    st.text(max_size=300),
    st.lists(
        st.sampled_from(
            [
                "# HELP vllm:x y",
                "# TYPE vllm:x counter",
                "vllm:x 1",
                'vllm:x{a="b"} 2.5',
                "vllm:x NaN",
                "vllm:x +Inf",
                "x{",
                'x{a="\\',
                "x 1 2 3",
                "# TYPE x histogram",
                'x_bucket{le="1"} 1',
                "x_count 1",
                "x_sum 0.5",
                "# EOF",
                "",
                " ",
            ]
        ),
        max_size=12,
    ).map("\n".join),
)


@EXAMPLES
@given(text=prom_text)
def test_the_prometheus_reader_takes_any_text(text: str) -> None:
    samples = only_ours(promtext.parse, text)
    if samples is not None:
        for name in samples.names():
            samples.total(name)
