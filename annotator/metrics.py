"""The annotator's Prometheus collectors (served on `/metrics`).

One registry per `Metrics` instance (not the global default) so tests can run
several annotators in one process. Names and labels are a contract; each is
defined in docs/annotator.md.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

# Reconciles are cache reads plus at most a handful of writes: most take
# milliseconds; a root with thousands of Pods, or a slow API, takes seconds.
_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class _RequestCounter(Collector):
    """`aibom_annotator_api_requests_total{verb}` read from the client's own counter."""

    def __init__(self, source: Callable[[], dict[str, int]]) -> None:
        self._source = source

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "aibom_annotator_api_requests",
            "Requests the annotator made to the API server, by HTTP verb (WATCH for watches).",
            labels=["verb"],
        )
        for verb, count in sorted(self._source().items()):
            family.add_metric([verb], count)
        return [family]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.outcomes = Counter(
            "aibom_workload_reconcile_outcomes",
            "Reconcile outcomes per tracked workload (docs/annotator.md defines each outcome).",
            ["kind", "outcome"],
            registry=r,
        )
        self.unresolved = Counter(
            "aibom_rollup_unresolved",
            "Roots reported as their own root because a hop of their walk failed.",
            ["kind", "reason"],
            registry=r,
        )
        self.reconcile_duration = Histogram(
            "aibom_annotator_reconcile_duration_seconds",
            "Time to reconcile one key, by queue and result.",
            ["queue", "result"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "aibom_annotator_queue_depth",
            "Keys waiting in a work queue (queued plus delayed).",
            ["queue"],
            registry=r,
        )
        self.watch_healthy = Gauge(
            "aibom_annotator_watch_healthy",
            "1 while the list+watch of a kind is synced and streaming, else 0.",
            ["group", "kind"],
            registry=r,
        )
        self.watch_state = Gauge(
            "aibom_annotator_watch_state",
            "The state of each kind's informer (1 for the current state).",
            ["group", "kind", "state"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "aibom_annotator_watch_restarts",
            "Watches restarted, by kind and why (expired: 410 Gone relist; error; closed).",
            ["group", "kind", "reason"],
            registry=r,
        )
        self.cached_objects = Gauge(
            "aibom_annotator_cached_objects",
            "Objects held in the in-memory cache, by kind.",
            ["group", "kind"],
            registry=r,
        )
        self.stamp_repairs = Counter(
            "aibom_annotator_stamp_repairs",
            "Objects whose aibom.dev stamp annotations were patched to agree with the graph.",
            ["kind"],
            registry=r,
        )
        self.stamp_skips = Counter(
            "aibom_annotator_stamp_checks_skipped",
            "Stamp checks not judged (the cache cannot know better than the webhook), by reason.",
            ["reason"],
            registry=r,
        )
        self.documents_written = Counter(
            "aibom_annotator_documents_written",
            "AIBOM ConfigMaps written (server-side apply), by encoding (json, gzip, truncated).",
            ["encoding"],
            registry=r,
        )
        self.documents_unchanged = Counter(
            "aibom_annotator_documents_unchanged",
            "Root reconciles that skipped the write because the input hash was unchanged.",
            registry=r,
        )
        self.documents_deleted = Counter(
            "aibom_annotator_documents_deleted",
            "AIBOM ConfigMaps deleted, by why (rolled_up, not_opted_in, stale).",
            ["reason"],
            registry=r,
        )
        self.documents_repaired = Counter(
            "aibom_annotator_documents_repaired",
            "AIBOM ConfigMaps rewritten because another writer had changed their data (edited).",
            ["reason"],
            registry=r,
        )
        self.errors = Counter(
            "aibom_annotator_errors",
            "Failed API operations of the annotator, by operation.",
            ["operation"],
            registry=r,
        )
        self.leader = Gauge(
            "aibom_annotator_leader",
            "1 while this replica holds the leader Lease (only the leader writes).",
            registry=r,
        )
        self.ready = Gauge(
            "aibom_annotator_ready",
            "1 once every kind's first list has synced (or the kind is known unreadable).",
            registry=r,
        )

    def watch_requests(self, source: Callable[[], dict[str, int]]) -> None:
        self.registry.register(_RequestCounter(source))
