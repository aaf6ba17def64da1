"""The annotator against the real control plane (design 005's Envtest list, and more).

The annotator runs as a real process (`python -m aibom_rollup annotator`)
under an identity bound to the ClusterRole shipped in
manifests/annotator/rbac.yaml (a second identity lacks one rule, for the
Forbidden case), with leader election on a real Lease. Deployments,
StatefulSets and Jobs get their ReplicaSets and Pods from the real
kube-controller-manager, which also garbage-collects; there is no kubelet,
so Pod status (containerStatuses with imageID) is written through the
pods/status subresource the way a kubelet would. Grove, LWS and Dynamo
objects are built parent-first with real controller references.

Each test opts in only its own namespace (a per-test namespace label), so
an annotator never touches another test's objects.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import pytest
import yaml

from aibom_core.rollup import unpack
from tests.controlplane import REPO_ROOT, ControlPlane, Kubectl, bind_rules, child_env

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
RBAC = REPO_ROOT / "manifests" / "annotator" / "rbac.yaml"
MANAGED = "app.kubernetes.io/managed-by=aibom-rollup"
GRAPH_LABEL = "nvidia.com/dynamo-graph-deployment-name"
LABEL_KEY = "aibom-test.dev/run"


# -- helpers --


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 30.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def digest(seed: str) -> str:
    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


def apply(kubectl: Kubectl, doc: Obj) -> Obj:
    out = kubectl(
        "apply",
        "--server-side",
        "--field-manager=test",
        "-f",
        "-",
        "-o",
        "json",
        input=json.dumps(doc),
    )
    result: Obj = json.loads(out.stdout)
    return result


def owner_ref(obj: Obj, *, controller: bool = True) -> Obj:
    ref = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
    }
    if controller:
        ref["controller"] = True
    return ref


def meta(ns: str, name: str, owner: Obj | None = None, **extra: Any) -> Obj:
    m: Obj = {"name": name, "namespace": ns, **extra}
    if owner is not None:
        m["ownerReferences"] = [owner_ref(owner)]
    return m


def pod_spec(image: str, container: str = "main") -> Obj:
    return {"containers": [{"name": container, "image": image}]}


def template(labels: dict[str, str], image: str) -> Obj:
    return {"metadata": {"labels": labels}, "spec": pod_spec(image)}


def dgd(ns: str, name: str, image: str = "registry.example/dynamo/worker:1") -> Obj:
    return {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": meta(ns, name),
        "spec": {
            "components": [
                {"name": "worker", "type": "worker", "podTemplate": {"spec": pod_spec(image)}}
            ]
        },
    }


def dcd(
    ns: str, name: str, owner: Obj | None = None, image: str = "registry.example/dynamo/worker:1"
) -> Obj:
    return {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoComponentDeployment",
        "metadata": meta(ns, name, owner),
        "spec": {"type": "worker", "podTemplate": {"spec": pod_spec(image)}},
    }


def deployment(
    ns: str,
    name: str,
    owner: Obj | None = None,
    *,
    replicas: int = 1,
    image: str = "registry.example/app:1",
) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(ns, name, owner),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": template(labels, image),
        },
    }


def statefulset(
    ns: str,
    name: str,
    owner: Obj | None = None,
    *,
    replicas: int = 1,
    image: str = "registry.example/lws/worker:1",
) -> Obj:
    labels = {"sts": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(ns, name, owner),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": template(labels, image),
        },
    }


def lws(
    ns: str, name: str, owner: Obj | None = None, image: str = "registry.example/lws/worker:1"
) -> Obj:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta(ns, name, owner),
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": pod_spec(image)}},
        },
    }


def grove(
    kind: str, ns: str, name: str, owner: Obj, image: str = "registry.example/dynamo/worker:1"
) -> Obj:
    api = "grove.io/v1alpha1"
    if kind == "PodCliqueSet":
        spec: Obj = {
            "replicas": 1,
            "template": {
                "cliques": [
                    {
                        "name": "worker",
                        "spec": {"roleName": "worker", "replicas": 1, "podSpec": pod_spec(image)},
                    }
                ]
            },
        }
    elif kind == "PodCliqueScalingGroup":
        spec = {"replicas": 1, "cliqueNames": ["worker"]}
    else:
        spec = {"roleName": "worker", "replicas": 1, "podSpec": pod_spec(image)}
    return {"apiVersion": api, "kind": kind, "metadata": meta(ns, name, owner), "spec": spec}


def pod(ns: str, name: str, owner: Obj | None, image: str, **labels: str) -> Obj:
    m = meta(ns, name, owner)
    if labels:
        m["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": pod_spec(image)}


def set_digest(cp: ControlPlane, ns: str, name: str, image: str, sha: str) -> None:
    """What a kubelet writes once the container runs: its image and imageID."""
    repo = image.rsplit(":", 1)[0]
    status = {
        "status": {
            "containerStatuses": [
                {
                    "name": "main",
                    "image": image,
                    "imageID": f"{repo}@{sha}",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ]
        }
    }
    resp = cp.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/{name}/status",
        status,
        content_type="application/merge-patch+json",
    )
    assert resp.ok, resp.body[:500]


def get(cp: ControlPlane, path: str) -> Obj | None:
    resp = cp.request("GET", path)
    if resp.status == 404:
        return None
    assert resp.ok, (path, resp.status, resp.body[:300])
    result: Obj = resp.json()
    return result


def docs(cp: ControlPlane, ns: str) -> dict[str, Obj]:
    """Our ConfigMaps in a namespace, by name."""
    body = get(cp, f"/api/v1/namespaces/{ns}/configmaps?labelSelector={MANAGED}")
    assert body is not None
    return {cm["metadata"]["name"]: cm for cm in body["items"]}


def document(cm: Obj) -> Obj:
    raw = unpack(cm)
    assert raw is not None, cm["metadata"]["name"]
    result: Obj = json.loads(raw)
    return result


def owned(doc: Obj) -> list[str]:
    props = doc.get("metadata", {}).get("component", {}).get("properties") or []
    items = sorted(
        (
            (int(p["name"].rsplit(".", 1)[1]), p["value"])
            for p in props
            if p["name"].startswith("aibom.rollup.owned.")
        ),
    )
    return [v for _, v in items]


def doc_text(cp: ControlPlane, ns: str, name: str) -> str | None:
    cm = docs(cp, ns).get(name)
    return None if cm is None else json.dumps(document(cm))


def wait_doc(
    cp: ControlPlane, ns: str, name: str, *, containing: tuple[str, ...] = (), timeout: float = 30
) -> Obj:
    def probe() -> Obj | None:
        cm = docs(cp, ns).get(name)
        if cm is None:
            return None
        text = json.dumps(document(cm))
        return cm if all(c in text for c in containing) else None

    found: Obj = wait_for(f"document {ns}/{name} containing {containing}", probe, timeout)
    return found


# -- the annotator process and its identity --


def shipped_rules(*, without: tuple[str, ...] = ()) -> list[Obj]:
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["kind"] == "ClusterRole")
    rules = []
    for rule in role["rules"]:
        resources = [r for r in rule["resources"] if r not in without]
        if resources:
            rules.append({**rule, "resources": resources})
    return rules


def lease_rules() -> list[Obj]:
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["kind"] == "Role")
    rules: list[Obj] = role["rules"]
    return rules


def grant(cp: ControlPlane, kubectl: Kubectl, user: str, *, without: tuple[str, ...] = ()) -> Path:
    """A kubeconfig for `user` bound to the shipped ClusterRole (minus `without`)."""
    ident = cp.issue_identity(user)
    bind_rules(kubectl, user, f"{user}-annotator", shipped_rules(without=without))
    return ident.kubeconfig


def grant_lease(kubectl: Kubectl, ns: str, user: str, lease: str) -> None:
    rules = [dict(r) for r in lease_rules()]
    for r in rules:
        if "resourceNames" in r:
            r["resourceNames"] = [lease]
    bind_rules(kubectl, user, f"{user}-lease", rules, namespace=ns)


@dataclass
class Annotator:
    kubeconfig: Path
    workdir: Path
    namespace: str
    identity: str = "annotator-a"
    lease: str = "aibom-test"
    args: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None
    metrics_port: int = field(default_factory=free_port)
    # Objects the tests make as the admin carry no provenance proof; tests about
    # anything but provenance take controller references as written.
    trust_references: bool = False
    health_port: int = field(default_factory=free_port)

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.identity}.log"

    def start(self) -> Self:
        cmd = [
            sys.executable,
            "-m",
            "aibom_rollup",
            "annotator",
            f"--kubeconfig={self.kubeconfig}",
            f"--namespace-label={LABEL_KEY}={self.namespace}",
            f"--lease-namespace={self.namespace}",
            f"--lease-name={self.lease}",
            f"--identity={self.identity}",
            "--bind-address=127.0.0.1",
            f"--metrics-port={self.metrics_port}",
            f"--health-port={self.health_port}",
            "--log-format=json",
            "--rediscovery-interval=2",
            "--stamp-settle=0.5",
            *(("--trust-owner-references",) if self.trust_references else ()),
            *self.args,
        ]
        env = child_env()
        env["PYTHONPATH"] = str(REPO_ROOT)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=REPO_ROOT,
                start_new_session=True,
            )
        return self

    def _get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready(self) -> bool:
        assert self.alive(), f"annotator exited:\n{self.tail()}"
        return self._get(self.health_port, "/readyz")[0] == 200

    def wait_ready(self, timeout: float = 60) -> Self:
        wait_for(f"annotator {self.identity} ready", self.ready, timeout)
        return self

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        status, text = self._get(self.metrics_port, "/metrics")
        if status != 200:
            return 0.0
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            metric_name, _, rest = head.partition("{")
            if metric_name != name:
                continue
            got = dict(kv.split("=", 1) for kv in rest.rstrip("}").split(",") if "=" in kv)
            got = {k: v.strip('"') for k, v in got.items()}
            if all(got.get(k) == v for k, v in (labels or {}).items()):
                total += float(value)
        return total

    def leading(self) -> bool:
        return self.metric("aibom_annotator_leader") == 1.0

    def wait_leading(self, timeout: float = 30) -> Self:
        wait_for(f"{self.identity} to lead", self.leading, timeout)
        return self

    def stop(self, timeout: float = 20) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                pytest.fail(f"annotator did not stop on SIGTERM:\n{self.tail()}")
        return int(self.proc.returncode)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def records(self) -> list[Obj]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if isinstance(rec, dict):
                    out.append(rec)
        return out

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


class Recorder:
    """Every watch event of our ConfigMaps in a namespace, in resourceVersion order."""

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        self.cp = cp
        self.ns = ns
        self.events: list[tuple[str, str, list[str]]] = []  # type, name, owned
        self._stop = threading.Event()
        self._conn: http.client.HTTPSConnection | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = threading.Event()

    def __enter__(self) -> Recorder:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)

    def _run(self) -> None:
        assert self.cp.ports is not None
        ctx: ssl.SSLContext = self.cp.ssl_context()
        self._conn = http.client.HTTPSConnection("127.0.0.1", self.cp.ports.apiserver, context=ctx)
        self._conn.request(
            "GET", f"/api/v1/namespaces/{self.ns}/configmaps?watch=1&labelSelector={MANAGED}"
        )
        resp = self._conn.getresponse()
        self._started.set()
        with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    break
                event = json.loads(line)
                cm = event["object"]
                listed = owned(document(cm)) if event["type"] != "DELETED" else []
                self.events.append((event["type"], cm["metadata"]["name"], listed))

    def assert_superseded_in_order(self, child_doc: str, root_doc: str, child: str) -> None:
        """`child_doc` was deleted only after `root_doc` was written listing `child`."""
        listed_at = next(
            (
                i
                for i, (t, n, o) in enumerate(self.events)
                if n == root_doc and t != "DELETED" and child in o
            ),
            None,
        )
        deleted_at = next(
            (i for i, (t, n, _) in enumerate(self.events) if n == child_doc and t == "DELETED"),
            None,
        )
        assert deleted_at is not None, f"{child_doc} never deleted: {self.events}"
        assert listed_at is not None and listed_at < deleted_at, (
            f"{child_doc} deleted (event {deleted_at}) before {root_doc} listed {child} "
            f"(event {listed_at}): {self.events}"
        )


@pytest.fixture(scope="module")
def identity(control_plane: ControlPlane, kubectl: Kubectl) -> Path:
    return grant(control_plane, kubectl, "aibom-annotator")


@pytest.fixture
def ns(kubectl: Kubectl, namespace: str) -> str:
    kubectl("label", "namespace", namespace, f"{LABEL_KEY}={namespace}", "--overwrite")
    grant_lease(kubectl, namespace, "aibom-annotator", "aibom-test")
    return namespace


@pytest.fixture
def start(tmp_path: Path, identity: Path, ns: str) -> Iterator[Callable[..., Annotator]]:
    """Start annotators for this test's namespace; all are stopped (SIGTERM) after it."""
    started: list[Annotator] = []

    def make(
        *args: str, kubeconfig: Path | None = None, ident: str = "annotator-a", wait: bool = True
    ) -> Annotator:
        # These tests are about everything but provenance (tests/integration/
        # test_provenance.py): objects made by the admin are taken as written.
        args = ("--trust-owner-references", *args)
        a = Annotator(kubeconfig or identity, tmp_path, ns, identity=ident, args=args).start()
        started.append(a)
        if wait:
            a.wait_ready().wait_leading()
        return a

    yield make
    for a in started:
        if a.alive():
            code = a.stop()
            assert code == 0, f"annotator {a.identity} exited {code}:\n{a.tail()}"


