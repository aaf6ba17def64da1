"""The audit trail on a REAL registry: export, referrers, history, `--at`, and faults.

The registry is the CNCF distribution registry v3.1.2 (`components/registry.py`:
built from its Go module, TLS from the cluster CA, htpasswd auth on). The
annotator runs as a process under the shipped ClusterRole (test_annotator.py's
way), signs with a key of `aibom-rollup keys new`, and exports with
`--export-registry`, its credentials a dockerconfigjson file and its CA the
cluster's. Faults go through `registryproxy.RegistryProxy` (a TLS proxy in
front of the same real registry) or stop the registry itself. Every wait is on
an event: a metric, a ConfigMap, a tag, a log line; never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import oras.provider
import pytest

from aibom_core import trail
from aibom_edge.oci import Endpoint
from aibom_edge.oci_client import Client
from annotator.export import BACKLOG_SELECTOR, now_rfc3339
from tests.controlplane import REPO_ROOT, ControlPlane, Kubectl, child_env
from tests.controlplane.components.registry import Registry
from tests.integration.kubelet import set_digest
from tests.integration.registryproxy import RegistryProxy
from tests.integration.support import (
    RBAC,
    Annotator,
    StartAnnotator,
    apply,
    deployment,
    docs,
    items,
    token_kubeconfig,
    wait_for,
)
from tests.integration.test_annotator_faults import POLICY, sa_request
from tests.integration.test_signing import KEYS_CM, mount, new_key

pytestmark = [pytest.mark.integration, pytest.mark.components("registry")]

IMAGE = "registry.example/team/app:1"
MIRROR = "registry.example/team/app"  # its repository in the export registry ({host}/{repository})
EXPORTED = "aibom_annotator_exports_total"
FAILURES = "aibom_annotator_export_failures_total"


@pytest.fixture
def registry(components: dict[str, Any]) -> Iterator[Registry]:
    reg = components["registry"]
    assert isinstance(reg, Registry)
    if not reg.processes:  # a test took it down and failed before bringing it back
        reg.start()
    yield reg
    if not reg.processes:
        reg.start()


@pytest.fixture
def creds(registry: Registry, tmp_path: Path) -> Path:
    path = tmp_path / "dockerconfig.json"
    path.write_text(registry.dockerconfigjson())
    return path


def client(registry: Registry, creds: Path, host: str | None = None) -> Client:
    return Client(
        Endpoint(host or registry.host, ca_file=str(registry.ca_file), auth_file=str(creds))
    )


def push_image(registry: Registry, creds: Path, repository: str = MIRROR) -> str:
    """A small real OCI image manifest at `repository` (what a mirror holds); its digest."""
    c = client(registry, creds)
    config = json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    ).encode()
    cdigest = trail.digest_of(config)
    c.push_blob(repository, config, cdigest)
    body = {
        "schemaVersion": 2,
        "mediaType": trail.MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": cdigest,
            "size": len(config),
        },
        "layers": [],
    }
    return c.push_manifest(repository, "1", body)


@dataclass
class Env:
    """What every test here uses: the plane, its namespace, the registry, an annotator maker."""

    cp: ControlPlane
    kubectl: Kubectl
    ns: str
    start: StartAnnotator
    registry: Registry
    creds: Path
    tmp: Path

    def annotator(
        self,
        *extra: str,
        host: str | None = None,
        ident: str = "annotator-a",
        wait: bool = True,
        kubeconfig: Path | None = None,
    ) -> Annotator:
        """An annotator that signs (a key of `keys new`) and exports to `host` (the registry)."""
        key = self.tmp / "secret-volume" / "tls.key"
        if not key.exists():
            mount(self.tmp, new_key(self.cp, "k1"))
        return self.start(
            f"--signing-key={key}",
            f"--keys-configmap={self.ns}/{KEYS_CM}",
            f"--export-registry={host or self.registry.host}/trail",
            f"--export-registry-credentials={self.creds}",
            f"--export-ca-file={self.registry.ca_file}",
            f"--export-cluster-id=test-{self.ns}",
            f"--export-backlog-namespace={self.ns}",
            *extra,
            ident=ident,
            wait=wait,
            kubeconfig=kubeconfig,
        )

    def client(self) -> Client:
        return client(self.registry, self.creds)

    def repo(self, name: str, kind: str = "Deployment", group: str = "apps") -> str:
        return root_repo(self.ns, kind, group, name)

    def versions(self, repo: str) -> list[str]:
        return versions(self.registry, self.creds, repo)


@pytest.fixture
def env(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    ns: str,
    start: StartAnnotator,
    request: pytest.FixtureRequest,
) -> Env:
    return Env(
        control_plane,
        kubectl,
        ns,
        start,
        request.getfixturevalue("registry"),
        request.getfixturevalue("creds"),
        request.getfixturevalue("tmp_path"),
    )


def root_repo(ns: str, kind: str, group: str, name: str) -> str:
    return trail.root_repository("trail", f"test-{ns}", trail.RootId(ns, kind, name, group=group))


def versions(registry: Registry, creds: Path, repo: str) -> list[str]:
    return [t for t in client(registry, creds).tags(repo) if trail.digest_of_tag(t)]


def backlog(cp: ControlPlane, ns: str) -> list[dict[str, Any]]:
    return items(cp, f"/api/v1/namespaces/{ns}/configmaps?labelSelector={BACKLOG_SELECTOR}")


def run_pod(cp: ControlPlane, ns: str, app: str, image: str, digest: str) -> str:
    """Wait for the Deployment's Pod (kube-controller-manager makes it) and play its kubelet."""
    pods = wait_for(
        f"a Pod of {app}",
        lambda: items(cp, f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}"),
        timeout=60,
    )
    name = pods[0]["metadata"]["name"]
    set_digest(cp, ns, name, image, digest)
    return str(name)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "aibom_rollup", *args],
        check=False, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip


