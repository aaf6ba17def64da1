"""What the integration tests share: waiting, objects, our two processes, identities.

Everything here runs against the real control plane of ``conftest.py`` (which
also holds the fixtures); nothing stands in for the API server. In one place so
that every module waits, builds objects and runs the webhook and the annotator
the same way:

- ``wait_for``: poll a probe until it is truthy, within a bound: the only way a
  test here waits (never a fixed sleep). ``settle`` and ``Recorder.sync`` are
  positive witnesses for claims that something does NOT happen: wait for them,
  then assert the absence.
- Objects: ``meta``, ``owner_ref``, ``template``, ``workload``, ``deployment``,
  ``statefulset``, ``cronjob``, ``lws``, ``dgd``/``dcd`` (Dynamo v1beta1),
  ``grove``, ``pod``, ``crd``; ``apply`` (server-side, field manager ``test``),
  ``kubectl_apply`` (client-side, optionally as another identity),
  ``merge_patch``; ``get``/``items`` (an API GET), ``kubectl_get``;
  ``new_namespace``.
- The annotator: ``Annotator`` (a real ``python -m aibom_rollup annotator``
  process), ``StartAnnotator`` (the type of conftest's ``start`` fixture), its
  identity (``grant_annotator``, ``grant_lease``), its documents (``docs``,
  ``document``, ``owned``, ``wait_doc``), ``Recorder`` (every watch event of the
  documents, in order), ``settle``.
- The webhook: ``Webhook`` (a real ``python -m aibom_rollup webhook`` process
  and its MutatingWebhookConfiguration), ``running_webhook`` (and ``StartWebhook``,
  the type of conftest's ``start_webhook`` fixture), ``grant_webhook``,
  ``shipped_role``, ``enabled_namespace``, ``wait_registered``, ``stamp``.
- ``metric_sum`` (a Prometheus text exposition), ``ConfigMapWatch`` (a watch in
  a thread), ``token_kubeconfig`` (a bearer-token identity).
"""

from __future__ import annotations

import contextlib
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
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

import pytest
import yaml

from aibom_core.document import unpack
from aibom_core.objects import Obj
from tests.controlplane import (
    HARNESS_APPLY,
    REPO_ROOT,
    ControlPlane,
    Kubectl,
    bind_rules,
    child_env,
)

MANIFESTS = REPO_ROOT / "manifests"
RBAC = MANIFESTS / "annotator" / "rbac.yaml"
MANAGED = "app.kubernetes.io/managed-by=aibom-rollup"
LABEL_KEY = "aibom-test.dev/run"
IMAGE = "registry.example/app:1"
STAMP_KEYS = ("aibom.dev/root", "aibom.dev/root-uid", "aibom.dev/rollup", "aibom.dev/rollup-reason")


# -- waiting and reading --


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 30.0, every: float = 0.2) -> Any:
    """Poll `probe` until it returns something truthy (returned); fail after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(every)


def metric_sum(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The sum of the samples of `name` in a Prometheus text exposition whose labels
    include `labels` (all of them when None)."""
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def new_namespace(cp: ControlPlane, prefix: str) -> str:
    """A fresh namespace `<prefix>-<6 hex>`, returned once its default ServiceAccount
    exists (Pods are refused until the serviceaccount controller has made it)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    resp = cp.request("POST", "/api/v1/namespaces", body)
    assert resp.status == 201, resp.body
    wait_for(
        f"the default ServiceAccount in {name}",
        lambda: cp.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").ok,
        every=0.1,
    )
    return name


def digest(seed: str) -> str:
    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


def apply(kubectl: Kubectl, doc: Obj) -> Obj:
    """Server-side apply as field manager `test`: the object as the API server stored it."""
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


def kubectl_apply(kubectl: Kubectl, doc: Obj, *, kubeconfig: Path | None = None) -> Obj:
    """`kubectl apply -f - -o json` (client-side), as `kubeconfig`'s identity if given."""
    out = kubectl("apply", "-f", "-", "-o", "json", input=json.dumps(doc), kubeconfig=kubeconfig)
    result: Obj = json.loads(out.stdout)
    return result