@pytest.fixture
def annotator(start: Callable[..., Annotator]) -> Annotator:
    return start()


# -- Grove --


def test_grove_direct_clique_digest_reaches_the_graph_and_label_is_no_authority(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/dynamo/worker:1"
    graph = apply(kubectl, dgd(ns, "g", image))
    pcs = apply(kubectl, grove("PodCliqueSet", ns, "g-0", graph, image))
    clique = apply(kubectl, grove("PodClique", ns, "g-0-worker", pcs, image))
    apply(kubectl, pod(ns, "g-0-worker-0", clique, image, **{GRAPH_LABEL: "g"}))
    set_digest(control_plane, ns, "g-0-worker-0", image, digest("grove-worker"))
    # A tenant Pod that carries the graph's label, owned by a foreign chain.
    foreign_pcs = apply(
        kubectl, {**grove("PodCliqueSet", ns, "other", graph, image), "metadata": meta(ns, "other")}
    )
    foreign = apply(kubectl, grove("PodClique", ns, "other-worker", foreign_pcs, image))
    apply(kubectl, pod(ns, "sneaky", foreign, image, **{GRAPH_LABEL: "g"}))
    set_digest(control_plane, ns, "sneaky", image, digest("tenant"))

    cm = wait_doc(
        control_plane, ns, "aibom-dynamographdeployment-g", containing=(digest("grove-worker"),)
    )
    text = json.dumps(document(cm))
    assert digest("tenant") not in text
    assert owned(document(cm)) == []  # Grove kinds are walk-only: never listed
    assert set(docs(control_plane, ns)) == {"aibom-dynamographdeployment-g"}
    labels = cm["metadata"]["labels"]
    assert labels["aibom.dev/root-kind"] == "DynamoGraphDeployment"
    assert labels["aibom.dev/root-name"] == "g"
    assert labels["aibom.dev/root-uid"] == graph["metadata"]["uid"]
    assert cm["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "nvidia.com/v1beta1",
            "kind": "DynamoGraphDeployment",
            "name": "g",
            "uid": graph["metadata"]["uid"],
        }
    ]
    # The Pod's own stamp, repaired by the annotator (no webhook runs here).
    stamped = wait_for(
        "the worker Pod's stamp",
        lambda: (
            (get(control_plane, f"/api/v1/namespaces/{ns}/pods/g-0-worker-0") or {})
            .get("metadata", {})
            .get("annotations", {})
            .get("aibom.dev/root")
        ),
    )
    assert stamped == "DynamoGraphDeployment/g"


