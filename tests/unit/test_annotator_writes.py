"""What the annotator sends the API server, recorded: preconditions on deletes and stamp
patches, a 409 judged again later (docs/annotator.md:109, 161-162, 175), no read
in a reconcile (:66, :345-346), and `--workers` bounding the writes in flight (:475-481).

The controller runs the real `Writer` over `RecordingApi` (tests/unit/recording_api.py);
the preconditions' effect on the real API server is in tests/integration/.
"""

from __future__ import annotations

import asyncio
import copy
import functools
from typing import Any

from aibom_core import jsf
from aibom_core.kinds import CONFIGMAP, NAMESPACE, group_kind_of
from aibom_core.objects import Obj
from annotator.controller import Controller
from annotator.keys import RootKey, SweepKey
from annotator.settings import Settings
from annotator.signing import Signing
from annotator.workqueue import WorkQueue
from annotator.writer import APPLY, MERGE
from tests.unit.kobj import chain, mk
from tests.unit.manifest_docs import ANNOTATOR, only, rules_by_resource
from tests.unit.recording_api import CONFIGMAPS, RecordingApi, until, write_through
from tests.unit.test_annotator_controller import REG, FakeKube, Recorder, controller
from tests.unit.test_manifests_static import DOCS, STAMPED

CHILD = "aibom-statefulset-l"  # the child document `controller()` starts with
DOCS_PATH = CONFIGMAPS.format(ns="ns")


def recorded() -> tuple[Controller, RootKey, RecordingApi]:
    """`controller()`'s world (a LeaderWorkerSet whose StatefulSet has a document of its
    own), with the server holding the version of that document the cache holds."""
    c, key = controller(Recorder())
    api = RecordingApi()
    write_through(c, api)
    child = c.state.configmap("ns", CHILD)
    assert child is not None
    api.serve(child)
    return c, key, api


def deleted(c: Controller) -> float | None:
    labels = {"reason": "rolled_up"}
    return c.metrics.registry.get_sample_value("aibom_annotator_documents_deleted_total", labels)


# -- deletes -----------------------------------------------------------------------


async def test_a_superseded_document_is_deleted_with_uid_and_resource_version_preconditions() -> (
    None
):
    c, key, api = recorded()
    assert await c.documents.reconcile(key) == "written"
    deletes = [call for call in api.calls if call.method == "DELETE"]
    assert [call.path for call in deletes] == [f"{DOCS_PATH}/{CHILD}"]
    assert deletes[0].body == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "cm-old", "resourceVersion": "5"},
    }
    assert api.configmap("ns", CHILD) is None
    assert deleted(c) == 1


async def test_a_document_changed_since_it_was_judged_is_not_deleted_and_judged_again() -> None:
    c, key, api = recorded()
    child = api.configmap("ns", CHILD)
    assert child is not None
    changed = api.put(child)  # someone wrote it after our cache saw it
    assert await c.documents.reconcile(key) == "written"  # a 409 is not an error
    assert api.configmap("ns", CHILD) == changed  # still there
    assert not deleted(c)
    assert c.state.configmap("ns", CHILD) is not None
    # The root is queued again (with backoff), to be judged from a fresh cache.
    assert c.docs.failures(key) == 1 and len(c.docs) == 1
    c.state.upsert(group_kind_of(changed), changed)  # the watch event arrives
    assert await c.documents.reconcile(key) == "unchanged"
    assert api.configmap("ns", CHILD) is None and deleted(c) == 1
    preconditions = [call.body["preconditions"] for call in api.calls if call.method == "DELETE"]
    assert preconditions == [
        {"uid": "cm-old", "resourceVersion": "5"},
        {"uid": "cm-old", "resourceVersion": changed["metadata"]["resourceVersion"]},
    ]


# -- documents edited under our own field manager's name ------------------------------

ROOT_DOC = "aibom-leaderworkerset-l"  # the root document of `controller()`'s world


def repaired(c: Controller) -> float | None:
    labels = {"reason": "edited"}
    return c.metrics.registry.get_sample_value("aibom_annotator_documents_repaired_total", labels)


