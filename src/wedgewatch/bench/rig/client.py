"""The client side of a fault trial (``bench/rig/trial.py``): a streaming chat request read to its
end, the error code the client read from it, and a client that sends half its body and then
nothing (the slow client of the corpus), on a raw socket."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import aiohttp

CLIENT_WAIT = 600.0
"""Seconds a client waits for its whole answer: a hang guard above the proxy's 240 s
``total_timeout``, so every release measured is wedgewatch's doing."""


@dataclass
class Answer:
    status: int | None
    """HTTP status; None when no answer came (the client's own error is in ``error``)."""
    request_id: str | None
    """The proxy's ``x-wedgewatch-request-id``: the request's row."""
    body: bytes
    ended: float
    """Wall-clock time of the client's last byte (time.time(), as the simulator's fault log)."""
    error: str = ""


async def ask(session: aiohttp.ClientSession, url: str, text: str, max_tokens: int = 40) -> Answer:
    """A streaming chat completion of ``text``, read to its end."""
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    try:
        async with session.post(
            url + "/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=CLIENT_WAIT)
        ) as resp:
            data = b""
            try:
                async for piece in resp.content.iter_any():
                    data += piece
            except aiohttp.ClientPayloadError:
                pass  # a failed stream ends cut short, after its error event (proxy/http.py)
            return Answer(resp.status, resp.headers.get("x-wedgewatch-request-id"), data, time.time())
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Answer(None, None, b"", time.time(), f"{type(exc).__name__}: {exc}")


def client_code(answer: Answer) -> str:
    """The error code the client read: the ``code`` of an error body, or of the last error event of
    a stream that began (the proxy's own, or the server's passed on); "" when there was none."""
    if answer.status is None:
        return ""
    if answer.status != 200:
        try:
            return str(json.loads(answer.body)["error"]["code"])
        except (ValueError, KeyError, TypeError):
            return ""
    code = ""
    for line in answer.body.split(b"\n"):
        if not line.startswith(b"data: {") or b'"error"' not in line:
            continue
        try:
            obj = json.loads(line[len(b"data: ") :])
        except ValueError:
            continue
        err = obj.get("error") if isinstance(obj.get("error"), dict) else obj
        code = str(err.get("code") or err.get("type") or "")
    return code


def finish_reason(answer: Answer) -> str:
    """The last ``finish_reason`` the client's stream carried: a whole answer has one."""
    found = ""
    for line in answer.body.split(b"\n"):
        if not line.startswith(b"data: {") or b'"finish_reason":"' not in line.replace(b" ", b""):
            continue
        try:
            choices = json.loads(line[len(b"data: ") :]).get("choices") or []
        except ValueError:
            continue
        for choice in choices:
            found = str(choice.get("finish_reason") or found)
    return found


def slow_request(body: bytes) -> bytes:
    """The head of a chat request with ``body``'s length: what a slow client sends first."""
    return (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: wedgewatch\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()


SLOW_BODY = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "hello"}]}).encode()


async def send_half(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a connection to ``url`` and send a request's head and half its body, nothing more."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(slow_request(SLOW_BODY) + SLOW_BODY[: len(SLOW_BODY) // 2])
    await writer.drain()
    return reader, writer


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer: status, headers (lower-case names) and its ``Content-Length`` of body.
    Not to the connection's end: a server that did not read a whole request body lingers before
    it closes (aiohttp: 10 s), and the client has its answer before that."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    length = headers.get("content-length")
    body = await (reader.readexactly(int(length)) if length is not None else reader.read())
    return status, headers, body


async def slow_body(url: str) -> Answer:
    """The slow client: half a body, then a wait for whatever the proxy answers."""
    reader, writer = await send_half(url)
    try:
        status, headers, body = await asyncio.wait_for(read_answer(reader), CLIENT_WAIT)
        return Answer(status, headers.get("x-wedgewatch-request-id"), body, time.time())
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
        return Answer(None, None, b"", time.time(), f"{type(exc).__name__}: {exc}")
    finally:
        writer.close()
