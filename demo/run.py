"""`make demo`: the product working on a local, real control plane.

1. builds (first time, with progress) and starts etcd + kube-apiserver +
   kube-controller-manager and the real operators: the LeaderWorkerSet
   controller, Grove, Dynamo, KServe, the NIM operator and KubeRay
   (tests/controlplane, `up --with kwok,lws,grove,dynamo,kserve,nim,kuberay`, each
   as its own ServiceAccount with its release's RBAC), kube-scheduler and kwok's
   fake Nodes, or reuses the running ones;
2. generates certificates and runs the webhook and the annotator as local
   processes, with the webhook configuration pointed at 127.0.0.1;
3. applies the bundled examples/ in the opted-in namespace `aibom-demo`;
4. plays only a CronJob's Job (`kubectl create job --from`): the LWS, Dynamo,
   Grove, NIMService, InferenceService and RayService chains are made by their
   real operators, and Kubernetes' own controllers create ReplicaSets,
   StatefulSet Pods and Job Pods;
5. waits for kube-scheduler to bind every Pod to a fake Node and for kwok's
   Stages to report it running with its image digests (there is no kubelet:
   kwok plays the Nodes' kubelets), so digests resolve; it writes nothing to Pods;
6. prints the stamps as `kubectl get -o yaml` shows them, the roll-up tree
   (the offline `aibom-rollup tree` over a live `kubectl get -o json`), and
   the AIBOM ConfigMaps.

The control plane, webhook and annotator keep running; `make demo-down`
stops everything. A second run reuses them and takes seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from demo import trail  # noqa: E402
from tests.controlplane import cache_dir, kubectl_env  # noqa: E402

NS = "aibom-demo"
STATE = Path(os.environ.get("AIBOM_DEMO_DIR") or cache_dir() / "demo")
UP_DIR = Path(os.environ.get("AIBOM_UP_DIR") or cache_dir() / "up")
WEBHOOK_PORT = int(os.environ.get("AIBOM_DEMO_WEBHOOK_PORT", "18443"))
METRICS_PORT = int(os.environ.get("AIBOM_DEMO_METRICS_PORT", "18090"))
HEALTH_PORT = int(os.environ.get("AIBOM_DEMO_HEALTH_PORT", "18091"))
PY = sys.executable
Obj = dict[str, Any]


def step(msg: str) -> None:
    print(f"\n==> {msg}", flush=True)


class Cluster:
    def __init__(self, kubeconfig: str, kubectl: str) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl_bin = kubectl
        self.env = kubectl_env(kubeconfig)  # KUBECONFIG, and kubectl's cache this plane's
        # How kube-apiserver authenticates to the webhook (tests.controlplane up
        # --webhook-client): {"host", "client_ca_file", "token_file"}, or None.
        self.caller: dict[str, str] | None = None
        self.registry: dict[str, Any] | None = None  # the export registry (demo/trail.py)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            [self.kubectl_bin, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )
        if check and proc.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)} failed:\n{proc.stderr.strip()}")
        return proc.stdout

    def get(self, kind: str, name: str) -> Obj | None:
        out = self.kubectl("get", kind, name, "-n", NS, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    def apply(self, obj: Obj) -> None:
        self.kubectl(
            "apply", "--server-side", "--field-manager=demo-operator", "--force-conflicts",
            "-n", NS, "-f", "-", stdin=json.dumps(obj),
        )  # fmt: skip


# -- 1. control plane ---------------------------------------------------------


#: What the demo runs (`up --with`): kwok first (its fake Nodes; it requires
#: kube-scheduler), so that every Pod is bound and reported as it comes; the real
#: operators (Dynamo requires Grove; KServe before the NIM operator, which watches
#: InferenceServices only if their CRD is there when it starts, and requires lws);
#: and the OCI registry (distribution) the annotator exports every signed version to.
COMPONENTS = ("kwok", "lws", "grove", "dynamo", "kserve", "nim", "kuberay", "registry")


def control_plane() -> Cluster:
    step(
        "control plane (etcd, kube-apiserver, kube-controller-manager), kube-scheduler,"
        " kwok's fake Nodes and the real LeaderWorkerSet, Grove, Dynamo, KServe, NIM and"
        " KubeRay operators from tests/controlplane (first run: builds them, with progress)"
    )
    up = subprocess.run(
        [PY, "-m", "tests.controlplane", "up", "--with", ",".join(COMPONENTS),
         "--webhook-client", f"127.0.0.1:{WEBHOOK_PORT}"],
        cwd=REPO, check=False,
    )  # fmt: skip
    if up.returncode != 0:
        raise SystemExit(
            "the control plane did not come up (see above); `make demo-down` resets it"
        )
    state = json.loads((UP_DIR / "state.json").read_text())
    cluster = Cluster(state["kubeconfig"], state["kubectl"])
    cluster.caller = state.get("webhook_caller")
    cluster.registry = trail.registry_of(state)
    return cluster


# -- 2. webhook and annotator --------------------------------------------------


def _stop_pidfile(name: str) -> None:
    pidfile = STATE / f"{name}.pid"
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pidfile.unlink(missing_ok=True)
        return
    for _ in range(100):
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    pidfile.unlink(missing_ok=True)


def _start(name: str, args: list[str], cluster: Cluster) -> None:
    _stop_pidfile(name)  # restart, so the demo always runs this checkout's code
    log = STATE / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [PY, "-m", "aibom_rollup", name, *args],
            cwd=REPO, env=cluster.env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    (STATE / f"{name}.pid").write_text(str(proc.pid))


def _wait_http(url: str, what: str, timeout: float = 60) -> None:
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{what} did not become ready at {url}; see {STATE}")


def processes(cluster: Cluster) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    certs = STATE / "certs"
    step(f"certificates and webhook configuration (aibom-rollup certs) in {certs}")
    subprocess.run(
        [PY, "-m", "aibom_rollup", "certs", "--out-dir", str(certs), "--ip", "127.0.0.1",
         "--url", f"https://127.0.0.1:{WEBHOOK_PORT}/mutate"],
        cwd=REPO, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    step(f"webhook on https://127.0.0.1:{WEBHOOK_PORT} (log {STATE / 'webhook.log'})")
    auth: list[str] = []
    caller = cluster.caller
    if caller and caller.get("host") == f"127.0.0.1:{WEBHOOK_PORT}":
        # Only the API server is answered: it presents a client certificate and
        # a bearer token from its AdmissionConfiguration (docs/webhook.md).
        auth = ["--client-ca-file", caller["client_ca_file"],
                "--client-token-file", caller["token_file"]]  # fmt: skip
        print("    callers authenticated: the API server's client certificate and token")
    else:
        print(
            "    NOTE: this control plane was started without webhook authentication "
            "(an older `make demo`); `make demo-down` and run again to turn it on"
        )
    _start(
        "webhook",
        ["--cert-file", str(certs / "tls.crt"), "--key-file", str(certs / "tls.key"),
         "--host", "127.0.0.1", "--port", str(WEBHOOK_PORT), "--kubeconfig", cluster.kubeconfig,
         "--provenance-key", str(certs / "provenance.key"), *auth],
        cluster,
    )  # fmt: skip
    _wait_http(f"https://127.0.0.1:{WEBHOOK_PORT}/readyz", "the webhook")
    cluster.kubectl("apply", "-f", str(certs / "mutatingwebhook.yaml"))
    step(
        f"annotator (metrics :{METRICS_PORT}, log {STATE / 'annotator.log'}), signing every"
        " document and exporting each version to the local registry"
    )
    cluster.kubectl("create", "namespace", "aibom-system", check=False)
    export = trail.annotator_args(cluster.registry, STATE) if cluster.registry else []
    _start(
        "annotator",
        ["--kubeconfig", cluster.kubeconfig, "--lease-namespace", "aibom-system",
         "--bind-address", "127.0.0.1", "--metrics-port", str(METRICS_PORT),
         "--health-port", str(HEALTH_PORT), "--log-format", "text",
         "--provenance-key", str(certs / "provenance.key"),
         "--signing-key", str(certs / "signing.key"), *export],
        cluster,
    )  # fmt: skip
    _wait_http(f"http://127.0.0.1:{HEALTH_PORT}/readyz", "the annotator")


# -- 3-5. examples, operators, Pod statuses --------------------------------------


def examples(cluster: Cluster) -> None:
    step(f"namespace {NS}, opted in with aibom.dev/enabled=true")
    cluster.kubectl("create", "namespace", NS, check=False)
    cluster.kubectl("label", "namespace", NS, "aibom.dev/enabled=true", "--overwrite")
    step("kubectl apply -f examples/ (the objects a user applies)")
    print(cluster.kubectl("apply", "-n", NS, "-f", str(REPO / "examples")).rstrip())


#: Who makes each chain of the demo (printed at the end, and in the README).
CHAINS = (
    ("real", "LeaderWorkerSet -> leader StatefulSet -> leader Pod -> worker StatefulSet"
     " -> worker Pods", "the LWS controller (sigs.k8s.io/lws) with Kubernetes' StatefulSet controller"),
    ("real", "NIMService -> Deployment -> ReplicaSet -> Pod",
     "the NIM operator (NVIDIA/k8s-nim-operator, from source) with kube-controller-manager"),
    ("real", "InferenceService -> Deployment <name>-predictor -> ReplicaSet -> Pod",
     "KServe's controller manager v0.20.0 (Standard mode; its Pod webhook adds the"
     " storage-initializer) with kube-controller-manager"),
    ("real", "RayService -> RayCluster -> head and worker Pods",
     "the KubeRay operator v1.5.0 (ray-project/kuberay)"),
    ("real", "Deployment -> ReplicaSet -> Pod, StatefulSet -> Pod, Job -> Pod",
     "Kubernetes' own controllers (kube-controller-manager)"),
    ("real", "DynamoGraphDeployment -> DynamoComponentDeployment -> Deployment",
     "the Dynamo operator (ai-dynamo/dynamo deploy/operator, built from source), then"
     " kube-controller-manager"),
    ("real", "DynamoGraphDeployment -> PodCliqueSet -> PodClique -> Pods",
     "the Dynamo operator, then the Grove operator (ai-dynamo/grove, built from source)"),
    ("real", "PodCliqueSet -> PodCliqueScalingGroup -> PodClique -> Pods",
     "the Grove operator"),
    ("played", "CronJob -> Job", "this script (kubectl create job --from; the cronjob"
     " controller is real but would wait for the schedule)"),
    ("real", "Pod -> Node, Pod status (Running, imageID digests)",
     "kube-scheduler, and kwok v0.8.0's Stages on fake Nodes (kwok plays the kubelets:"
     " no container runs)"),
)  # fmt: skip


def operators(cluster: Cluster) -> None:
    step("play a CronJob's Job (the real operators make every other chain)")
    for what in (
        "LeaderWorkerSet/vllm",
        "DynamoGraphDeployment/vllm-agg and vllm-disagg (the Dynamo operator; Grove under"
        " vllm-disagg)",
        "PodCliqueSet/prefill (the Grove operator)",
        "NIMService/meta-llama-3-2-1b-instruct",
        "InferenceService/huggingface-llama2",
        "RayService/rayservice-sample",
    ):
        print(f"  {what}: not played; its real operator makes its chain")  # fmt: skip

    if cluster.get("job", "nightly-eval-manual") is None:
        cluster.kubectl(
            "create", "job", "nightly-eval-manual", "--from=cronjob/nightly-eval", "-n", NS
        )
    print(
        "  CronJob/nightly-eval -> Job/nightly-eval-manual (kubectl create job --from, as the cronjob controller would)"
    )


#: The Pods the examples and operators make (name prefixes), each reported by kwok.
EXPECTED_PODS = {"vllm-agg-frontend", "vllm-agg-vllmdecodeworker", "vllm-0", "vllm-0-1",
                 "vllm-disagg-0-frontend", "vllm-disagg-0-vllmdecodeworker",
                 "vllm-disagg-0-vllmprefillworker", "prefill-0-prefill-0-pleader",
                 "prefill-0-prefill-0-pworker", "meta-llama-3-2-1b-instruct",
                 "nightly-eval-manual", "web", "debug-shell",
                 "huggingface-llama2-predictor", "rayservice-sample"}  # fmt: skip


def _reported(pod: Obj) -> bool:
    """kwok's Stages reported the Pod: Running (or, a Job's, Succeeded), an imageID for
    every container, init ones too."""
    spec, status = pod["spec"], pod.get("status", {})
    statuses = [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]
    ids = {s["name"]: s.get("imageID") for s in statuses}
    names = [c["name"] for c in [*spec.get("initContainers", []), *spec["containers"]]]
    return status.get("phase") in {"Running", "Succeeded"} and all(ids.get(n) for n in names)


def pod_statuses(cluster: Cluster, timeout: float = 120) -> None:
    step("kube-scheduler binds the Pods to kwok's fake Nodes; kwok reports them running,"
         " with the image digests they pulled")  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        pods = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]
        names = {p["metadata"]["name"] for p in pods}
        prefixes = {n.rsplit("-", 2)[0] for n in names} | names
        missing = {e for e in EXPECTED_PODS if not any(n.startswith(e) for n in prefixes)}
        waiting = [p for p in pods if not _reported(p)]
        if not missing and not waiting:
            nodes = sorted({p["spec"]["nodeName"] for p in pods})
            print(f"  {len(pods)} Pods on {', '.join(nodes)}, every container's imageID"
                  " reported by kwok")  # fmt: skip
            return
        if time.monotonic() > deadline:
            late = [f"{p['metadata']['name']} ({p.get('status', {}).get('phase')},"
                    f" node {p['spec'].get('nodeName', '-')})" for p in waiting]  # fmt: skip
            raise SystemExit(f"Pods not reported in time: missing {sorted(missing)}, {late}")
        time.sleep(1)


# -- 6. show -----------------------------------------------------------------------


EXPECTED_DOCS = {
    "aibom-dynamographdeployment-vllm-agg",
    "aibom-dynamographdeployment-vllm-disagg",
    "aibom-podcliqueset-prefill",
    "aibom-leaderworkerset-vllm",
    "aibom-nimservice-meta-llama-3-2-1b-instruct",
    "aibom-inferenceservice-huggingface-llama2",
    "aibom-rayservice-rayservice-sample",
    "aibom-cronjob-nightly-eval",
    "aibom-deployment-web",
}


def show(cluster: Cluster, timeout: float = 60) -> None:
    step("the stamps, as `kubectl get -o yaml` shows them (its metadata, as printed)")
    vllm_pod = _decode_worker_pod(cluster)
    worker = json.loads(cluster.kubectl("get", "deployments", "-n", NS, "-l", DECODE_WORKER,
                                        "-o", "json"))["items"][0]["metadata"]["name"]  # fmt: skip
    for kind, name in [
        ("dynamographdeployment", "vllm-agg"),
        ("deployment", worker),
        ("pod", vllm_pod),
        ("pod", "debug-shell"),
    ]:
        print(f"$ kubectl get {kind} {name} -n {NS} -o yaml   # up to metadata.annotations")
        yaml_text = cluster.kubectl("get", kind, name, "-n", NS, "-o", "yaml")
        lines = yaml_text.splitlines()
        start = next(i for i, line in enumerate(lines) if line == "  annotations:")
        block = [lines[start]]
        for line in lines[start + 1 :]:
            if not line.startswith("    "):
                break
            block.append(line)
        # Our keys and the others, minus kubectl's last-applied copy of the manifest.
        keep = [b for b in block if "last-applied" not in b and not b.startswith("      ")]
        print("\n".join([*lines[:2], "metadata:", *keep]))
    pods = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]
    print("--- every Pod (root / rollup):")
    for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
        a = p["metadata"].get("annotations", {})
        print(
            f"  {p['metadata']['name']:45s} {a.get('aibom.dev/root', '-'):50s} {a.get('aibom.dev/rollup', '-')}"
        )

    step("the roll-up tree: kubectl get ... -o json | aibom-rollup tree (the offline mode)")
    kinds = (
        "deploy,rs,sts,job,cronjob,pod,lws,dgd,dcd,nimservice,pcs,pcsg,pclq,isvc,"
        "rayservice,raycluster"
    )
    dump = cluster.kubectl("get", kinds, "-n", NS, "-o", "json")
    (STATE / "dump.json").write_text(dump)
    print(subprocess.run([PY, "-m", "aibom_rollup", "tree", "-"], input=dump, capture_output=True,
                         text=True, cwd=REPO, check=True).stdout.rstrip())  # fmt: skip

    step("the AIBOM ConfigMaps written by the annotator (one per root)")
    deadline = time.monotonic() + timeout
    while True:
        cms = json.loads(cluster.kubectl(
            "get", "configmaps", "-n", NS, "-l", "app.kubernetes.io/managed-by=aibom-rollup", "-o", "json"
        ))["items"]  # fmt: skip
        names = {c["metadata"]["name"] for c in cms}
        docs = {
            c["metadata"]["name"]: json.loads(c.get("data", {}).get("aibom.json", "{}"))
            for c in cms
        }
        graph_doc = docs.get("aibom-dynamographdeployment-vllm-agg", {})
        digests_in = json.dumps(graph_doc).count("sha256")
        if names >= EXPECTED_DOCS and digests_in:
            break
        if time.monotonic() > deadline:
            print(
                f"  (still waiting for {sorted(EXPECTED_DOCS - names)}; see {STATE / 'annotator.log'})"
            )
            break
        time.sleep(1)
    print(
        cluster.kubectl(
            "get", "configmaps", "-n", NS, "-l", "app.kubernetes.io/managed-by=aibom-rollup"
        ).rstrip()
    )
    doc = docs.get("aibom-dynamographdeployment-vllm-agg")
    if doc:
        props = [
            p
            for p in doc.get("metadata", {}).get("component", {}).get("properties", [])
            if "rollup" in p["name"]
        ]
        print("--- aibom-dynamographdeployment-vllm-agg: what the graph absorbed")
        for p in props:
            print(f"  {p['name']} = {p['value']}")
        print("--- its components (type, name, version / digest)")
        for c in doc.get("components", []):
            hashes = ",".join(h["content"][:12] for h in c.get("hashes", []))
            print(f"  {c['type']:24s} {c['name']:45s} {c.get('version', '')} {hashes}")
        (STATE / "aibom-dynamographdeployment-vllm-agg.json").write_text(json.dumps(doc, indent=2))
        print(f"  (full document: {STATE / 'aibom-dynamographdeployment-vllm-agg.json'})")
    children = sorted(names - EXPECTED_DOCS)
    print(f"--- documents of rolled-up children: {children or 'none (each child is on its root)'}")


#: The labels the Dynamo operator gives what it makes for a graph, and for the graph
#: vllm-agg's decode worker (and its Pods).
GRAPH_LABEL = "nvidia.com/dynamo-graph-deployment-name"
DECODE_WORKER = f"{GRAPH_LABEL}=vllm-agg,nvidia.com/dynamo-component=VllmDecodeWorker"


def _decode_worker_pod(cluster: Cluster) -> str:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-l", DECODE_WORKER, "-o", "json"))
    name: str = sorted(p["metadata"]["name"] for p in pods["items"])[0]
    return name


def plugin(cluster: Cluster) -> None:
    """`kubectl aibom`, the installed plugin, found by the real kubectl on PATH."""
    env = trail.plugin_env(cluster.env, cluster.registry, STATE)
    env["PATH"] = f"{Path(PY).parent}{os.pathsep}{env.get('PATH', '')}"
    pod = _decode_worker_pod(cluster)
    for args in (["tree", "dgd/vllm-agg"], ["explain", f"pod/{pod}"] if pod else [], ["get"]):
        if not args:
            continue
        step(f"kubectl aibom {' '.join(args)} -n {NS}")
        proc = subprocess.run(
            [cluster.kubectl_bin, "aibom", *args, "-n", NS],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        print((proc.stdout + proc.stderr).rstrip())


#: The objects the real operators made, by selector: their controller and field managers.
REAL_MADE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("statefulsets,pods", ("-l", "leaderworkerset.sigs.k8s.io/name=vllm")),
    ("dynamocomponentdeployments,deployments", ("-l", f"{GRAPH_LABEL}=vllm-agg")),
    ("podcliquesets", ("--field-selector", "metadata.name=vllm-disagg")),
    ("podcliques", ("-l", f"{GRAPH_LABEL}=vllm-disagg")),
    ("podcliquescalinggroups,podcliques", ("-l", "app.kubernetes.io/part-of=prefill")),
    ("deployments", ("-l", "app.kubernetes.io/managed-by=k8s-nim-operator")),
    ("deployments", ("-l", "serving.kserve.io/inferenceservice=huggingface-llama2")),
    ("rayclusters", ("-l", "ray.io/originated-from-cr-name=rayservice-sample")),
    ("pods", ("-l", "ray.io/is-ray-node=yes")),
)


def chains(cluster: Cluster) -> None:
    step("who made what: the real operators' objects (controller reference, field"
         " managers), and what is played")  # fmt: skip
    made: list[Obj] = []
    for kinds, selector in REAL_MADE:
        got = json.loads(cluster.kubectl(
            "get", kinds, "-n", NS, *selector, "-o", "json", "--show-managed-fields"
        ))["items"]  # fmt: skip
        made += sorted(got, key=lambda o: (o["kind"], o["metadata"]["name"]))
    for obj in made:
        refs = obj["metadata"].get("ownerReferences", [])
        ctrl = next((f"{r['kind']}/{r['name']}" for r in refs if r.get("controller")), "-")
        managers = sorted({m["manager"] for m in obj["metadata"].get("managedFields", [])
                           if not m.get("subresource")})  # fmt: skip
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        print(f"  {what:50s} controller: {ctrl:40s} managers: {', '.join(managers)}")
    for kind, chain, by in CHAINS:
        print(f"  [{kind:6s}] {chain}\n           by {by}")


def main() -> int:
    t0 = time.monotonic()
    cluster = control_plane()
    processes(cluster)
    examples(cluster)
    operators(cluster)
    pod_statuses(cluster)
    show(cluster)
    chains(cluster)
    plugin(cluster)
    if cluster.registry is not None:
        step(f"kubectl aibom history dgd/vllm-agg -n {NS}: its versions in the registry, signed")
        env = trail.plugin_env(cluster.env, cluster.registry, STATE)
        env["PATH"] = f"{Path(PY).parent}{os.pathsep}{env.get('PATH', '')}"
        trail.show(cluster.kubectl_bin, env, NS, "DynamoGraphDeployment/vllm-agg")
    step(f"done in {time.monotonic() - t0:.0f} s; everything keeps running")
    print(f"  export KUBECONFIG={cluster.kubeconfig}")
    print(f"  {cluster.kubectl_bin} get configmaps -n {NS}")
    print(f"  export PATH={Path(PY).parent}:$PATH   # kubectl finds the kubectl-aibom plugin")
    print(
        f"  kubectl aibom tree dgd/vllm-agg -n {NS}; kubectl aibom get dgd/vllm-agg -n {NS} -o wide"
    )
    print(f"  kubectl aibom find -A --image nginx:1.27; kubectl aibom explain pod/<name> -n {NS}")
    print(f"  metrics: curl -s http://127.0.0.1:{METRICS_PORT}/metrics | grep aibom_")
    print("  stop everything: make demo-down")
    return 0


def down() -> int:
    for name in ("annotator", "webhook"):
        _stop_pidfile(name)
    subprocess.run([PY, "-m", "tests.controlplane", "down"], cwd=REPO, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(down() if sys.argv[1:] == ["down"] else main())
