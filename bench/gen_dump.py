"""Generate a synthetic `kubectl get -A -o json` dump with every ownership shape we know.

Deterministic (same arguments, same bytes). Each root is one of these shapes,
materialized the way the operators and Kubernetes' controllers do it, with
pods whose status carries image digests (as a kubelet would report them):

  dynamo     DynamoGraphDeployment -> DynamoComponentDeployment -> Deployment -> ReplicaSet -> Pods
  dynamo-lws DynamoGraphDeployment -> DynamoComponentDeployment -> LeaderWorkerSet
             -> leader StatefulSet -> leader Pod -> worker StatefulSet -> worker Pods (6 hops)
  grove      DynamoGraphDeployment -> PodCliqueSet -> PodClique -> Pods
  grove-sg   DynamoGraphDeployment -> PodCliqueSet -> PodCliqueScalingGroup -> PodClique -> Pods
  lws        LeaderWorkerSet -> leader StatefulSet -> leader Pod -> worker StatefulSet -> Pods
  nim        NIMService -> Deployment -> ReplicaSet -> Pods
  cronjob    CronJob -> Job -> Pods
  deployment Deployment -> ReplicaSet -> Pods
  dcd        a standalone DynamoComponentDeployment -> Deployment -> ReplicaSet -> Pods

plus one bare Pod per namespace (uncovered).

    python bench/gen_dump.py --roots 2000 --objects 100000 -o /tmp/dump.json

`--shapes` picks the shapes (round robin); the Pods are then spread so the
dump holds about `--objects` objects, fractional Pods per root included. A
fleet of small roots (~5 objects each):

    python bench/gen_dump.py --roots 20000 --objects 100000 \
        --shapes deployment,nim,cronjob,lws,dcd -o /tmp/fleet.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from aibom_core.objects import Obj

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.controlplane import owner_reference

SHAPES = ["dynamo", "dynamo-lws", "grove", "grove-sg", "lws", "nim", "cronjob", "deployment", "dcd"]
CREATED = "2026-11-01T12:00:00Z"

VLLM = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1"
SGLANG = "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.3.1"
NIM = "nvcr.io/nim/meta/llama-3.1-8b-instruct"
LWS_VLLM = "vllm/vllm-openai:v0.8.5"
BATCH = "python:3.12-slim"
WEB = "nginx:1.27"


def _hex(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def _uid(*parts: str) -> str:
    h = _hex("uid", *parts)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class Builder:
    def __init__(self, ns: str) -> None:
        self.ns = ns
        self.out: list[Obj] = []

    def obj(  # noqa: PLR0917
        self,
        api_version: str,
        kind: str,
        name: str,
        owner: Obj | None,
        spec: Obj | None = None,
        labels: dict[str, str] | None = None,
    ) -> Obj:
        meta: Obj = {
            "name": name,
            "namespace": self.ns,
            "uid": _uid(self.ns, kind, name),
            "resourceVersion": str(int(_hex(self.ns, kind, name)[:6], 16)),
            "creationTimestamp": CREATED,
        }
        if labels:
            meta["labels"] = labels
        if owner is not None:
            meta["ownerReferences"] = [owner_reference(owner)]
        o: Obj = {"apiVersion": api_version, "kind": kind, "metadata": meta}
        if spec is not None:
            o["spec"] = spec
        self.out.append(o)
        return o

    def pod(
        self,
        name: str,
        owner: Obj | None,
        containers: list[Obj],
        labels: dict[str, str] | None = None,
    ) -> Obj:
        p = self.obj("v1", "Pod", name, owner, {"containers": containers}, labels)
        p["status"] = {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": _image_id(c["image"]),
                    "ready": True,
                    "restartCount": 0,
                }
                for c in containers
            ],
        }
        return p


def _image_id(image: str) -> str:
    return f"{image.rsplit(':', 1)[0]}@sha256:{_hex('digest', image)}"


def _container(image: str, args: list[str] | None = None, command: list[str] | None = None) -> Obj:
    c: Obj = {"name": "main", "image": image}
    if command:
        c["command"] = command
    if args:
        c["args"] = args
    return c


def _template(c: Obj) -> Obj:
    return {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [c]}}


def _rs_pods(b: Builder, dep: Obj, c: Obj, pods: int) -> None:
    rs = b.obj(
        "apps/v1", "ReplicaSet", f"{dep['metadata']['name']}-7c9f", dep, {"template": _template(c)}
    )
    for i in range(pods):
        b.pod(f"{rs['metadata']['name']}-{i:03d}", rs, [c])


def _lws_tree(b: Builder, lws: Obj, c: Obj, pods: int) -> None:
    name = lws["metadata"]["name"]
    leader_sts = b.obj("apps/v1", "StatefulSet", name, lws, {"template": _template(c)})
    groups = max(1, pods // 4)
    per = max(0, pods // groups - 1)
    for g in range(groups):
        leader = b.pod(f"{name}-{g}", leader_sts, [c])
        worker_sts = b.obj(
            "apps/v1", "StatefulSet", f"{name}-{g}", leader, {"template": _template(c)}
        )
        for w in range(1, per + 1):
            b.pod(f"{name}-{g}-{w}", worker_sts, [c])


def _model_args(model: str) -> list[str]:
    return ["--model", model, "--served-model-name", model]


def shape(b: Builder, kind: str, name: str, pods: int) -> None:
    model = "Qwen/Qwen3-0.6B"
    if kind in ("dynamo", "dynamo-lws"):
        worker = _container(VLLM, _model_args(model), ["python3", "-m", "dynamo.vllm"])
        frontend = _container(VLLM, None, ["python3", "-m", "dynamo.frontend"])
        comps = [
            {
                "name": "Frontend",
                "type": "frontend",
                "replicas": 1,
                "podTemplate": _template(frontend),
            },
            {
                "name": "VllmWorker",
                "type": "worker",
                "replicas": 1,
                "podTemplate": _template(worker),
                "modelRef": {"name": model, "revision": "main"},
            },
        ]
        if kind == "dynamo-lws":
            comps[1]["multinode"] = {"nodeCount": 2}
        dgd = b.obj(
            "nvidia.com/v1beta1", "DynamoGraphDeployment", name, None, {"components": comps}
        )
        for comp, c in (("frontend", frontend), ("vllmworker", worker)):
            spec = {"podTemplate": _template(c), "type": comp}
            dcd = b.obj(
                "nvidia.com/v1alpha1",
                "DynamoComponentDeployment",
                f"{name}-{comp}",
                dgd,
                spec,
                {"nvidia.com/dynamo-graph-deployment-name": name},
            )
            if kind == "dynamo-lws" and comp == "vllmworker":
                lws = b.obj(
                    "leaderworkerset.x-k8s.io/v1",
                    "LeaderWorkerSet",
                    f"{name}-{comp}",
                    dcd,
                    {"leaderWorkerTemplate": {"size": 4, "workerTemplate": _template(c)}},
                )
                _lws_tree(b, lws, c, pods)
            else:
                dep = b.obj(
                    "apps/v1", "Deployment", f"{name}-{comp}", dcd, {"template": _template(c)}
                )
                _rs_pods(b, dep, c, max(1, pods // 2))
    elif kind in ("grove", "grove-sg"):
        c = _container(SGLANG, ["--model-path", model], ["python3", "-m", "dynamo.sglang"])
        dgd = b.obj(
            "nvidia.com/v1beta1",
            "DynamoGraphDeployment",
            name,
            None,
            {"components": [{"name": "decode", "type": "worker", "podTemplate": _template(c)}]},
        )
        pcs = b.obj("grove.io/v1alpha1", "PodCliqueSet", name, dgd, {})
        parent = pcs
        if kind == "grove-sg":
            parent = b.obj("grove.io/v1alpha1", "PodCliqueScalingGroup", f"{name}-0-sg", pcs, {})
        clique = b.obj(
            "grove.io/v1alpha1",
            "PodClique",
            f"{parent['metadata']['name']}-0-decode",
            parent,
            {"podSpec": {"containers": [c]}},
        )
        for i in range(pods):
            b.pod(f"{clique['metadata']['name']}-{i:03d}", clique, [c])
    elif kind == "lws":
        c = _container(LWS_VLLM, None, ["sh", "-c", f"vllm serve {model} --tensor-parallel-size 8"])
        lws = b.obj(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            name,
            None,
            {"leaderWorkerTemplate": {"size": 4, "workerTemplate": _template(c)}},
        )
        _lws_tree(b, lws, c, pods)
    elif kind == "nim":
        image = f"{NIM}:1.3.3"
        nim = b.obj(
            "apps.nvidia.com/v1alpha1",
            "NIMService",
            name,
            None,
            {
                "image": {"repository": NIM, "tag": "1.3.3"},
                "storage": {"nimCache": {"name": "meta-llama3-8b-instruct", "profile": ""}},
            },
        )
        c = _container(image)
        dep = b.obj("apps/v1", "Deployment", name, nim, {"template": _template(c)})
        _rs_pods(b, dep, c, pods)
    elif kind == "cronjob":
        c = _container(BATCH, ["python", "-c", "print('eval')"])
        cj = b.obj(
            "batch/v1",
            "CronJob",
            name,
            None,
            {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": _template(c)}}},
        )
        job = b.obj("batch/v1", "Job", f"{name}-29000000", cj, {"template": _template(c)})
        for i in range(pods):
            b.pod(f"{name}-29000000-{i:03d}", job, [c])
    elif kind == "deployment":
        c = _container(WEB)
        dep = b.obj("apps/v1", "Deployment", name, None, {"template": _template(c)})
        _rs_pods(b, dep, c, pods)
    elif kind == "dcd":
        c = _container(VLLM, _model_args(model), ["python3", "-m", "dynamo.vllm"])
        dcd = b.obj(
            "nvidia.com/v1alpha1",
            "DynamoComponentDeployment",
            name,
            None,
            {"podTemplate": _template(c)},
        )
        dep = b.obj("apps/v1", "Deployment", name, dcd, {"template": _template(c)})
        _rs_pods(b, dep, c, pods)
    else:
        raise ValueError(kind)


def _non_pods(kind: str) -> int:
    """Objects other than Pods one root of this shape holds (with one Pod)."""
    b = Builder("x")
    shape(b, kind, "x", 1)
    return sum(1 for o in b.out if o["kind"] != "Pod")


def generate(
    roots: int, objects: int, namespaces: int = 20, shapes: list[str] | None = None
) -> Iterator[Obj]:
    """The dump's objects. Without `shapes`: every shape, the same bytes as ever."""
    per_ns = max(1, roots // namespaces)
    kinds = shapes or SHAPES
    if shapes is None:
        # ~9 non-pod objects per root on average: the rest of the budget is pods.
        share = float(max(1, (objects - roots * 9) // max(1, roots)))
    else:
        overhead = sum(_non_pods(k) for k in kinds) / len(kinds)
        share = max(1.0, objects / max(1, roots) - overhead)

    def pods_of(index: int) -> int:  # a fractional share spread evenly
        return max(1, int((index + 1) * share) - int(index * share))

    for n in range(max(1, roots // per_ns)):
        ns = f"team-{n:02d}"
        yield {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "uid": _uid(ns), "labels": {"aibom.dev/enabled": "true"}},
        }
        b = Builder(ns)
        for r in range(per_ns):
            index = n * per_ns + r
            kind = kinds[index % len(kinds)]
            shape(b, kind, f"{kind}-{r:04d}", pods_of(index))
        b.pod("debug-shell", None, [_container("busybox:1.36")])
        yield from b.out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--roots", type=int, default=2000)
    ap.add_argument("--objects", type=int, default=100_000, help="approximate total")
    ap.add_argument("--namespaces", type=int, default=20)
    ap.add_argument(
        "--shapes",
        help=f"comma-separated shapes, round robin (default: all of {','.join(SHAPES)})",
    )
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args()
    shapes = None
    if args.shapes:
        shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
        unknown = sorted(set(shapes) - set(SHAPES))
        if unknown or not shapes:
            ap.error(f"--shapes: unknown {', '.join(unknown) or '(none given)'}")
    items = list(generate(args.roots, args.objects, args.namespaces, shapes))
    doc = {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}
    text = json.dumps(doc, indent=None, separators=(",", ":"), sort_keys=True)
    if args.output == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        print(f"{len(items)} objects -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
