"""The listening server in-process: real TLS, readiness, graceful stop with a review in flight."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp

from tests.unit.kobj import mk
from tests.unit.webhook_fakes import MemorySource, body, review, serving_files
from webhook.flags import Settings
from webhook.server import Server
from webhook.tls import CertReloader


async def test_stop_finishes_the_review_in_flight(tmp_path: Path) -> None:
    serving_files(tmp_path)
    owner = mk("Deployment", "d")
    source = MemorySource([owner], delay=0.5)  # a slow API server
    server = Server(
        Settings(
            host="127.0.0.1", port=0, walk_deadline=2.0, owner_cache_ttl=0, shutdown_grace=5.0
        ),
        source=source,
        reloader=CertReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")),
    )
    await server.start()
    serving = asyncio.create_task(server.serve_until_stopped())
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    base = f"https://127.0.0.1:{server.port}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as http:
        async with http.get(base + "/readyz") as resp:
            assert resp.status == 200
        rs = mk("ReplicaSet", "d-1", owner)
        post = asyncio.create_task(
            http.post(
                base + "/mutate",
                data=body(review(rs, uid="in-flight")),
                headers={"Content-Type": "application/json"},
            )
        )
        await asyncio.wait_for(source.asked.wait(), 10)  # the review waits on the slow GET
        server.request_stop("SIGTERM")
        assert server.readiness.shutting_down
        resp = await post
        doc = await resp.json()
        assert resp.status == 200 and doc["response"]["uid"] == "in-flight"
        assert "patch" in doc["response"]
    await asyncio.wait_for(serving, 10)
    # Stopped: no longer accepting.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as http:
        try:
            await http.get(base + "/healthz")
        except aiohttp.ClientConnectionError:
            pass
        else:
            raise AssertionError("still listening after stop")