def kubectl_get(kubectl: Kubectl, ns: str, *what: str) -> Obj:
    result: Obj = json.loads(kubectl("get", "-n", ns, *what, "-o", "json").stdout)
    return result


def merge_patch(
    kubectl: Kubectl, ns: str, what: str, patch: Obj, *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`kubectl patch -n NS WHAT --type=merge -p PATCH` (WHAT: `kind/name`)."""
    return kubectl("patch", "-n", ns, what, "--type=merge", "-p", json.dumps(patch), check=check)


def owner_ref(obj: Obj, *, controller: bool = True) -> Obj:
    """An ownerReference to `obj` (no blockOwnerDeletion: nothing is checked for it)."""
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


def workload(
    kind: str,
    ns: str,
    name: str,
    owner: Obj | None = None,
    *,
    replicas: int,
    template: Obj,
    **spec: Any,
) -> Obj:
    """An apps/v1 workload (Deployment, StatefulSet, ReplicaSet) selecting its template,
    with more `spec` fields (e.g. `serviceName=`) if given."""
    labels = template["metadata"]["labels"]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": meta(ns, name, owner),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": template,
            **spec,
        },
    }


def deployment(
    ns: str, name: str, owner: Obj | None = None, *, replicas: int = 1, image: str = IMAGE
) -> Obj:
    """`replicas` Pods of one container `main` running `image`, labelled `app=<name>`."""
    pods = template({"app": name}, image)
    return workload("Deployment", ns, name, owner, replicas=replicas, template=pods)


def statefulset(
    ns: str,
    name: str,
    owner: Obj | None = None,
    *,
    replicas: int = 1,
    image: str = "registry.example/lws/worker:1",
) -> Obj:
    """Like `deployment`, labelled `sts=<name>`; no serviceName (no Service is needed)."""
    return workload(
        "StatefulSet", ns, name, owner, replicas=replicas, template=template({"sts": name}, image)
    )


def cronjob(
    ns: str,
    name: str,
    image: str = IMAGE,
    *,
    schedule: str = "0 0 1 1 *",
    suspend: bool = False,
    labels: dict[str, str] | None = None,
) -> Obj:
    """A CronJob whose Jobs run `image` once (restartPolicy Never)."""
    pods: Obj = {"spec": {**pod_spec(image), "restartPolicy": "Never"}}
    if labels:
        pods["metadata"] = {"labels": labels}
    spec: Obj = {"schedule": schedule, "jobTemplate": {"spec": {"template": pods}}}
    if suspend:
        spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta(ns, name), "spec": spec}


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


def crd(group: str, kind: str, plural: str) -> Obj:
    """A namespaced CustomResourceDefinition, one version `v1`, with no schema (any fields)."""
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
            },
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}],
        },
    }


def get(cp: ControlPlane, path: str) -> Obj | None:
    resp = cp.request("GET", path)
    if resp.status == 404:
        return None
    assert resp.ok, (path, resp.status, resp.body[:300])
    result: Obj = resp.json()
    return result


def items(cp: ControlPlane, path: str) -> list[Obj]:
    body = get(cp, path)
    assert body is not None, path
    result: list[Obj] = body["items"]
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


def reported_pods(doc: Obj) -> set[str]:
    """The Pods whose status reported a digest in the document (its pod-status evidence)."""
    return {
        prop["value"].split("#", 1)[0].removeprefix("Pod/")
        for comp in doc.get("components", [])
        for prop in comp.get("properties", [])
        if prop["name"] == "aibom.evidence.pod-status"
    }


def unproven_members(doc: Obj) -> set[str]:
    """What the document lists as ``aibom.rollup.unproven.<i>``."""
    props = doc.get("metadata", {}).get("component", {}).get("properties") or []
    return {p["value"] for p in props if p["name"].startswith("aibom.rollup.unproven.")}


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


def grant_annotator(
    cp: ControlPlane, kubectl: Kubectl, user: str, *, without: tuple[str, ...] = ()
) -> Path:
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
    #: New ports at most this many times when a port picked free was taken before
    #: the annotator bound it (4 xdist workers pick ports at once).
    port_retries: int = 3
    _log_start: int = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.identity}.log"

    def _lost_its_port(self) -> bool:
        """It exited because a port picked free was taken before it bound it."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                return b"address already in use" in log.read()
        except OSError:
            return False

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
            self._log_start = log.tell()
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
        if not self.alive() and self.port_retries > 0 and self._lost_its_port():
            self.port_retries -= 1
            self.metrics_port, self.health_port = free_port(), free_port()
            self.start()
            return False
        assert self.alive(), f"annotator exited:\n{self.tail()}"
        return self._get(self.health_port, "/readyz")[0] == 200

    def wait_ready(self, timeout: float = 60) -> Self:
        wait_for(f"annotator {self.identity} ready", self.ready, timeout)
        return self

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        status, text = self._get(self.metrics_port, "/metrics")
        return metric_sum(text, name, labels) if status == 200 else 0.0

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


class StartAnnotator(Protocol):
    """The ``start`` fixture (tests/integration/conftest.py): ``start(*args,
    kubeconfig=, ident=, wait=)`` starts an :class:`Annotator` for the test's
    namespace, with the extra command-line `args`, as `kubeconfig` (default: the
    shipped ClusterRole's user) and named `ident`; with `wait`, once it is ready
    and leading."""

    def __call__(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        ident: str = "annotator-a",
        wait: bool = True,
    ) -> Annotator: ...


class ConfigMapWatch:
    """A thread that hands every watch event of a namespace's ConfigMaps (those
    matching `selector`, if given) to `handle`, in resourceVersion order."""

    def __init__(self, cp: ControlPlane, ns: str, *, selector: str = "") -> None:
        self.cp = cp
        self.ns = ns
        self.selector = selector
        self._stop = threading.Event()
        self._conn: http.client.HTTPSConnection | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = threading.Event()

    def __enter__(self) -> Self:
        self._thread.start()
        assert self._started.wait(10), "the watch did not start within 10 s"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._conn is not None and self._conn.sock is not None:
            with contextlib.suppress(OSError):
                self._conn.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)

    def handle(self, event: Obj) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        assert self.cp.ports is not None
        ctx: ssl.SSLContext = self.cp.ssl_context()
        self._conn = http.client.HTTPSConnection("127.0.0.1", self.cp.ports.apiserver, context=ctx)
        query = f"watch=1&labelSelector={self.selector}" if self.selector else "watch=1"
        self._conn.request("GET", f"/api/v1/namespaces/{self.ns}/configmaps?{query}")
        resp = self._conn.getresponse()
        self._started.set()
        with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    break
                self.handle(json.loads(line))


