"""The annotator under faults, against a real control plane of its own (issue 13).

This module starts its own control plane (not the session one): its tests
restart kube-apiserver and compact etcd, and the API server writes an audit
log of every ConfigMap and Lease write, which is how the failover test proves
who wrote what, when. Faults are injected by the real API server (restart,
compaction, expired continue tokens) or by `tests.integration.apiproxy`, a
loopback proxy in front of the real API server (429 with Retry-After, a watch
gap, a silent stream). After each fault the documents are compared, byte for
byte, with what a fresh annotator writes from a cold start on the same state.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from annotator.configmap import unpack
from tests.controlplane import ClientIdentity, ControlPlane, bind_rules
from tests.integration.apiproxy import ApiProxy
from tests.integration.test_annotator import (
    LABEL_KEY,
    MANAGED,
    Annotator,
    apply,
    dcd,
    docs,
    document,
    grant_lease,
    lws,
    owned,
    owner_ref,
    shipped_rules,
    statefulset,
    wait_for,
)

pytestmark = pytest.mark.integration

DCD_PATH = "/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamocomponentdeployments"
DCD_LIST = "/apis/nvidia.com/v1beta1/dynamocomponentdeployments"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create", "update", "patch", "delete"],
            "resources": [
                {"group": "", "resources": ["configmaps"]},
                {"group": "coordination.k8s.io", "resources": ["leases"]},
            ],
        },
        {"level": "None"},
    ],
}


@pytest.fixture(scope="module")
def fcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    work = tmp_path_factory.mktemp("faults-cp")
    policy = work / "audit-policy.json"
    policy.write_text(json.dumps(AUDIT_POLICY))
    cp = ControlPlane(
        extra_apiserver_args=(
            f"--audit-policy-file={policy}",
            f"--audit-log-path={work / 'audit.log'}",
            "--audit-log-mode=blocking",
        )
    )
    cp.start()
    try:
        cp.install_crds()
        yield cp
    finally:
        cp.stop()


def audit_log(cp: ControlPlane) -> list[dict[str, Any]]:
    path = next(
        Path(a.split("=", 1)[1])
        for a in cp.extra_apiserver_args
        if a.startswith("--audit-log-path=")
    )
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


@pytest.fixture
def fns(fcp: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"faults-{abs(hash(request.node.name)) % 10**8}-{int(time.time() * 1000) % 10**6}"
    fcp.kubectl("create", "namespace", name)
    fcp.kubectl("label", "namespace", name, f"{LABEL_KEY}={name}")
    wait_for(
        "the default ServiceAccount",
        lambda: fcp.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").ok,
    )
    yield name
    fcp.request("DELETE", f"/api/v1/namespaces/{name}")


def identity(cp: ControlPlane, ns: str, user: str) -> ClientIdentity:
    ident = cp.issue_identity(user)
    bind_rules(cp.kubectl, user, f"{user}-annotator", shipped_rules())
    grant_lease(cp.kubectl, ns, user, "aibom-test")
    return ident


def compact_etcd(cp: ControlPlane) -> int:
    """Compact etcd at its current revision (its JSON gateway): no older history remains."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            cp.etcd_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            result: dict[str, Any] = json.loads(resp.read())
            return result

    head = post("/v3/kv/range", {"key": base64.b64encode(b"/registry/").decode()})
    revision = int(head["header"]["revision"])
    post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def doc_bytes(cp: ControlPlane, ns: str) -> dict[str, bytes]:
    out = {}
    for name, cm in docs(cp, ns).items():
        raw = unpack(cm)
        assert raw is not None, name
        out[name] = raw
    return out


def assert_cold_start_agrees(
    cp: ControlPlane, ns: str, ident: ClientIdentity, tmp_path: Path, converged: dict[str, bytes]
) -> None:
    """Delete every document; a fresh annotator (no faults) must write the same bytes."""
    cp.kubectl("delete", "configmaps", "-n", ns, "-l", MANAGED, "--wait=true")
    assert docs(cp, ns) == {}
    cold = Annotator(ident.kubeconfig, tmp_path, ns, identity="cold", lease="aibom-test").start()
    try:
        cold.wait_ready().wait_leading()
        wait_for(
            "the cold start's documents",
            lambda: set(docs(cp, ns)) == set(converged),
            90,
        )
        fresh = doc_bytes(cp, ns)
        for name, data in converged.items():
            assert fresh[name] == data, f"{name} differs from a cold start"
    finally:
        assert cold.stop() == 0, cold.tail()


def names(cp: ControlPlane, ns: str) -> set[str]:
    return set(docs(cp, ns))


def want(*roots: str) -> set[str]:
    return {f"aibom-dynamocomponentdeployment-{r}" for r in roots}


