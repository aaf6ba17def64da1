"""The webhook process's memory stays flat under hostile bodies.

The real `aibom-rollup webhook` process gets 3,000 of tests/unit/review_fuzz.py's
seeded bodies over TLS (8 keep-alive connections), among them the 64 KiB and
1 MiB annotations and the 5,000-reference lists. Its resident set (VmRSS) is
read after the first 120 and at the end: it may not grow by more than 8 MiB.

Without the pinned allocator thresholds (aibom_edge/heap.py), glibc keeps
the large bodies' high-water mark: measured 80.5 -> 96.5 MiB over the same
3,000 bodies (+16 MiB), against 74.6 -> 79.2 MiB (+4.6) with them. The full
100,000-body run is bench/webhook_fuzz.py (BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.controlplane import ControlPlane, Kubectl
from tests.integration.support import Webhook, shipped_role
from tests.integration.support import grant_webhook as grant
from tests.unit.review_fuzz import send_reviews

pytestmark = pytest.mark.integration

COUNT = 3000
WARM_UP = 120
MAX_GROWTH_MIB = 8.0


def test_rss_stays_flat_over_hostile_bodies(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path: Path
) -> None:
    kubeconfig = grant(control_plane, kubectl, "aibom-webhook-memory", shipped_role())
    hook = Webhook(control_plane, tmp_path, name="memory", kubeconfig=kubeconfig)
    hook.start()
    try:
        assert hook.proc is not None
        run = asyncio.run(
            send_reviews(
                f"https://127.0.0.1:{hook.port}/mutate",
                hook.ssl_context(),
                seed=14,
                count=COUNT,
                concurrency=8,
                pid=hook.proc.pid,
                marks=(WARM_UP,),
            )
        )
        failures, rss = run.failures, run.rss
        assert hook.proc.poll() is None, "the webhook died"
    finally:
        hook.stop()
    assert not failures, failures[:5]
    growth = rss[COUNT] - rss[WARM_UP]
    assert growth <= MAX_GROWTH_MIB, (
        f"RSS grew {growth:.1f} MiB over {COUNT - WARM_UP} bodies "
        f"({rss[WARM_UP]:.1f} -> {rss[COUNT]:.1f} MiB)"
    )
