"""The composition root: supervised servers behind the watchdog proxy on one event bus
(``servers.Stack``), what ``run``, ``serve``, ``wrap`` and ``proxy`` start, and the one loop that
keeps a command's stack up until it is interrupted or fails (``session``)."""
