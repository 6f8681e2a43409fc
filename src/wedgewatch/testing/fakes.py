"""Stand-ins for the supervisor, for code that only reads the server's life."""

from __future__ import annotations

from wedgewatch.base.protocols import LifeInfo


class ChangingLives:
    """An ``Upstream`` whose server life changes between requests, as the supervisor's does after
    a restart: the n-th call to ``life()`` returns ``life-n``, aged 10·n s, n requests, 100·n tokens."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.n = 0

    @property
    def base_url(self) -> str:
        return self.url

    def life(self) -> LifeInfo:
        self.n += 1
        return LifeInfo(
            f"life-{self.n}", age_seconds=10.0 * self.n, age_requests=self.n, age_tokens=100 * self.n
        )


class FixedLife:
    """A server whose one life never changes (what a progress display reads)."""

    def __init__(self, info: LifeInfo) -> None:
        self.info = info
        self.life_id = info.life_id

    def life(self) -> LifeInfo:
        return self.info
