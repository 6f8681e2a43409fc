"""``wedgewatch view``: a live page over the ledger, read-only. A reader of the record: it imports
the ledger, the vocabulary and the analysis (the panels' data and templates, shared with ``report
--html``), never a writer (``proxy``, ``supervisor``, ``runner``, ``stack``, ``wrap``); the progress
of requests in flight comes from the proxy over HTTP (``progress.py``), not as an import.

``cursor.py`` (where a page stands in the ledger, on SQLite and PostgreSQL), ``progress.py`` (the
proxies' status), ``feed.py`` (a page's batch a second), ``pages.py`` (rendering), ``app.py`` (the
routes), ``child.py`` (a view started beside ``serve``, ``run`` or ``wrap``, in a process of its
own), ``static/`` (htmx and its SSE extension, vendored). docs/view.md says what the page shows.
"""
