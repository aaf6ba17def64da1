"""kwok: the kubelets of fake Nodes (sigs.k8s.io/kwok), as its own ServiceAccount.

Built from ``modules/kwok`` (a ``tool`` directive naming upstream's
``sigs.k8s.io/kwok/cmd/kwok``, v0.8.0) with the ldflags of upstream's
``hack/releases.sh`` (``pkg/consts.Version``, ``KubeVersion``), checked with
``kwok --version``. The build also renders the release's two manifests as
upstream's ``hack/manifests.sh`` makes them from the same module:
``release.yaml`` (``kubectl kustomize kustomize/kwok``: CRDs, ServiceAccount
``kube-system/kwok-controller``, ClusterRole and binding, FlowSchema, the
``kwok`` ConfigMap with its KwokConfiguration, Service, Deployment) and
``stage-fast.yaml`` (``kubectl kustomize kustomize/stage/fast``: the default
Stages ``node-initialize``, ``node-heartbeat-with-lease``, ``pod-ready``,
``pod-complete``, ``pod-delete``).

:meth:`Kwok.start` (after ``kube-scheduler``, which it requires: kwok plays the
kubelets, the scheduler binds the Pods) applies from the release the CRDs, the
ServiceAccount, the ClusterRole and binding and the FlowSchema (not the
ConfigMap, Service or Deployment: the controller is a local process), and the
default Stages with one addition (:func:`with_image_ids`): every container
status the Pod Stages write carries an ``imageID``, as a kubelet reports it once
the runtime pulled the image. It runs the controller as
``kube-system/kwok-controller`` (a TokenRequest token, the release's ClusterRole:
never admin) with the release's KwokConfiguration (Stages from the API,
``manageNodesWithAnnotationSelector: kwok.x-k8s.io/node=fake``), its server on
a loopback port, creates :data:`NODES` Nodes annotated ``kwok.x-k8s.io/node:
fake``, and returns once ``/healthz`` answers and every Node is Ready with no
taint left (kube-controller-manager lifts the ``not-ready`` taint the
``TaintNodesByCondition`` admission plugin puts on a new Node).

The imageID: kwok's templates have sprig's functions (``pkg/utils/gotpl``:
``sprig.TxtFuncMap()``), ``sha256sum`` among them, so the Stage computes
``<repository>@sha256:<hex>`` where hex is the SHA-256 of ``kwok/<image>/<pod
name>``: one digest per image and Pod, as if each node had pulled a moving tag at
its own time, so a document shows which Pods' reports reached it (a digest names
at most 3 Pods in a document). An image pinned by digest reports that digest, as
a runtime does. :func:`image_id` and :func:`digest_of` compute the same in Python.

The Nodes carry no taint: kwok's own example taints its fake Node so that real
Pods stay off it in a cluster that also has real Nodes; here every Node is fake
and the operators' Pods are made as released (no tolerations for a kwok taint).
Each Node has its own ``podCIDR`` (kwok takes Pod IPs from it) and GPU-node
resources (:data:`NODE_RESOURCES`, kept by the ``node-initialize`` Stage), so
that Pods asking for ``nvidia.com/gpu`` are scheduled.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Final

import yaml

from tests.controlplane.component import RELEASE_KINDS, Component, register, rendered
from tests.controlplane.gobuild import GoBuild, go_ldflags, module_dir, module_source
from tests.controlplane.kubernetes import kustomize
from tests.controlplane.process import ControlPlaneError, free_ports, http_ok

#: The kwok release (modules/kwok/go.mod).
VERSION: Final = "v0.8.0"
#: What upstream's Makefile passes as ``--kube-version``: the first line of the
#: module's ``supported_releases.txt`` (1.36.1 for v0.8.0).
KUBE_VERSION: Final = "v1.36.1"
MODULE: Final = "sigs.k8s.io/kwok"
MAIN: Final = "sigs.k8s.io/kwok/cmd/kwok"
#: Where the release puts the controller, and as whom it runs.
NAMESPACE: Final = "kube-system"
SERVICE_ACCOUNT: Final = "kwok-controller"
#: The annotation the release's KwokConfiguration selects the Nodes it manages by.
NODE_ANNOTATION: Final = ("kwok.x-k8s.io/node", "fake")
#: A label of ours on the Nodes it made (deleted on stop).
NODE_LABEL: Final = ("type", "kwok")
#: How many fake Nodes. Enough GPUs for the largest module: test_nim_operator keeps
#: a guarded and an unguarded namespace for the module, each with a multi-node
#: NIMService (2 Pods of 8 GPUs, a whole Node each) and 1-GPU Pods beside it, so
#: 4 Nodes (32 GPUs) left a Pod Pending whenever a namespace's Pods were slow to go.
NODES: Final = 8
#: Each Node's capacity and allocatable: a GPU node (the ``node-initialize`` Stage keeps
#: what the Node says; without it, kwok's defaults have no ``nvidia.com/gpu``).
NODE_RESOURCES: Final = {
    "cpu": "128",
    "memory": "1Ti",
    "ephemeral-storage": "2Ti",
    "pods": "250",
    "nvidia.com/gpu": "8",
}
#: The release's kinds it applies: the usual ones and the FlowSchema (its requests are
#: exempt from API priority and fairness, as released).
KINDS: Final = RELEASE_KINDS | {"FlowSchema"}


def _render(_module: Path, staging: Path) -> None:
    """``release.yaml`` and ``stage-fast.yaml``: ``kubectl kustomize`` of the module's
    ``kustomize/kwok`` and ``kustomize/stage/fast`` (upstream's ``hack/manifests.sh``
    also sets the Deployment's image tag, which is not used here)."""
    source = module_source(module_dir("kwok"), MODULE)
    for name, folder in (
        ("release.yaml", "kustomize/kwok"),
        ("stage-fast.yaml", "kustomize/stage/fast"),
    ):
        header = f"# kubectl kustomize {folder} of {MODULE}@{VERSION} ({source})\n"
        (staging / name).write_text(header + kustomize(source / folder))


BUILD: Final = GoBuild(
    name="kwok",
    version=VERSION,
    mains={"kwok": MAIN},
    module=module_dir("kwok"),
    # hack/releases.sh sets these two for a release (Makefile: VERSION from the git
    # tag, KUBE_VERSION the newest supported release); the rest keep their defaults.
    ldflags=go_ldflags(
        {"sigs.k8s.io/kwok/pkg/consts": {"Version": VERSION, "KubeVersion": KUBE_VERSION}}
    ),
    check=("kwok", ("--version",), f"kwok version {VERSION}"),
    verify=True,
    estimate="about 3 min",
    render=_render,
    outputs=("release.yaml", "stage-fast.yaml"),
)


def release() -> list[dict[str, Any]]:
    """The release's manifests (built and rendered unless cached)."""
    return rendered(BUILD, "release.yaml")


# -- the image digests -----------------------------------------------------------------

#: The prefix of what is hashed: ``kwok/<image>/<pod name>``.
_SALT: Final = "kwok"


def digest_of(image: str, pod: str) -> str:
    """The digest the Stages report for ``image`` in the Pod named ``pod``."""
    _, _, pinned = image.partition("@")
    return pinned or "sha256:" + hashlib.sha256(f"{_SALT}/{image}/{pod}".encode()).hexdigest()


def image_id(image: str, pod: str) -> str:
    """``imageID`` as the Stages write it: the repository (no tag, no digest) and the
    digest (:func:`digest_of`)."""
    name = image.partition("@")[0]
    return f"{re.sub(r':[^:/]*$', '', name)}@{digest_of(image, pod)}"


def pod_digests(pod: dict[str, Any]) -> set[str]:
    """What the Stages report for every container (init ones too) of ``pod``."""
    spec, name = pod["spec"], pod["metadata"]["name"]
    return {
        digest_of(c["image"], name) for c in [*spec.get("initContainers", []), *spec["containers"]]
    }


def _image_id_template(ref: str) -> str:
    """The template of :func:`image_id` for the image ``ref`` (``.image``, ``$item.image``):
    sprig's ``regexReplaceAll``, ``splitList``, ``contains`` and ``sha256sum``; ``$`` is
    the Pod."""
    repo = f'regexReplaceAll ":[^:/]*$" (first (splitList "@" {ref})) ""'
    pinned = f'printf "%s@%s" ({repo}) (last (splitList "@" {ref}))'
    hashed = (
        f'printf "%s@sha256:%s" ({repo}) (sha256sum (printf "{_SALT}/%s/%s" {ref} $.metadata.name))'
    )
    actions = (f'if contains "@" {ref}', f"{pinned} | Quote", "else", f"{hashed} | Quote", "end")
    return "".join("{{ " + action + " }}" for action in actions)


#: A container status entry of kwok's Pod Stages: ``- image: {{ .image | Quote }}``.
_STATUS_ENTRY: Final = re.compile(
    r"^(?P<indent>[ ]*)- image: \{\{ (?P<ref>(?:\$item)?\.image) \| Quote \}\}$", re.MULTILINE
)


def with_image_ids(stages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Stages with an ``imageID`` line after each container status's ``image`` in
    the Pod Stages' status templates (the Node Stages as they are). Fails if a Pod
    Stage writes a container status this does not recognise."""
    out = []
    for original in stages:
        stage = json.loads(json.dumps(original))
        spec = stage["spec"]
        template = spec.get("next", {}).get("statusTemplate")
        if spec["resourceRef"]["kind"] == "Pod" and template:
            entries = template.count("Statuses:")
            changed, count = _STATUS_ENTRY.subn(
                lambda m: (
                    f"{m.group(0)}\n{m.group('indent')}  imageID: "
                    + _image_id_template(m.group("ref"))
                ),
                template,
            )
            if count != entries:
                raise ValueError(
                    f"kwok Stage {stage['metadata']['name']}: {entries} status lists,"
                    f" {count} container entries recognised"
                )
            spec["next"]["statusTemplate"] = changed
        out.append(stage)
    return out


def stages() -> list[dict[str, Any]]:
    """The release's default Stages (``stage-fast.yaml``), with imageIDs."""
    return with_image_ids(rendered(BUILD, "stage-fast.yaml"))


def node(index: int) -> dict[str, Any]:
    """A fake Node kwok manages (its annotation), a GPU node, with its own Pod CIDR."""
    name = f"kwok-node-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {NODE_ANNOTATION[0]: NODE_ANNOTATION[1],
                            "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {NODE_LABEL[0]: NODE_LABEL[1], "kubernetes.io/hostname": name,
                       "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
        },
        "spec": {"podCIDR": f"10.244.{index}.0/24", "podCIDRs": [f"10.244.{index}.0/24"]},
        "status": {"capacity": dict(NODE_RESOURCES), "allocatable": dict(NODE_RESOURCES)},
    }  # fmt: skip


