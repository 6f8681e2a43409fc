"""/metrics: vLLM's metric names and types, written by prometheus_client from the engine's ints.

A custom collector reads the engine's counters at scrape time, so the token loop never touches a
prometheus_client object. Once the server wedges the collector shows the values frozen at that
moment: a frozen engine reports nothing new.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from wedgewatch.sim.engine import Engine, Histogram

LABELS = ["model_name", "engine"]


def _hist(name: str, doc: str, h: Histogram, labels: list[str]) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=LABELS)
    buckets, acc = [], 0
    for bound, n in zip([*h.bounds, float("inf")], h.counts, strict=True):
        acc += n
        buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), acc))
    fam.add_metric(labels, buckets, h.sum)
    return fam


@dataclass(frozen=True)
class Families:
    """Gauges and counters of one label set: every series the simulator shows is one model's."""

    labels: list[str]
    values: list[str]

    def gauge(self, name: str, doc: str, v: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=self.labels)
        g.add_metric(self.values, v)
        return g

    def counter(self, name: str, doc: str, v: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=self.labels)
        c.add_metric(self.values, v)
        return c


class EngineCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        e = self.engine
        m = e.metrics_view()
        lv = [e.served_names[0], "0"]
        families = Families(LABELS, lv)
        gauge, counter = families.gauge, families.counter
        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", m.running)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", m.waiting)
        capacity = e.scenario.server.kv_cache_tokens
        yield gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            min(1.0, m.kv_tokens / capacity),
        )
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", m.generation_tokens)
        yield counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            m.prefix_queries,
        )
        yield counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", m.prefix_hits
        )
        yield counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", m.preemptions
        )
        rs = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*LABELS, "finished_reason"],
        )
        for reason, n in m.success.items():
            rs.add_metric([*lv, reason], n)
        yield rs
        yield _hist(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft, lv
        )
        yield _hist(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl, lv
        )
        yield _hist(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", m.iteration, lv
        )


def make_registry(engine: Engine) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EngineCollector(engine))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    out: bytes = generate_latest(reg)
    return out
