"""The proxy's own Prometheus metrics (``GET /wedgewatch/metrics``), in a registry of its own so
that several proxies in one process (tests, the runner) never collide."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import HistogramMetricFamily, Metric

from wedgewatch.proxy.deadlines import Buckets

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 240.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _BucketsCollector:
    """Exposes a ``Buckets`` (observed on the hot path without locks) as a Prometheus histogram."""

    def __init__(self, name: str, doc: str, buckets: Buckets) -> None:
        self._name, self._doc, self._b = name, doc, buckets

    def collect(self) -> Iterator[Metric]:
        b = self._b
        cumulative, running = [], 0
        for bound, n in zip((*b.bounds, float("inf")), b.counts, strict=True):
            running += n
            cumulative.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        yield HistogramMetricFamily(self._name, self._doc, buckets=cumulative, sum_value=b.sum)


class ProxyMetrics:
    def __init__(self, in_flight: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "wedgewatch_proxy_requests",
            "Generation requests by outcome (ok, a stall kind, upstream_http_<code>, ...).",
            ["outcome"],
            registry=self.registry,
        )
        self.stalls = Counter(
            "wedgewatch_proxy_stalls",
            "Requests aborted by the watchdog, by stall kind.",
            ["kind"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "wedgewatch_proxy_requests_in_flight", "Generation requests in flight.", registry=self.registry
        )
        self.in_flight.set_function(in_flight)
        self.ttft = Histogram(
            "wedgewatch_proxy_ttft_seconds",
            "Seconds from a request to its first token.",
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.itl = Buckets(ITL_BUCKETS)
        self.registry.register(
            _BucketsCollector(
                "wedgewatch_proxy_inter_token_seconds", "Seconds between consecutive tokens.", self.itl
            )
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
