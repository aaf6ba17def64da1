"""Tiny builders of raw Kubernetes objects for the core's table tests."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from aibom_core.objects import Obj

API_VERSION = {
    "Pod": "v1",
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "DynamoGraphDeployment": "nvidia.com/v1beta1",
    "DynamoComponentDeployment": "nvidia.com/v1alpha1",
    "NIMService": "apps.nvidia.com/v1alpha1",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
    "PodCliqueSet": "grove.io/v1alpha1",
    "PodCliqueScalingGroup": "grove.io/v1alpha1",
    "PodClique": "grove.io/v1alpha1",
    "DisaggregatedSet": "disaggregatedset.x-k8s.io/v1alpha1",
    "Widget": "example.com/v1",
}


def uid_for(kind: str, name: str, ns: str = "ns", gen: int = 0) -> str:
    digest = hashlib.sha256(f"{ns}/{kind}/{name}/{gen}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def mk(
    kind: str,
    name: str,
    owner: Obj | None = None,
    *,
    ns: str = "ns",
    gen: int = 0,
    controller: bool = True,
    owner_uid: str | None = None,
    owner_api_version: str | None = None,
    extra_owners: Sequence[Obj] = (),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: Obj | None = None,
    status: Obj | None = None,
    uid: str | None = None,
) -> Obj:
    """An object of `kind`, controller-owned by `owner` (its UID unless `owner_uid`)."""
    meta: Obj = {
        "name": name,
        "namespace": ns,
        "uid": uid if uid is not None else uid_for(kind, name, ns, gen),
    }
    refs = []
    for o in extra_owners:
        refs.append(_ref(o, controller=False))
    if owner is not None:
        refs.append(
            _ref(owner, controller=controller, uid=owner_uid, api_version=owner_api_version)
        )
    if refs:
        meta["ownerReferences"] = refs
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    obj: Obj = {
        "apiVersion": API_VERSION.get(kind, "example.com/v1"),
        "kind": kind,
        "metadata": meta,
    }
    if spec is not None:
        obj["spec"] = spec
    if status is not None:
        obj["status"] = status
    return obj


def _ref(
    owner: Obj, *, controller: bool, uid: str | None = None, api_version: str | None = None
) -> Obj:
    ref: Obj = {
        "apiVersion": api_version or owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": uid or owner["metadata"]["uid"],
    }
    if controller:
        ref["controller"] = True
        ref["blockOwnerDeletion"] = True
    return ref


def chain(*spec: str, ns: str = "ns") -> list[Obj]:
    """`chain("DynamoGraphDeployment/g", "Deployment/d", "Pod/p")`: each owned by the previous."""
    out: list[Obj] = []
    for item in spec:
        kind, name = item.split("/", 1)
        out.append(mk(kind, name, out[-1] if out else None, ns=ns))
    return out


def dynamo_graph(component: str, rs_hash: str, pods: int = 2) -> list[Obj]:
    """DynamoGraphDeployment/g -> DynamoComponentDeployment/COMPONENT -> Deployment/COMPONENT
    -> ReplicaSet/COMPONENT-RS_HASH -> `pods` Pods COMPONENT-RS_HASH-<i>, graph first."""
    rs_name = f"{component}-{rs_hash}"
    objs = chain(
        "DynamoGraphDeployment/g",
        f"DynamoComponentDeployment/{component}",
        f"Deployment/{component}",
        f"ReplicaSet/{rs_name}",
    )
    return [*objs, *(mk("Pod", f"{rs_name}-{i}", objs[-1]) for i in range(pods))]


def container_spec(
    image: str,
    *,
    command: list[Any] | None = None,
    args: list[Any] | None = None,
    env: list[Obj] | None = None,
) -> Obj:
    """A container `c` running `image` (command, args and env only when given)."""
    c: Obj = {"name": "c", "image": image}
    if command is not None:
        c["command"] = command
    if args is not None:
        c["args"] = args
    if env is not None:
        c["env"] = env
    return c


def bare_pod(*containers: Obj) -> Obj:
    """A Pod `p` with these containers (no namespace, no owner)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": list(containers)},
    }
