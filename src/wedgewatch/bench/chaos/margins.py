"""How near a tie a differing reply was, asked of the engine itself (vLLM).

A request the proxy continued on the next life from its token ids is computed there in one
prefill: the tokens already sent are read in one pass where the first life decoded them one by
one, so their log probabilities differ by rounding, and a near-tie can flip. The control measures
that rounding: for a sample of its exchanges, the greedy decode's log probability of each token
(``logprobs``) against the same token's in one prefill of the whole reply (``prompt_logprobs``);
the largest difference, twice (both candidates of a tie may move), is the margin under which a
flip is the arithmetic's. A struck reply that differs is then read at its first differing token:
the prefill's top two there, and their margin. It is accepted only when those two are the two
replies' tokens and their margin is below the control's.

Only where the engine can say: vLLM's ``/tokenize`` and completions with token ids. The
simulator's replies are text, never near a tie; on llama.cpp this is not built (a differing reply
is reported unaccepted).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from wedgewatch.bench.chaos.replies import Exchange

SAMPLE = 8
"""Control exchanges whose decode and prefill are compared."""


@dataclass(frozen=True)
class Margin:
    position: int
    control_token: int
    run_token: int
    top: list[int]
    margin: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Engine:
    """The few calls the margins need, on a vLLM at ``base_url``."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, model: str) -> None:
        self.session, self.base_url, self.model = session, base_url, model

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(self.base_url + path, json={"model": self.model, **body}) as resp:
            resp.raise_for_status()
            out: dict[str, Any] = await resp.json()
            return out

    async def prompt_ids(self, messages: tuple[dict[str, str], ...]) -> list[int]:
        out = await self._post("/tokenize", {"messages": list(messages), "add_generation_prompt": True})
        return list(out["tokens"])

    async def text_ids(self, text: str) -> list[int]:
        out = await self._post("/tokenize", {"prompt": text, "add_special_tokens": False})
        return list(out["tokens"])

    async def prefill(self, ids: list[int]) -> list[dict[int, float]]:
        """Each position's top log probabilities (two, and the token's own) in one prefill."""
        out = await self._post("/v1/completions", {"prompt": ids, "max_tokens": 1, "prompt_logprobs": 2})
        rows = out["choices"][0]["prompt_logprobs"]
        return [{int(k): float(v["logprob"]) for k, v in (row or {}).items()} for row in rows]

    async def decode(self, ids: list[int], n: int) -> tuple[list[int], list[float]]:
        """The greedy continuation's tokens and each one's log probability, decoded one by one."""
        out = await self._post(
            "/v1/completions",
            {
                "prompt": ids,
                "max_tokens": n,
                "temperature": 0,
                "logprobs": 1,
                "return_tokens_as_token_ids": True,
            },
        )
        lp = out["choices"][0]["logprobs"]
        tokens = [int(str(t).split(":", 1)[1]) for t in lp["tokens"]]
        return tokens, [float(x) for x in lp["token_logprobs"]]


async def noise(engine: Engine, sample: list[Exchange]) -> dict[str, Any]:
    """The largest difference between a token's log probability decoded and prefilled, over the
    sample; the margin below which a flip is accepted is twice it."""
    diffs: list[float] = []
    flips = 0
    for e in sample[:SAMPLE]:
        prompt = await engine.prompt_ids(e.messages)
        want = len(await engine.text_ids(e.text)) or 1
        tokens, decoded = await engine.decode(prompt, want)
        rows = await engine.prefill(prompt + tokens)
        for j, (tok, lp) in enumerate(zip(tokens, decoded, strict=True)):
            row = rows[len(prompt) + j]
            if tok in row:
                diffs.append(abs(row[tok] - lp))
                flips += int(max(row, key=lambda k: row[k]) != tok)
    worst = max(diffs, default=0.0)
    return {"tokens": len(diffs), "max": round(worst, 6), "flips": flips, "accept_below": round(2 * worst, 6)}


async def margin(engine: Engine, run: Exchange, control: Exchange) -> Margin | None:
    """The prefill's top two at the first token where the two replies differ, and their margin."""
    prompt = await engine.prompt_ids(control.messages)
    mine, theirs = await engine.text_ids(run.text), await engine.text_ids(control.text)
    i = next((k for k, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), None)
    if i is None:
        return None  # one is a prefix of the other: no token to weigh
    row = (await engine.prefill(prompt + theirs[: i + 1]))[len(prompt) + i]
    top = sorted(row, key=lambda k: row[k], reverse=True)[:2]
    gap = row[top[0]] - row[top[1]] if len(top) == 2 else float("inf")
    return Margin(i, theirs[i], mine[i], top, round(gap, 6))


def accepted(m: Margin | None, below: float) -> bool:
    return m is not None and set(m.top) == {m.control_token, m.run_token} and m.margin < below
