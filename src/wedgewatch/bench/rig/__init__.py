"""The fault rig: one place that strikes wedgewatch and the servers it watches, for every bench
that measures a fault.

- ``trial.py`` meets one fault of the corpus once (``bench faults``): a supervised simulator
  behind the proxy, a client, the supervisor's reactions.
- ``armed.py``: the simulator's own faults (a scenario's ``[[fault]]`` with a marker file), armed
  from outside by removing the marker, so a fault strikes the next request a few tokens in.
- ``strikes.py``: the faults dealt from outside to any server and to wedgewatch itself: a
  process of the server's group frozen, slowed or killed, its connections reset, the run's
  process killed, a sandbox's command killed, the ledger's disk full or its file size limited.
- ``progress.py``: a server life's token progress and requests in flight, read off its
  ``/metrics``, on which ``bench chaos`` schedules its faults.
"""
