"""A new annotator over documents that already exist: failover and rollout.

The annotator runs as a real process against the real control plane (the
fixtures of tests/integration/test_annotator.py). Writes are counted with
the annotator's own metrics, and checked against the ConfigMaps'
resourceVersions on the API server: a restart must rewrite no document
whose input did not change, and must rewrite the one whose input did,
even when it changed while no annotator was running.
"""

from __future__ import annotations

import pytest

from tests.controlplane import ControlPlane, Kubectl
from tests.integration.kubelet import set_digest
from tests.integration.support import (
    Annotator,
    StartAnnotator,
    apply,
    dcd,
    digest,
    docs,
    pod,
    wait_doc,
    wait_for,
)

pytestmark = pytest.mark.integration

# The fixtures `ns` and `start` (conftest.py): an opted-in namespace with a Lease
# grant, and annotators started for it as the shipped ClusterRole's identity.

IMAGE = "registry.example/dynamo/worker:1"
ROOTS = 6
SOURCES = "aibom.dev/sources-hash"


def converged(a: Annotator) -> bool:
    """The annotator's first full resync had every root reconciled (its own metric)."""
    return a.metric("aibom_annotator_resync_completed_timestamp_seconds") > 0


def versions(cp: ControlPlane, ns: str) -> dict[str, str]:
    return {name: cm["metadata"]["resourceVersion"] for name, cm in docs(cp, ns).items()}


def test_a_restart_rewrites_only_the_documents_whose_input_changed(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator
) -> None:
    cp = control_plane
    # Roots no controller touches (a DynamoComponentDeployment has none here), with
    # two Pods each whose digests a "kubelet" reports: after that nothing changes. The
    # objects are not stamped (no webhook here) and stamp repairs are off: a repair
    # after a document was written would give the objects new resourceVersions, and
    # the next annotator would compute those roots' facts (and still write nothing).
    off = "--stamp-repair=off"
    first = start(off, ident="first")
    for i in range(ROOTS):
        root = apply(kubectl, dcd(ns, f"c{i}", image=IMAGE))
        for j in range(2):
            apply(kubectl, pod(ns, f"c{i}-{j}", root, IMAGE))
            set_digest(cp, ns, f"c{i}-{j}", IMAGE, digest(f"v1-c{i}-{j}"))
    for i in range(ROOTS):
        wait_doc(
            cp,
            ns,
            f"aibom-dynamocomponentdeployment-c{i}",
            containing=tuple(digest(f"v1-c{i}-{j}")[7:] for j in range(2)),
        )
    before = versions(cp, ns)
    assert len(before) == ROOTS
    assert all(SOURCES in cm["metadata"]["annotations"] for cm in docs(cp, ns).values())
    assert first.stop() == 0

    # A failover: a new process over the same, unchanged cluster writes nothing, and
    # knows every document current from its sources hash alone (no facts computed).
    second = start(off, ident="second")
    wait_for("the second annotator's resync to converge", lambda: converged(second), 60)
    counts = {
        name: second.metric(f"aibom_annotator_documents_{name}_total")
        for name in ("written", "unchanged", "current_by_sources")
    }
    assert counts == {"written": 0, "unchanged": ROOTS, "current_by_sources": ROOTS}
    assert versions(cp, ns) == before
    assert second.stop() == 0

    # One Pod's image changes while no annotator runs: the next one rewrites that
    # document, and only that one.
    set_digest(cp, ns, "c2-0", IMAGE, digest("v2-c2-0"))
    third = start(off, ident="third")
    wait_for("the third annotator's resync to converge", lambda: converged(third), 60)
    wait_doc(cp, ns, "aibom-dynamocomponentdeployment-c2", containing=(digest("v2-c2-0")[7:],))
    assert third.metric("aibom_annotator_documents_written_total") == 1, third.tail()
    # The five others from their sources hash (and c2 too, once rewritten, if an
    # event makes it look again).
    assert third.metric("aibom_annotator_documents_current_by_sources_total") >= ROOTS - 1
    after = versions(cp, ns)
    assert {n for n in after if after[n] != before[n]} == {"aibom-dynamocomponentdeployment-c2"}