def jwks(cp: ControlPlane, ns: str, tmp_path: Path) -> Path:
    resp = cp.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{KEYS_CM}")
    assert resp.ok
    path = tmp_path / "jwks.json"
    path.write_text(resp.json()["data"]["jwks.json"])
    return path


# ------------------------------------------------------------------------------- the trail


def test_each_version_lands_once_signed_and_found_from_its_image(env: Env) -> None:
    cp, kubectl, ns, registry, creds, tmp_path = (
        env.cp, env.kubectl, env.ns, env.registry, env.creds, env.tmp,
    )  # fmt: skip
    digest = push_image(registry, creds)
    a = env.annotator()
    apply(kubectl, deployment(ns, "web", image=IMAGE))
    run_pod(cp, ns, "web", IMAGE, digest)
    repo = root_repo(ns, "Deployment", "apps", "web")

    # The document names the digest once the Pod reports it: that version is exported.
    def digest_exported() -> list[str]:
        c = client(registry, creds)
        found = []
        for tag in versions(registry, creds, repo):
            m = c.manifest(repo, tag)
            body = json.loads(c.blob(repo, m["layers"][0]["digest"]))
            if digest in trail.aspects(body)["digests"]:
                found.append(tag)
        return found

    tags = wait_for("the version naming the digest in the registry", digest_exported, timeout=60)
    assert len(tags) == 1
    wait_for("the backlog emptied", lambda: not backlog(cp, ns), timeout=30)

    # Pulled with the library (ORAS's own `pull`), its signature checks with verify.
    reg = oras.provider.Registry(
        hostname=registry.host, tls_verify=str(registry.ca_file), auth_backend="basic"
    )
    files = reg.pull(
        target=f"{registry.host}/{repo}:{tags[0]}",
        config_path=str(creds),
        outdir=str(tmp_path / "pulled"),
    )
    assert [Path(f).name for f in files] == ["aibom.json"]
    r = cli("verify", files[0], "--key", str(jwks(cp, ns, tmp_path)))
    assert r.returncode == 0 and r.stdout.split()[0] == "valid", r.stdout + r.stderr

    # Its manifest: the OCI 1.1 artifact, annotated as docs/annotator.md says.
    manifest = client(registry, creds).manifest(repo, tags[0])
    assert manifest["artifactType"] == trail.ARTIFACT_TYPE
    uid = kubectl("get", "deploy", "web", "-n", ns, "-o", "jsonpath={.metadata.uid}").stdout.strip()
    ann = manifest["annotations"]
    assert (ann[trail.A_KIND], ann[trail.A_NAME], ann[trail.A_NAMESPACE], ann[trail.A_UID]) == (
        "Deployment", "web", ns, uid,
    )  # fmt: skip
    assert ann[trail.A_CLUSTER] == f"test-{ns}"
    cm = docs(cp, ns)["aibom-deployment-web"]
    assert ann[trail.A_INPUT_HASH] == cm["metadata"]["annotations"]["aibom.dev/input-hash"]

    # Found from the image: the referrers API of the mirror's repository lists it.
    refs = client(registry, creds).referrers(MIRROR, digest, trail.ARTIFACT_TYPE)
    assert [r["annotations"][trail.A_NAME] for r in refs] == ["web"], refs
    assert any(r["annotations"][trail.A_INPUT_HASH] == ann[trail.A_INPUT_HASH] for r in refs)

    # A restarted annotator pushes nothing again (the documents are current, and
    # the registry is asked before any push).
    before = len(versions(registry, creds, repo))
    a.stop()
    b = env.annotator(ident="annotator-b")
    wait_for(
        "b's full resync",
        lambda: any(r.get("msg") == "full resync converged" for r in b.records()),
    )
    assert b.metric(EXPORTED, {"result": "pushed"}) == 0
    assert len(versions(registry, creds, repo)) == before


