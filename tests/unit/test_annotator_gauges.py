"""Current-state gauges; one meaning of `aibom_rollup_unresolved_total`; scraped."""

from __future__ import annotations

import aiohttp

from aibom_core.kinds import GroupKind, group_kind_of
from aibom_core.walk import Reason
from annotator.controller import Controller
from annotator.keys import RootKey
from annotator.probes import Probes
from annotator.settings import Settings
from tests.unit.kobj import chain
from tests.unit.test_annotator_controller import REG, FakeKube, Recorder, controller

LWS = GroupKind("leaderworkerset.x-k8s.io", "LeaderWorkerSet")


def samples(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, _, value = line.rpartition(" ")
            out[head[len(name) :]] = float(value)
    return out


async def scrape(c: Controller) -> str:
    probes = Probes(
        metrics=c.metrics,
        readiness=c.readiness.report,
        host="127.0.0.1",
        metrics_port=0,
        health_port=0,
    )
    await probes.start()
    try:
        port = probes.ports["metrics"]
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            assert resp.status == 200
            return await resp.text()
    finally:
        await probes.stop()


def unresolved_controller() -> tuple[Controller, RootKey]:
    """A StatefulSet whose owner (a LeaderWorkerSet) may not be listed: unresolved."""
    settings = Settings(registry=REG, tool_version="t", trust_owner_references=True)
    c = Controller(FakeKube(), settings, election=None)  # type: ignore[arg-type]
    c.writer = Recorder()  # type: ignore[assignment]
    st = c.state
    st.upsert(
        GroupKind("", "Namespace"),
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "ns", "labels": {"aibom.dev/enabled": "true"}},
        },
    )
    _lws, sts = chain("LeaderWorkerSet/l", "StatefulSet/s")
    st.upsert(group_kind_of(sts), sts)
    st.set_unavailable(LWS, Reason.FORBIDDEN)
    st.bulk = False
    m = sts["metadata"]
    return c, RootKey("ns", m["uid"], "apps", "StatefulSet", "s")


async def test_unresolved_total_counts_document_versions_not_reconciles() -> None:
    # Today's annotator counts every reconcile of an unresolved root (a resync,
    # any event of its Pods): the counter measured churn, unlike the webhook's.
    c, key = unresolved_controller()
    assert await c.documents.reconcile(key) == "written"
    assert await c.documents.reconcile(key) == "unchanged"
    assert await c.documents.reconcile(key) == "unchanged"
    text = await scrape(c)
    assert samples(text, "aibom_rollup_unresolved_total") == {
        '{kind="StatefulSet",reason="Forbidden"}': 1.0
    }


async def test_current_state_gauges_are_scraped() -> None:
    c, key = controller(Recorder())
    assert await c.documents.reconcile(key) == "written"
    u, ukey = unresolved_controller()
    await u.documents.reconcile(ukey)
    c.gauges.refresh()
    u.gauges.refresh()
    text = await scrape(c)
    assert samples(text, "aibom_annotator_roots") == {'{kind="LeaderWorkerSet"}': 1.0}
    assert samples(text, "aibom_annotator_rolled_up_objects") == {'{kind="StatefulSet"}': 1.0}
    assert samples(text, "aibom_annotator_unresolved_roots") == {}
    # The new document is cached; the superseded one is deleted (the fake writer said so).
    assert samples(text, "aibom_annotator_documents") == {'{encoding="json"}': 1.0}
    utext = await scrape(u)
    assert samples(utext, "aibom_annotator_unresolved_roots") == {
        '{kind="StatefulSet",reason="Forbidden"}': 1.0
    }
    assert samples(utext, "aibom_annotator_roots") == {'{kind="StatefulSet"}': 1.0}
    # The root goes: so do its gauges (level, not churn).
    c.state.delete(
        group_kind_of(c.state.graph.get(key.uid) or {}), c.state.graph.get(key.uid) or {}
    )
    await c.documents.reconcile(key)
    c.gauges.refresh()
    text = await scrape(c)
    assert samples(text, "aibom_annotator_roots") == {}
    assert samples(text, "aibom_annotator_rolled_up_objects") == {}
    assert "aibom_annotator_api_throttled_retries_total" in text
    assert "aibom_annotator_credential_refreshes_total 0.0" in text
    assert "aibom_annotator_credential_refresh_failures_total 0.0" in text
