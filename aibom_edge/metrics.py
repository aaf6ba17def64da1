"""What the two processes' Prometheus endpoints share.

- `Collectors`: declares a process's collectors on its own registry (one per
  `Metrics` instance, not the global default, so tests can run several in
  one process); both `Metrics` classes declare every collector through it.
- `Collectors.unresolved`: `aibom_rollup_unresolved_total{kind,reason}`, the
  one metric both the webhook and the annotator export under the same name
  (each says in its help what one count is).
- `exposition`: the `/metrics` answer of a registry.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

UNRESOLVED = "aibom_rollup_unresolved"


class Collectors:
    """Counters, gauges and histograms declared on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, documentation, labels, registry=self.registry)

    def histogram(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str],
        *,
        buckets: Sequence[float],
    ) -> Histogram:
        return Histogram(name, documentation, labels, buckets=buckets, registry=self.registry)

    def unresolved(self, documentation: str) -> Counter:
        """`aibom_rollup_unresolved_total`, by the walked object's kind and the failing hop's
        reason."""
        return self.counter(UNRESOLVED, documentation, ["kind", "reason"])


def exposition(registry: CollectorRegistry) -> web.Response:
    """The Prometheus text format of `registry`, as `/metrics` answers it."""
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )
