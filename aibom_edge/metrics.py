"""What the two processes' Prometheus endpoints share.

- `unresolved_counter`: `aibom_rollup_unresolved_total{kind,reason}`, the one
  metric both the webhook and the annotator export under the same name (each
  says in its help what one count is).
- `exposition`: the `/metrics` answer of a registry.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

UNRESOLVED = "aibom_rollup_unresolved"


def unresolved_counter(registry: CollectorRegistry, documentation: str) -> Counter:
    """`aibom_rollup_unresolved_total`, by the walked object's kind and the failing hop's reason."""
    return Counter(UNRESOLVED, documentation, ["kind", "reason"], registry=registry)


def exposition(registry: CollectorRegistry) -> web.Response:
    """The Prometheus text format of `registry`, as `/metrics` answers it."""
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )
