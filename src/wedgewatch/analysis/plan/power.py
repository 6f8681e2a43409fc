"""How many instances each cell needs to see a factor's effect on the wedge rate.

A main effect compares the half of the cells at one level with the half at the other, so each
side of the comparison holds cells/2 x n instances (the factorial's "hidden replication"). The
size per side is the two-proportion test's: Cohen's h (arcsine difference) with statsmodels'
``NormalIndPower``, two-sided. It assumes the other factors do not change the effect much (no
strong interactions) and instances independent of each other.
"""

from __future__ import annotations

import math
from typing import Any

from wedgewatch.base.errors import BadInput


def cell_size(
    baseline: float, effect: float, alpha: float, power: float, cells: int, k: int
) -> dict[str, Any]:
    """Instances per cell to detect ``baseline`` -> ``baseline + effect`` in the per-instance
    wedge (api_error) rate, for any one factor of a design with ``cells`` cells."""
    target = baseline + effect
    if not 0 < baseline < 1:
        raise BadInput(f"--baseline: {baseline:g} is not a rate between 0 and 1")
    if effect == 0 or not 0 < target < 1:
        raise BadInput(
            f"--effect: {effect:+g} from --baseline {baseline:g} gives {target:g}, not a rate in (0, 1)"
        )
    if not 0 < alpha < 1:
        raise BadInput(f"--alpha: {alpha:g} is not in (0, 1)")
    if not 0 < power < 1:
        raise BadInput(f"--power: {power:g} is not in (0, 1)")
    from statsmodels.stats.power import NormalIndPower
    from statsmodels.stats.proportion import proportion_effectsize

    h = abs(float(proportion_effectsize(target, baseline)))
    per_side = float(NormalIndPower().solve_power(effect_size=h, alpha=alpha, power=power, ratio=1.0))
    n_side = math.ceil(per_side)
    per_cell = max(1, math.ceil(n_side / (cells / 2)))
    return {
        "baseline": baseline,
        "effect": effect,
        "target": target,
        "alpha": alpha,
        "power": power,
        "cohens_h": h,
        "instances_per_level": n_side,
        "instances_per_cell": per_cell,
        "instances_total": per_cell * cells,
        # One factor at a time needs a reference arm plus one arm per factor, each n_side big.
        "one_at_a_time_total": n_side * (k + 1),
    }
