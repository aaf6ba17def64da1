"""The current-state gauges (docs/annotator.md, Metrics): what the cache and the
last verdicts say now, set again every housekeeping round, as opposed to the
counters the reconcilers add to as they go."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from aibom_core.kinds import CONFIGMAP, NAMESPACE, GroupKind
from annotator.cache import ClusterState
from annotator.documents import Verdict
from annotator.keys import RootKey
from annotator.metrics import Metrics
from annotator.plan import Outcome
from annotator.settings import Settings
from annotator.workqueue import Queues


class Gauges:
    def __init__(
        self,
        *,
        metrics: Metrics,
        settings: Settings,
        state: ClusterState,
        queues: Queues,
        verdicts: Mapping[RootKey, Verdict],
        wanted: tuple[GroupKind, ...],
    ) -> None:
        self.metrics = metrics
        self.settings = settings
        self.state = state
        self.queues = queues
        self.verdicts = verdicts  # the document reconciler's, read here
        self.wanted = wanted
        self._unproven_reported: set[str] = set()

    def count_work(self) -> None:
        """The queues' depths and the objects cached per kind."""
        self.metrics.queue_depth.labels("documents").set(len(self.queues.docs))
        self.metrics.queue_depth.labels("stamps").set(len(self.queues.stamps))
        counts = dict(self.state.kind_counts)
        counts[CONFIGMAP] = len(self.state.configmaps)
        counts[NAMESPACE] = len(self.state.namespaces)
        for gk in self.wanted:
            self.metrics.cached_objects.labels(gk.group or "core", gk.kind).set(counts.get(gk, 0))

    def refresh(self) -> None:
        """Set the current-state gauges from the verdicts and the cache (docs/annotator.md)."""
        m = self.metrics
        roots: Counter[str] = Counter()
        rolled: Counter[str] = Counter()
        unresolved: Counter[tuple[str, str]] = Counter()
        for key, (outcome, reason, owned) in self.verdicts.items():
            roots[key.kind] += 1
            rolled.update(owned)
            if outcome is Outcome.ROLLUP_UNRESOLVED:
                unresolved[key.kind, reason] += 1
        encodings: Counter[str] = Counter()
        enc_key = self.settings.labels.encoding
        for cm in self.state.configmaps.values():
            meta = cm.get("metadata") or {}
            ann = meta.get("annotations") or {}
            labels = meta.get("labels") or {}
            encodings[str(ann.get(enc_key) or labels.get(enc_key) or "json")] += 1
        for gauge, values in (
            (m.roots, roots),
            (m.rolled_up_objects, rolled),
            (m.documents, encodings),
        ):
            gauge.clear()
            for label, n in sorted(values.items()):
                gauge.labels(label).set(n)
        m.unresolved_roots.clear()
        for (kind, reason), n in sorted(unresolved.items()):
            m.unresolved_roots.labels(kind, reason).set(n)
        self.report_unproven()

    def report_unproven(self) -> None:
        unproven, mismatched = self.state.unproven_edges()
        for gauge, counts in (
            (self.metrics.unproven_edges, unproven),
            (self.metrics.adopted_mismatch, mismatched),
        ):
            for ns in self._unproven_reported - set(counts):
                gauge.labels(ns).set(0)
            for ns, n in counts.items():
                gauge.labels(ns).set(n)
        self._unproven_reported = set(unproven) | set(mismatched)
