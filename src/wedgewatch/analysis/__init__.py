"""Analysis: statistics over the ledger and over other harnesses' result files.

- ``compare``: two runs side by side, the difference in resolved rate with a confidence interval,
  a paired test on the instances both ran, and infrastructure rates.
- ``scan``: forensics on result files written by other harnesses: the signature of a client
  timeout scored as a model failure.
- ``plan``: factorial designs for ablations of the procedure, one run config per cell, and the
  main effects of a finished design.
- ``survival``: Kaplan–Meier survival of server lives by age (requests, tokens or seconds).
- ``html``: one self-contained HTML page of one or more runs, with figures from ``plots``.

Reads the ledger (and files); imports nothing from the runner, the proxy or the supervisor.
"""
