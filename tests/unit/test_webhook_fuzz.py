"""Fuzz: malformed and hostile AdmissionReviews through the real HTTP edge.

A seeded, deterministic few thousand of tests/unit/review_fuzz.py's bodies
(the benchmark bench/webhook_fuzz.py sends 100,000 to the real process):
zero crashes (no 5xx, no error counted in the admitter), every answer
well-formed (an AdmissionReview that allows, with no patch or with a patch
that applies to the object; or a 4xx for a body that is not a review), and
what the process keeps (metric label sets, the owner cache, the once-per
(kind, reason) log memory) does not grow with the number of requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from aibom_core.kinds import default_registry
from aibom_core.stamp import Keys
from tests.unit.review_fuzz import KNOWN_OWNERS, bodies, check_answer
from tests.unit.webhook_fakes import MemorySource
from webhook.app import Admitter, Readiness, make_app
from webhook.metrics import Metrics
from webhook.resolver import OwnerCache, Resolver

MakeClient = Callable[..., Awaitable[TestClient[Any, Any]]]
SEED = 14
COUNT = 3000


def _samples(metrics: Metrics) -> int:
    return sum(len(m.samples) for m in metrics.registry.collect())


async def test_fuzzed_reviews_are_answered_well_formed_and_state_stays_bounded(
    aiohttp_client: MakeClient,
) -> None:
    metrics = Metrics()
    registry = default_registry()
    cache = OwnerCache(ttl=60, size=50)
    resolver = Resolver(MemorySource(KNOWN_OWNERS), registry=registry, deadline=1.0, cache=cache)
    admitter = Admitter(resolver=resolver, registry=registry, keys=Keys(), metrics=metrics)
    app = make_app(admitter=admitter, metrics=metrics, readiness=Readiness(True, True))
    client = await aiohttp_client(app)
    classes: Counter[str] = Counter()
    half = 0
    for i, data in bodies(SEED, COUNT):
        resp = await client.post("/mutate", data=data, headers={"Content-Type": "application/json"})
        answer = await resp.read()
        try:
            classes[check_answer(data, resp.status, resp.content_type, answer)] += 1
        except Exception as exc:
            raise AssertionError(f"case {i} (seed {SEED}): {exc}\nbody: {data[:300]!r}") from exc
        if i == COUNT // 2:
            half = _samples(metrics)
    assert metrics.registry.get_sample_value("aibom_webhook_errors_total", {"stage": "admit"}) in (
        None,
        0.0,
    )
    # Every family was exercised.
    assert classes["patched"] > 100 and classes["allowed"] > 100 and classes["http-400"] > 100
    # Bounded state: the second half adds no new label sets (kinds outside the
    # registry share one label), the cache stays within its size, and the
    # log memory holds at most one entry per (known kind, reason).
    assert _samples(metrics) - half <= 40, "metric label sets grow with hostile input"
    assert len(cache) <= 50
    assert len(admitter._logged) <= 2 * 7 * 20