def test_grove_scaling_group_digest_reaches_the_graph(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/dynamo/prefill:2"
    graph = apply(kubectl, dgd(ns, "sg", image))
    pcs = apply(kubectl, grove("PodCliqueSet", ns, "sg-0", graph, image))
    pcsg = apply(kubectl, grove("PodCliqueScalingGroup", ns, "sg-0-group", pcs, image))
    clique = apply(kubectl, grove("PodClique", ns, "sg-0-group-0-worker", pcsg, image))
    apply(kubectl, pod(ns, "sg-0-group-0-worker-0", clique, image))
    set_digest(control_plane, ns, "sg-0-group-0-worker-0", image, digest("scaling-group"))
    wait_doc(
        control_plane, ns, "aibom-dynamographdeployment-sg", containing=(digest("scaling-group"),)
    )
    assert set(docs(control_plane, ns)) == {"aibom-dynamographdeployment-sg"}


def test_owner_recreated_with_a_new_uid_does_not_adopt_the_stale_child(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/dynamo/worker:1"
    old = apply(kubectl, dgd(ns, "g", image))
    # The finalizer holds the stale child after its owner goes: the garbage
    # collector would otherwise remove it before anyone could be confused.
    pcs_doc = grove("PodCliqueSet", ns, "g-0", old, image)
    pcs_doc["metadata"]["finalizers"] = ["aibom.dev/test-hold"]
    pcs = apply(kubectl, pcs_doc)
    clique = apply(kubectl, grove("PodClique", ns, "g-0-worker", pcs, image))
    apply(kubectl, pod(ns, "g-0-worker-0", clique, image))
    set_digest(control_plane, ns, "g-0-worker-0", image, digest("old-generation"))
    wait_doc(
        control_plane, ns, "aibom-dynamographdeployment-g", containing=(digest("old-generation"),)
    )
    try:
        kubectl("delete", "-n", ns, "dynamographdeployment/g", "--wait=true")
        new = apply(kubectl, dgd(ns, "g", image))
        assert new["metadata"]["uid"] != old["metadata"]["uid"]

        def new_doc() -> Obj | None:
            cm = docs(control_plane, ns).get("aibom-dynamographdeployment-g")
            uid = new["metadata"]["uid"]
            return cm if cm and cm["metadata"]["labels"]["aibom.dev/root-uid"] == uid else None

        cm = wait_for("the re-created graph's document", new_doc)
        time.sleep(2)  # let any (wrong) adoption show up
        cm = new_doc()
        assert cm is not None
        assert digest("old-generation") not in json.dumps(document(cm))
        assert cm["metadata"]["ownerReferences"][0]["uid"] == new["metadata"]["uid"]
    finally:
        kubectl(
            "patch",
            "-n",
            ns,
            "podcliqueset/g-0",
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
        )


# -- LeaderWorkerSet --


def wait_pod(cp: ControlPlane, ns: str, name: str) -> Obj:
    found: Obj = wait_for(
        f"pod {ns}/{name} (made by the controller-manager)",
        lambda: get(cp, f"/api/v1/namespaces/{ns}/pods/{name}"),
        60,
    )
    return found


def build_lws(
    cp: ControlPlane,
    kubectl: Kubectl,
    ns: str,
    name: str,
    owner: Obj | None = None,
    *,
    adopt_later: bool = False,
) -> tuple[Obj, str]:
    """LWS -> leader StatefulSet -> leader Pod -> worker StatefulSet -> worker Pod (real KCM)."""
    image = "registry.example/lws/worker:1"
    group = apply(kubectl, lws(ns, name, owner, image))
    leader_sts = apply(kubectl, statefulset(ns, name, None if adopt_later else group, image=image))
    leader = wait_pod(cp, ns, f"{name}-0")
    assert leader["metadata"]["ownerReferences"][0]["uid"] == leader_sts["metadata"]["uid"]
    worker_sts = statefulset(ns, f"{name}-0", image=image)
    worker_sts["metadata"]["ownerReferences"] = [
        owner_ref({**leader, "apiVersion": "v1", "kind": "Pod"})
    ]
    apply(kubectl, worker_sts)
    worker = f"{name}-0-0"
    wait_pod(cp, ns, worker)
    set_digest(cp, ns, f"{name}-0", image, digest(f"{name}-leader"))
    set_digest(cp, ns, worker, image, digest(f"{name}-worker"))
    return group, worker


def test_lws_rolls_up_its_statefulsets_and_deletes_their_prior_document(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    with Recorder(control_plane, ns) as rec:
        group, _ = build_lws(control_plane, kubectl, ns, "lws", adopt_later=True)
        # Before adoption the leader StatefulSet is a root with its own document.
        wait_doc(control_plane, ns, "aibom-statefulset-lws")
        kubectl(
            "patch",
            "-n",
            ns,
            "statefulset/lws",
            "--type=merge",
            "-p",
            json.dumps({"metadata": {"ownerReferences": [owner_ref(group)]}}),
        )
        cm = wait_doc(
            control_plane,
            ns,
            "aibom-leaderworkerset-lws",
            containing=(digest("lws-worker"), digest("lws-leader")),
        )
        assert owned(document(cm)) == ["StatefulSet/lws", "StatefulSet/lws-0"]
        wait_for(
            "only the LWS document",
            lambda: set(docs(control_plane, ns)) == {"aibom-leaderworkerset-lws"},
        )
        time.sleep(0.5)
    rec.assert_superseded_in_order(
        "aibom-statefulset-lws", "aibom-leaderworkerset-lws", "StatefulSet/lws"
    )
    assert annotator.metric("aibom_annotator_documents_deleted_total", {"reason": "rolled_up"}) >= 1


# -- Dynamo --


def test_dynamo_graph_over_component_over_deployment_is_one_document(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/dynamo/worker:1"
    graph = apply(kubectl, dgd(ns, "g", image))
    comp = apply(kubectl, dcd(ns, "g-worker", graph, image))
    apply(kubectl, deployment(ns, "g-worker", comp, replicas=2, image=image))

    def pods() -> list[Obj]:
        body = get(control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=app=g-worker") or {}
        items: list[Obj] = body.get("items", [])
        return items if len(items) == 2 else []

    made = wait_for("the controller-manager's two Pods", pods, 60)
    for p in made:
        set_digest(control_plane, ns, p["metadata"]["name"], image, digest("dynamo-worker"))
    cm = wait_doc(
        control_plane, ns, "aibom-dynamographdeployment-g", containing=(digest("dynamo-worker"),)
    )
    assert owned(document(cm)) == ["Deployment/g-worker", "DynamoComponentDeployment/g-worker"]
    time.sleep(1)
    assert set(docs(control_plane, ns)) == {"aibom-dynamographdeployment-g"}
    assert (
        annotator.metric(
            "aibom_workload_reconcile_outcomes_total",
            {"kind": "DynamoGraphDeployment", "outcome": "matched"},
        )
        >= 1
    )
    assert (
        annotator.metric(
            "aibom_workload_reconcile_outcomes_total",
            {"kind": "Deployment", "outcome": "rolled_up"},
        )
        >= 1
    )


def test_worker_pod_six_hops_under_a_graph_is_attributed(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    graph = apply(kubectl, dgd(ns, "deep", "registry.example/lws/worker:1"))
    comp = apply(kubectl, dcd(ns, "deep-worker", graph, "registry.example/lws/worker:1"))
    build_lws(control_plane, kubectl, ns, "deep-lws", comp)
    cm = wait_doc(
        control_plane,
        ns,
        "aibom-dynamographdeployment-deep",
        containing=(digest("deep-lws-worker"),),
    )
    assert owned(document(cm)) == [
        "DynamoComponentDeployment/deep-worker",
        "LeaderWorkerSet/deep-lws",
        "StatefulSet/deep-lws",
        "StatefulSet/deep-lws-0",
    ]
    assert set(docs(control_plane, ns)) == {"aibom-dynamographdeployment-deep"}


def test_standalone_component_is_its_own_root(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    comp = apply(kubectl, dcd(ns, "alone"))
    cm = wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-alone")
    assert cm["metadata"]["labels"]["aibom.dev/root-uid"] == comp["metadata"]["uid"]
    assert owned(document(cm)) == []


# -- CronJob, untracked owners --


def test_cronjob_job_pod(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/batch/eval:3"
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta(ns, "nightly"),
        "spec": {
            "schedule": "0 0 1 1 *",
            "suspend": True,
            "jobTemplate": {
                "spec": {"template": {"spec": {**pod_spec(image), "restartPolicy": "Never"}}}
            },
        },
    }
    apply(kubectl, cron)
    kubectl("create", "job", "-n", ns, "nightly-manual", "--from=cronjob/nightly")
    job = get(control_plane, f"/apis/batch/v1/namespaces/{ns}/jobs/nightly-manual")
    assert job is not None and job["metadata"]["ownerReferences"][0]["controller"] is True

    def job_pod() -> str | None:
        body = (
            get(
                control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name=nightly-manual"
            )
            or {}
        )
        items = body.get("items") or []
        return items[0]["metadata"]["name"] if items else None

    name = wait_for("the Job's Pod", job_pod, 60)
    set_digest(control_plane, ns, name, image, digest("eval"))
    cm = wait_doc(control_plane, ns, "aibom-cronjob-nightly", containing=(digest("eval"),))
    assert owned(document(cm)) == ["Job/nightly-manual"]
    assert set(docs(control_plane, ns)) == {"aibom-cronjob-nightly"}


def test_owner_kind_we_may_not_read_leaves_the_child_reported(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: Callable[..., Annotator]
) -> None:
    user = "aibom-annotator-nolws"
    kubeconfig = grant(control_plane, kubectl, user, without=("leaderworkersets",))
    grant_lease(kubectl, ns, user, "aibom-test")
    a = start(kubeconfig=kubeconfig)
    group = apply(kubectl, lws(ns, "hidden"))
    apply(kubectl, statefulset(ns, "hidden", group, replicas=0))
    cm = wait_doc(control_plane, ns, "aibom-statefulset-hidden")
    assert cm["metadata"]["labels"]["aibom.dev/root-kind"] == "StatefulSet"
    wait_for(
        "rollup_unresolved counted",
        lambda: (
            a.metric(
                "aibom_workload_reconcile_outcomes_total",
                {"kind": "StatefulSet", "outcome": "rollup_unresolved"},
            )
            >= 1
        ),
    )
    assert (
        a.metric("aibom_rollup_unresolved_total", {"kind": "StatefulSet", "reason": "Forbidden"})
        >= 1
    )
    forbidden = [r for r in a.records() if r.get("msg", "").startswith("cannot list a kind")]
    assert [r["kind"] for r in forbidden] == ["leaderworkerset.x-k8s.io/LeaderWorkerSet"]
    unresolved = [r for r in a.records() if r.get("msg", "").startswith("owner walk failed")]
    assert len(unresolved) == 1, unresolved  # once per kind
    assert "aibom-leaderworkerset-hidden" not in docs(control_plane, ns)


# -- documents: byte identity, size, opt-out --


def test_roots_without_descendants_match_the_offline_scan_byte_for_byte(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    ns: str,
    start: Callable[..., Annotator],
    tmp_path: Path,
) -> None:
    a = start()
    apply(kubectl, dcd(ns, "solo"))
    apply(kubectl, deployment(ns, "idle", replicas=0))
    first = wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-solo")
    wait_doc(control_plane, ns, "aibom-deployment-idle")
    dump = kubectl("get", "-n", ns, "dynamocomponentdeployments,deployments", "-o", "json").stdout
    (tmp_path / "dump.json").write_text(dump)
    out = tmp_path / "scan"
    subprocess.run(
        [sys.executable, "-m", "aibom_rollup", "scan", str(tmp_path / "dump.json"), "-o", str(out)],
        check=True,
        env={**child_env(), "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
    )
    for name in ("aibom-dynamocomponentdeployment-solo", "aibom-deployment-idle"):
        assert unpack(docs(control_plane, ns)[name]) == (out / ns / f"{name}.json").read_bytes()
    # A restart re-reads everything and writes nothing: the input hash is unchanged.
    assert a.stop() == 0
    start(ident="annotator-b")
    time.sleep(3)
    again = docs(control_plane, ns)["aibom-dynamocomponentdeployment-solo"]
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_large_documents_are_compressed_or_cut_never_dropped(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: Callable[..., Annotator]
) -> None:
    # A 3,000-byte budget instead of 1 MiB: the same code paths, small objects.
    a = start("--max-document-bytes=3000")

    def wide(name: str, n: int, noise: int) -> Obj:
        d = deployment(ns, name, replicas=0)
        d["spec"]["template"]["spec"]["containers"] = [
            {
                "name": f"c{i}",
                "image": f"registry.example/{name}/{digest(str(i))[7 : 7 + noise]}c{i}:1",
            }
            for i in range(n)
        ]
        return d

    apply(kubectl, wide("narrow", 1, 0))  # ~1.6 KB
    apply(kubectl, wide("medium", 10, 0))  # ~9 KB, ~1 KB gzip-compressed
    apply(kubectl, wide("broad", 60, 40))  # ~72 KB, ~5.5 KB gzip-compressed
    narrow = wait_doc(control_plane, ns, "aibom-deployment-narrow")
    medium = wait_doc(control_plane, ns, "aibom-deployment-medium")
    broad = wait_doc(control_plane, ns, "aibom-deployment-broad")
    assert narrow["metadata"]["annotations"]["aibom.dev/encoding"] == "json"
    assert "aibom.json" in narrow["data"] and "binaryData" not in narrow
    assert medium["metadata"]["annotations"]["aibom.dev/encoding"] == "gzip"
    assert "aibom.json.gz" in medium["binaryData"] and "data" not in medium
    assert len(document(medium)["components"]) == 10  # all of it
    assert broad["metadata"]["annotations"]["aibom.dev/encoding"] == "truncated"
    cut = document(broad)
    props = {p["name"]: p["value"] for p in cut["metadata"]["properties"]}
    assert props["aibom.truncated"] == "true"
    assert int(props["aibom.truncated.omitted-components"]) == 60 - len(cut["components"]) > 0

    def event() -> list[Obj]:
        body = get(control_plane, f"/apis/events.k8s.io/v1/namespaces/{ns}/events") or {}
        return [
            e
            for e in body.get("items", [])
            if e.get("reason") == "AIBOMTruncated" and e["regarding"]["name"] == "broad"
        ]

    events = wait_for("the AIBOMTruncated Event on the root", event)
    assert "truncated" in events[0]["note"] and events[0]["type"] == "Warning"
    assert events[0]["regarding"]["uid"] == broad["metadata"]["labels"]["aibom.dev/root-uid"]
    for encoding in ("json", "gzip", "truncated"):
        assert a.metric("aibom_annotator_documents_written_total", {"encoding": encoding}) >= 1


def test_namespace_that_stops_opting_in_loses_its_documents(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    apply(kubectl, dcd(ns, "x"))
    apply(kubectl, deployment(ns, "y", replicas=0))
    wait_for("two documents", lambda: len(docs(control_plane, ns)) == 2)
    kubectl("label", "namespace", ns, f"{LABEL_KEY}-")
    wait_for("no documents", lambda: docs(control_plane, ns) == {})
    assert (
        annotator.metric("aibom_annotator_documents_deleted_total", {"reason": "not_opted_in"}) >= 2
    )
    kubectl("label", "namespace", ns, f"{LABEL_KEY}={ns}")
    wait_for("documents back", lambda: len(docs(control_plane, ns)) == 2)


def test_a_document_someone_edited_or_deleted_is_restored(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    apply(kubectl, dcd(ns, "kept"))
    name = "aibom-dynamocomponentdeployment-kept"
    original = unpack(wait_doc(control_plane, ns, name))
    kubectl(
        "patch",
        "-n",
        ns,
        f"configmap/{name}",
        "--type=merge",
        "-p",
        json.dumps({"data": {"aibom.json": '{"tampered": true}'}}),
    )
    wait_for(
        "the edited document restored",
        lambda: unpack(docs(control_plane, ns).get(name) or {}) == original,
    )
    kubectl("delete", "-n", ns, f"configmap/{name}")
    wait_for(
        "the deleted document restored",
        lambda: unpack(docs(control_plane, ns).get(name) or {}) == original,
    )


# -- stamps --


def test_forged_and_missing_stamps_are_repaired(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    forged = deployment(ns, "forged", replicas=1)
    forged["metadata"]["annotations"] = {
        "aibom.dev/root": "Deployment/elsewhere",
        "aibom.dev/rollup": "uncovered",
    }
    made = apply(kubectl, forged)

    def stamp() -> dict[str, str] | None:
        obj = get(control_plane, f"/apis/apps/v1/namespaces/{ns}/deployments/forged") or {}
        ann = obj.get("metadata", {}).get("annotations") or {}
        got = {k: v for k, v in ann.items() if k.startswith("aibom.dev/")}
        return got if got.get("aibom.dev/rollup") == "root" else None

    assert wait_for("the repaired stamp", stamp) == {
        "aibom.dev/root": "Deployment/forged",
        "aibom.dev/root-uid": made["metadata"]["uid"],
        "aibom.dev/rollup": "root",
    }

    def pod_stamped() -> bool:
        body = get(control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=app=forged") or {}
        items = body.get("items") or []
        return bool(items) and all(
            (p["metadata"].get("annotations") or {}).get("aibom.dev/root") == "Deployment/forged"
            for p in items
        )

    wait_for("the controller-manager's Pod stamped", pod_stamped, 60)
    assert annotator.metric("aibom_annotator_stamp_repairs_total", {"kind": "Deployment"}) >= 1
    time.sleep(3)
    # No fight with the deployment controller over the ReplicaSet's copied annotations.
    rs_repairs = annotator.metric("aibom_annotator_stamp_repairs_total", {"kind": "ReplicaSet"})
    time.sleep(4)
    assert (
        annotator.metric("aibom_annotator_stamp_repairs_total", {"kind": "ReplicaSet"})
        == rs_repairs
    )


def test_with_the_webhook_running_stamps_are_agreed_not_fought(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    ns: str,
    start: Callable[..., Annotator],
    tmp_path: Path,
) -> None:
    """The real webhook stamps at admission; the annotator only fills in what it cannot.

    A root's own UID is not known on CREATE, so the webhook leaves
    `root-uid` out on the roots; the annotator adds it (one patch per root).
    Everything else already agrees, and nothing flips back and forth: not the
    ReplicaSets the deployment controller keeps copying annotations onto.
    """
    from tests.integration.test_webhook import Webhook, shipped_role
    from tests.integration.test_webhook import grant as grant_webhook

    hook_kubeconfig = grant_webhook(
        control_plane, kubectl, "aibom-webhook-for-annotator", shipped_role()
    )
    hook = Webhook(
        control_plane,
        tmp_path,
        name="aibom-rollup-annotator-test",
        kubeconfig=hook_kubeconfig,
        selector={LABEL_KEY: ns},
    )
    hook.start()
    hook.register(kubectl)
    try:

        def webhook_on() -> bool:
            probe = pod(ns, "probe", None, "registry.example/app:1")
            out = kubectl(
                "create", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(probe)
            )
            ann = json.loads(out.stdout)["metadata"].get("annotations") or {}
            return ann.get("aibom.dev/rollup") == "uncovered"

        wait_for("the webhook to take effect", webhook_on)
        a = start()
        graph = apply(kubectl, dgd(ns, "g"))
        comp = apply(kubectl, dcd(ns, "g-worker", graph))
        apply(kubectl, deployment(ns, "g-worker", comp, replicas=2))
        web = apply(kubectl, deployment(ns, "web", replicas=1))

        def everything() -> list[Obj] | None:
            body = get(control_plane, f"/api/v1/namespaces/{ns}/pods") or {}
            pods = body.get("items") or []
            return pods if len(pods) == 3 else None

        wait_for("the controller-manager's Pods", everything, 60)
        wait_for(
            "two documents",
            lambda: (
                set(docs(control_plane, ns))
                == {"aibom-dynamographdeployment-g", "aibom-deployment-web"}
            ),
        )

        def stamps() -> dict[str, dict[str, str]]:
            out: dict[str, dict[str, str]] = {}
            for path in (
                "/api/v1/namespaces/{ns}/pods",
                "/apis/apps/v1/namespaces/{ns}/replicasets",
                "/apis/apps/v1/namespaces/{ns}/deployments",
                "/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamocomponentdeployments",
                "/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamographdeployments",
            ):
                for o in (get(control_plane, path.format(ns=ns)) or {}).get("items", []):
                    ann = o["metadata"].get("annotations") or {}
                    out[f"{o.get('kind') or path.rsplit('/', 1)[1]}/{o['metadata']['name']}"] = {
                        k: v for k, v in ann.items() if k.startswith("aibom.dev/")
                    }
            return out

        def settled() -> bool:
            s = stamps()
            return (
                all("aibom.dev/root-uid" in v for v in s.values()) and len(s) == 3 + 2 + 2 + 1 + 1
            )

        wait_for("every stamp complete", settled, 30)
        repairs = a.metric("aibom_annotator_stamp_repairs_total")
        before = stamps()
        time.sleep(6)
        assert stamps() == before
        assert a.metric("aibom_annotator_stamp_repairs_total") == repairs
        # Only the roots' own root-uid needed the annotator.
        assert repairs == 2, (repairs, a.records()[-20:])
        uid = graph["metadata"]["uid"]
        for name, st in before.items():
            if name.startswith("pods/") and "web" not in name:
                assert (
                    st["aibom.dev/root"] == "DynamoGraphDeployment/g"
                    and st["aibom.dev/root-uid"] == uid
                )
        assert web["metadata"]["uid"] in {v["aibom.dev/root-uid"] for v in before.values()}
    finally:
        hook.unregister(kubectl)
        hook.stop()


# -- degradation: CRDs come and go --

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.aibom-test.example.com"},
    "spec": {
        "group": "aibom-test.example.com",
        "names": {
            "kind": "Widget",
            "plural": "widgets",
            "singular": "widget",
            "listKind": "WidgetList",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def test_a_crd_installed_later_is_watched_without_a_restart(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    ns: str,
    start: Callable[..., Annotator],
    tmp_path: Path,
) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text("tracked:\n  - {group: aibom-test.example.com, kind: Widget}\n")
    grant_extra(kubectl, "aibom-annotator", "widgets")
    control_plane.delete_crd("widgets.aibom-test.example.com")
    a = start(f"--kinds={kinds}")
    apply(kubectl, dcd(ns, "other"))  # the other kinds work meanwhile
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-other")
    crd_file = tmp_path / "widget-crd.yaml"
    crd_file.write_text(yaml.safe_dump(WIDGET_CRD))
    control_plane.install_crd(crd_file)
    try:
        apply(
            kubectl,
            {
                "apiVersion": "aibom-test.example.com/v1",
                "kind": "Widget",
                "metadata": meta(ns, "w"),
                "spec": {"template": {"spec": pod_spec("registry.example/w:1")}},
            },
        )
        wait_doc(control_plane, ns, "aibom-widget-w", timeout=30)
        assert (
            a.metric(
                "aibom_annotator_watch_healthy",
                {"group": "aibom-test.example.com", "kind": "Widget"},
            )
            == 1
        )
    finally:
        control_plane.delete_crd("widgets.aibom-test.example.com")
    # The kind went away: the other kinds are unaffected.
    apply(kubectl, dcd(ns, "after"))
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-after")
    assert a.ready()


def test_a_kind_that_cannot_be_listed_does_not_hold_up_the_others(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    ns: str,
    start: Callable[..., Annotator],
    tmp_path: Path,
) -> None:
    # A CRD whose preferred version needs a conversion webhook that is down:
    # every LIST at that version fails with 500, as with a broken operator.
    crd: dict[str, Any] = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["name"] = "gadgets.aibom-test.example.com"
    crd["spec"]["names"] = {
        "kind": "Gadget",
        "plural": "gadgets",
        "singular": "gadget",
        "listKind": "GadgetList",
    }
    schema = crd["spec"]["versions"][0]["schema"]
    crd["spec"]["versions"].append(
        {"name": "v2", "served": True, "storage": False, "schema": schema}
    )
    crd["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/convert"},
        },
    }
    crd_file = tmp_path / "gadget-crd.yaml"
    crd_file.write_text(yaml.safe_dump(crd))
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text("walkOnly:\n  - {group: aibom-test.example.com, kind: Gadget}\n")
    grant_extra(kubectl, "aibom-annotator", "gadgets")
    control_plane.install_crd(crd_file)
    try:
        gadget = apply(
            kubectl,
            {
                "apiVersion": "aibom-test.example.com/v1",
                "kind": "Gadget",
                "metadata": meta(ns, "g"),
                "spec": {},
            },
        )
        a = start(f"--kinds={kinds}", "--sync-timeout=3")
        apply(kubectl, dcd(ns, "unaffected"))
        apply(kubectl, deployment(ns, "owned-by-gadget", gadget, replicas=0))
        wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-unaffected")
        cm = wait_doc(control_plane, ns, "aibom-deployment-owned-by-gadget")
        props = {p["name"]: p["value"] for p in document(cm)["metadata"]["component"]["properties"]}
        assert props["aibom.rollup.unresolved"] == "Timeout aibom-test.example.com/Gadget/g"
        gadget_kind = {"group": "aibom-test.example.com", "kind": "Gadget"}
        assert a.metric("aibom_annotator_watch_healthy", gadget_kind) == 0
        assert (
            a.metric("aibom_annotator_watch_restarts_total", {**gadget_kind, "reason": "error"})
            >= 1
        )
        assert a.ready()
        assert (
            a.metric("aibom_rollup_unresolved_total", {"kind": "Deployment", "reason": "Timeout"})
            >= 1
        )
        assert any(r.get("msg", "").startswith("kind cannot be listed") for r in a.records())
    finally:
        control_plane.delete_crd("gadgets.aibom-test.example.com")


def grant_extra(kubectl: Kubectl, user: str, resource: str) -> None:
    rules = [
        {
            "apiGroups": ["aibom-test.example.com"],
            "resources": [resource],
            "verbs": ["list", "watch", "patch"],
        }
    ]
    bind_rules(kubectl, user, f"{user}-{resource}", rules)


# -- operations: leader election, shutdown, API server restart --


def test_killed_leader_standby_finishes_and_never_deletes_a_child_document_early(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: Callable[..., Annotator]
) -> None:
    n = 24
    # A slow leader (3 writes/s), so that it dies in the middle of the work.
    leader = start("--write-qps=3", "--write-burst=1", ident="leader")
    standby = start("--write-qps=50", ident="standby", wait=False).wait_ready()
    assert not standby.leading()
    for i in range(n):
        apply(kubectl, statefulset(ns, f"s{i}", replicas=0))
    wait_for(f"{n} StatefulSet documents", lambda: len(docs(control_plane, ns)) == n, 60)
    with Recorder(control_plane, ns) as rec:
        for i in range(n):
            group = apply(kubectl, lws(ns, f"l{i}"))
            kubectl(
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
            lambda: (
                sum(1 for k in docs(control_plane, ns) if k.startswith("aibom-leaderworkerset-"))
                >= 3
            ),
            60,
            every=0.05,
        )
        leader.kill()
        killed = time.monotonic()
        standby.wait_leading(timeout=25)
        took_over = time.monotonic() - killed
        want = {f"aibom-leaderworkerset-l{i}" for i in range(n)}
        wait_for(
            "every LWS document and no StatefulSet document",
            lambda: set(docs(control_plane, ns)) == want,
            60,
        )
        time.sleep(0.5)
    print(f"standby took over {took_over:.1f} s after the leader was killed")
    assert took_over <= 17.5, f"standby took over after {took_over:.1f} s"
    for i in range(n):
        rec.assert_superseded_in_order(
            f"aibom-statefulset-s{i}", f"aibom-leaderworkerset-l{i}", f"StatefulSet/s{i}"
        )
    # Nothing was lost: every LWS document lists its StatefulSet.
    final = docs(control_plane, ns)
    for i in range(n):
        assert owned(document(final[f"aibom-leaderworkerset-l{i}"])) == [f"StatefulSet/s{i}"]


def test_graceful_shutdown_hands_the_lease_over_at_once(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: Callable[..., Annotator]
) -> None:
    first = start(ident="first")
    second = start(ident="second", wait=False).wait_ready()
    assert not second.leading()
    stopped = time.monotonic()
    assert first.stop() == 0
    lease = get(control_plane, f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/aibom-test")
    assert lease is not None and lease["spec"]["holderIdentity"] in ("", "second")
    second.wait_leading(timeout=10)
    handed_over = time.monotonic() - stopped
    print(f"standby leading {handed_over:.1f} s after SIGTERM to the leader")
    assert handed_over < 8
    apply(kubectl, dcd(ns, "after-handover"))
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-after-handover")


def test_watches_resume_after_an_api_server_restart(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    apply(kubectl, dcd(ns, "before"))
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-before")
    restarts = annotator.metric("aibom_annotator_watch_restarts_total")
    control_plane.restart_apiserver()
    apply(kubectl, dcd(ns, "after"))
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-after", timeout=60)
    assert annotator.metric("aibom_annotator_watch_restarts_total") > restarts
    wait_for("the annotator leading again", annotator.leading, 30)
    assert annotator.ready()
