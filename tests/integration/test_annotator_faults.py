"""The annotator under faults, against a real control plane of its own.

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
import contextlib
import http.client
import json
import os
import ssl
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aibom_core.document import unpack
from tests.controlplane import REPO_ROOT, ClientIdentity, ControlPlane, bind_rules
from tests.integration.apiproxy import ApiProxy
from tests.integration.support import (
    LABEL_KEY,
    MANAGED,
    RBAC,
    apply,
    dcd,
    deployment,
    docs,
    document,
    grant_lease,
    lws,
    merge_patch,
    owned,
    owner_ref,
    shipped_rules,
    statefulset,
    token_kubeconfig,
    wait_for,
)
from tests.integration.support import Annotator as _Annotator

pytestmark = pytest.mark.integration


@dataclass
class Annotator(_Annotator):
    """These tests are about faults, not provenance: references taken as written."""

    trust_references: bool = True


DCD_PATH = "/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamocomponentdeployments"
DCD_LIST = "/apis/nvidia.com/v1beta1/dynamocomponentdeployments"
DCD_LABELS = {"group": "nvidia.com", "kind": "DynamoComponentDeployment"}
THROTTLE_SECONDS = float(os.environ.get("AIBOM_THROTTLE_SECONDS", "0"))
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


def audited(cp: ControlPlane, ns: str, users: tuple[str, ...]) -> list[dict[str, Any]]:
    """The API server's record of the successful requests of `users` in `ns`, in its order."""
    events = [
        e
        for e in audit_log(cp)
        if e.get("stage") == "ResponseComplete"
        and e["user"]["username"] in users
        and e["objectRef"].get("namespace") == ns
        and 200 <= int(e.get("responseStatus", {}).get("code", 0)) < 300
    ]
    events.sort(key=lambda e: e["stageTimestamp"])
    return events


