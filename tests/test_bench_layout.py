"""How `wedgewatch bench proxy` places its three processes on the CPUs (the figures depend on it)."""

from __future__ import annotations

import os

from wedgewatch.bench.proxy import BenchOptions, layout


def test_the_proxy_gets_a_cpu_of_its_own_and_the_rest_go_to_the_simulator_and_load() -> None:
    cpus = os.sched_getaffinity(0)
    load, proxy = layout(BenchOptions(pin=True))
    if len(cpus) < 2:
        assert (load, proxy) == (None, None)  # nothing to separate on one CPU
        return
    assert load is not None and proxy is not None
    assert len(proxy) == 1 and not (load & proxy) and load | proxy == cpus


def test_no_pin_shares_every_cpu() -> None:
    assert layout(BenchOptions(pin=False)) == (None, None)
