"""Python heap of the webhook app under the fuzz stream (not a test).

Runs the real aiohttp application in process (plain HTTP on loopback, an
in-memory owner source), sends N bodies of tests/unit/review_fuzz.py, and
prints the memory `tracemalloc` traces after `gc.collect()` at each quarter,
with the lines that grew most. Flat numbers mean no Python-level leak; the
process RSS of bench/webhook_fuzz.py also includes the allocator's
high-water mark from large bodies.

    .venv/bin/python bench/webhook_heap.py [N]     # default 8000
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import tracemalloc
from pathlib import Path

import aiohttp
from aiohttp import web

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aibom_core.kinds import default_registry  # noqa: E402
from aibom_core.stamp import Keys  # noqa: E402
from tests.unit.review_fuzz import KNOWN_OWNERS, bodies  # noqa: E402
from tests.unit.webhook_fakes import MemorySource  # noqa: E402
from webhook.app import Admitter, Readiness, make_app  # noqa: E402
from webhook.metrics import Metrics  # noqa: E402
from webhook.resolver import OwnerCache, Resolver  # noqa: E402


async def run(count: int) -> None:
    metrics = Metrics()
    reg = default_registry()
    resolver = Resolver(
        MemorySource(KNOWN_OWNERS), registry=reg, deadline=1.0, cache=OwnerCache(ttl=60)
    )
    admitter = Admitter(resolver=resolver, registry=reg, keys=Keys(), metrics=metrics)
    app = make_app(admitter=admitter, metrics=metrics, readiness=Readiness(True, True))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site.port}/mutate"
    snap = None
    async with aiohttp.ClientSession() as http:
        tracemalloc.start()
        for i, data in bodies(14, count):
            async with http.post(
                url, data=data, headers={"Content-Type": "application/json"}
            ) as resp:
                await resp.read()
            if (i + 1) % max(1, count // 4) == 0:
                gc.collect()
                current, _ = tracemalloc.get_traced_memory()
                print(f"{i + 1} requests: {current / 2**20:.2f} MiB traced", flush=True)
                new = tracemalloc.take_snapshot()
                if snap is not None:
                    for stat in new.compare_to(snap, "lineno")[:3]:
                        print(f"    {stat}")
                snap = new
    await runner.cleanup()


def main() -> int:
    logging.disable(logging.CRITICAL)
    asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