@pytest.fixture
def ns(fcp: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on this module's control plane (this module's own `ns`:
    tests/integration/conftest.py's is on the session's)."""
    name = f"faults-{abs(hash(request.node.name)) % 10**8}-{int(time.time() * 1000) % 10**6}"
    fcp.kubectl("create", "namespace", name)
    fcp.kubectl("label", "namespace", name, f"{LABEL_KEY}={name}")
    wait_for(
        "the default ServiceAccount",
        lambda: fcp.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").ok,
        # After the previous test restarted kube-apiserver and compacted etcd, the
        # controller-manager's serviceaccount controller needs a relist first.
        120,
    )
    yield name
    fcp.request("DELETE", f"/api/v1/namespaces/{name}")


def identity(cp: ControlPlane, ns: str, user: str) -> ClientIdentity:
    ident = cp.issue_identity(user)
    bind_rules(cp.kubectl, user, f"{user}-annotator", shipped_rules())
    grant_lease(cp.kubectl, ns, user, "aibom-test")
    return ident


def through(proxy: ApiProxy, tmp_path: Path, ns: str, name: str, *args: str) -> Annotator:
    """An annotator (not started) whose every request goes through `proxy`."""
    kubeconfig = proxy.kubeconfig(tmp_path / "proxy.kubeconfig")
    return Annotator(kubeconfig, tmp_path, ns, identity=name, args=args)


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


@contextlib.contextmanager
def through_faults(
    fcp: ControlPlane, ns: str, tmp_path: Path, name: str, roots: int, *args: str
) -> Iterator[tuple[ApiProxy, Annotator]]:
    """Roots c0..c<roots-1>, then an annotator (`name`, with `args`) whose every
    request goes through an ApiProxy, ready, leading and with their documents.

    The block injects its faults and waits until the annotator has converged;
    the documents are then what a fresh annotator with no faults must write,
    byte for byte, from a cold start (checked after the block).
    """
    ident = identity(fcp, ns, f"{name}-annotator")
    for i in range(roots):
        apply(fcp.kubectl, dcd(ns, f"c{i}"))
    with ApiProxy(fcp, ident) as proxy:
        a = through(proxy, tmp_path, ns, name, *args).start()
        try:
            a.wait_ready(90).wait_leading()
            every = want(*(f"c{i}" for i in range(roots)))
            wait_for(f"{roots} documents", lambda: names(fcp, ns) == every, 60)
            yield proxy, a
            converged = doc_bytes(fcp, ns)
        finally:
            assert a.stop() == 0, a.tail()
    assert_cold_start_agrees(fcp, ns, ident, tmp_path, converged)


def live_dcds(cp: ControlPlane) -> int:
    """DynamoComponentDeployments in the whole cluster (the annotator caches them all)."""
    resp = cp.request("GET", DCD_LIST)
    # -1 (never a count) while a restarted API server cannot answer yet.
    return len(resp.json()["items"]) if resp.ok else -1


def names(cp: ControlPlane, ns: str) -> set[str]:
    return set(docs(cp, ns))


def want(*roots: str) -> set[str]:
    return {f"aibom-dynamocomponentdeployment-{r}" for r in roots}


def test_deletions_during_a_watch_gap_expired_resource_version_and_continue_token(
    fcp: ControlPlane, ns: str, tmp_path: Path
) -> None:
    with through_faults(
        fcp, ns, tmp_path, "gap", 6, "--page-size=2", "--rediscovery-interval=2"
    ) as (proxy, a):
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
        # The documents of deleted roots go with them anyway (ownerReference:
        # the garbage collector); the cache is where a ghost would live.
        wait_for(
            "exactly the live roots in the annotator's cache",
            lambda: a.metric("aibom_annotator_cached_objects", DCD_LABELS) == live_dcds(fcp),
            60,
        )
        wait_for("the deleted roots' documents gone", lambda: names(fcp, ns) == final, 90)
        assert a.metric("aibom_annotator_watch_restarts_total", {"reason": "expired"}) > expired
        assert a.metric("aibom_annotator_watch_restarts_total", {"reason": "continue_expired"}) >= 1
        # Nothing comes back afterwards. The witness: a root made now gets its
        # document, and by then every earlier change has been judged too.
        apply(fcp.kubectl, dcd(ns, "after-gap"))
        final = want("c2", "c4", "gap-new", "after-gap")
        wait_for("the document of a root made after the gap", lambda: names(fcp, ns) >= final)
        assert names(fcp, ns) == final
        # (The gauge follows the cache at each housekeeping pass.)
        wait_for(
            "exactly the live roots in the annotator's cache, the new one too",
            lambda: a.metric("aibom_annotator_cached_objects", DCD_LABELS) == live_dcds(fcp),
            60,
        )


def test_throttling_a_silent_stream_and_an_api_server_restart_converge(
    fcp: ControlPlane, ns: str, tmp_path: Path
) -> None:
    with through_faults(
        fcp, ns, tmp_path, "throttled", 4, "--watch-idle-timeout=3", "--rediscovery-interval=2"
    ) as (proxy, a):
        lists_before = proxy.lists_ok[DCD_LIST]
        # A sustained run of 429s (Retry-After: 1) while the cluster changes.
        proxy.throttle(1)
        began = time.monotonic()
        apply(fcp.kubectl, dcd(ns, "during-429"))
        fcp.kubectl("delete", "dynamocomponentdeployment", "-n", ns, "c0", "--wait=true")
        # Held until the annotator has lived through it: its watch restarted
        # for the 429s and its client retried after them; with
        # AIBOM_THROTTLE_SECONDS=120 (BENCHMARKS.md) also for at least that long.
        wait_for(
            "the annotator to be throttled",
            lambda: (
                proxy.counts["429"] >= 5
                and a.metric("aibom_annotator_api_throttled_retries_total") >= 3
                and a.metric("aibom_annotator_watch_restarts_total", {"reason": "throttled"}) >= 1
                and time.monotonic() - began >= THROTTLE_SECONDS
            ),
            60 + THROTTLE_SECONDS,
        )
        proxy.throttle(None)
        ended = time.monotonic()
        wait_for(
            "convergence after the 429s",
            lambda: names(fcp, ns) == want("c1", "c2", "c3", "during-429"),
            60,
            every=0.05,
        )
        print(
            f"429s for {ended - began:.1f} s: {proxy.counts['429']} answered; converged "
            f"{time.monotonic() - ended:.2f} s after; lists of the kind during it: "
            f"{proxy.lists_ok[DCD_LIST] - lists_before}; client retries: "
            f"{a.metric('aibom_annotator_api_throttled_retries_total'):.0f}"
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


def test_sigkilled_leader_mid_reconcile_no_overlap_of_writers(
    fcp: ControlPlane, ns: str, tmp_path: Path
) -> None:
    n = 16
    users = ("writer-leader", "writer-standby")
    lead_id, standby_id = [identity(fcp, ns, user) for user in users]
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
            merge_patch(
                fcp.kubectl,
                ns,
                f"statefulset/s{i}",
                {"metadata": {"ownerReferences": [owner_ref(group)]}},
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
    events = audited(fcp, ns, users)
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
    # retry period late, waits the lease out on its own clock and looks again the
    # moment it runs out, not at its next round), plus 0.5 s for its read and write.
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


EXEC_PLUGIN = r"""
import datetime, json, os, subprocess, sys, time
state = os.environ["PLUGIN_STATE"]
n = len(open(state).read().splitlines()) + 1 if os.path.exists(state) else 1
if n > 1:
    open(state + ".running", "w").close()
    time.sleep(float(os.environ["PLUGIN_DELAY"]))  # a slow plugin must not stall the annotator
