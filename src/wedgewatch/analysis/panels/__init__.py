"""What the live view (``wedgewatch view``) and the frozen report (``report --html``) both show of a
run, read from the ledger: one set of data for one set of templates (``analysis/templates``).

- ``scope.py``: what a page is about (a run, a wrapped run, or the lives ``serve`` recorded);
- ``header.py``: the run's header (instances done, the honest score beside the published one);
- ``lanes.py`` and ``engine.py``: a lane per server, its lives and their markers, the engine strip;
- ``flight.py``: the requests in flight, with their legs;
- ``chains.py``: each instance's chain of attempts, and the infrastructure's failures by cause;
- ``render.py``: the one Jinja2 environment.
"""
