"""A testing kit that ships with the package, as mini-swe-agent ships its DeterministicModel and
trio its MockClock: the helpers wedgewatch's own tests use, for anyone testing code around it."""

from wedgewatch.testing.wait import eventually, eventually_async

__all__ = ["eventually", "eventually_async"]
