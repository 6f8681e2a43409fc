"""The trivial ``Upstream``: a fixed URL that nobody supervises."""

from __future__ import annotations

from wedgewatch.protocols import LifeInfo


class StaticUpstream:
    """A fixed server root (``http://127.0.0.1:8000``; a trailing ``/v1`` is dropped)."""

    def __init__(self, url: str) -> None:
        url = url.rstrip("/")
        self._url = url.removesuffix("/v1")

    @property
    def base_url(self) -> str:
        return self._url

    def life(self) -> LifeInfo | None:
        return None

    def __repr__(self) -> str:
        return f"StaticUpstream({self._url!r})"
