"""The settings module: defaults, docstrings, and errors that name the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from wedgewatch.base.errors import BadInput, ConfigError
from wedgewatch.config import Config, load_config


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    out = [model]
    for f in model.model_fields.values():
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _models(ann)
    return out


def test_every_field_has_a_default_and_a_docstring() -> None:
    for model in _models(Config):
        for name, f in model.model_fields.items():
            assert not f.is_required(), f"{model.__name__}.{name} has no default"
            assert f.description, f"{model.__name__}.{name} has no docstring"


def test_story_defaults() -> None:
    c = Config()
    assert c.run.concurrency == 4
    assert c.run.attempts == 3
    assert c.watchdog.total_timeout == 240
    assert (c.server.warmup.count, c.server.warmup.prompt, c.server.warmup.max_tokens) == (
        2,
        "Write hello world.",
        40,
    )
    assert c.server.restart_after_api_errors == 2
    assert c.server.fresh is True
    assert c.server.host == "127.0.0.1"


def test_bad_field_names_file_and_field(tmp_path: Path) -> None:
    p = tmp_path / "run.toml"
    p.write_text("[run]\nconcurrency = 0\n")
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(exc.value).startswith(f"{p}: run.concurrency: ")
    assert isinstance(exc.value, BadInput)


def test_unknown_field_and_bad_toml_and_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "run.toml"
    p.write_text("[watchdog]\nttft = 3\n")
    with pytest.raises(ConfigError, match=r"watchdog\.ttft: no such field in \[watchdog\]"):
        load_config(p)
    p.write_text("[run\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)
    with pytest.raises(ConfigError, match=r"nope\.toml"):
        load_config(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[server]\nprofle = 'sim'\n", "server.profle: no such field in [server]; did you mean profile?"),
        ("[run]\ntime_scal = 20\n", "run.time_scal: no such field in [run]; did you mean time_scale?"),
        (
            "[server.warmup]\ncout = 3\n",
            "server.warmup.cout: no such field in [server.warmup]; did you mean count?",
        ),
        (
            "[[servers]]\nprofle = 'sim'\n",
            "servers.0.profle: no such field in [[servers]]; did you mean profile?",
        ),
        ("[run.ray]\nadress = 'auto'\n", "run.ray.adress: no such field in [run.ray]; did you mean address?"),
        ("[servr]\nport = 1\n", "servr: no such section; did you mean server or servers?"),
        (
            "[server]\nzzzz = 1\n",
            "server.zzzz: no such field in [server] (wedgewatch config --schema lists every field)",
        ),
    ],
)
def test_a_mistyped_key_gets_the_nearest_field_names(tmp_path: Path, text: str, line: str) -> None:
    p = tmp_path / "run.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(exc.value) == f"{p}: {line}"


def test_hash_follows_the_snapshot() -> None:
    a, b = Config(), Config()
    assert a.hash() == b.hash()
    b.run.seed = 1
    assert a.hash() != b.hash()


def test_a_pool_names_its_members_and_its_snapshot_rebuilds_the_same_config(tmp_path: Path) -> None:
    from wedgewatch.config import server_of, validate

    p = tmp_path / "pool.toml"
    p.write_text(
        '[[servers]]\nmodel = "m"\n[[servers]]\nname = "gpu1"\nmodel = "m"\n[[servers]]\nmodel = "m"\n'
    )
    c = load_config(p)
    assert [m.name for m in c.members()] == ["s0", "gpu1", "s2"]
    snap = c.snapshot()
    assert "server" not in snap and server_of(snap)["model"] == "m"
    assert validate(snap, "snapshot").hash() == c.hash()
    assert [m.name for m in Config().members()] == [None]  # the one [server] keeps no name


def test_a_pool_refuses_server_beside_it_and_twice_the_same_name(tmp_path: Path) -> None:
    p = tmp_path / "pool.toml"
    p.write_text('[server]\nprofile = "sim"\n[[servers]]\n')
    with pytest.raises(ConfigError, match=r"\[server\] or \[\[servers\]\]"):
        load_config(p)
    p.write_text('[[servers]]\nname = "a"\n[[servers]]\nname = "a"\n')
    with pytest.raises(ConfigError, match="a is used twice"):
        load_config(p)
    p.write_text('[[servers]]\nname = "s1"\n[[servers]]\n')  # the second's default name is s1
    with pytest.raises(ConfigError, match="s1 is used twice"):
        load_config(p)
