"""``wedgewatch bench chaos``: a real agent on the bundled suite against a real engine (or the
simulator), struck by a seeded schedule of faults on the engine and on wedgewatch itself, and a
checker of what must hold whatever the schedule: the same outcomes from the same replies as a run
never struck, nothing lost, nothing left, every fault's cost bounded (docs/reliability.md).

``kinds.py`` (the faults and the schedule), ``engines.py`` (each engine made deterministic),
``process.py`` (``wedgewatch run`` as a process), ``table.py`` (the run watched from outside,
and the waits), ``deal.py`` (a fault dealt), ``driver.py`` (control, schedule, checker),
``replies.py``, ``timing.py`` and ``checker.py`` (the invariants), ``report.py`` (the tables).
The strikes themselves are the fault rig's (``bench/rig``).
"""
