"""The export backlog's group commit (annotator/export.py), against a stand-in API that holds
each backlog write until the test lets it through (the pushes are tested on a real registry:
tests/integration/test_export.py)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from prometheus_client import CollectorRegistry

from aibom_core import trail
from aibom_edge.kube import KubeResponse
from aibom_edge.oci import Endpoint
from annotator.export import Exporter, ExportMetrics, ExportSettings, Pending


class HeldApi:
    """POSTs of backlog ConfigMaps wait for `release`; each batch is remembered."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        self.arrived = asyncio.Event()

    async def request(self, method: str, path: str, **kw: Any) -> KubeResponse:
        assert method == "POST", (method, path)
        self.arrived.set()
        await self.release.wait()
        body = kw["json"]
        self.batches.append(body)
        return KubeResponse(201, {**body, "metadata": {**body["metadata"], "uid": "u"}}, {})


def exporter(api: HeldApi) -> Exporter:
    settings = ExportSettings(Endpoint("registry.example"), namespace="aibom-system", cluster="c")
    return Exporter(
        api,  # type: ignore[arg-type]
        settings,
        ExportMetrics(CollectorRegistry()),
        is_leader=lambda: True,
        client=object(),  # type: ignore[arg-type]  # no push happens here
    )


def root(i: int) -> trail.RootId:
    return trail.RootId("ns", "Deployment", f"d{i}", group="apps", uid=f"u{i}")


async def test_versions_recorded_while_a_batch_is_written_are_written_too() -> None:
    api = HeldApi()
    ex = exporter(api)
    first = asyncio.create_task(ex.record(root(0), document=b"{}", input_hash="h", signed_by=""))
    await api.arrived.wait()  # the first batch is being written, and held
    # Recorded now: they must not wait for a record that never comes (the end of a cold start).
    later = [
        asyncio.create_task(ex.record(root(i), document=b"{}", input_hash="h", signed_by=""))
        for i in (1, 2)
    ]
    await asyncio.sleep(0)
    api.release.set()
    done: list[Pending | None] = await asyncio.wait_for(asyncio.gather(first, *later), 5)
    assert all(isinstance(e, Pending) and e.batch for e in done)
    assert len(api.batches) == 2  # one write for the first, one for the two that waited
    assert len(api.batches[1]["binaryData"]) == 1  # same bytes: one blob, two entries
    assert api.batches[1]["data"]["versions.json"].count('"uid": "u') == 2


async def test_past_the_bound_a_version_is_dropped_and_counted() -> None:
    api = HeldApi()
    api.release.set()
    ex = exporter(api)
    ex.settings = ExportSettings(
        Endpoint("r.example"), namespace="n", cluster="c", backlog_bytes=1024
    )
    big = os.urandom(4096).hex().encode()  # does not compress below the bound
    got = await ex.record(root(0), document=big, input_hash="h", signed_by="")
    assert got is None
    assert ex.metrics.dropped._value.get() == 1
    assert ("ns", "u0") in ex._overflowed  # its current document is exported later