def kubectl_aibom(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl aibom ARGS` through the real kubectl (the plugin on PATH), configured for
    the trail by the environment, as a user would set it once."""
    assert env.cp.bin_dir is not None
    run_env = child_env()
    run_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{run_env.get('PATH', '')}"
    run_env["KUBERC"] = "off"
    run_env |= {
        "AIBOM_EXPORT_REGISTRY": f"{env.registry.host}/trail",
        "AIBOM_EXPORT_CREDENTIALS": str(env.creds),
        "AIBOM_EXPORT_CA_FILE": str(env.registry.ca_file),
        "AIBOM_CLUSTER_ID": f"test-{env.ns}",
    }
    cmd = [str(env.cp.bin_dir / "kubectl"), "aibom", f"--kubeconfig={env.cp.kubeconfig}", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, env=run_env, timeout=60)


def next_second(after: str) -> str:
    """Wait until the clock's RFC 3339 second is past `after` (versions are timed to the
    second): an event of the clock, not a fixed sleep."""
    return str(wait_for(f"a second after {after}", lambda: (t := now_rfc3339()) > after and t))


def test_history_and_at_answer_from_the_registry(env: Env) -> None:
    ns = env.ns
    env.annotator()
    apply(env.kubectl, deployment(ns, "web", image="registry.example/team/app:1"))
    wait_for("its Pod", lambda: items(env.cp, f"/api/v1/namespaces/{ns}/pods"), timeout=60)
    settled(env)
    between = next_second(history(env, "-o", "json")[-1]["created"])
    next_second(between)
    apply(env.kubectl, deployment(ns, "web", image="registry.example/team/app:2"))
    wait_for(
        "the version with image :2",
        lambda: (
            "registry.example/team/app:2"
            in history(env, "-o", "json")[-1]["changes"]["added"].get("images", ())
        ),
        timeout=60,
    )
    settled(env)

    # history: oldest first, each signed and valid, what changed.
    got = history(env, "-o", "json")
    assert {v["signature"]["status"] for v in got} == {"valid"}
    assert got[0]["changes"]["added"]["images"] == ["registry.example/team/app:1"]
    two = next(
        i for i, v in enumerate(got)
        if "registry.example/team/app:2" in v["changes"]["added"].get("images", ())
    )  # fmt: skip
    assert got[two - 1]["created"] <= between < got[two]["created"]
    # (:1 stays: the old ReplicaSet's Pod never goes, as no kubelet makes the new one ready)
    cm = docs(env.cp, ns)["aibom-deployment-web"]
    assert got[-1]["inputHash"] == cm["metadata"]["annotations"]["aibom.dev/input-hash"]
    assert len({v["digest"] for v in got}) == len(got)  # never the same version twice
    table = kubectl_aibom(
        env, "history", "deploy/web", "-n", ns, f"--keys-configmap={ns}/{KEYS_CM}"
    )
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert len(lines) == 2 + len(got) and "(first version)" in lines[2], table.stdout
    assert "+image registry.example/team/app:2" in lines[2 + two] and "valid (k1)" in lines[2 + two]

    # The same history without kubectl, as an auditor with only the registry would ask.
    offline = cli(
        "history", "Deployment/web", "-n", ns, "-o", "json",
        f"--registry={env.registry.host}/trail", f"--registry-credentials={env.creds}",
        f"--registry-ca-file={env.registry.ca_file}", f"--cluster-id=test-{ns}",
        f"--key={jwks(env.cp, ns, env.tmp)}",
    )  # fmt: skip
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout)["versions"] == got

    # --at: which roots ran image :2 then (none), and since.
    def found(image: str, when: str) -> list[list[str]]:
        got = kubectl_aibom(env, "find", "-A", "--image", image, "--at", when)
        assert got.returncode == 0, got.stderr
        return [line.split()[:2] for line in got.stdout.splitlines()[1:]]

    assert found("registry.example/team/app:1", between) == [[ns, "Deployment/web"]]
    assert found("registry.example/team/app:2", between) == []
    assert found("registry.example/team/app:2", got[two]["created"]) == [[ns, "Deployment/web"]]
    before = kubectl_aibom(env, "get", "-n", ns, "--at", "2001-01-01")
    assert before.returncode == 0 and "No AIBOMs found" in before.stderr, before.stdout

    # get shows each root's signature state.
    listed = kubectl_aibom(env, "get", "-n", ns, f"--keys-configmap={ns}/{KEYS_CM}")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[-1] == "SIGNATURE" and row.split()[-1] == "valid"
    one = kubectl_aibom(env, "get", "deploy/web", "-n", ns, "-o", "wide",
                        f"--keys-configmap={ns}/{KEYS_CM}")  # fmt: skip
    assert one.returncode == 0 and "signature: valid" in one.stdout, one.stdout + one.stderr
    unknown = kubectl_aibom(env, "get", "-n", ns, "-o", "json", "--keys-configmap=nowhere/none")
    assert [i["signature"] for i in json.loads(unknown.stdout)["items"]] == ["unknown-key"]


def settled(env: Env) -> None:
    """The cluster's document is the registry's latest version, and nothing waits."""

    def probe() -> bool:
        cm = docs(env.cp, env.ns).get("aibom-deployment-web")
        latest = history(env, "-o", "json")
        return bool(
            cm and latest and not backlog(env.cp, env.ns)
            and latest[-1]["inputHash"] == cm["metadata"]["annotations"]["aibom.dev/input-hash"]
        )  # fmt: skip

    wait_for("the document exported and settled", probe, timeout=60)


def history(env: Env, *args: str) -> list[dict[str, Any]]:
    got = kubectl_aibom(
        env,
        "history",
        "Deployment/web",
        "-n",
        env.ns,
        f"--keys-configmap={env.ns}/{KEYS_CM}",
        *args,
    )
    assert got.returncode == 0, got.stderr
    versions: list[dict[str, Any]] = json.loads(got.stdout)["versions"]
    return versions


# ------------------------------------------------------------------------------- faults


def current_exported(env: Env, name: str) -> bool:
    """The cluster's document of Deployment `name` is a version in the registry."""
    cm = docs(env.cp, env.ns).get(f"aibom-deployment-{name}")
    if cm is None:
        return False
    want = cm["metadata"]["annotations"]["aibom.dev/input-hash"]
    c, repo = env.client(), env.repo(name)
    return any(
        c.manifest(repo, tag)["annotations"][trail.A_INPUT_HASH] == want
        for tag in env.versions(repo)
    )


def recorded(env: Env) -> int:
    """Versions waiting in the backlog ConfigMaps."""
    return sum(len(json.loads(cm["data"]["versions.json"])) for cm in backlog(env.cp, env.ns))


def pushed_once(proxy_or_log: list[str]) -> None:
    tags = [p for p in proxy_or_log if "/manifests/sha256-" in p]
    assert len(tags) == len(set(tags)), f"a version was pushed twice: {tags}"


def registry_pushes(registry: Registry) -> list[str]:
    """The version tags the registry accepted (its own access log: PUT .../manifests/sha256-)."""
    out = []
    for line in registry.log_file.read_text(errors="replace").splitlines():
        found = re.search(r'"PUT (/v2/\S+/manifests/sha256-[0-9a-f]{64}) HTTP/1.1" 201', line)
        if found:
            out.append(found.group(1))
    return out


FAULTS = {
    "403": dict(status=403),
    "429": dict(status=429, retry_after=1),
    "500": dict(status=500),
    "503": dict(status=503),
}
REASON = {"403": "auth", "429": "throttled", "500": "server", "503": "server"}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_refusing_registry_delays_exports_never_documents(env: Env, fault: str) -> None:
    with RegistryProxy(env.cp, env.registry.url) as proxy:
        proxy.refuse(**FAULTS[fault])  # type: ignore[arg-type]
        env.creds.write_text(env.registry.dockerconfigjson(proxy.host))
        a = env.annotator(host=proxy.host)
        apply(env.kubectl, deployment(env.ns, "web"))
        # The document is written while the registry refuses; the version waits.
        wait_for("the document", lambda: "aibom-deployment-web" in docs(env.cp, env.ns))
        wait_for(
            f"a {fault} counted",
            lambda: a.metric(FAILURES, {"reason": REASON[fault]}) >= 1,
            timeout=30,
        )
        assert recorded(env) >= 1
        assert not env.versions(env.repo("web"))
        if fault == "429":  # the registry's Retry-After is honoured
            waits = [r.get("retry_in_s", 0) for r in a.records() if r.get("reason") == "throttled"]
            assert waits and min(waits) >= 1, waits
        proxy.restore()
        wait_for("the version exported", lambda: current_exported(env, "web"), timeout=60)
        wait_for("the backlog emptied", lambda: not backlog(env.cp, env.ns), timeout=30)
        pushed_once(proxy.pushes())


def test_wrong_credentials_then_a_rotated_secret(env: Env) -> None:
    """401 from the real registry (htpasswd refuses the password); the Secret's file is
    then rewritten with the right one, and the annotator reads it again."""
    good = env.creds.read_text()
    env.creds.write_text(good.replace(env.registry.authorization().removeprefix("Basic "), "eDp5"))
    a = env.annotator()
    apply(env.kubectl, deployment(env.ns, "web"))
    wait_for("the document", lambda: "aibom-deployment-web" in docs(env.cp, env.ns))
    wait_for("a 401 counted", lambda: a.metric(FAILURES, {"reason": "auth"}) >= 1, timeout=30)
    env.creds.write_text(good)
    wait_for("the version exported", lambda: current_exported(env, "web"), timeout=60)


def test_a_slow_registry_times_out_and_is_retried(env: Env) -> None:
    with RegistryProxy(env.cp, env.registry.url) as proxy:
        proxy.delay(3.0)
        env.creds.write_text(env.registry.dockerconfigjson(proxy.host))
        a = env.annotator("--export-timeout=1", host=proxy.host)
        apply(env.kubectl, deployment(env.ns, "web"))
        wait_for("the document", lambda: "aibom-deployment-web" in docs(env.cp, env.ns))
        wait_for(
            "a timeout counted",
            lambda: a.metric(FAILURES, {"reason": "unreachable"}) >= 1,
            timeout=30,
        )
        proxy.restore()
        wait_for("the version exported", lambda: current_exported(env, "web"), timeout=60)
        pushed_once(proxy.pushes())


def test_a_full_registry_then_space(env: Env) -> None:
    """A registry whose disk is full (its storage on a 64 KiB tmpfs: uploads fail with
    ENOSPC inside the real registry) refuses the push; with space again, it lands."""
    reg = env.registry
    storage = reg.work_dir / "storage"
    reg.stop()
    storage.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(storage)], check=True)
    try:
        filler = storage / "filler"
        # leave the registry no room for a document
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            f.write(b"\0" * (64 << 10))
        reg.start()
        a = env.annotator()
        apply(env.kubectl, deployment(env.ns, "web"))
        wait_for("the document", lambda: "aibom-deployment-web" in docs(env.cp, env.ns))
        wait_for("a refusal counted", lambda: a.metric(FAILURES) >= 1, timeout=30)
        assert recorded(env) >= 1
        reasons = {
            r.get("reason") for r in a.records() if r.get("msg") == "export failed; will retry"
        }
        assert reasons & {"server", "refused"}, reasons
        filler.unlink()  # space again
        wait_for("the version exported", lambda: current_exported_on_tmpfs(env), timeout=60)
    finally:
        reg.stop()
        subprocess.run(["umount", str(storage)], check=False)
        reg.start()


def current_exported_on_tmpfs(env: Env) -> bool:
    return bool(env.versions(env.repo("web"))) and not backlog(env.cp, env.ns)


THREE = ("one", "two", "three")


def three_roots(env: Env, what: str) -> None:
    """Three Deployments, and their documents written (whatever the registry does)."""
    for name in THREE:
        apply(env.kubectl, deployment(env.ns, name))
    want = {f"aibom-deployment-{n}" for n in THREE}
    wait_for(what, lambda: want <= set(docs(env.cp, env.ns)))


def test_registry_down_then_a_leader_change_then_up(env: Env) -> None:
    """Versions recorded while the registry is down survive the leader's death: the next
    leader reads the backlog and pushes each once when the registry is back."""
    reg = env.registry
    reg.stop()
    a = env.annotator()
    b = env.annotator(ident="annotator-b", wait=False).wait_ready()
    three_roots(env, "three documents")
    wait_for("unreachable counted", lambda: a.metric(FAILURES, {"reason": "unreachable"}) >= 1)
    waiting = recorded(env)
    assert waiting >= 3
    a.kill()  # the leader dies with its backlog in the cluster
    b.wait_leading(timeout=60)
    wait_for("b read the backlog", lambda: b.metric("aibom_annotator_export_backlog_versions") >= 3)
    before = len(registry_pushes(reg))
    reg.start()
    for name in ("one", "two", "three"):
        wait_for(f"{name} exported", functools.partial(current_exported, env, name), timeout=90)
    wait_for("the backlog emptied", lambda: not backlog(env.cp, env.ns), timeout=30)
    pushes = registry_pushes(reg)[before:]
    pushed_once(pushes)
    assert b.metric(EXPORTED, {"result": "pushed"}) + b.metric(EXPORTED, {"result": "present"}) >= 3


def test_past_the_bound_versions_are_dropped_counted_and_caught_up(env: Env) -> None:
    reg = env.registry
    reg.stop()
    a = env.annotator("--export-backlog-bytes=1024")
    three_roots(env, "three documents (never held up by the full backlog)")
    wait_for("drops counted", lambda: a.metric("aibom_annotator_export_dropped_total") >= 2)
    assert a.metric("aibom_annotator_export_backlog_bytes") <= 1024
    reg.start()
    # Once the backlog drains, each dropped root's current document is exported.
    for name in ("one", "two", "three"):
        wait_for(f"{name} exported", functools.partial(current_exported, env, name), timeout=90)


# ------------------------------------------------------------------------------- least privilege


def test_the_shipped_rbac_and_policy_allow_the_trail_and_nothing_more(
    env: Env, request: pytest.FixtureRequest
) -> None:
    """As the real ServiceAccount under the shipped ClusterRole, Lease Role and writes
    policy: the JWK set is published, the backlog is written and deleted, versions land;
    a backlog ConfigMap outside the annotator's namespace is refused by the policy."""
    cp = env.cp
    if not cp.request("GET", "/api/v1/namespaces/aibom-system").ok:
        cp.kubectl("create", "namespace", "aibom-system")
    # Cluster-scoped, on the session's control plane: gone after the test (a later
    # module's `helm install` of the chart refused to adopt the ClusterRole).
    request.addfinalizer(
        lambda: cp.kubectl(
            "delete", "--ignore-not-found", "-f", str(POLICY), "-f", str(RBAC), check=False
        )
    )
    cp.kubectl("apply", "--server-side", "-f", str(RBAC))
    cp.kubectl("apply", "--server-side", "-f", str(POLICY))
    token = cp.kubectl(
        "create", "token", "aibom-rollup-annotator", "-n", "aibom-system", "--duration=1h"
    ).stdout.strip()
    elsewhere = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "aibom-export-elsewhere",
            "namespace": env.ns,
            "labels": {"app.kubernetes.io/managed-by": "aibom-rollup-export"},
        },
    }

    def policy_refuses() -> bool:  # in force once the API server's informer has it
        status, _ = sa_request(
            cp, token, "POST", f"/api/v1/namespaces/{env.ns}/configmaps?dryRun=All", elsewhere
        )
        return status == 403

    wait_for("the policy in force", policy_refuses, 60)
    kubeconfig = token_kubeconfig(cp, env.tmp / "sa.kubeconfig", "sa", token)
    env.registry.stop()  # versions wait in the backlog, in aibom-system
    a = env.annotator(
        "--lease-namespace=aibom-system",
        "--lease-name=aibom-rollup-annotator",
        "--keys-configmap=aibom-system/aibom-signing-keys",
        "--export-backlog-namespace=aibom-system",
        kubeconfig=kubeconfig,
    )
    apply(env.kubectl, deployment(env.ns, "web"))
    wait_for("the document", lambda: "aibom-deployment-web" in docs(cp, env.ns), 60)
    wait_for("the backlog in aibom-system", lambda: backlog(cp, "aibom-system"), 30)
    assert cp.request("GET", "/api/v1/namespaces/aibom-system/configmaps/aibom-signing-keys").ok
    env.registry.start()
    wait_for("exported", functools.partial(current_exported, env, "web"), timeout=60)
    wait_for("the backlog deleted", lambda: not backlog(cp, "aibom-system"), 30)
    assert a.metric("aibom_annotator_errors_total") == 0, a.tail()
