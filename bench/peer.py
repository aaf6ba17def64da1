"""The peer, side by side: k8s-aibom on the annotator bench's cluster.

k8s-aibom (GoogleCloudPlatform/k8s-aibom, Apache-2.0, Go) is the published
anchor for a runtime AI-BOM controller. This module builds it from a checkout
of its source at ``PEER_COMMIT`` (``$AIBOM_UPSTREAM_SRC/k8s-aibom-src``; never copied into this
repository: it is built and measured, not reused), installs what its Helm
chart installs, runs it on the control plane and the objects that
``bench/annotator_bench.py`` built, and measures it the way that bench
measures our annotator: ``peer.py bench`` runs the annotator bench (same flags)
with :class:`Peer` as its side-by-side tool:

    .venv/bin/python bench/peer.py bench --roots 1000 --json out.json
    .venv/bin/python bench/peer.py build     # only build (or find cached) the binary

Build: like ``tests/controlplane/gotools.py`` builds helm and promtool
(``CGO_ENABLED=0 go build -trimpath -mod=readonly``, the Go toolchain the
control plane uses, modules from the Go module proxy), with the ldflags of the
peer's own Dockerfile (``-s -w -X main.controllerVersion=...``); cached under
``<cache>/controlplane/tools/k8s-aibom-<commit>-<hash>/bin/k8s-aibom`` behind
a file lock, never in the repository.

Install (what ``helm template`` of the peer's chart renders, with the cached
helm): its two CRDs, the ServiceAccount ``k8s-aibom-system/k8s-aibom``, its
ClusterRole and binding and the ``AIBOMControllerConfig`` ``default``. Not
its Deployment: the controller runs here as a local process, as that
ServiceAccount (a TokenRequest token), with the chart's flags (no leader
election) and the metrics and health ports on loopback. It only looks at
namespaces labelled ``aibom.k8saibom.dev/enabled=true``; the bench
namespace gets that label just before the peer starts.

Requests, the same way for both tools: the API server's audit log. When
the peer is measured, the control plane starts with an audit policy that logs
(level Metadata) exactly two users, our annotator (a client certificate of
its own, :data:`OURS_USER`) and the peer's ServiceAccount; nothing else.
A tool's cold requests are its audited requests received up to the one that
wrote its last first document (ours: a ConfigMap write; the peer: an
AIBOM status write, where its document lives). Both tools' own client
counters are reported next to it as a cross-check.

Cold time (process start -> the roots-th document seen through a watch of the
bench's own), peak RSS (VmHWM) and CPU time are measured as the bench does
for ours. Update latency: the peer's document carries ONE digest per
container, taken from whichever Pod its cache lists first (map order), so a
single Pod's new digest is not reliably in its document; its probe is
therefore a rollout of one workload (every Pod of it gets the same new
digest; the clock starts before the last Pod's status write and stops when
the document holds the new digest).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import datetime as _dt
import functools
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import yaml

from aibom_core.objects import Obj

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import annotator_bench as ab  # noqa: E402

from aibom_core.document import unpack  # noqa: E402
from aibom_edge.kube import Kube  # noqa: E402
from tests.controlplane import BuildError, ControlPlane, child_env  # noqa: E402
from tests.controlplane.gobuild import GoBuild, SourceTree, binary, go_ldflags  # noqa: E402
from tests.controlplane.gotools import ensure_tool  # noqa: E402
from tests.controlplane.paths import upstream_source_dirs  # noqa: E402

#: The commit measured: GoogleCloudPlatform/k8s-aibom `main` of 2026-08-21 (after v1.3.0).
PEER_COMMIT: Final = "0dd2f89e0dd09641bb471f16f98498dc687d18b8"
PEER_VERSION: Final = f"main-{PEER_COMMIT[:8]}"
PEER_NAMESPACE: Final = "k8s-aibom-system"
PEER_SERVICE_ACCOUNT: Final = "k8s-aibom"
PEER_USER: Final = f"system:serviceaccount:{PEER_NAMESPACE}:{PEER_SERVICE_ACCOUNT}"
PEER_OPT_IN: Final = "aibom.k8saibom.dev/enabled"
PEER_AIBOMS: Final = "/apis/aibom.k8saibom.dev/v1beta1/namespaces/{ns}/aiboms"
#: Our annotator's identity when measured beside the peer (a client certificate, group system:masters):
#: only so that the audit log tells its requests from the bench's own.
OURS_USER: Final = "aibom-bench-annotator"
_TOKEN_SECONDS: Final = 24 * 3600
#: What the chart renders that a local process needs (not its Deployment).
_APPLIED_KINDS: Final = frozenset(
    {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)


def log(msg: str) -> None:
    print(f"[peer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- build


def peer_src() -> Path:
    """The peer's source tree (its chart is installed from it, and the builder builds
    it): ``k8s-aibom-src`` (a checkout of https://github.com/GoogleCloudPlatform/k8s-aibom
    at PEER_COMMIT) under the upstream source folders (``paths.upstream_source_dirs``:
    $AIBOM_UPSTREAM_SRC, ``shared/upstream`` beside this checkout or its parent folder)."""
    candidates = [base / "k8s-aibom-src" for base in upstream_source_dirs()]
    for path in candidates:
        if (path / "go.mod").is_file() and (path / "cmd" / "manager").is_dir():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise BuildError(
        f"the k8s-aibom source tree was not found (tried {tried}); set AIBOM_UPSTREAM_SRC to "
        "the folder that holds k8s-aibom-src/, a checkout of "
        f"https://github.com/GoogleCloudPlatform/k8s-aibom at {PEER_COMMIT}"
    )


#: The peer, through the one builder: the module proxy refuses the module, so the
#: tree of the snapshot above is built as it is (no patch), its own go.mod and go.sum.
PEER_BUILD: Final = GoBuild(
    name="k8s-aibom",
    version=PEER_VERSION,
    mains={"k8s-aibom": "./cmd/manager"},
    source=SourceTree(
        module="github.com/GoogleCloudPlatform/k8s-aibom",
        version=PEER_COMMIT,
        commit=PEER_COMMIT,
        tree="k8s-aibom-src",
        marker="cmd/manager/main.go",
    ),
    # Its Dockerfile's flags; the version lands in every BOM's metadata.tools.
    ldflags=go_ldflags({"main": {"controllerVersion": PEER_VERSION}}),
    # It has no version flag; -help lists its flags (exit 0).
    check=("k8s-aibom", ("-help",), "metrics-bind-address"),
    estimate="about 4 min",
)


def ensure_peer() -> Path:
    """Build the peer unless cached; return the binary (BuildError says why not)."""
    return binary(PEER_BUILD)


# --------------------------------------------------------------------------- audit


def apiserver_args(directory: Path) -> list[str]:
    """kube-apiserver flags for the audit log that counts both tools' requests.

    Level Metadata (one line per request, no bodies) for exactly the two tools'
    users, nothing for anyone else (the bench's own client, the controller-manager).
    """
    directory.mkdir(parents=True, exist_ok=True)
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "users": [OURS_USER, PEER_USER]},
            {"level": "None"},
        ],
    }
    policy_file = directory / "audit-policy.yaml"
    policy_file.write_text(json.dumps(policy, indent=2) + "\n")
    return [
        f"--audit-policy-file={policy_file}",
        f"--audit-log-path={audit_log(directory)}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
    ]


def audit_log(directory: Path) -> Path:
    return directory / "audit.log"


def _when(stamp: str) -> float:
    return _dt.datetime.fromisoformat(stamp).timestamp()


def audited(directory: Path, user: str) -> list[Obj]:
    """The user's requests, one event each (a watch's ResponseStarted and ResponseComplete
    are one request), in the order the API server received them."""
    seen: dict[str, Obj] = {}
    with open(audit_log(directory), encoding="utf-8") as fh:
        for line in fh:
            event = json.loads(line)
            if event.get("user", {}).get("username") == user:
                seen.setdefault(event["auditID"], event)
    return sorted(seen.values(), key=lambda e: _when(e["requestReceivedTimestamp"]))


def _is_document_write(event: Obj, resource: str, subresource: str) -> bool:
    ref = event.get("objectRef") or {}
    code = (event.get("responseStatus") or {}).get("code", 0)
    return (
        event["verb"] in ("create", "update", "patch")
        and ref.get("resource") == resource
        and ref.get("subresource", "") == subresource
        and ref.get("namespace") == ab.NS
        and 200 <= code < 300
    )


def cold_requests(events: list[Obj], resource: str, subresource: str, roots: int) -> Obj:
    """Requests up to (and with) the one that wrote the roots-th distinct document."""
    names: set[str] = set()
    cut = None
    for i, event in enumerate(events):
        if _is_document_write(event, resource, subresource):
            names.add(event["objectRef"].get("name", ""))
            if len(names) >= roots:
                cut = i
                break
    if cut is None:
        return {"complete": False, "documents": len(names), "by_verb": {}, "total": 0}
    window = events[: cut + 1]
    by_verb = Counter(e["verb"] for e in window)
    return {
        "complete": True,
        "documents": len(names),
        "by_verb": dict(sorted(by_verb.items())),
        "total": len(window),
        "per_root": round(len(window) / roots, 3),
        "server_seconds": round(
            _when(window[-1]["requestReceivedTimestamp"])
            - _when(window[0]["requestReceivedTimestamp"]),
            2,
        ),
    }


# --------------------------------------------------------------------------- install


def ours_kubeconfig(cp: ControlPlane) -> Path:
    """A client certificate for our annotator alone (group system:masters, as the admin)."""
    return cp.issue_identity(OURS_USER, ["system:masters"]).kubeconfig


def render_chart(src: Path, directory: Path) -> list[Obj]:
    """``helm template`` of the peer's chart (defaults; release k8s-aibom in its namespace)."""
    helm = ensure_tool("helm")
    out = subprocess.run(
        [str(helm), "template", "k8s-aibom", str(src / "charts" / "k8s-aibom"),
         f"--namespace={PEER_NAMESPACE}"],
        capture_output=True, text=True, check=False, env=child_env(), timeout=120,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"helm template of the peer's chart failed: {out.stderr[-2000:]}")
    (directory / "peer-chart.yaml").write_text(out.stdout)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def install_peer(cp: ControlPlane, src: Path, directory: Path) -> Path:
    """Install what the peer's chart installs except its Deployment; return the kubeconfig
    of its ServiceAccount."""
    directory.mkdir(parents=True, exist_ok=True)
    crds = sorted((src / "charts" / "k8s-aibom" / "crds").glob("*.yaml"))
    cp.install_crds(crds)
    docs = render_chart(src, directory)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PEER_NAMESPACE}}
    base = [namespace] + [d for d in docs if d["kind"] in _APPLIED_KINDS]
    configs = [d for d in docs if d["kind"] == "AIBOMControllerConfig"]
    for items in (base, configs):
        cp.kubectl(
            "apply", "--server-side", "--field-manager=aibom-bench", "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )  # fmt: skip
    kubeconfig = cp.service_account_kubeconfig(
        PEER_NAMESPACE, PEER_SERVICE_ACCOUNT, directory / "peer.kubeconfig", _TOKEN_SECONDS
    )
    kinds = Counter(d["kind"] for d in base[1:] + configs)
    log(f"installed the peer's chart (CRDs, {dict(kinds)}); it runs as {PEER_USER}")
    return kubeconfig


# --------------------------------------------------------------------------- run


class AibomWatch(ab.DocWatch):
    """The peer's AIBOMs: first time each holds a document, and the document's text."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube, PEER_AIBOMS.format(ns=ab.NS), selector=None)
        #: document name -> the kind of the workload it is about (spec.workloadRef.kind)
        self.kinds: dict[str, str] = {}

    def seen(self, obj: Obj) -> None:
        inline = ((obj.get("status") or {}).get("bomDocument") or {}).get("inline")
        if not inline or not inline.get("data"):
            return  # created, its status (where the document lives) not yet written
        name = obj["metadata"]["name"]
        self.first.setdefault(name, time.monotonic())
        self.kinds[name] = obj.get("spec", {}).get("workloadRef", {}).get("kind", "")
        with contextlib.suppress(binascii.Error, UnicodeDecodeError):
            self.text[name] = base64.b64decode(inline["data"]).decode()
        self.changed.set()


async def _items(kube: Kube, kind: str) -> list[Obj]:
    """Every object of a kind in the bench namespace, in pages (100,000 Pods at 10,000 roots)."""
    out: list[Obj] = []
    params = {"limit": "1000"}
    while True:
        resp = await kube.request("GET", ab.PATHS[kind].format(ns=ab.NS), params=params)
        if not resp.ok:
            raise RuntimeError(f"list {kind}: {resp.status} {str(resp.body)[:300]}")
        out += resp.body["items"]
        token = resp.body.get("metadata", {}).get("continue")
        if not token:
            return out
        params = {"limit": "1000", "continue": token}


async def _workload_pods(kube: Kube) -> dict[str, list[str]]:
    """The peer's document name (``apps-<kind>-<name>``) -> the Pods its workload owns."""
    rs_owner: dict[str, str] = {}
    for rs in await _items(kube, "ReplicaSet"):
        for ref in rs["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref["kind"] == "Deployment":
                rs_owner[rs["metadata"]["name"]] = f"apps-deployment-{ref['name']}"
    out: dict[str, list[str]] = {}
    for pod in await _items(kube, "Pod"):
        for ref in pod["metadata"].get("ownerReferences") or []:
            if not ref.get("controller"):
                continue
            doc = (
                rs_owner.get(ref["name"])
                if ref["kind"] == "ReplicaSet"
                else f"apps-statefulset-{ref['name']}"
                if ref["kind"] == "StatefulSet"
                else None
            )
            if doc:
                out.setdefault(doc, []).append(pod["metadata"]["name"])
    return out


async def _set_digest(kube: Kube, pod: str, digest: str) -> None:
    """What a kubelet writes when the Pod runs a new digest (the bench's own status write)."""
    await ab.Builder(kube, concurrency=1).status({"metadata": {"name": pod}}, digest)


def _client_requests(m: dict[str, float]) -> dict[str, int]:
    """controller-runtime's client counter (rest_client_requests_total), by method."""
    out: Counter[str] = Counter()
    for key, value in m.items():
        if key.startswith("rest_client_requests_total{"):
            method = key.split('method="', 1)[1].split('"', 1)[0]
            out[method] += int(value)
    return dict(sorted(out.items()))


async def run_peer(args: argparse.Namespace, cp: ControlPlane, setup: Setup, out: BinaryIO) -> Obj:
    """Start the peer over the bench's objects (no AIBOM yet) and measure it."""
    async with Kube.from_kubeconfig(str(cp.kubeconfig), pool_size=16) as kube:
        resp = await kube.request(
            "PATCH",
            f"/api/v1/namespaces/{ab.NS}",
            json={"metadata": {"labels": {PEER_OPT_IN: "true"}}},
            content_type="application/merge-patch+json",
        )
        if not resp.ok:
            raise RuntimeError(f"opt-in label on {ab.NS}: {resp.status} {str(resp.body)[:300]}")
        pods_of = await _workload_pods(kube)
        watch = AibomWatch(kube)
        watch.task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.5)
        mport, hport = ab.free_port(), ab.free_port()
        cmd = [
            str(setup.binary),
            f"--metrics-bind-address=127.0.0.1:{mport}",
            f"--health-probe-bind-address=127.0.0.1:{hport}",
        ]
        # The chart's downward-API variables (its startup Event names this Pod).
        env = {
            **child_env(),
            "KUBECONFIG": str(setup.kubeconfig),
            "POD_NAME": "k8s-aibom-bench",
            "POD_NAMESPACE": PEER_NAMESPACE,
        }
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            # 600 s, or 90 ms per root past 6,666 roots (it took ~75 ms per root at 1,000).
            budget = max(600.0, 0.09 * args.roots)
            ok = await watch.wait(lambda: len(watch.first) >= args.roots, timeout=budget)
            if not ok:
                raise RuntimeError(
                    f"the peer wrote {len(watch.first)} of {args.roots} documents in"
                    f" {budget:.0f} s; see {out.name}"
                )
            cold = max(watch.first.values()) - started
            rss_cold = ab.rss_kib(proc.pid, "VmHWM")
            cpu_cold = ab.cpu_seconds(proc.pid)
            client_cold = _client_requests(ab.metrics(mport))
            log(f"peer cold: {cold:.2f} s, peak RSS {rss_cold / 1024:.0f} MiB")
            documents = {name: watch.text.get(name, "") for name in watch.first}
            # Before the update probes change their Pods: what each tool's document says.
            samples = await _samples(kube, setup.directory)

            # Update: a rollout of one workload at a time (see the module docstring).
            names = sorted(n for n in pods_of if n in watch.first)
            step = max(1, len(names) // max(1, args.updates))
            latencies: list[float] = []
            for k, doc in enumerate(names[::step][: args.updates]):
                digest = ab.sha(f"peer-{doc}-{k}")
                *first, last = pods_of[doc]
                await asyncio.gather(*(_set_digest(kube, pod, digest) for pod in first))
                begin = time.monotonic()
                await _set_digest(kube, last, digest)
                shown = functools.partial(ab._shows, watch, doc, digest)
                if not await watch.wait(shown, timeout=30):
                    raise RuntimeError(f"the peer's {doc} never showed {digest}")
                latencies.append(time.monotonic() - begin)
            rss_end = ab.rss_kib(proc.pid, "VmHWM")
            client_end = _client_requests(ab.metrics(mport))
        finally:
            await ab.stop(proc, watch)
    return {
        "cold_seconds": round(cold, 2),
        "cold_cpu_seconds": round(cpu_cold, 2),
        "documents": len(documents),
        "documents_by_workload_kind": dict(sorted(Counter(watch.kinds.values()).items())),
        "document_bytes_median": int(statistics.median(len(t) for t in documents.values())),
        "client_requests_until_converged": client_cold,
        "client_requests_at_end": client_end,
        "peak_rss_mib_after_cold": round(rss_cold / 1024, 1),
        "peak_rss_mib_at_end": round(rss_end / 1024, 1),
        "document_samples": samples,
        "update_probe": "rollout: all Pods of one workload get one new digest",
        "update_samples": len(latencies),
        "update_p50_ms": round(1000 * statistics.median(latencies), 1),
        "update_p99_ms": round(1000 * ab.pct(latencies, 99), 1),
        "update_max_ms": round(1000 * max(latencies), 1),
    }


async def _our_documents(kube: Kube) -> dict[str, int]:
    """Our ConfigMaps by root kind (their names are aibom-<kind>-<name>)."""
    resp = await kube.request(
        "GET", f"/api/v1/namespaces/{ab.NS}/configmaps", params={"labelSelector": ab.MANAGED}
    )
    kinds = Counter(cm["metadata"]["name"].split("-")[1] for cm in resp.body["items"])
    return dict(sorted(kinds.items()))


#: One root of each shape: (its label selector, our document, the peer's document).
SAMPLES: Final = (
    ("app=d0", "aibom-deployment-d0", "apps-deployment-d0"),
    ("app=g0-worker", "aibom-dynamographdeployment-g0", "apps-deployment-g0-worker"),
    ("lws=l0", "aibom-leaderworkerset-l0", "apps-statefulset-l0"),
)


async def _samples(kube: Kube, directory: Path) -> list[Obj]:
    """For one root of each shape: how many of its Pods' current digests each tool's
    document names (the documents themselves go to documents-sample.json)."""
    facts: list[Obj] = []
    texts: dict[str, str] = {}
    for selector, ours_name, peer_name in SAMPLES:
        resp = await kube.request(
            "GET", ab.PATHS["Pod"].format(ns=ab.NS), params={"labelSelector": selector}
        )
        digests = {
            cs["imageID"].rsplit("@sha256:", 1)[-1]
            for pod in resp.body.get("items", [])
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
        }
        cm = await kube.request("GET", f"/api/v1/namespaces/{ab.NS}/configmaps/{ours_name}")
        raw = unpack(cm.body) if cm.ok else None
        texts[ours_name] = raw.decode() if raw else ""
        bom = await kube.request("GET", f"{PEER_AIBOMS.format(ns=ab.NS)}/{peer_name}")
        inline = ((bom.body.get("status") or {}).get("bomDocument") or {}).get("inline") or {}
        texts[peer_name] = base64.b64decode(inline.get("data", "")).decode() if bom.ok else ""
        facts.append({
            "root": ours_name.removeprefix("aibom-"),
            "pods": len(resp.body.get("items", [])),
            "distinct_pod_digests": len(digests),
            "ours": {"document": ours_name,
                     "pod_digests_named": sum(d in texts[ours_name] for d in digests)},
            "peer": {"document": peer_name,
                     "pod_digests_named": sum(d in texts[peer_name] for d in digests)},
        })  # fmt: skip
    (directory / "documents-sample.json").write_text(json.dumps(texts, indent=2) + "\n")
    return facts


# --------------------------------------------------------------------------- side by side


@dataclass(frozen=True)
class Setup:
    binary: Path
    kubeconfig: Path
    directory: Path


def prepare(cp: ControlPlane, args: argparse.Namespace, binary: Path, directory: Path) -> Setup:
    """Before the bench: install the peer and give our annotator its own identity (its
    --kubeconfig, appended to the annotator flags, wins over the bench's)."""
    args.annotator_args.append(f"--kubeconfig={ours_kubeconfig(cp)}")
    return Setup(binary, install_peer(cp, peer_src(), directory), directory)


def side_by_side(args: argparse.Namespace, cp: ControlPlane, setup: Setup, ours: Obj) -> Obj:
    """After the bench measured ours: measure the peer on the same objects; both rows."""
    directory = setup.directory
    with open(directory / "peer.log", "wb") as out:
        peer = asyncio.run(run_peer(args, cp, setup, out))

    async def docs() -> dict[str, int]:
        async with Kube.from_kubeconfig(str(cp.kubeconfig)) as kube:
            return await _our_documents(kube)

    ours_docs = asyncio.run(docs())
    ours_audit = cold_requests(audited(directory, OURS_USER), "configmaps", "", args.roots)
    peer_audit = cold_requests(audited(directory, PEER_USER), "aiboms", "status", args.roots)
    peer["audited_requests_until_converged"] = peer_audit
    peer["version"] = PEER_VERSION
    ours_row = {
        "cold_seconds": ours["cold_seconds"],
        "cold_cpu_seconds": ours.get("cold_cpu_seconds"),
        "audited_requests_until_converged": ours_audit,
        "client_requests_until_converged": ours.get("requests_until_converged"),
        "peak_rss_mib_after_cold": ours.get("peak_rss_mib_after_cold"),
        "peak_rss_mib_at_end": ours.get("peak_rss_mib_at_end"),
        "documents": sum(ours_docs.values()),
        "documents_by_root_kind": ours_docs,
        "update_probe": "one Pod gets a new digest",
        "update_p50_ms": ours.get("update_p50_ms"),
        "update_p99_ms": ours.get("update_p99_ms"),
        "update_max_ms": ours.get("update_max_ms"),
    }
    result = {
        "roots": args.roots,
        "pods": ours.get("pods"),
        "ours": ours_row,
        "peer": peer,
        "document_samples": peer.pop("document_samples"),
    }
    result["table"] = table(result)
    return result


def _per_root(row: Obj) -> str:
    audit = row["audited_requests_until_converged"]
    return f"{audit['per_root']:.2f}" if audit.get("complete") else "incomplete"


def table(result: Obj) -> str:
    """Both rows, in Markdown (what BENCHMARKS.md shows)."""
    ours, peer = result["ours"], result["peer"]
    head = (
        "| tool | cold (s) | API requests per root (audit) | peak RSS after cold / at end"
        " (MiB) | update p50 / p99 / max (ms) | documents on these objects |\n"
        "|---|---|---|---|---|---|\n"
    )

    def row(name: str, r: Obj, docs: Obj) -> str:
        kinds = ", ".join(f"{v} {k}" for k, v in docs.items())
        return (
            f"| {name} | {r['cold_seconds']:.1f} | {_per_root(r)} |"
            f" {r['peak_rss_mib_after_cold']:.0f} / {r['peak_rss_mib_at_end']:.0f} |"
            f" {r['update_p50_ms']:.0f} / {r['update_p99_ms']:.0f} / {r['update_max_ms']:.0f}"
            f" ({r['update_probe']}) | {r['documents']}: {kinds} |\n"
        )

    return (
        head
        + row("aibom-rollup annotator", ours, ours["documents_by_root_kind"])
        + row(f"k8s-aibom {peer['version']}", peer, peer["documents_by_workload_kind"])
    )


class Peer:
    """The side-by-side tool of ``annotator_bench.main`` (its ``SideBySide``)."""

    def __init__(self) -> None:
        self.binary = ensure_peer()  # before the control plane: minutes on a cold cache
        self.setup: Setup | None = None

    def apiserver_args(self, workdir: Path) -> list[str]:
        return apiserver_args(workdir)

    def prepare(self, cp: ControlPlane, args: argparse.Namespace, workdir: Path) -> None:
        self.setup = prepare(cp, args, self.binary, workdir)

    def measure(self, args: argparse.Namespace, cp: ControlPlane, ours: Obj) -> Obj:
        assert self.setup is not None
        return side_by_side(args, cp, self.setup, ours)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "what",
        choices=["build", "bench"],
        help="build: build (or find cached) the peer's binary; bench: the annotator bench"
        " (its flags follow), then the peer on the same objects, both reported",
    )
    args, rest = ap.parse_known_args(argv)
    try:
        if args.what == "bench":
            return ab.main(rest, side=Peer())
        binary = ensure_peer()
    except BuildError as exc:
        sys.exit(f"error: {exc}")  # exit status 1, the message on stderr
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
