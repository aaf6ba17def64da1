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

import aiohttp
import pytest

from tests.controlplane import ControlPlane, Kubectl
from tests.integration.support import Webhook, shipped_role
from tests.integration.support import grant_webhook as grant
from tests.unit.review_fuzz import bodies, check_answer

pytestmark = pytest.mark.integration

COUNT = 3000
WARM_UP = 120
MAX_GROWTH_MIB = 8.0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def _send(hook: Webhook, pid: int) -> tuple[list[str], dict[int, float]]:
    failures: list[str] = []
    rss: dict[int, float] = {}
    queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue(maxsize=64)
    done = 0
    url = f"https://127.0.0.1:{hook.port}/mutate"
    connector = aiohttp.TCPConnector(ssl=hook.ssl_context(), limit=8)

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal done
        while (item := await queue.get()) is not None:
            i, data = item
            try:
                async with http.post(
                    url, data=data, headers={"Content-Type": "application/json"}
                ) as resp:
                    check_answer(data, resp.status, resp.content_type, await resp.read())
            except Exception as exc:  # the oracle's verdict, or a dropped connection
                failures.append(f"case {i}: {type(exc).__name__}: {str(exc)[:200]}")
            done += 1
            if done in (WARM_UP, COUNT):
                rss[done] = rss_mib(pid)

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        workers = [asyncio.create_task(worker(http)) for _ in range(8)]
        for item in bodies(14, COUNT):
            await queue.put(item)
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
    return failures, rss


def test_rss_stays_flat_over_hostile_bodies(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path: Path
) -> None:
    kubeconfig = grant(control_plane, kubectl, "aibom-webhook-memory", shipped_role())
    hook = Webhook(control_plane, tmp_path, name="memory", kubeconfig=kubeconfig)
    hook.start()
    try:
        assert hook.proc is not None
        failures, rss = asyncio.run(_send(hook, hook.proc.pid))
        assert hook.proc.poll() is None, "the webhook died"
    finally:
        hook.stop()
    assert not failures, failures[:5]
    growth = rss[COUNT] - rss[WARM_UP]
    assert growth <= MAX_GROWTH_MIB, (
        f"RSS grew {growth:.1f} MiB over {COUNT - WARM_UP} bodies "
        f"({rss[WARM_UP]:.1f} -> {rss[COUNT]:.1f} MiB)"
    )
