"""A SWE-bench-layout image of a bundled instance, built from this host's own files, for the
container backend where no registry is reachable (the tests, and a first try of the backend).

The image has what a SWE-bench instance image has and the harness's evaluation script expects:
the repository at ``/testbed`` at its base commit, ``/opt/miniconda3/bin/activate`` and a
``testbed`` environment (here a shim: ``conda activate testbed`` puts its ``bin`` first on PATH)
whose Python has pytest, ``/root/.bashrc`` activating it for ``bash -l``, and the tools eval
scripts and agents use (bash, coreutils, git, patch, grep, sed). The files are copied from the
host (binaries and the libraries ``ldd`` names; the running interpreter's standard library
without its tests; pytest from the running environment) into one tarball that ``<cli> import``
turns into an image. Its tag carries a hash of the content, so an image already built is reused.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import SandboxError
from wedgewatch.sandbox import groups
from wedgewatch.sandbox.images import cli_run, docker_id, image_present
from wedgewatch.suites.materialise import materialise
from wedgewatch.suites.testrun import node_ids

_TOOLS_TEXT = """bash sh cat cp mv rm mkdir rmdir ls ln chmod touch env sleep mktemp head tail wc sort
uniq tr cut sed grep find xargs dirname basename readlink realpath date id seq dd timeout ps kill
git patch diff cmp which stat du"""
TOOLS = _TOOLS_TEXT.split()
# Not copied: the parts no test run imports, and the installed packages of either layout.
_SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"}
_SKIP_STDLIB |= {"site-packages", "dist-packages"}
_PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
ENV_BIN = "/opt/miniconda3/envs/testbed/bin"
_ACTIVATE = f"""# wedgewatch's stand-in for miniconda's activate: one environment, `testbed`.
conda() {{
  if [ "$1" = activate ]; then export PATH="/opt/miniconda3/envs/${{2:-base}}/bin:$PATH"; fi
}}
export PATH="{ENV_BIN}:$PATH"
"""
_BASHRC = "source /opt/miniconda3/bin/activate\nconda activate testbed\n"
_VERSION = "2"  # bump when the layout changes: the tag's hash covers it


def _libs(binaries: Iterable[Path]) -> set[Path]:
    """Every shared library the binaries load, as ``ldd`` resolves them on this host."""
    argv = ["ldd", *map(str, binaries)]  # one ldd for all: it is a shell script, slow to start
    proc = groups.spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    with groups.owned(proc):
        out = proc.communicate(timeout=300)[0].decode("utf-8", errors="replace")
    return {Path(m) for m in re.findall(r"=> (/\S+)|^\s+(/\S+) \(", out, flags=re.M) for m in m if m}


def _stdlib() -> Path:
    return Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"


def _site_dir(python: Path) -> str:
    """Where the bare interpreter looks for installed packages: ``lib/python3.X/site-packages``
    under its prefix on a build from source, ``/usr/local/lib/python3.X/dist-packages`` on
    Debian's, whose ``site`` never reads the first. Asked of the interpreter itself (isolated, so
    no virtual environment or user site answers)."""
    argv = [str(python), "-I", "-c", "import sys; print('\\n'.join(sys.path))"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    for entry in out.splitlines():
        if entry.endswith(("site-packages", "dist-packages")):
            return entry
    raise SandboxError(f"testbed image: {python} searches no site-packages directory")


def _stdlib_files(lib: Path) -> list[Path]:
    out: list[Path] = []
    for path in sorted(lib.rglob("*")):
        rel = path.relative_to(lib).parts
        if any(part in _SKIP_STDLIB or part.startswith("config-") for part in rel):
            continue
        # The compiled files come too (not the optimised ones): without them every command
        # would compile the standard library it imports, seconds per pytest run.
        if (path.is_file() or path.is_symlink()) and ".opt-" not in path.name and "_tkinter" not in path.name:
            out.append(path)
    return out


def _pytest_files() -> list[tuple[Path, str]]:
    import pytest

    site = Path(pytest.__file__).resolve().parent.parent
    pairs: list[tuple[Path, str]] = []
    for info in sorted(site.glob("*.dist-info")):  # pytest prints its plugins' versions from these
        if info.name.split("-")[0].lower() in _PYTEST_PACKAGES:
            pairs += [(f, str(f.relative_to(site))) for f in sorted(info.rglob("*")) if f.is_file()]
    for name in _PYTEST_PACKAGES:
        if (site / f"{name}.py").is_file():
            pairs.append((site / f"{name}.py", f"{name}.py"))
            continue
        for path in sorted((site / name).rglob("*")):
            if path.is_file() and ".opt-" not in path.name:
                pairs.append((path, str(path.relative_to(site))))
    return pairs


def eval_script(instance: Mapping[str, Any]) -> str:
    """An evaluation script of the official harness's shape for a bundled instance: activate,
    reset the test files, apply the test patch, run the tests between the markers the grading
    reads, reset the test files again."""
    base = str(instance["base_commit"])
    test_patch = str(instance.get("test_patch") or "")
    files = sorted(set(re.findall(r"^diff --git a/(\S+) b/", test_patch, flags=re.M)))
    tests = " ".join(
        dict.fromkeys(node_ids(instance.get("FAIL_TO_PASS")) + node_ids(instance.get("PASS_TO_PASS")))
    )
    checkout = f"git checkout {base} {' '.join(files)}" if files else "true"
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        "source /opt/miniconda3/bin/activate",
        "conda activate testbed",
        "cd /testbed",
        "git config --global --add safe.directory /testbed",
        "cd /testbed",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {base}",
        "source /opt/miniconda3/bin/activate",
        "conda activate testbed",
        checkout,
        f"git apply -v - <<'EOF_114329324912'\n{test_patch}\nEOF_114329324912",
        ": '>>>>> Start Test Output'",
        f"pytest -rA -p no:cacheprovider {tests}",
        ": '>>>>> End Test Output'",
        checkout,
    ]
    return "\n".join(lines) + "\n"


def swebench_row(instance: Mapping[str, Any], image: str) -> dict[str, Any]:
    """The instance as a row of SWE-bench's dataset schema, with the fields the ``swebench``
    library's test specification reads (image, eval_script, log_parser, eval_type)."""
    row = {k: instance[k] for k in instance if k != "test_cmd"}
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        row[key] = json.dumps(node_ids(instance.get(key)))
    row.update(image_name=image, image=image, eval_script=eval_script(instance))
    row.update(log_parser="parse_log_pytest", eval_type="pass_and_fail")
    return row


