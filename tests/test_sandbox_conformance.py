"""One conformance suite over every sandbox backend on this machine: local, bwrap, and container
(podman, the SWE-bench-layout image of a bundled instance). Real processes, real git, a real
container engine; what a backend started is looked for in the host's process table."""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_helpers import gone, host_pids_with, make, settings
from wedgewatch.base.protocols import Sandbox
from wedgewatch.sandbox.output import HALF
from wedgewatch.suites import load_bundled
from wedgewatch.suites.git import run_git

pytestmark = pytest.mark.timeout(180)

INSTANCE = load_bundled()[0]
KINDS = ["local", "bwrap", "container"]


@pytest.fixture(params=KINDS)
def new_box(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Sandbox]]:
    kind = str(request.param)
    image = request.getfixturevalue("testbed_images")(0) if kind == "container" else None
    boxes: list[Sandbox] = []

    def new(**limits: Any) -> Sandbox:
        box = make(kind, INSTANCE, tmp_path / "boxes", settings(kind, image, **limits))
        boxes.append(box)
        return box

    yield new
    for box in boxes:
        box.close()


def marker() -> str:
    return f"wwmark{secrets.token_hex(4)}"


@pytest.mark.long
def test_each_attempt_starts_fresh_at_the_base_commit(new_box: Callable[..., Sandbox]) -> None:
    a, b = new_box(), new_box()
    assert a.run("echo changed > README.md && echo new > scratch.txt", timeout=30).exit_code == 0
    head = b.run("git rev-parse HEAD && git status --porcelain && cat README.md", timeout=30)
    assert head.exit_code == 0
    lines = head.output.splitlines()
    assert lines[0] == INSTANCE["base_commit"]
    assert "scratch.txt" not in head.output and "changed" not in head.output


@pytest.mark.long
def test_exit_status_output_and_environment(new_box: Callable[..., Sandbox]) -> None:
    box = new_box()
    res = box.run("echo out; echo err >&2; echo $WW_VALUE; exit 3", timeout=30, env={"WW_VALUE": "given"})
    assert (res.exit_code, res.timed_out) == (3, False)
    assert res.output.split() == ["out", "err", "given"]


@pytest.mark.long
def test_the_timeout_kills_everything_the_command_started(new_box: Callable[..., Sandbox]) -> None:
    box = new_box()
    mark = marker()
    res = box.run(
        f"(exec -a {mark} sleep 300) & (exec -a {mark} sleep 300) & echo started; sleep 300", timeout=2
    )
    assert res.timed_out and res.exit_code is None  # the 2 s timeout, not the 300 s sleeps, ended it
    assert "started" in res.output
    assert gone(mark), f"still running after the timeout: {host_pids_with(mark)}"
    assert box.run("echo alive", timeout=30).output.strip() == "alive"  # the sandbox still works


def test_nothing_outlives_a_command_that_ended(new_box: Callable[..., Sandbox]) -> None:
    box = new_box()
    mark = marker()
    res = box.run(f"(exec -a {mark} sleep 300) >/dev/null 2>&1 & disown; echo bg", timeout=30)
    assert res.exit_code == 0 and res.output.strip() == "bg"
    assert gone(mark), f"left running: {host_pids_with(mark)}"


def test_output_is_bounded(new_box: Callable[..., Sandbox]) -> None:
    res = new_box().run("head -c 5000000 /dev/zero | tr '\\0' x", timeout=60)
    assert res.exit_code == 0
    assert len(res.output) < 2 * HALF + 200
    assert "bytes of output dropped" in res.output


def test_the_patch_is_extracted(new_box: Callable[..., Sandbox]) -> None:
    box = new_box()
    cmd = "printf 'more\\n' >> README.md && mkdir -p extra && printf 'x = 1\\n' > extra/new.py"
    assert box.run(cmd, timeout=30).exit_code == 0
    patch = box.diff()
    assert "diff --git a/README.md b/README.md" in patch and "+more" in patch
    assert "diff --git a/extra/new.py b/extra/new.py" in patch and "+x = 1" in patch
    # The repository's own index is left alone: the new file is still untracked.
    assert "?? extra/" in box.run("git status --porcelain", timeout=30).output


@pytest.mark.parametrize("kind", ["local", "bwrap"])  # a container's index is the image's: old
def test_a_same_size_edit_in_the_second_of_the_checkout_is_in_the_patch(kind: str, tmp_path: Path) -> None:
    """git trusts an index entry whose file kept its size, inode and times (whole seconds), unless
    the index file is as new as the entry ("racily clean"): then it reads the file. A model that
    edits in the second of the sandbox's checkout must not lose its patch to a diff taken later
    through an index copy that looks newer (seen: a correct fix scored `empty_patch`)."""
    for _ in range(20):
        box = make(kind, INSTANCE, tmp_path / "boxes", settings(kind))
        readme = box.path / "README.md"
        with readme.open("r+b") as fh:  # in place: same inode, same size
            first = fh.read(1)
            fh.seek(0)
            fh.write(b"Y" if first == b"X" else b"X")
        entry = run_git(box.path, "ls-files", "--debug", "README.md")
        found = re.search(r"ctime: (\d+):\d+\s+mtime: (\d+):", entry)
        assert found, entry
        st = os.stat(readme)
        if (int(st.st_ctime), int(st.st_mtime)) == (int(found.group(1)), int(found.group(2))):
            break  # the edit landed in the checkout's second: the racy case
        box.close()
    else:
        pytest.fail("no edit landed in the second of its checkout in 20 tries")
    # The subject: the diff must come in a later second than the checkout, as a model's would.
    time.sleep(max(0.0, int(found.group(1)) + 1.05 - time.time()))
    patch = box.diff()
    box.close()
    assert "diff --git a/README.md b/README.md" in patch


def test_a_closed_container_is_removed(tmp_path: Path, testbed_images: Callable[[int], str]) -> None:
    import subprocess

    box = make("container", INSTANCE, tmp_path, settings("container", testbed_images(0)))
    name = box.container  # type: ignore[attr-defined]
    listed = ["podman", "ps", "-a", "--filter", "label=wedgewatch.sandbox", "--format", "{{.Names}}"]
    assert name in subprocess.run(listed, capture_output=True, text=True, check=True).stdout.split()
    box.close()
    assert name not in subprocess.run(listed, capture_output=True, text=True, check=True).stdout.split()
