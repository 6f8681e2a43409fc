"""The one SSE parser: events survive any split of the byte stream."""

from __future__ import annotations

import random

from wedgewatch.wire.sse import SSEParser, encode_data, iter_events

BODY = (
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
    b": ping\n\n"
    b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'
    b"event: error\ndata: line one\ndata: line two\n\n"
    b"data: [DONE]\n\n"
)


def _all(parser: SSEParser, chunks: list[bytes]) -> list[tuple[bytes | None, list[bytes], str | None]]:
    out = []
    for c in chunks:
        out += [(e.data, e.comments, e.event) for e in parser.feed(c)]
    out += [(e.data, e.comments, e.event) for e in parser.close()]
    return out


def test_whole_body() -> None:
    events = list(iter_events(BODY))
    assert [e.data for e in events] == [
        b'{"choices":[{"delta":{"role":"assistant"}}]}',
        None,
        b'{"choices":[{"delta":{"content":"Hi"}}]}',
        b"line one\nline two",
        b"[DONE]",
    ]
    assert events[1].comments == [b"ping"]
    assert events[3].event == "error"
    assert events[4].is_done
    assert events[2].json()["choices"][0]["delta"]["content"] == "Hi"


def test_any_split_gives_the_same_events() -> None:
    expected = _all(SSEParser(), [BODY])
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(BODY)), rng.randint(1, 12)))
        chunks = [BODY[a:b] for a, b in zip([0, *cuts], [*cuts, len(BODY)], strict=True)]
        assert _all(SSEParser(), chunks) == expected


def test_crlf_and_cr_line_endings() -> None:
    crlf = BODY.replace(b"\n", b"\r\n")
    assert _all(SSEParser(), [crlf]) == _all(SSEParser(), [BODY])
    # A split between \r and \n must not produce a phantom blank line (which would cut the
    # two-line data event in two).
    for at in [i + 1 for i in range(len(crlf)) if crlf[i : i + 2] == b"\r\n"]:
        assert _all(SSEParser(), [crlf[:at], crlf[at:]]) == _all(SSEParser(), [BODY])


def test_last_event_without_blank_line_is_flushed_on_close() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: tail") == []
    assert [e.data for e in parser.close()] == [b"tail"]


def test_encode_round_trip() -> None:
    (event,) = list(iter_events(encode_data({"a": [1, "x"]})))
    assert event.json() == {"a": [1, "x"]}