class _Tar:
    def __init__(self, fileobj: Any) -> None:
        self.tar = tarfile.open(fileobj=fileobj, mode="w")  # noqa: SIM115 (closed by build)
        self.seen: set[str] = set()

    def dirs(self, arcname: str) -> None:
        parts = Path(arcname).parts[:-1]
        for n in range(1, len(parts) + 1):
            self.directory("/".join(parts[:n]))

    def directory(self, arcname: str, mode: int = 0o755) -> None:
        arcname = arcname.strip("/")
        if arcname in self.seen or not arcname:
            return
        self.seen.add(arcname)
        info = tarfile.TarInfo(arcname)
        info.type, info.mode = tarfile.DIRTYPE, mode
        self.tar.addfile(info)

    def file(self, host: Path, arcname: str) -> None:
        arcname = arcname.strip("/")
        if arcname in self.seen:
            return
        self.dirs(arcname)
        self.seen.add(arcname)
        self.tar.add(str(host.resolve()), arcname=arcname, recursive=False)

    def text(self, arcname: str, text: str, mode: int = 0o644) -> None:
        arcname = arcname.strip("/")
        self.dirs(arcname)
        self.seen.add(arcname)
        data = text.encode()
        info = tarfile.TarInfo(arcname)
        info.size, info.mode = len(data), mode
        self.tar.addfile(info, io.BytesIO(data))

    def link(self, arcname: str, target: str) -> None:
        arcname = arcname.strip("/")
        if arcname in self.seen:
            return
        self.dirs(arcname)
        self.seen.add(arcname)
        info = tarfile.TarInfo(arcname)
        info.type, info.linkname = tarfile.SYMTYPE, target
        self.tar.addfile(info)


