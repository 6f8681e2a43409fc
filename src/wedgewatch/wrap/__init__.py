"""``wedgewatch wrap``: any harness, unmodified, behind a supervised server and the watchdog proxy
(docs/wrap.md)."""