def ready_condition(node: dict[str, Any]) -> dict[str, Any]:
    """A Node's ``Ready`` condition, ``{}`` when it has none yet."""
    conditions: list[dict[str, Any]] = node.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), {})


@register
class Kwok(Component):
    name: ClassVar[str] = "kwok"
    summary: ClassVar[str] = f"kwok {VERSION} ({NODES} fake Nodes, Pod status by its Stages)"
    requires: ClassVar[tuple[str, ...]] = ("kube-scheduler",)
    go_build: ClassVar[GoBuild | None] = BUILD

    port = 0

    def start(self) -> None:
        began = self.began()
        docs = release()
        self.apply_release(docs, KINDS)
        self.plane.apply(stages())
        kubeconfig = self.run_as(NAMESPACE, SERVICE_ACCOUNT)
        (self.port,) = free_ports(1)
        config = self.work_dir / "kwok.yaml"
        config.write_text(yaml.safe_dump(self._configuration(docs), sort_keys=False))
        self.spawn(
            "kwok",
            [str(self.dist_dir / "bin" / "kwok"), f"--config={config}",
             f"--kubeconfig={kubeconfig}",
             # The release passes the Pod's IP; out of a cluster, the process is on loopback.
             "--node-ip=127.0.0.1"],
        )  # fmt: skip
        self.wait("/healthz", lambda: http_ok(self.port, "/healthz"))
        for index in range(NODES):
            resp = self.plane.request("POST", "/api/v1/nodes", node(index))
            if not resp.ok and resp.status != 409:  # 409: left by an earlier start
                raise RuntimeError(f"creating a kwok Node: {resp.status} {resp.body[:300]!r}")
        try:
            self.wait(f"{NODES} Nodes Ready and untainted", self.nodes_ready)
        except ControlPlaneError as exc:
            raise ControlPlaneError(f"{exc}\nthe Nodes then: {self.nodes_state()}") from None
        self.ready_after(began)

    def _configuration(self, docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """The release's KwokConfiguration (its ConfigMap ``kwok``), its server on loopback."""
        (configmap,) = [
            d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kwok"
        ]
        config: dict[str, Any] = yaml.safe_load(configmap["data"]["kwok.yaml"])
        config["options"]["nodePort"] = self.port
        config["options"]["serverAddress"] = f"127.0.0.1:{self.port}"
        return config

    def nodes(self) -> list[dict[str, Any]]:
        """The Nodes it made."""
        resp = self.plane.request(
            "GET", f"/api/v1/nodes?labelSelector={NODE_LABEL[0]}%3D{NODE_LABEL[1]}"
        )
        assert resp.ok, (resp.status, resp.body[:300])
        found: list[dict[str, Any]] = resp.json()["items"]
        return found

    def nodes_ready(self) -> bool:
        def ready(n: dict[str, Any]) -> bool:
            return not n["spec"].get("taints") and ready_condition(n).get("status") == "True"

        found = self.nodes()
        return len(found) == NODES and all(ready(n) for n in found)

    def nodes_state(self) -> str:
        """One line per Node it made: Ready's status and reason, and the taints."""
        lines = []
        for n in self.nodes():
            ready = ready_condition(n)
            taints = ",".join(f"{t['key']}:{t['effect']}" for t in n["spec"].get("taints", []))
            lines.append(
                f"{n['metadata']['name']} Ready={ready.get('status', '-')}"
                f" ({ready.get('reason', '')}) taints=[{taints}]"
                f" deleting={'deletionTimestamp' in n['metadata']}"
            )
        return "; ".join(lines) or "none"

    def stop(self) -> None:
        """Delete its Nodes (kube-controller-manager then removes the Pods bound to
        them), then stop the controller."""
        if self.plane.server:
            self.plane.kubectl("delete", "nodes", "-l", "=".join(NODE_LABEL),
                               "--ignore-not-found", "--wait=false", check=False)  # fmt: skip
        super().stop()

    def info(self) -> dict[str, Any]:
        return super().info() | {"nodes": [f"kwok-node-{i}" for i in range(NODES)]}