def borrowed_name_edit(c: Controller, api: RecordingApi) -> Obj:
    """Someone applies other data to the root's document under our field manager's name:
    the server keeps our labels and annotations, and managedFields show nothing but our
    Apply entry. The watch event that follows is all the cache learns (a new
    resourceVersion: its ConfigMaps are metadata only)."""
    mine = api.configmap("ns", ROOT_DOC)
    assert mine is not None
    forged = copy.deepcopy(mine)
    forged["data"] = {"aibom.json": '{"bomFormat": "CycloneDX", "components": []}'}
    stored = api.put(forged)
    c.state.upsert(CONFIGMAP, c.slim(stored))
    return mine


async def test_a_document_rewritten_under_our_field_managers_name_is_restored() -> None:
    """docs/annotator.md: a document is repaired by content, not by who wrote it."""
    c, key, api = recorded()
    assert await c.documents.reconcile(key) == "written"
    mine = borrowed_name_edit(c, api)
    assert await c.documents.reconcile(key) == "written"
    restored = api.configmap("ns", ROOT_DOC)
    assert restored is not None and restored["data"] == mine["data"]
    assert repaired(c) == 1
    # The version our apply returned is known: nothing more to do.
    assert await c.documents.reconcile(key) == "unchanged"


async def test_after_a_restart_a_document_found_current_is_watched_for_edits_too() -> None:
    """A new process (a restart, a failover) has written nothing: the version its first
    reconcile found current is the one it knows."""
    first, key, api = recorded()
    assert await first.documents.reconcile(key) == "written"
    c, key = controller(Recorder())
    write_through(c, api)
    listed = api.configmap("ns", ROOT_DOC)
    assert listed is not None
    c.state.upsert(CONFIGMAP, c.slim(listed))
    assert await c.documents.reconcile(key) == "unchanged"
    mine = borrowed_name_edit(c, api)
    assert await c.documents.reconcile(key) == "written"
    restored = api.configmap("ns", ROOT_DOC)
    assert restored is not None and restored["data"] == mine["data"]


# -- stamp patches -----------------------------------------------------------------


async def test_a_stamp_patch_answered_409_is_judged_again_after_the_settle_delay() -> None:
    c, _, api = recorded()
    now = [0.0]
    c.queues.stamps = WorkQueue("stamps", now=lambda: now[0])
    c.stamp_repair.watched = lambda gk: True  # no informers here
    dep = mk("Deployment", "d", annotations={"aibom.dev/rollup": "uncovered"})
    dep["metadata"]["resourceVersion"] = "9"
    uid = dep["metadata"]["uid"]
    c.state.upsert(group_kind_of(dep), dep)
    newer = copy.deepcopy(dep)
    newer["metadata"]["resourceVersion"] = "10"
    api.serve(newer)  # the object changed since the cache saw it
    assert await c.stamp_repair.repair_stamp(uid) == "conflict"
    [patch] = [call for call in api.calls if call.method == "PATCH"]
    assert patch.content_type == MERGE
    assert patch.path == "/apis/apps/v1/namespaces/ns/deployments/d"
    meta = patch.body["metadata"]
    assert (meta["uid"], meta["resourceVersion"]) == (uid, "9")
    assert meta["annotations"]["aibom.dev/rollup"] == "root"
    labels = {"kind": "Deployment"}
    assert not c.metrics.registry.get_sample_value("aibom_annotator_stamp_repairs_total", labels)
    assert len(c.stamp_repair.ledger) == 0
    # Judged again once the settle delay has passed, from the cache as it is then.
    assert c.stamps.poll() is None
    now[0] = c.settings.stamp_settle - 0.01
    assert c.stamps.poll() is None
    now[0] = c.settings.stamp_settle
    assert c.stamps.poll() == uid
    c.state.upsert(group_kind_of(newer), newer)
    assert await c.stamp_repair.repair_stamp(uid) == "patched"
    assert c.metrics.registry.get_sample_value("aibom_annotator_stamp_repairs_total", labels) == 1


# -- a reconcile reads only the cache ----------------------------------------------


def populated() -> tuple[Controller, RecordingApi]:
    """Two roots with their workloads and Pods, unstamped, and a superseded child document."""
    c, _, api = recorded()
    c.stamp_repair.watched = lambda gk: True
    for obj in chain("Deployment/web", "ReplicaSet/web-1", "Pod/web-1-a"):
        obj["metadata"]["resourceVersion"] = "3"
        c.state.upsert(group_kind_of(obj), obj)
    for obj in c.state.graph.objects():
        api.serve(obj)
    return c, api