class Recorder(ConfigMapWatch):
    """Every watch event of our ConfigMaps in a namespace, in resourceVersion order.

    It watches every ConfigMap of the namespace (and keeps only ours) so that
    `sync()` can make a marker ConfigMap: once the marker's event arrives, every
    event before it has arrived too (one watch stream is in resourceVersion order).
    """

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        super().__init__(cp, ns)
        self.events: list[tuple[str, str, list[str]]] = []  # type, name, owned
        self._markers: set[str] = set()
        self._seen = threading.Condition()

    def handle(self, event: Obj) -> None:
        label, _, value = MANAGED.partition("=")
        cm = event["object"]
        name = cm["metadata"]["name"]
        if (cm["metadata"].get("labels") or {}).get(label) == value:
            listed = owned(document(cm)) if event["type"] != "DELETED" else []
            self.events.append((event["type"], name, listed))
        elif name.startswith("recorder-sync-"):
            with self._seen:
                self._markers.add(name)
                self._seen.notify_all()

    def sync(self, timeout: float = 30.0) -> None:
        """Return once every event of the namespace's ConfigMaps so far has been recorded."""
        name = f"recorder-sync-{uuid.uuid4().hex[:8]}"
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        made = self.cp.request("POST", f"/api/v1/namespaces/{self.ns}/configmaps", body)
        assert made.status == 201, made.body
        with self._seen:
            if not self._seen.wait_for(lambda: name in self._markers, timeout):
                pytest.fail(f"the recorder's watch did not see {name} within {timeout:.0f} s")

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


