"""Standbys keep warm caches and queue nothing; a new leader does one full resync
(docs/annotator.md, "Leader election")."""

from __future__ import annotations

import asyncio
from typing import Any

from aibom_core.kinds import NAMESPACE, default_registry, group_kind_of
from aibom_core.objects import Obj
from annotator.controller import Controller
from annotator.lease import ElectionConfig
from annotator.settings import Settings
from tests.unit.kobj import chain, mk
from tests.unit.test_annotator_controller import FakeKube, Recorder

REG = default_registry()


class Waiting(Recorder):
    """A Recorder that says when every document named has been applied."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.waiting_for = set(names)
        self.all_written = asyncio.Event()

    async def apply_configmap(self, body: dict[str, Any]) -> Obj:
        stored = await super().apply_configmap(body)
        self.waiting_for.discard(body["metadata"]["name"])
        if not self.waiting_for:
            self.all_written.set()
        return stored


async def test_a_standby_caches_but_queues_nothing_and_a_new_leader_resyncs() -> None:
    settings = Settings(registry=REG, tool_version="t", trust_owner_references=True)
    election = ElectionConfig(identity="b", namespace="aibom-system", name="lease")
    c = Controller(FakeKube(), settings, election=election)  # type: ignore[arg-type]
    rec = Waiting({"aibom-leaderworkerset-l", "aibom-deployment-web"})
    c.writer = rec  # type: ignore[assignment]
    # As after the first sync (`_check_synced`): from here on, events are judged.
    c.state.bulk = False
    c.synced.set()
    assert not c.is_leader()
    c.intake.upsert(NAMESPACE, mk("Namespace", "ns", ns="", labels={"aibom.dev/enabled": "true"}))
    lws, sts = chain("LeaderWorkerSet/l", "StatefulSet/l")
    web = mk("Deployment", "web")
    for obj in (lws, sts, web):
        c.intake.upsert(group_kind_of(obj), obj)
    # Warm: the standby knows every object and its root...
    assert len(c.state.roots(c.state.opted_in_namespaces())) == 2
    # ...and has queued nothing: no document, no stamp.
    assert (len(c.docs), len(c.stamps)) == (0, 0)

    c._leadership(True)  # what the elector calls when this replica wins the Lease
    try:
        async with asyncio.timeout(10):
            await rec.all_written.wait()
    finally:
        c._leadership(False)
    assert sorted(rec.calls).count(("apply", "aibom-leaderworkerset-l")) == 1