async def reconcile_everything(c: Controller) -> None:
    for root in c.state.roots(c.state.opted_in_namespaces()):
        await c.documents.reconcile(root)
    for ns in c.state.doc_namespaces():
        await c.documents.sweep(SweepKey(ns))
    for key in list(c.state.graph.keys()):
        await c.stamp_repair.repair_stamp(key)


async def test_a_reconcile_issues_no_list_and_no_get() -> None:
    c, api = populated()
    await reconcile_everything(c)
    kinds = ["apply" if call.content_type == APPLY else call.method.lower() for call in api.calls]
    assert api.reads() == []
    assert set(kinds) == {"apply", "delete", "patch"}, kinds
    assert kinds.count("apply") == 2 and kinds.count("delete") == 1
    for call in api.calls:
        if call.method == "PATCH" and call.content_type == MERGE:
            assert set(call.body["metadata"]) == {"annotations", "uid", "resourceVersion"}
        else:
            assert call.path.startswith(f"{DOCS_PATH}/aibom-"), call


async def test_signing_adds_one_list_of_the_keys_configmap_per_new_key() -> None:
    # The one exception to "no read": publishing a new signing key (docs/signing.md).
    c, api = populated()
    c.signer.signing = Signing(jsf.SigningKey.of(jsf.generate(), kid="k1"), ("sys", "keys"))
    await reconcile_everything(c)
    assert [(call.method, call.path) for call in api.reads()] == [
        ("GET", CONFIGMAPS.format(ns="sys"))
    ]
    assert sum(call.content_type == APPLY for call in api.calls) == 2


def test_the_annotator_role_grants_get_only_on_the_guard() -> None:
    # docs/annotator.md:345-346: `list` and `watch`; it never GETs a single object
    # but the guard's binding and policy (whether the guard is in force).
    role = only(DOCS, "ClusterRole", ANNOTATOR)
    for rule in role["rules"]:
        if {"get", "*"} & set(rule["verbs"]):
            assert rule.get("resourceNames") == ["aibom-rollup-provenance"], rule
            assert rule["resources"] == [
                "validatingadmissionpolicybindings",
                "validatingadmissionpolicies",
            ], rule
    granted = rules_by_resource(role)
    for res in {*STAMPED, ("", "namespaces"), ("", "configmaps")}:
        assert not {"get", "*"} & granted.get(res, set()), res


# -- --workers bounds the writes in flight ---------------------------------------------


class GatedWriter(Recorder):
    """Each document apply waits until the test lets it through; counts those in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[asyncio.Future[None]] = []
        self.in_flight = 0
        self.peak = 0

    def holding(self, n: int) -> bool:
        """At least `n` applies wait on the gate."""
        return len(self.waiting) >= n

    async def apply_configmap(self, body: dict[str, Any]) -> Obj:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        gate = asyncio.get_running_loop().create_future()
        self.waiting.append(gate)
        try:
            await gate
        finally:
            self.in_flight -= 1
        return await super().apply_configmap(body)


async def test_workers_bound_the_document_writes_in_flight() -> None:
    roots = 20
    settings = Settings(
        registry=REG, tool_version="t", workers=3, stamp_mode="off", trust_owner_references=True
    )
    c = Controller(FakeKube(), settings, election=None)  # type: ignore[arg-type]
    writer = GatedWriter()
    c.writer = writer  # type: ignore[assignment]
    labels = {"aibom.dev/enabled": "true"}
    c.state.upsert(
        NAMESPACE,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "labels": labels}},
    )
    for i in range(roots):
        dep = mk("Deployment", f"d{i}")
        c.state.upsert(group_kind_of(dep), dep)
    c.state.bulk = False
    c.synced.set()
    c._leadership(True)  # workers start, and a full resync queues every root
    try:
        for released in range(roots):
            # As many writes as workers are in flight (fewer at the end), each
            # waiting on the server; then one completes.
            expected = min(settings.workers, roots - released)
            await until(f"{expected} writes in flight", functools.partial(writer.holding, expected))
            writer.waiting.pop(0).set_result(None)
        await until("every document written", lambda: len(writer.calls) == roots)
        assert writer.peak == settings.workers
        assert sorted(name for _, name in writer.calls) == sorted(
            f"aibom-deployment-d{i}" for i in range(roots)
        )
    finally:
        await c.stop(grace=1.0)