def settle(cp: ControlPlane, kubectl: Kubectl, ns: str, timeout: float = 60.0) -> Obj:
    """A positive witness that the annotator has judged everything it saw before now.

    Makes a marker, a new DynamoComponentDeployment (a root with no children),
    and waits until the annotator has written its document and stamped its
    `root-uid` (no webhook knows a root's own UID at admission). One worker
    checks stamps, in the order the changes arrived, each `--stamp-settle`
    after its change, and document reconciles start as soon as a change
    arrives: once the marker is stamped, every change that reached the
    annotator before the marker was made has been judged. Returns the marker.
    """
    name = f"settle-{uuid.uuid4().hex[:6]}"
    marker = apply(kubectl, dcd(ns, name))
    uid = marker["metadata"]["uid"]
    path = f"/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamocomponentdeployments/{name}"

    def judged() -> bool:
        ann = (get(cp, path) or {}).get("metadata", {}).get("annotations") or {}
        return ann.get("aibom.dev/root-uid") == uid and (
            f"aibom-dynamocomponentdeployment-{name}" in docs(cp, ns)
        )

    wait_for(f"the annotator to judge the marker {name}", judged, timeout)
    return marker


# -- the webhook --


def stamp(obj: Obj) -> dict[str, str]:
    """The object's stamp: those of its annotations that are our four keys."""
    ann = obj.get("metadata", {}).get("annotations") or {}
    return {k: v for k, v in ann.items() if k in STAMP_KEYS}


def bare_pod(ns: str, name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta(ns, name), "spec": pod_spec(IMAGE)}


class Webhook:
    """One `aibom-rollup webhook` process and its MutatingWebhookConfiguration."""

    def __init__(
        self,
        cp: ControlPlane,
        workdir: Path,
        *,
        name: str,
        kubeconfig: Path,
        selector: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.cp, self.name, self.kubeconfig = cp, name, kubeconfig
        self.dir = workdir / name
        self.port = free_port()
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.dir / "webhook.log"
        self.dir.mkdir(parents=True)
        self.certs()
        config = yaml.safe_load_all((self.dir / "mutatingwebhook.yaml").read_text())
        docs = [d for d in config if d]
        for doc in docs:
            doc["metadata"]["name"] = name
            for hook in doc["webhooks"]:
                if selector is not None:
                    hook["namespaceSelector"] = {"matchLabels": selector}
        self.config = docs

    def certs(self, *extra: str) -> str:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "aibom_rollup",
                "certs",
                "--out-dir",
                str(self.dir),
                "--ip",
                "127.0.0.1",
                "--url",
                f"https://127.0.0.1:{self.port}/mutate",
                *extra,
            ],
            cwd=REPO_ROOT,
            env=child_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    def start(self) -> None:
        log = open(self.log, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aibom_rollup",
                "webhook",
                "--cert-file",
                str(self.dir / "tls.crt"),
                "--key-file",
                str(self.dir / "tls.key"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--kubeconfig",
                str(self.kubeconfig),
                "--log-level",
                "debug",
                "--cert-check-interval",
                "0.5",
                # The edge-proof key `certs` wrote next to the certificate (provenance).
                "--provenance-key",
                str(self.dir / "provenance.key"),
                *self.args,
            ],
            cwd=REPO_ROOT,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        wait_for(f"{self.name} /readyz", self._ready, timeout=30)

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"webhook exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            return self.request("GET", "/readyz")[0] == 200
        except OSError:
            return False

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.proc = None
        return code

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.dir / "ca.crt"))

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, timeout=10, context=self.ssl_context()
        )

    def request(
        self, method: str, path: str, body: bytes | None = None, ctype: str = "application/json"
    ) -> tuple[int, bytes]:
        conn = self.connection()
        try:
            conn.request(method, path, body=body, headers={"Content-Type": ctype})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        _, text = self.request("GET", "/metrics")
        return metric_sum(text.decode(), name, labels)

    def register(self, kubectl: Kubectl) -> None:
        kubectl(*HARNESS_APPLY, input=yaml.safe_dump_all(self.config))

    def unregister(self, kubectl: Kubectl) -> None:
        kubectl("delete", "mutatingwebhookconfiguration", self.name, "--ignore-not-found")


