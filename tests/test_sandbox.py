"""LocalSandbox with real processes and real git: fresh directories, timeouts that kill the whole
process group, a scrubbed environment, SWE-bench-style diffs, mirrors, and cleanup."""

from __future__ import annotations

import contextvars
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from wedgewatch.base.errors import BadInput, SandboxError
from wedgewatch.base.protocols import CommandResult, Sandbox
from wedgewatch.sandbox import LocalSandbox, get_sandbox, groups
from wedgewatch.suites import load_bundled
from wedgewatch.suites.git import run_git
from wedgewatch.suites.materialise import commit_env
from wedgewatch.testing import eventually


@pytest.fixture
def instance() -> dict[str, str]:
    return load_bundled()[0]


def _ended(pid: int) -> bool:
    """True if ``pid`` no longer runs (absent, or a zombie waiting for its reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _gone(pid: int) -> bool:
    """Wait (5 s at most) until ``pid`` no longer runs."""
    return eventually(lambda: _ended(pid), timeout=5.0, what=f"process {pid} ended")


def test_each_create_is_a_new_directory_at_base(tmp_path: Path, instance: dict[str, str]) -> None:
    a = LocalSandbox.create(instance, tmp_path)
    b = LocalSandbox.create(instance, tmp_path)
    try:
        assert isinstance(a, Sandbox)
        assert a.path != b.path and a.path.is_dir() and b.path.is_dir()
        assert run_git(a.path, "rev-parse", "HEAD").strip() == instance["base_commit"]
        (a.path / "scratch.txt").write_text("a")
        assert not (b.path / "scratch.txt").exists()
    finally:
        a.close()
        b.close()


def test_timeout_kills_the_command_and_its_children(tmp_path: Path, instance: dict[str, str]) -> None:
    box = LocalSandbox.create(instance, tmp_path)
    try:
        res = box.run("sleep 100 & echo $! > child.pid; echo started; sleep 100", timeout=1.0)
        assert res.timed_out and res.exit_code is None  # the 1 s timeout, not the 100 s sleep, ended it
        assert "started" in res.output
        child = int((box.path / "child.pid").read_text())
        assert _gone(child), f"child {child} survived the timeout"
    finally:
        box.close()


def test_background_processes_do_not_outlive_their_command(tmp_path: Path, instance: dict[str, str]) -> None:
    box = LocalSandbox.create(instance, tmp_path)
    try:
        res = box.run("sleep 100 >/dev/null 2>&1 & echo $!", timeout=10)
        assert res.exit_code == 0 and not res.timed_out
        assert _gone(int(res.output.strip()))
    finally:
        box.close()


def test_environment_is_scrubbed(
    tmp_path: Path, instance: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-do-not-leak")
    monkeypatch.setenv("WEDGEWATCH_PARENT_ONLY", "1")
    box = LocalSandbox.create(instance, tmp_path)
    try:
        res = box.run("env; echo to-stderr >&2; git config user.name", timeout=10, env={"EXTRA": "given"})
        env = dict(line.split("=", 1) for line in res.output.splitlines() if "=" in line)
        assert "OPENAI_API_KEY" not in env and "sk-secret" not in res.output
        assert "WEDGEWATCH_PARENT_ONLY" not in env
        assert env["HOME"] == str(box.home) and env["EXTRA"] == "given" and env["PATH"]
        assert env["PWD"] == str(box.path)
        assert "to-stderr" in res.output  # stderr is merged into the output
        assert "wedgewatch agent" in res.output  # the sandbox's own git identity
        assert box.run("exit 3", timeout=10).exit_code == 3
    finally:
        box.close()


def test_diff_has_edits_and_new_files_but_not_ignored_ones(tmp_path: Path, instance: dict[str, str]) -> None:
    box = LocalSandbox.create(instance, tmp_path)
    try:
        assert box.diff() == ""
        box.run(
            "sed -i 's/year % 4 == 0/year % 4 == 0  # edited/' datekit/cal.py && mkdir -p notes && echo hi > notes/new.txt",
            10,
        )
        box.run("python -c 'import datekit.cal' && mkdir -p __pycache__ && echo x > __pycache__/junk.pyc", 30)
        patch = box.diff()
        assert "diff --git a/datekit/cal.py b/datekit/cal.py" in patch and "# edited" in patch
        assert "diff --git a/notes/new.txt b/notes/new.txt" in patch and "new file mode" in patch
        assert "pycache" not in patch
        # The real index is untouched: the new file is still untracked.
        assert "?? notes/" in run_git(box.path, "status", "--porcelain")
        # The patch applies to a fresh copy at base (what evaluation does).
        other = LocalSandbox.create(instance, tmp_path)
        try:
            (other.root / "tmp" / "p.diff").write_text(patch)
            assert other.run("git apply ../tmp/p.diff && cat notes/new.txt", 10).output.strip() == "hi"
        finally:
            other.close()
    finally:
        box.close()


def test_diff_includes_committed_changes(tmp_path: Path, instance: dict[str, str]) -> None:
    box = LocalSandbox.create(instance, tmp_path)
    try:
        box.run("echo more >> README.md && git commit -qam 'agent commit'", 10)
        assert "+more" in box.diff()
    finally:
        box.close()


def test_close_removes_unless_kept(tmp_path: Path, instance: dict[str, str]) -> None:
    box = LocalSandbox.create(instance, tmp_path)
    root = box.root
    box.close()
    assert not root.exists()
    with pytest.raises(SandboxError):
        box.run("true", 5)
    kept = LocalSandbox.create(instance, tmp_path, keep=True)
    kept.close()
    assert kept.path.is_dir()


def test_clone_from_a_local_mirror_hides_later_history(tmp_path: Path) -> None:
    mirror = tmp_path / "repos" / "acme__widget"
    mirror.mkdir(parents=True)
    env = commit_env("2024-01-01T00:00:00Z")
    run_git(mirror, "init", "-q", "-b", "main", env=env)
    (mirror / "w.py").write_text("VALUE = 1\n")
    run_git(mirror, "add", "-A", env=env)
    run_git(mirror, "commit", "-qm", "base", env=env)
    base = run_git(mirror, "rev-parse", "HEAD", env=env).strip()
    (mirror / "w.py").write_text("VALUE = 2  # the fix\n")
    run_git(mirror, "commit", "-qam", "the fix", env=env)
    run_git(mirror, "tag", "v1", env=env)
    inst = {"instance_id": "acme__widget-7", "repo": "acme/widget", "base_commit": base}
    box = LocalSandbox.create(inst, tmp_path / "boxes", repos_dir=tmp_path / "repos")
    try:
        assert (box.path / "w.py").read_text() == "VALUE = 1\n"
        assert "the fix" not in box.run("git log --all --oneline", 10).output
        box.run("echo 'VALUE = 3' > w.py", 10)
        assert "+VALUE = 3" in box.diff()
    finally:
        box.close()


def test_no_repository_is_a_sandbox_error(tmp_path: Path) -> None:
    inst = {"instance_id": "acme__gone-1", "repo": "acme/gone", "base_commit": "a" * 40}
    with pytest.raises(SandboxError, match="no repository"):
        LocalSandbox.create(inst, tmp_path, repos_dir=tmp_path / "repos")
    assert list(tmp_path.iterdir()) == []  # the half-made sandbox is removed


def test_huge_output_is_bounded(tmp_path: Path, instance: dict[str, str]) -> None:
    box = LocalSandbox.create(instance, tmp_path)
    try:
        res = box.run("yes | head -c 5000000", timeout=30)
        assert res.exit_code == 0
        assert "bytes of output dropped" in res.output
        assert len(res.output) < 1_200_000
    finally:
        box.close()


def test_registry() -> None:
    assert get_sandbox("local") is LocalSandbox
    with pytest.raises(BadInput, match="unknown backend"):
        get_sandbox("docker-someday")


def test_sandboxes_share_no_state_through_home(tmp_path: Path, instance: dict[str, str]) -> None:
    a = LocalSandbox.create(instance, tmp_path)
    b = LocalSandbox.create(instance, tmp_path)
    try:
        a.run("echo secret > ~/note", 5)
        assert b.run("cat ~/note", 5).exit_code != 0
        assert os.path.exists(a.home / "note")
    finally:
        a.close()
        b.close()


def test_quick_commands_keep_their_exit_codes(tmp_path: Path, instance: dict[str, str]) -> None:
    """Regression: killing the group at EOF, before bash had exited, turned exit 0 into -9."""
    box = LocalSandbox.create(instance, tmp_path)
    try:
        codes = [
            box.run("seq 1 20000" if n % 2 else "nl -ba datekit/cal.py", 10).exit_code for n in range(40)
        ]
        assert codes == [0] * 40
        assert box.run("seq 1 20000; exit 5", 10).exit_code == 5
    finally:
        box.close()


def test_a_same_size_edit_within_a_second_runs_the_new_code(tmp_path: Path, instance: dict[str, str]) -> None:
    """Regression: a cached .pyc (keyed on mtime seconds and size) made the old code run."""
    box = LocalSandbox.create(instance, tmp_path)
    try:
        box.run("printf 'X = 1\\n' > m.py", 10)
        assert box.run("python -c 'import m; print(m.X)'", 30).output.strip() == "1"
        box.run("printf 'X = 2\\n' > m.py", 10)
        assert box.run("python -c 'import m; print(m.X)'", 30).output.strip() == "2"
        assert not (box.path / "__pycache__").exists()
    finally:
        box.close()


def test_a_relative_root_works(
    tmp_path: Path, instance: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    box = LocalSandbox.create(instance, Path("boxes"))
    try:
        assert box.path.is_absolute() and box.path.is_relative_to(tmp_path / "boxes")
        res = box.run("git rev-parse HEAD", timeout=30)
        assert res.exit_code == 0 and res.output.strip() == instance["base_commit"]
        box.run("echo hi >> NEWFILE", timeout=30)
        assert "NEWFILE" in box.diff()
    finally:
        box.close()


def test_closing_a_runs_groups_ends_the_commands_still_running(
    tmp_path: Path, instance: dict[str, str]
) -> None:
    # What a run stopped early does for the agent threads it abandons.
    box = LocalSandbox.create(instance, tmp_path)
    results: list[CommandResult] = []
    with groups.scope() as listed:
        context = contextvars.copy_context()  # as runner.context.run_in_thread hands it on
        worker = threading.Thread(
            target=context.run, args=(lambda: results.append(box.run("sleep 300 & sleep 300", 600)),)
        )
        worker.start()
        try:
            eventually(listed.running, what="the command is listed")
            assert groups.current() is listed and listed.close() == 1
            worker.join(10)
            assert not worker.is_alive()
            assert results[0].exit_code == -9 and not results[0].timed_out
            assert listed.running() == 0  # nothing listed once the command is over
            with pytest.raises(SandboxError, match="stopping"):
                box.run("true", 10)  # a closed list starts nothing more
        finally:
            box.close()
    assert groups.current() is not listed  # the scope ended; other code is unaffected


def test_no_command_escapes_a_close_racing_its_spawn() -> None:
    # The race issue 14 named: a command started just as the run stops must be killed or refused,
    # never left running unlisted. Spawners hammer the list while it is closed under them.
    started: list[subprocess.Popen[bytes]] = []
    for _ in range(20):
        listed = groups.Groups()
        go = threading.Event()

        def spawner(listed: groups.Groups = listed, go: threading.Event = go) -> None:
            go.wait()
            while True:
                try:
                    started.append(listed.spawn(["sleep", "30"], stdin=subprocess.DEVNULL))
                except SandboxError:
                    return

        threads = [threading.Thread(target=spawner) for _ in range(3)]
        for t in threads:
            t.start()
        go.set()
        time.sleep(0.002)  # the subject: close while the spawners are at work, racing them
        listed.close()
        for t in threads:
            t.join(10)
    try:
        assert started, "the spawners started nothing"
        for proc in started:
            assert proc.wait(5) == -9  # every one was killed by close, none left running
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