def test_deletions_during_a_watch_gap_expired_resource_version_and_continue_token(
    fcp: ControlPlane, fns: str, tmp_path: Path
) -> None:
    ns = fns
    ident = identity(fcp, ns, "gap-annotator")
    for i in range(6):
        apply(fcp.kubectl, dcd(ns, f"c{i}"))
    with ApiProxy(fcp, ident) as proxy:
        a = Annotator(
            proxy.kubeconfig(tmp_path / "proxy.kubeconfig"),
            tmp_path,
            ns,
            identity="gap",
            args=("--page-size=2", "--rediscovery-interval=2"),
        ).start()
        try:
            a.wait_ready(90).wait_leading()
            wait_for(
                "six documents", lambda: names(fcp, ns) == want(*(f"c{i}" for i in range(6))), 60
            )
            # The gap: every stream cut, every request refused.
            proxy.cut()
            fcp.kubectl("delete", "dynamocomponentdeployment", "-n", ns, "c5", "--wait=true")
            apply(fcp.kubectl, dcd(ns, "gap-new"))
            # The watch cache starts over and etcd forgets the history: the
            # resourceVersion the annotator resumes from has expired (410).
            fcp.restart_apiserver()
            compact_etcd(fcp)
            expired = a.metric("aibom_annotator_watch_restarts_total", {"reason": "expired"})
            # The relist that follows is paged (2 per page); hold its second page.
            proxy.hold_continue(DCD_LIST)
            proxy.restore()
            assert proxy.held.wait(90), "the relist never asked for a second page"
            # Meanwhile c0 and c1 (the first page: the aborted pass saw them) go,
            # and the continue token expires.
            for name in ("c0", "c1", "c3"):
                fcp.kubectl("delete", "dynamocomponentdeployment", "-n", ns, name, "--wait=true")
            fcp.restart_apiserver()
            compact_etcd(fcp)
            proxy.release()
            final = want("c2", "c4", "gap-new")
            wait_for("the deleted roots' documents gone", lambda: names(fcp, ns) == final, 90)
            assert a.metric("aibom_annotator_watch_restarts_total", {"reason": "expired"}) > expired
            assert (
                a.metric("aibom_annotator_watch_restarts_total", {"reason": "continue_expired"})
                >= 1
            )
            time.sleep(3)  # nothing comes back afterwards (a ghost would be re-written)
            assert names(fcp, ns) == final
            converged = doc_bytes(fcp, ns)
        finally:
            assert a.stop() == 0, a.tail()
    assert_cold_start_agrees(fcp, ns, ident, tmp_path, converged)


def test_throttling_a_silent_stream_and_an_api_server_restart_converge(
    fcp: ControlPlane, fns: str, tmp_path: Path
) -> None:
    ns = fns
    ident = identity(fcp, ns, "throttled-annotator")
    for i in range(4):
        apply(fcp.kubectl, dcd(ns, f"c{i}"))
    with ApiProxy(fcp, ident) as proxy:
        a = Annotator(
            proxy.kubeconfig(tmp_path / "proxy.kubeconfig"),
            tmp_path,
            ns,
            identity="throttled",
            args=("--watch-idle-timeout=3", "--rediscovery-interval=2"),
        ).start()
        try:
            a.wait_ready(90).wait_leading()
            wait_for("four documents", lambda: names(fcp, ns) == want("c0", "c1", "c2", "c3"), 60)
            lists_before = proxy.lists_ok[DCD_LIST]
            # A sustained run of 429s (Retry-After: 1) for 6 s, while the cluster changes.
            proxy.throttle(1)
            began = time.monotonic()
            apply(fcp.kubectl, dcd(ns, "during-429"))
            fcp.kubectl("delete", "dynamocomponentdeployment", "-n", ns, "c0", "--wait=true")
            wait_for("429s answered", lambda: proxy.counts["429"] >= 5, 30)
            time.sleep(max(0.0, 6 - (time.monotonic() - began)))
            proxy.throttle(None)
            wait_for(
                "convergence after the 429s",
                lambda: names(fcp, ns) == want("c1", "c2", "c3", "during-429"),
                60,
            )
            assert proxy.lists_ok[DCD_LIST] == lists_before, "a 429 caused a relist"
            assert a.metric("aibom_annotator_watch_restarts_total", {"reason": "throttled"}) >= 1
            # A stream that goes silent without closing: the idle timeout restarts it.
            proxy.freeze()
            apply(fcp.kubectl, dcd(ns, "after-freeze"))
            wait_for(
                "a document through a restarted watch",
                lambda: "aibom-dynamocomponentdeployment-after-freeze" in names(fcp, ns),
                60,
            )
            assert a.metric("aibom_annotator_watch_restarts_total", {"reason": "idle"}) >= 1
            # kube-apiserver restarted mid-watch.
            fcp.restart_apiserver()
            apply(fcp.kubectl, dcd(ns, "after-restart"))
            fcp.kubectl("delete", "dynamocomponentdeployment", "-n", ns, "c1", "--wait=true")
            final = want("c2", "c3", "during-429", "after-freeze", "after-restart")
            wait_for("convergence after the restart", lambda: names(fcp, ns) == final, 90)
            converged = doc_bytes(fcp, ns)
        finally:
            assert a.stop() == 0, a.tail()
    assert_cold_start_agrees(fcp, ns, ident, tmp_path, converged)