@functools.cache
def _inputs() -> tuple[tuple[Path, ...], tuple[Path, ...], tuple[tuple[Path, str], ...]]:
    """The host's files every testbed image copies: the tools, the interpreter, its standard
    library and the libraries they load, and pytest. Found once per process: the ``ldd`` over a
    hundred binaries costs about 0.3 CPU-s, and a process that builds several images (a test
    session, a benchmark) would pay it for each."""
    tools = []
    for name in TOOLS:
        found = shutil.which(name)
        if found is None:
            raise SandboxError(f"testbed image: the host has no `{name}`")
        tools.append(Path(found))
    python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    stdlib = _stdlib_files(_stdlib())
    binaries = [*tools, python, *(p for p in stdlib if p.suffix == ".so")]
    return (*tools, python), (*stdlib, *sorted(_libs(binaries))), tuple(_pytest_files())


def _tag(instance: Mapping[str, Any], files: Iterable[Path]) -> str:
    h = hashlib.sha256(_VERSION.encode())
    h.update(json.dumps(dict(instance), sort_keys=True, default=str).encode())
    for path in files:
        st = path.stat()
        h.update(f"{path}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:12]


def build(instance: Mapping[str, Any], cli: str = "podman") -> str:
    """Build (or find, by its content tag) the testbed image of a bundled ``instance``; return
    its name, ``localhost/wedgewatch-testbed:<id>-<hash>``."""
    tools, files, pytest_files = _inputs()
    name = f"localhost/wedgewatch-testbed:{docker_id(str(instance['instance_id']))}-"
    name += _tag(instance, [*tools, *files, *(p for p, _ in pytest_files)])
    if image_present(cli, name):
        return name
    with tempfile.TemporaryDirectory(prefix="wedgewatch-testbed-") as scratch:
        repo = materialise(instance, Path(scratch) / "testbed")
        tarball = Path(scratch) / "rootfs.tar"
        with tarball.open("wb") as fh:
            tar = _Tar(fh)
            # A merged-/usr host (/lib -> usr/lib) keeps its links; files go where the links lead.
            for top in ("bin", "sbin", "lib", "lib64"):
                if Path(f"/{top}").is_symlink():
                    tar.link(top, str(Path(f"/{top}").readlink()))
            for path in (*tools, *files):
                tar.file(path, str(path.parent.resolve() / path.name))
            python = str(tools[-1])
            site = _site_dir(tools[-1])
            for path, rel in pytest_files:
                tar.file(path, f"{site}/{rel}")
            for alias in ("python", "python3"):
                tar.link(f"{ENV_BIN}/{alias}", python)
                tar.link(f"/usr/local/bin/{alias}", python)
            runner = (
                f"#!{ENV_BIN}/python\nimport sys\nfrom pytest import console_main\nsys.exit(console_main())\n"
            )
            tar.text(f"{ENV_BIN}/pytest", runner, 0o755)
            tar.text("/opt/miniconda3/bin/activate", _ACTIVATE)
            tar.text("/root/.bashrc", _BASHRC)
            tar.text("/root/.profile", "[ -f ~/.bashrc ] && . ~/.bashrc\n")
            tar.text(
                "/etc/passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/nonexistent:/bin/sh\n"
            )
            tar.text("/etc/group", "root:x:0:\nnogroup:x:65534:\n")
            for d in ("tmp", "var/tmp"):
                tar.directory(d, 0o1777)
            for d in ("proc", "sys", "dev", "run", "etc/ssl"):
                tar.directory(d)
            tar.tar.add(str(repo), arcname="testbed")
            tar.tar.close()
        changes = [
            "--change",
            f"ENV PATH={ENV_BIN}:/usr/local/bin:/usr/bin:/bin",
            "--change",
            "WORKDIR /testbed",
        ]
        res = cli_run([cli, "import", *changes, str(tarball), name], 600, f"import {name}")
        if res.returncode != 0:
            raise SandboxError(f"cannot import the testbed image {name}: {res.stderr.strip()[-500:]}")
    return name
