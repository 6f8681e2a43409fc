"""The one Prometheus text-format reader.

Parsing is ``prometheus_client``'s; this module only turns families into a flat, queryable set of
samples. Names keep their suffixes as exposed (``vllm:generation_tokens_total``), so callers ask
for exactly the series a server documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from wedgewatch.base.errors import BadMetrics


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


class Samples:
    """All samples of one scrape."""

    def __init__(self, samples: list[Sample]) -> None:
        self._samples = samples
        self._by_name: dict[str, list[Sample]] = {}
        for s in samples:
            self._by_name.setdefault(s.name, []).append(s)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def names(self) -> set[str]:
        return set(self._by_name)

    def series(self, name: str) -> list[Sample]:
        return list(self._by_name.get(name, ()))

    def total(self, name: str, **labels: str) -> float | None:
        """Sum of every series of ``name`` whose labels include ``labels``; None if absent."""
        found = [
            s.value
            for s in self._by_name.get(name, ())
            if all(s.labels.get(k) == v for k, v in labels.items())
        ]
        return sum(found) if found else None

    def value(self, name: str, **labels: str) -> float | None:
        """Alias of ``total`` for gauges, where one series is the usual case."""
        return self.total(name, **labels)


def parse(text: str) -> Samples:
    """Parse Prometheus text exposition format. Raises ``BadMetrics`` (a ``ValueError``) on
    malformed text, and nothing else, whatever a server sends."""
    out: list[Sample] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.append(Sample(s.name, dict(s.labels), float(s.value)))
    except Exception as exc:  # prometheus_client's parser raises more than ValueError on odd text
        raise BadMetrics(f"not Prometheus text: {type(exc).__name__}: {exc}"[:300]) from None
    return Samples(out)
