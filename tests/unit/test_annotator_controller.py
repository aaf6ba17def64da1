"""The reconcile's write order, recorded: a child's document goes only after the root's."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from aibom_core.document import DocLabels
from aibom_core.kinds import CONFIGMAP, NAMESPACE, default_registry, group_kind_of
from aibom_core.objects import Obj, ref_of
from annotator.configmap import configmap_body, fit
from annotator.controller import Controller
from annotator.keys import RootKey
from annotator.ledger import RepairLedger
from annotator.plan import DocRef
from annotator.settings import Settings
from annotator.writer import WriteError
from tests.unit.kobj import chain

REG = default_registry()


class FakeKube:
    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.discovery = None


class Recorder:
    def __init__(self, *, fail_apply: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_apply = fail_apply

    async def apply_configmap(self, body: dict[str, Any]) -> Obj:
        name = body["metadata"]["name"]
        if self.fail_apply:
            raise WriteError(f"apply {name}", 500, "etcd is sad")
        self.calls.append(("apply", name))
        stored = copy.deepcopy(body)
        stored["metadata"].update(uid=f"cm-{name}", resourceVersion="100")
        return stored

    async def delete_configmap(self, doc: DocRef) -> bool:
        self.calls.append(("delete", doc.name))
        return True


def controller(writer: Recorder) -> tuple[Controller, RootKey]:
    settings = Settings(registry=REG, tool_version="t", trust_owner_references=True)
    c = Controller(FakeKube(), settings, election=None)  # type: ignore[arg-type]
    c.writer = writer  # type: ignore[assignment]
    st = c.state
    st.upsert(
        NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "ns", "labels": {"aibom.dev/enabled": "true"}},
        },
    )
    lws, sts = chain("LeaderWorkerSet/l", "StatefulSet/l")
    for o in (lws, sts):
        st.upsert(group_kind_of(o), o)
    prior = configmap_body(
        ref_of(sts),
        api_version="apps/v1",
        name="aibom-statefulset-l",
        payload=fit(b"{}"),
        input_hash="old",
        generator="g",
        labels=DocLabels(),
    )
    prior["metadata"].update(uid="cm-old", resourceVersion="5")
    st.upsert(CONFIGMAP, prior)
    st.bulk = False
    m = lws["metadata"]
    return c, RootKey("ns", m["uid"], "leaderworkerset.x-k8s.io", "LeaderWorkerSet", "l")


async def test_root_document_is_written_before_the_child_document_is_deleted() -> None:
    rec = Recorder()
    c, key = controller(rec)
    assert await c.documents.reconcile(key) == "written"
    assert rec.calls == [("apply", "aibom-leaderworkerset-l"), ("delete", "aibom-statefulset-l")]
    # The cache now holds the written document (and not the deleted one): a
    # second reconcile writes nothing and deletes nothing.
    rec.calls.clear()
    assert await c.documents.reconcile(key) == "unchanged"
    assert rec.calls == []


async def test_failed_write_deletes_nothing() -> None:
    rec = Recorder(fail_apply=True)
    c, key = controller(rec)
    with pytest.raises(WriteError):
        await c.documents.reconcile(key)
    assert rec.calls == []
    assert c.state.configmap("ns", "aibom-statefulset-l") is not None


async def test_outcomes_are_counted_for_the_root_and_what_it_absorbed() -> None:
    c, key = controller(Recorder())
    await c.documents.reconcile(key)
    value = c.metrics.registry.get_sample_value
    labels = {"kind": "LeaderWorkerSet", "outcome": "matched"}
    assert value("aibom_workload_reconcile_outcomes_total", labels) == 1
    labels = {"kind": "StatefulSet", "outcome": "rolled_up"}
    assert value("aibom_workload_reconcile_outcomes_total", labels) == 1
    assert value("aibom_annotator_documents_deleted_total", {"reason": "rolled_up"}) == 1


def test_ledger_leaves_contested_objects_alone_for_a_window() -> None:
    now = [0.0]
    ledger = RepairLedger(limit=2, window=600, now=lambda: now[0])
    assert not ledger.contested("rs")
    ledger.record("rs")
    now[0] = 5
    ledger.record("rs")
    assert ledger.contested("rs")
    now[0] = 601  # the first repair left the window
    assert not ledger.contested("rs")
    ledger.record("pod")
    now[0] = 2000
    ledger.prune()
    assert len(ledger) == 0


def test_ledger_counts_repairs_to_the_same_stamp_only() -> None:
    """A repair undone is written again with the same stamp; a new stamp (the object's
    root changed) is news, whatever came before it in the window."""
    ledger = RepairLedger(limit=2, window=600, now=lambda: 0.0)
    for stamp in ("root a", "root b", "root c"):
        assert not ledger.contested("pod", stamp)
        ledger.record("pod", stamp)
    assert not ledger.contested("pod", "root d")
    ledger.record("pod", "root c")
    assert ledger.contested("pod", "root c")