kubectl = [os.environ["KUBECTL"], "--kubeconfig=" + os.environ["ADMIN_KUBECONFIG"]]
ns, sa = os.environ["SA_NAMESPACE"], os.environ["SA_NAME"]
secret = f"{sa}-tok-{n}"
subprocess.run(kubectl + ["create", "secret", "generic", secret, "-n", ns], check=True,
               capture_output=True)
token = subprocess.run(
    kubectl + ["create", "token", sa, "-n", ns, "--duration=10m",
               "--bound-object-kind=Secret", f"--bound-object-name={secret}"],
    check=True, capture_output=True, text=True).stdout.strip()
# Reported to expire 5 min + ROTATE s from now: the kubernetes library refreshes
# 5 min before expiry, so the annotator asks again after ROTATE s.
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
    seconds=300 + float(os.environ["ROTATE"]))
with open(state, "a") as f:
    f.write(secret + "\n")
if os.path.exists(state + ".running"):
    os.remove(state + ".running")
json.dump({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
           "status": {"token": token,
                      "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}, sys.stdout)
"""


def test_exec_plugin_tokens_rotate_and_the_old_ones_are_revoked(
    fcp: ControlPlane, ns: str, tmp_path: Path
) -> None:
    sa = "exec-annotator"
    fcp.kubectl("create", "serviceaccount", sa, "-n", ns)
    user = f"system:serviceaccount:{ns}:{sa}"
    bind_rules(fcp.kubectl, user, f"{ns}-exec-annotator", shipped_rules())
    grant_lease(fcp.kubectl, ns, user, "aibom-test")
    plugin = tmp_path / "plugin.py"
    plugin.write_text(EXEC_PLUGIN)
    state = tmp_path / "issued.txt"
    assert fcp.bin_dir is not None
    env = {
        "PLUGIN_STATE": str(state),
        "PLUGIN_DELAY": "3",
        "ROTATE": "8",
        "KUBECTL": str(fcp.bin_dir / "kubectl"),
        "ADMIN_KUBECONFIG": str(fcp.kubeconfig),
        "SA_NAMESPACE": ns,
        "SA_NAME": sa,
    }
    kubeconfig = tmp_path / "exec.kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "cp",
                        "cluster": {
                            "server": fcp.server,
                            "certificate-authority": str(fcp.ca_file),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "exec",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1",
                                "command": sys.executable,
                                "args": [str(plugin)],
                                "env": [{"name": k, "value": v} for k, v in env.items()],
                                "interactiveMode": "Never",
                            }
                        },
                    }
                ],
                "contexts": [{"name": "exec", "context": {"cluster": "cp", "user": "exec"}}],
                "current-context": "exec",
            }
        )
    )

    def issued() -> list[str]:
        return state.read_text().split() if state.exists() else []

    a = Annotator(kubeconfig, tmp_path, ns, identity="exec").start()
    try:
        a.wait_ready(90).wait_leading()
        apply(fcp.kubectl, dcd(ns, "first"))
        wait_for("a document", lambda: want("first") <= names(fcp, ns), 60)
        for round_, root in ((2, "second"), (3, "third")):
            # A refresh is running (the plugin sleeps 3 s): the loop still answers.
            wait_for(
                "the plugin running again", lambda: Path(f"{state}.running").exists(), 60, 0.05
            )
            answered, deadline = 0, time.monotonic() + 60
            while Path(f"{state}.running").exists():
                assert time.monotonic() < deadline, "the plugin ran for over 60 s"
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{a.health_port}/healthz", timeout=1
                ) as resp:
                    assert resp.status == 200
                answered += 1
                time.sleep(0.2)
            assert answered >= 3, f"only {answered} probes during a 3 s refresh"
            wait_for(f"token {round_}", lambda r=round_: len(issued()) >= r, 60)  # type: ignore[misc]
            # Revoke every older token: only the newest one works from now on.
            for old in issued()[:-1]:
                fcp.kubectl("delete", "secret", "-n", ns, old, "--ignore-not-found")
            apply(fcp.kubectl, dcd(ns, root))
            wait_for(f"the {root} document", lambda r=root: want(r) <= names(fcp, ns), 60)  # type: ignore[misc]
        assert a.leading()
    finally:
        assert a.stop() == 0, a.tail()


POLICY = REPO_ROOT / "manifests" / "annotator-policy" / "writes-policy.yaml"
SA_USER = "system:serviceaccount:aibom-system:aibom-rollup-annotator"


def sa_request(
    cp: ControlPlane, token: str, method: str, path: str, body: Any = None, *, ctype: str = ""
) -> tuple[int, dict[str, Any]]:
    """One request as the annotator's ServiceAccount, with its own token."""
    assert cp.ports is not None
    ctx = ssl.create_default_context(cafile=str(cp.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", cp.ports.apiserver, context=ctx, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = ctype or "application/json"
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else {}
    finally:
        conn.close()


def test_the_shipped_rbac_and_policy_allow_the_annotators_work_and_nothing_else(
    fcp: ControlPlane, ns: str, tmp_path: Path
) -> None:
    if not fcp.request("GET", "/api/v1/namespaces/aibom-system").ok:
        fcp.kubectl("create", "namespace", "aibom-system")
    # Exactly the manifests: the ServiceAccount, ClusterRole, Lease Role, bindings, policy.
    fcp.kubectl("apply", "--server-side", "-f", str(RBAC))
    fcp.kubectl("apply", "--server-side", "-f", str(POLICY))
    token = fcp.kubectl(
        "create", "token", "aibom-rollup-annotator", "-n", "aibom-system", "--duration=1h"
    ).stdout.strip()
    merge = "application/merge-patch+json"
    stranger = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "not-an-aibom", "namespace": ns},
        "data": {"k": "v"},
    }
    made = fcp.request("POST", f"/api/v1/namespaces/{ns}/configmaps", stranger)
    assert made.status == 201, made.body
    probe = f"/api/v1/namespaces/{ns}/configmaps/not-an-aibom?dryRun=All"
    last: list[Any] = []

    def policy_refuses() -> bool:
        # A dry run: admission runs, nothing is deleted while the policy is not in force.
        last[:] = sa_request(fcp, token, "DELETE", probe)
        return bool(last[0] == 403)

    # The policy is in force once the API server's informer has it.
    wait_for("the policy in force", policy_refuses, 60)
    assert "aibom-rollup-annotator-writes" in last[1]["message"], last
    kubeconfig = token_kubeconfig(fcp, tmp_path / "sa.kubeconfig", "sa", token)
    # Its normal work: documents, a superseded one deleted, a forged stamp repaired.
    apply(fcp.kubectl, statefulset(ns, "s", replicas=0))
    forged = deployment(ns, "forged", replicas=0)
    forged["metadata"]["annotations"] = {"aibom.dev/root": "Deployment/elsewhere", "team": "x"}
    apply(fcp.kubectl, forged)
    a = Annotator(
        kubeconfig,
        tmp_path,
        ns,
        identity="sa",
        lease="aibom-rollup-annotator",
        args=("--lease-namespace=aibom-system",),
    ).start()
    try:
        a.wait_ready(90).wait_leading()
        wait_for("the StatefulSet's document", lambda: "aibom-statefulset-s" in names(fcp, ns), 60)
        group = apply(fcp.kubectl, lws(ns, "l"))
        merge_patch(
            fcp.kubectl, ns, "statefulset/s", {"metadata": {"ownerReferences": [owner_ref(group)]}}
        )
        wait_for(
            "the LWS document, the StatefulSet's deleted by the annotator",
            lambda: (
                names(fcp, ns) >= {"aibom-leaderworkerset-l", "aibom-deployment-forged"}
                and "aibom-statefulset-s" not in names(fcp, ns)
            ),
            60,
        )

        def stamp() -> str | None:
            obj = fcp.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/forged").json()
            return str((obj["metadata"].get("annotations") or {}).get("aibom.dev/root"))

        wait_for("the repaired stamp", lambda: stamp() == "Deployment/forged", 60)
        assert a.metric("aibom_annotator_errors_total") == 0, a.tail()
    finally:
        assert a.stop() == 0, a.tail()
    # Anything else, with the same token: refused by the policy (RBAC would allow it).
    dep = f"/apis/apps/v1/namespaces/{ns}/deployments/forged"
    refused = {
        "a label": (dep, {"metadata": {"labels": {"aibom.dev/x": "y"}}}),
        "another annotation": (dep, {"metadata": {"annotations": {"team": "y"}}}),
        "removing another annotation": (dep, {"metadata": {"annotations": {"team": None}}}),
        "the spec": (dep, {"spec": {"replicas": 3}}),
        "a ConfigMap that is not an AIBOM": (
            f"/api/v1/namespaces/{ns}/configmaps/not-an-aibom",
            {"data": {"k": "changed"}},
        ),
    }
    for what, (path, patch) in refused.items():
        status, body = sa_request(fcp, token, "PATCH", path, patch, ctype=merge)
        assert status == 403, (what, status, body)
        assert "aibom-rollup-annotator-writes" in body.get("message", ""), (what, body)
    status, body = sa_request(
        fcp, token, "DELETE", f"/api/v1/namespaces/{ns}/configmaps/not-an-aibom"
    )
    assert status == 403 and "aibom-rollup-annotator-writes" in body["message"], body
    status, body = sa_request(
        fcp,
        token,
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        {**stranger, "metadata": {"name": "new", "namespace": ns}},
    )
    assert status == 403, body
    # ...while its own kind of change still passes.
    status, body = sa_request(
        fcp,
        token,
        "PATCH",
        dep,
        {"metadata": {"annotations": {"aibom.dev/probe": "1"}}},
        ctype=merge,
    )
    assert status == 200, body


def test_a_leader_whose_renewals_hang_stops_writing_at_the_renew_deadline(
    fcp: ControlPlane, ns: str, tmp_path: Path
) -> None:
    # Today's leader checks its deadline only when a (hanging) renewal step
    # ends, and writes for up to two request timeouts past it.
    n = 40
    users = ("partitioned-leader", "healthy-standby")
    part_id, standby_id = [identity(fcp, ns, user) for user in users]
    with ApiProxy(fcp, part_id) as proxy:
        leader = through(
            proxy,
            tmp_path,
            ns,
            "partitioned",
            "--write-qps=1",
            "--write-burst=1",
            "--stamp-repair=off",
        ).start()
        standby: Annotator | None = None
        try:
            leader.wait_ready(90).wait_leading()
            standby = Annotator(
                standby_id.kubeconfig,
                tmp_path,
                ns,
                identity="standby",
                args=("--stamp-repair=off",),
            ).start()
            standby.wait_ready(90)
            for i in range(n):
                apply(fcp.kubectl, dcd(ns, f"r{i:02d}"))
            wait_for("the leader writing", lambda: len(names(fcp, ns)) >= 3, 60, every=0.05)
            # Its Lease requests hang from now on; its other requests still go through.
            proxy.blackhole("/leases/")
            standby.wait_leading(timeout=40)
            wait_for("every document", lambda: len(names(fcp, ns)) == n, 120)
        finally:
            if standby is not None:
                assert standby.stop() == 0, standby.tail()
            leader.kill()
    events = audited(fcp, ns, users)
    renewals = [
        e
        for e in events
        if e["objectRef"]["resource"] == "leases" and e["user"]["username"] == "partitioned-leader"
    ]
    writes = [
        e
        for e in events
        if e["objectRef"]["resource"] == "configmaps"
        and e["user"]["username"] == "partitioned-leader"
    ]
    last_renewal = _seconds(renewals[-1]["requestReceivedTimestamp"])
    last_write = _seconds(writes[-1]["stageTimestamp"])
    # The test is only worth something if the leader still had work at its deadline.
    standby_writes = [
        e
        for e in events
        if e["objectRef"]["resource"] == "configmaps" and e["user"]["username"] == "healthy-standby"
    ]
    assert len(standby_writes) >= 5, "the leader finished before its deadline: no test"
    print(
        f"partitioned leader's last write {last_write - last_renewal:.2f} s after its last renewal"
    )
    # Its deadline: 10 s after it *sent* that renewal (which the server received later).
    assert last_write <= last_renewal + 10.0 + 0.5, last_write - last_renewal
    # And the writers never overlap: the standby took over after the last of them.
    takeover = next(
        e
        for e in events
        if e["objectRef"]["resource"] == "leases" and e["user"]["username"] == "healthy-standby"
    )
    assert _seconds(takeover["stageTimestamp"]) > last_write
