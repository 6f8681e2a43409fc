"""The closed-form statistics of analysis/stats.py against statsmodels and scipy, and the TOML
writer plan uses, round-tripped through tomllib and the config model."""

from __future__ import annotations

import tomllib

import pytest

from conftest import STATSMODELS
from wedgewatch.analysis import stats
from wedgewatch.analysis.plan.tomlout import dumps
from wedgewatch.config import Config, validate

pytestmark = STATSMODELS


@pytest.mark.parametrize(
    ("k1", "n1", "k2", "n2"), [(12, 20, 9, 20), (0, 12, 15, 15), (6, 6, 0, 6), (1, 50, 3, 7)]
)
def test_newcombe_matches_statsmodels(k1: int, n1: int, k2: int, n2: int) -> None:
    from statsmodels.stats.proportion import confint_proportions_2indep

    d, lo, hi = stats.newcombe_diff(k1, n1, k2, n2)
    want = confint_proportions_2indep(k1, n1, k2, n2, method="newcomb", compare="diff")
    assert d == pytest.approx(k1 / n1 - k2 / n2)
    assert (lo, hi) == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize(("b", "c"), [(0, 0), (5, 0), (6, 0), (3, 9), (10, 10), (1, 30)])
def test_mcnemar_matches_statsmodels(b: int, c: int) -> None:
    from statsmodels.stats.contingency_tables import mcnemar

    want = 1.0 if b + c == 0 else mcnemar([[7, b], [c, 4]], exact=True).pvalue
    assert stats.mcnemar_exact(b, c) == pytest.approx(want)


@pytest.mark.parametrize(("m", "lam"), [(1, 0.5), (3, 2.0), (6, 0.01), (14, 0.5), (2, 30.0)])
def test_poisson_tail_matches_scipy(m: int, lam: float) -> None:
    from scipy.stats import poisson

    assert stats.poisson_sf(m, lam) == pytest.approx(float(poisson.sf(m - 1, lam)), rel=1e-9)


def test_detectable_difference_is_what_the_power_calculation_inverts() -> None:
    from statsmodels.stats.power import NormalIndPower

    d = stats.detectable_difference(40, 40, 0.5)
    # Cohen's h of a small difference around 0.5 is about 2 x the difference.
    n = NormalIndPower().solve_power(effect_size=2 * d, alpha=0.05, power=0.8)
    assert n == pytest.approx(40, rel=0.05)
    assert stats.detectable_difference(10, 10, 0.5) > stats.detectable_difference(100, 100, 0.5)


def test_toml_writer_round_trips_a_config() -> None:
    cfg = validate(
        {
            "server": {
                "args": ["--policy", "swe", 'a "quoted" arg'],
                "env": {"A_B": "x\ny", "ü": "ÿ"},
                "warmup": {"count": 0, "prompt": "Say \\ hi"},
                "arg_sets": ["hybrid-safe"],
            },
            "suite": {"ids": ["x__y-1"], "slice": "0:3"},
            "run": {"time_scale": 12.5, "seed": -3, "keep_sandboxes": True},
        },
        "t",
    )
    text = dumps(cfg.snapshot(), "a header\nof two lines")  # a written config is its snapshot (autos pinned)
    assert text.startswith("# a header\n# of two lines\n")
    back = validate(tomllib.loads(text), "back")
    assert back.hash() == cfg.hash()
    assert (
        validate(tomllib.loads(dumps(Config().model_dump(mode="json", exclude_defaults=True))), "e")
        == Config()
    )


def test_toml_writer_round_trips_characters_outside_the_bmp() -> None:
    data = {"server": {"env": {"EMOJI": "wedged \U0001f9ca at 0 tok/s", "𝔘": "\U00010348"}}}
    text = dumps(data, "non-BMP: \U0001f600")
    assert tomllib.loads(text) == data
    cfg = validate(tomllib.loads(text), "t")
    assert cfg.server.env["EMOJI"] == "wedged \U0001f9ca at 0 tok/s"


@pytest.mark.parametrize(("b", "c"), [(600, 500), (1024, 0), (700, 700), (1500, 1400)])
def test_mcnemar_at_a_thousand_discordant_pairs_matches_scipy(b: int, c: int) -> None:
    from scipy.stats import binomtest

    want = binomtest(min(b, c), b + c, 0.5).pvalue
    got = stats.mcnemar_exact(b, c)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-300)
    assert 0.0 <= got <= 1.0


@pytest.mark.parametrize(("m", "lam"), [(790, 800.0), (750, 760.0), (1180, 1200.0), (800, 800.0)])
def test_poisson_tail_at_large_lambda_matches_scipy(m: int, lam: float) -> None:
    from scipy.stats import poisson

    want = float(poisson.sf(m - 1, lam))
    assert stats.poisson_sf(m, lam) == pytest.approx(want, rel=1e-9)
    assert want < 0.99  # the old code returned 1.0 here
