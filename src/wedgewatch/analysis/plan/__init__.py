"""Ablation planning: factorial designs over the procedure (fresh server, warm-up, flags,
concurrency, or any config field), one run config per cell, and the main effects of a finished
design on the api_error rate."""

from wedgewatch.analysis.plan.build import make_plan, render_plan, write_plan
from wedgewatch.analysis.plan.effects import analyse, render_text
from wedgewatch.analysis.plan.factors import DEFAULT_FACTORS, KNOWN, Factor, parse

__all__ = [
    "DEFAULT_FACTORS",
    "KNOWN",
    "Factor",
    "analyse",
    "make_plan",
    "parse",
    "render_plan",
    "render_text",
    "write_plan",
]