def grant_webhook(cp: ControlPlane, kubectl: Kubectl, user: str, role: Obj) -> Path:
    """A kubeconfig for `user`, bound to `role` (a ClusterRole document) and nothing else."""
    ident = cp.issue_identity(user)
    bind_rules(kubectl, user, f"{user}-role", role["rules"])
    return ident.kubeconfig


def shipped_role() -> Obj:
    docs = yaml.safe_load_all((MANIFESTS / "webhook/rbac.yaml").read_text())
    role: Obj = next(d for d in docs if d and d["kind"] == "ClusterRole")
    return role


def enabled_namespace(kubectl: Kubectl, namespace: str, *labels: str) -> str:
    kubectl("label", "namespace", namespace, "aibom.dev/enabled=true", *labels, "--overwrite")
    return namespace


def wait_registered(
    kubectl: Kubectl, ns: str, probe: Obj | None = None, rollup: str = "uncovered"
) -> None:
    """The API server's webhook informer is asynchronous: wait until it calls us, i.e.
    until a server-side dry run of `probe` (a bare Pod by default) is stamped `rollup`."""

    def stamped() -> bool:
        obj = probe or bare_pod(ns, f"probe-{uuid.uuid4().hex[:6]}")
        out = kubectl("create", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(obj))
        return stamp(json.loads(out.stdout)).get("aibom.dev/rollup") == rollup

    wait_for("the webhook configuration to take effect", stamped, timeout=30)


class StartWebhook(Protocol):
    """The ``start_webhook`` fixture (tests/integration/conftest.py): starts
    :func:`running_webhook` for the module and returns the running webhook."""

    def __call__(
        self,
        *,
        user: str,
        name: str,
        selector: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> Webhook: ...


@contextlib.contextmanager
def running_webhook(
    cp: ControlPlane,
    kubectl: Kubectl,
    workdir: Path,
    *,
    user: str,
    name: str,
    selector: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> Iterator[Webhook]:
    """The webhook as shipped (its ClusterRole, for `user`; its configuration, named
    `name`, for the namespaces labelled `selector`), started and registered; on
    exit unregistered and stopped."""
    kubeconfig = grant_webhook(cp, kubectl, user, shipped_role())
    hook = Webhook(cp, workdir, name=name, kubeconfig=kubeconfig, selector=selector, args=args)
    hook.start()
    hook.register(kubectl)
    try:
        yield hook
    finally:
        hook.unregister(kubectl)
        if hook.proc is not None:
            hook.stop()


# -- identities --


def token_kubeconfig(
    cp: ControlPlane, path: Path, user: str, token: str, *, namespace: str | None = None
) -> Path:
    """A kubeconfig (mode 0600) for `cp` that authenticates as `user` with a bearer
    token (its context in `namespace`, if given)."""
    context: Obj = {"cluster": "cp", "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cp",
                "cluster": {"server": cp.server, "certificate-authority": str(cp.ca_file)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": context}],
        "current-context": user,
    }
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    return path
