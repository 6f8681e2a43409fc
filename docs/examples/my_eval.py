"""A stand-in for your harness, for README's quick tour: a plain OpenAI-SDK script that knows
nothing of wedgewatch.

    python my_eval.py [--base-url URL] SUITE.jsonl RESULTS.jsonl

For each instance of a SWE-bench JSONL suite (4 at a time) it asks the server's first model for a
patch, and writes one JSON line per instance: ``instance_id``, ``outcome`` (``submitted``, or
``error`` with the exception's name as ``status``) and ``duration``. It grades nothing, so
``wedgewatch audit`` scores it by ``submitted``. The OpenAI SDK's defaults stand, retries
included; ``--base-url`` (default: ``OPENAI_BASE_URL``, which ``wedgewatch wrap`` sets) points it
at the server, as many harnesses take a flag for it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import time
from typing import Any

import openai


def solve(client: openai.OpenAI, model: str, instance: dict[str, Any]) -> dict[str, Any]:
    started = time.time()
    row: dict[str, Any] = {"instance_id": instance["instance_id"]}
    try:
        reply = client.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": "You fix bugs. Answer with a unified diff."},
                {"role": "user", "content": f"Fix this issue:\n\n{instance['problem_statement']}"},
            ],
            max_tokens=64,
        )
        row["outcome"] = "submitted" if reply.choices[0].message.content else "empty_patch"
    except openai.APIError as exc:
        row.update(outcome="error", status=type(exc).__name__)
    row["duration"] = round(time.time() - started, 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", help="SWE-bench JSONL: one instance a line")
    parser.add_argument("results", help="where to write one JSON line per instance")
    parser.add_argument("--base-url", help="the server's /v1 URL (default: OPENAI_BASE_URL)")
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.base_url)
    model = client.models.list().data[0].id
    with open(args.suite, encoding="utf-8") as fh:
        instances = [json.loads(line) for line in fh if line.strip()]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        rows = list(pool.map(lambda i: solve(client, model, i), instances))
    with open(args.results, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    print(
        f"{args.results}: {len(rows)} instances, {sum(r['outcome'] == 'submitted' for r in rows)} submitted"
    )


if __name__ == "__main__":
    main()
