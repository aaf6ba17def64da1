"""The annotator's Prometheus collectors (served on `/metrics`).

One registry per `Metrics` instance (not the global default) so tests can run
several annotators in one process. Names and labels are a contract; each is
defined in docs/annotator.md.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from aibom_edge.metrics import Collectors

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


class _ClientCounters(Collector):
    def __init__(
        self,
        throttled: Callable[[], dict[str, int]],
        refreshes: Callable[[], int],
        failures: Callable[[], int] = lambda: 0,
    ):
        self._throttled = throttled
        self._refreshes = refreshes
        self._failures = failures

    def collect(self) -> list[Metric]:
        retries = CounterMetricFamily(
            "aibom_annotator_api_throttled_retries",
            "Requests retried after a 429 (or a 5xx with Retry-After), by HTTP verb.",
            labels=["verb"],
        )
        for verb, count in sorted(self._throttled().items()):
            retries.add_metric([verb], count)
        refreshed = CounterMetricFamily(
            "aibom_annotator_credential_refreshes",
            "Times the API token (or an exec plugin's client certificate) changed on refresh "
            "(exec plugin, OIDC, projected token file).",
        )
        refreshed.add_metric([], self._refreshes())
        failed = CounterMetricFamily(
            "aibom_annotator_credential_refresh_failures",
            "Refreshes of the API token that failed (the plugin or the OIDC provider refused, "
            "or gave an expired token); the old token is kept and the refresh retried with "
            "backoff.",
        )
        failed.add_metric([], self._failures())
        return [retries, refreshed, failed]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        c = Collectors(self.registry)
        self.outcomes = c.counter(
            "aibom_workload_reconcile_outcomes",
            "Reconcile outcomes per tracked workload (docs/annotator.md defines each outcome).",
            ["kind", "outcome"],
        )
        self.unresolved = c.unresolved(
            "Object versions recorded as unresolved (a hop of the walk failed), by the "
            "walked object's kind and the hop's reason: the annotator counts each document "
            "version it writes for an unresolved root (the webhook: each admission it "
            "stamps unresolved).",
        )
        # Current state (gauges), from the leader's last reconcile of each root;
        # 0 on a standby (it reconciles nothing).
        self.roots = c.gauge(
            "aibom_annotator_roots",
            "Roots with a document in opted-in namespaces (matched or unresolved), by kind.",
            ["kind"],
        )
        self.rolled_up_objects = c.gauge(
            "aibom_annotator_rolled_up_objects",
            "Tracked workloads rolled up into another root's document, by their kind.",
            ["kind"],
        )
        self.unresolved_roots = c.gauge(
            "aibom_annotator_unresolved_roots",
            "Roots whose walk is unresolved now, by kind and the failing hop's reason.",
            ["kind", "reason"],
        )
        self.documents = c.gauge(
            "aibom_annotator_documents",
            "AIBOM ConfigMaps in the cache (all namespaces), by encoding (json, gzip, truncated).",
            ["encoding"],
        )

        self.reconcile_duration = c.histogram(
            "aibom_annotator_reconcile_duration_seconds",
            "Time to reconcile one key, by queue and result.",
            ["queue", "result"],
            buckets=_DURATION_BUCKETS,
        )
        self.queue_depth = c.gauge(
            "aibom_annotator_queue_depth",
            "Keys waiting in a work queue (queued plus delayed).",
            ["queue"],
        )
        self.watch_healthy = c.gauge(
            "aibom_annotator_watch_healthy",
            "1 while the list+watch of a kind is synced and streaming, else 0.",
            ["group", "kind"],
        )
        self.watch_state = c.gauge(
            "aibom_annotator_watch_state",
            "The state of each kind's informer (1 for the current state).",
            ["group", "kind", "state"],
        )
        self.watch_restarts = c.counter(
            "aibom_annotator_watch_restarts",
            "Watches restarted, by kind and why (expired: 410 Gone relist; continue_expired: a "
            "paged list restarted; throttled: 429 or 5xx with Retry-After; idle: a silent "
            "stream; error; closed).",
            ["group", "kind", "reason"],
        )
        self.cached_objects = c.gauge(
            "aibom_annotator_cached_objects",
            "Objects held in the in-memory cache, by kind.",
            ["group", "kind"],
        )
        self.stamp_repairs = c.counter(
            "aibom_annotator_stamp_repairs",
            "Objects whose aibom.dev stamp annotations were patched to agree with the graph.",
            ["kind"],
        )
        self.stamp_skips = c.counter(
            "aibom_annotator_stamp_checks_skipped",
            "Stamp checks not judged (the cache cannot know better than the webhook), by reason.",
            ["reason"],
        )
        self.documents_written = c.counter(
            "aibom_annotator_documents_written",
            "AIBOM ConfigMaps written (server-side apply), by encoding (json, gzip, truncated).",
            ["encoding"],
        )
        self.documents_unchanged = c.counter(
            "aibom_annotator_documents_unchanged",
            "Root reconciles that skipped the write because the input hash was unchanged.",
        )
        self.documents_current_by_sources = c.counter(
            "aibom_annotator_documents_current_by_sources",
            "Root reconciles that found the document current from its recorded sources hash "
            "alone (the same object versions), without computing the facts; also counted in "
            "aibom_annotator_documents_unchanged_total.",
        )
        self.documents_deleted = c.counter(
            "aibom_annotator_documents_deleted",
            "AIBOM ConfigMaps deleted, by why (rolled_up, not_opted_in, stale).",
            ["reason"],
        )
        self.documents_repaired = c.counter(
            "aibom_annotator_documents_repaired",
            "AIBOM ConfigMaps rewritten because another writer had changed their data (edited).",
            ["reason"],
        )
        self.errors = c.counter(
            "aibom_annotator_errors",
            "Failed API operations of the annotator, by operation.",
            ["operation"],
        )
        self.leader = c.gauge(
            "aibom_annotator_leader",
            "1 while this replica holds the leader Lease (only the leader writes).",
        )
        self.unproven_edges = c.gauge(
            "aibom_annotator_unproven_edges",
            "Controller edges (to a known owner) not followed because they are not proven "
            "(no verifying edge-proof), per opted-in namespace.",
            ["namespace"],
        )
        self.adopted_mismatch = c.gauge(
            "aibom_annotator_adopted_mismatch",
            "Objects adopted by a controller (a proven edge added to an existing object) "
            "that do not run its Pod template, per opted-in namespace: listed apart in the "
            "root's AIBOM (aibom.rollup.adopted-mismatch.<i>), never absorbed.",
            ["namespace"],
        )
        self.guard_in_force = c.gauge(
            "aibom_annotator_guard_in_force",
            "1 while the provenance guard's policy and binding are what aibom-rollup policy "
            "generates for this registry and opt-in label (they exist, deny, and select the "
            "opted-in namespaces): only then is a namespace reported guarded.",
        )
        self.guard_disabled = c.gauge(
            "aibom_annotator_guard_disabled_namespaces",
            "Opted-in namespaces labelled aibom.dev/provenance-guard=disabled (nothing "
            "refuses a forged ownerReference there at admission).",
        )
        # When did the leader's last full resync (start of leadership,
        # RBAC/CRD change) converge: every key it queued reconciled.
        self.resync_completed = c.gauge(
            "aibom_annotator_resync_completed_timestamp_seconds",
            "Unix time at which the last full resync had every key reconciled (0: not yet).",
        )
        self.resync_duration = c.gauge(
            "aibom_annotator_resync_duration_seconds",
            "Seconds from the start of the last full resync until every key was reconciled.",
        )
        self.ready = c.gauge(
            "aibom_annotator_ready",
            "1 once every kind's first list has synced (or the kind is known unreadable).",
        )

    def watch_requests(self, source: Callable[[], dict[str, int]]) -> None:
        self.registry.register(_RequestCounter(source))

    def watch_client(
        self,
        throttled: Callable[[], dict[str, int]],
        refreshes: Callable[[], int],
        failures: Callable[[], int] = lambda: 0,
    ) -> None:
        """The client's own counters: retries after 429/Retry-After, token refreshes (and
        failed ones)."""
        self.registry.register(_ClientCounters(throttled, refreshes, failures))
