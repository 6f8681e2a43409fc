"""The bash agent's prompts. Kept as plain templates (``str.format``) so that the simulator's
policy, and a reader, can see exactly what the model is told.

The shape is mini-swe-agent's: a THOUGHT, then exactly one fenced ```bash block per reply, and the
same submission sentinel, so a model tuned on mini-swe-agent trajectories feels at home.
"""

from __future__ import annotations

import re

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

# One fenced block: ```bash, a newline, the command, a newline, ```. Same as mini-swe-agent 1.x.
ACTION_RE = re.compile(r"```bash[ \t]*\n(.*?)\n```", re.DOTALL)

SYSTEM_TEMPLATE = """\
You are a software engineer working in a bash shell on a code repository. You solve the task you \
are given by running one shell command per turn.

Every reply has two parts: a THOUGHT paragraph that explains your reasoning, then exactly ONE \
bash code block holding ONE command (join several steps with && or ||). For example:

THOUGHT: I need to see which files the repository has before I read any of them.

```bash
ls -la
```

Each command runs in a fresh shell in the repository's root directory, so cd and exported \
variables do not carry over to the next command. Its output (cut short if very long) comes back \
as the next message. Do not start interactive programs (editors, pagers, prompts): they would \
hang until the command's time limit.

When you are done, submit by running this command on its own:

```bash
echo {sentinel}
```

Your changes to the files in the repository are the patch that gets evaluated. You cannot \
continue after submitting.
"""

INSTANCE_TEMPLATE = """\
Please solve this issue in {where}:

<problem_statement>
{problem_statement}
</problem_statement>

A good way to work:
1. Find and read the code the issue is about.
2. Reproduce the problem, with the existing tests or a short script.
3. Edit the source code to fix it.
4. Check the fix: run the tests and try edge cases.
5. Submit with `echo {sentinel}` as a command of its own.

Do not change the existing tests unless the issue asks for it. You have at most {step_limit} \
replies.
"""

FORMAT_ERROR_TEMPLATE = """\
Format error: your reply must contain exactly ONE ```bash code block; it contained {count}.

Reply with a THOUGHT paragraph and exactly one bash block, like this:

THOUGHT: why I run this command.

```bash
the_command --with arguments
```

To finish, run `echo {sentinel}` as a command of its own.
"""

OBSERVATION_TEMPLATE = """\
<returncode>{returncode}</returncode>
{warning}<output>
{output}
</output>"""

TIMEOUT_WARNING = (
    "<warning>The command did not finish within {timeout:g} seconds and was killed, together "
    "with everything it started. Avoid long-running or interactive commands.</warning>\n"
)

ELIDED_NOTE = (
    "\n[... {elided} characters elided: the output was longer than {limit} characters. Use head, "
    "tail, grep or sed -n to look at parts of it ...]\n"
)


def system_prompt() -> str:
    return SYSTEM_TEMPLATE.format(sentinel=SENTINEL)


def instance_prompt(repo: str, problem_statement: str, step_limit: int) -> str:
    return INSTANCE_TEMPLATE.format(
        where=f"the repository {repo}" if repo else "the repository in the current directory",
        problem_statement=problem_statement.strip(),
        sentinel=SENTINEL,
        step_limit=step_limit,
    )


def format_error(count: int) -> str:
    return FORMAT_ERROR_TEMPLATE.format(count=count, sentinel=SENTINEL)


def truncate(output: str, limit: int) -> str:
    """Keep the head and the tail of ``output`` (``limit`` characters in all) with a note between."""
    if len(output) <= limit:
        return output
    half = limit // 2
    return output[:half] + ELIDED_NOTE.format(elided=len(output) - 2 * half, limit=limit) + output[-half:]


def observation(returncode: int | None, output: str, limit: int, timeout: float | None = None) -> str:
    warning = TIMEOUT_WARNING.format(timeout=timeout) if timeout is not None else ""
    code = "timeout" if returncode is None else str(returncode)
    return OBSERVATION_TEMPLATE.format(returncode=code, warning=warning, output=truncate(output, limit))


def actions(reply: str) -> list[str]:
    """The commands of every ```bash block in a reply (the agent accepts exactly one)."""
    return [m.strip() for m in ACTION_RE.findall(reply)]


def is_submission(output: str, exit_code: int | None) -> bool:
    """mini-swe-agent's rule: the output's first line is the sentinel, and the command succeeded."""
    lines = output.lstrip().splitlines()
    return exit_code == 0 and bool(lines) and lines[0].strip() == SENTINEL