def test_sigkilled_leader_mid_reconcile_no_overlap_of_writers(
    fcp: ControlPlane, fns: str, tmp_path: Path
) -> None:
    ns = fns
    n = 16
    lead_id = identity(fcp, ns, "writer-leader")
    standby_id = identity(fcp, ns, "writer-standby")
    for i in range(n):
        apply(fcp.kubectl, statefulset(ns, f"s{i}", replicas=0))
    leader = Annotator(
        lead_id.kubeconfig,
        tmp_path,
        ns,
        identity="leader",
        args=("--write-qps=3", "--write-burst=1"),
    ).start()
    standby: Annotator | None = None
    try:
        leader.wait_ready(90).wait_leading()
        standby = Annotator(standby_id.kubeconfig, tmp_path, ns, identity="standby").start()
        standby.wait_ready(90)
        assert not standby.leading()
        wait_for(f"{n} StatefulSet documents", lambda: len(docs(fcp, ns)) == n, 90)
        for i in range(n):
            group = apply(fcp.kubectl, lws(ns, f"l{i}"))
            fcp.kubectl(
                "patch",
                "-n",
                ns,
                f"statefulset/s{i}",
                "--type=merge",
                "-p",
                json.dumps({"metadata": {"ownerReferences": [owner_ref(group)]}}),
            )
        wait_for(
            "the leader in the middle of it",
            lambda: sum(1 for k in docs(fcp, ns) if k.startswith("aibom-leaderworkerset-")) >= 2,
            60,
            every=0.05,
        )
        leader.kill()  # SIGKILL, mid-reconcile
        killed = time.monotonic()
        standby.wait_leading(timeout=30)
        took_over = time.monotonic() - killed
        expected = {f"aibom-leaderworkerset-l{i}" for i in range(n)}
        wait_for(
            "every LWS document, no StatefulSet one", lambda: set(docs(fcp, ns)) == expected, 90
        )
    finally:
        if leader.alive():
            leader.kill()
        if standby is not None:
            assert standby.stop() == 0, standby.tail()
    print(f"standby leading {took_over:.1f} s after SIGKILL of the leader")
    # LeaseDuration + RetryPeriod, plus 1 s for this test's polling of /metrics.
    assert took_over <= 15 + 2 + 1, f"took over after {took_over:.1f} s (> lease + retry)"
    # No document lost or duplicated: one per LWS, each listing its StatefulSet.
    final = docs(fcp, ns)
    for i in range(n):
        assert owned(document(final[f"aibom-leaderworkerset-l{i}"])) == [f"StatefulSet/s{i}"]
    # The API server's own record: who wrote which ConfigMap and Lease, in its order.
    users = {"writer-leader", "writer-standby"}
    events = [
        e
        for e in audit_log(fcp)
        if e.get("stage") == "ResponseComplete"
        and e["user"]["username"] in users
        and e["objectRef"].get("namespace") == ns
        and 200 <= int(e.get("responseStatus", {}).get("code", 0)) < 300
    ]
    events.sort(key=lambda e: e["stageTimestamp"])
    writes = [e for e in events if e["objectRef"]["resource"] == "configmaps"]
    lease = [e for e in events if e["objectRef"]["resource"] == "leases"]
    assert writes and lease
    order = [e["user"]["username"] for e in writes]
    switch = order.index("writer-standby")
    assert set(order[:switch]) == {"writer-leader"} and set(order[switch:]) == {"writer-standby"}, (
        f"writers interleave: {order}"
    )
    last_old = writes[switch - 1]["stageTimestamp"]
    first_new = writes[switch]["requestReceivedTimestamp"]
    # The standby's first successful Lease write by itself (its takeover)...
    takeover = next(e for e in lease if e["user"]["username"] == "writer-standby")
    # ...came after the old leader's last write completed, and it wrote only after it.
    assert last_old < takeover["stageTimestamp"] <= first_new, (last_old, takeover, first_new)
    # On the API server's clock: from the dead leader's last renewal to the takeover,
    # at most LeaseDuration + RetryPeriod (the standby sees a renewal up to one
    # retry period late and then waits the lease out on its own clock).
    last_renewal = [e for e in lease if e["user"]["username"] == "writer-leader"][-1]
    gap = _seconds(takeover["stageTimestamp"]) - _seconds(last_renewal["stageTimestamp"])
    print(f"Lease: last renewal of the dead leader to the standby's takeover: {gap:.2f} s")
    assert gap <= 15 + 2 + 0.5, gap
    # Holder history: the Lease changed hands once (leaseTransitions).
    obj = fcp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/aibom-test")
    spec = obj.json()["spec"]
    assert spec["holderIdentity"] in ("", "standby") and spec["leaseTransitions"] >= 1


def _seconds(stamp: str) -> float:
    """An audit RFC 3339 timestamp (microseconds, Z) as epoch seconds."""
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
