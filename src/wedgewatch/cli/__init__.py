"""The command line: the only place that parses flags.

Each module of this package registers its commands on ``app`` when imported; ``main`` imports the
modules of the command it was given (all of them for ``--help`` or a name it does not know), runs
the command, and turns bad input into one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import sys

import typer

# typer >= 0.20 vendors click; its exceptions live here, and non-standalone mode raises them.
from typer._click.exceptions import NoArgsIsHelpError, NoSuchOption, UsageError

from wedgewatch import __version__
from wedgewatch.base.errors import WedgewatchError
from wedgewatch.base.extras import missing_extra
from wedgewatch.base.files import private_umask
from wedgewatch.cli._app import app

log = logging.getLogger(__name__)


def _command_modules(argv: list[str]) -> list[str]:
    """The modules that register the command ``argv`` names: ``sim`` is ``sim.py``, ``import-report``
    ``import_report.py``, ``config`` ``config_cmd.py``; a group is a package, ``bench`` is ``bench/``
    and ``bench proxy`` its ``bench/proxy.py`` (all of its modules when no sub-command is named). Every
    module when ``argv`` names none of them (``--help``, a typo: click then lists every command).
    Importing one command, not twenty, is most of a short command's start-up: each simulator a test
    or a supervisor starts saves a third of a CPU-second."""
    found = {m.name: m.ispkg for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    words = [a for a in argv if not a.startswith("-")]
    if words:
        stem = words[0].replace("-", "_")
        own = [n for n in sorted(found) if n in (stem, f"{stem}_cmd")]
        if own:
            return own + _group_modules(own[0], words[1:]) if found[own[0]] else own
    names: list[str] = []
    for name in sorted(found):
        names += [name, *(_group_modules(name, []) if found[name] else [])]
    return names


def _group_modules(group: str, words: list[str]) -> list[str]:
    """The sub-command modules of the group package ``group``: the one ``words`` names, else all."""
    package = importlib.import_module(f"{__name__}.{group}")
    subs = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))
    if words and (sub := words[0].replace("-", "_")) in subs:
        return [f"{group}.{sub}"]
    return [f"{group}.{s}" for s in subs]


def _load_commands(argv: list[str]) -> None:
    for name in _command_modules(argv):
        importlib.import_module(f"{__name__}.{name}")


@app.callback()
def _root() -> None:
    """Agent evaluations against self-hosted LLM servers that never mistake a wedged server for a
    weak model."""


@app.command("version")
def version() -> None:
    """Print the wedgewatch version."""
    typer.echo(__version__)


def fail(message: str, code: int = 2) -> None:
    """Print one line on stderr and exit: the CLI's way of reporting bad input."""
    typer.echo(f"wedgewatch: error: {message}", err=True)
    raise SystemExit(code)


def _hint(exc: UsageError, args: list[str]) -> str:
    """An option unknown to a command that runs another program's command line (``wrap ... --
    CMD ARGS``), given no ``--``, is most likely that program's own, given without the ``--``
    that ends ours."""
    ctx = exc.ctx
    if not isinstance(exc, NoSuchOption) or ctx is None or "--" in args:
        return ""
    if not any(p.name == "cmd" and p.nargs == -1 for p in ctx.command.params):
        return ""
    return (
        f"; if {exc.option_name} is the harness's own, put -- before its command: "
        f"{ctx.command_path} CONFIG [OPTIONS] -- CMD ARGS..."
    )


def main(argv: list[str] | None = None) -> None:
    """The ``wedgewatch`` command. Whatever it creates (ledger and its -wal/-shm, logs, records,
    exports, evidence, reports), and whatever the processes it starts create, is the user's only
    (base/files.py); the umask is put back on the way out, for a caller that runs it in-process."""
    old = private_umask()
    try:
        _main(argv)
    finally:
        os.umask(old)


def _main(argv: list[str] | None) -> None:
    logging.basicConfig(
        level=os.environ.get("WEDGEWATCH_LOG", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    args = sys.argv[1:] if argv is None else argv
    _load_commands(args)
    try:
        rc = app(args=argv, prog_name="wedgewatch", standalone_mode=False)
    except NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx is not None else str(exc))
        raise SystemExit(0) from None
    except UsageError as exc:
        # click names the option in its message ("Invalid value for '--port': ...").
        cmd = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
        fail(f"{cmd}{exc.format_message()}{_hint(exc, args)}".replace("\n", " "))
    except typer.Abort:
        fail("aborted", 130)
    except WedgewatchError as exc:  # BadInput and a busy port exit 2, the rest 1
        fail(str(exc).replace("\n", " "), exc.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except ModuleNotFoundError as exc:
        hint = missing_extra(exc)
        if hint is None:
            raise
        fail(hint)
    raise SystemExit(rc if isinstance(rc, int) else 0)
