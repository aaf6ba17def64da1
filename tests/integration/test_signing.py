"""Signed AIBOMs on the real control plane: tampering, repair, key rotation (docs/signing.md).

The annotator runs as in test_annotator.py (a real process under the shipped
ClusterRole's identity, its own Lease); `aibom-rollup verify` and `keys` run
as a user would run them, with the admin kubeconfig. The JWK set ConfigMap
lives in the test's namespace (--keys-configmap) so tests do not share it.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aibom_core import jsf
from aibom_core.document import unpack
from tests.controlplane import REPO_ROOT, ControlPlane, Kubectl, child_env
from tests.integration.support import (
    MANAGED,
    ConfigMapWatch,
    StartAnnotator,
    apply,
    dcd,
    docs,
    merge_patch,
    wait_doc,
    wait_for,
)

pytestmark = pytest.mark.integration

KEYS_CM = "aibom-signing-keys"
REPAIRED = "aibom_annotator_documents_repaired_total"


def cli(cp: ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "aibom_rollup", *args],
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=120,
    )


def verify(cp: ControlPlane, ns: str, *extra: str) -> tuple[int, list[list[str]]]:
    """`aibom-rollup verify -n NS` against the keys published in NS; (exit code, lines)."""
    r = cli(
        cp,
        "verify",
        f"--kubeconfig={cp.kubeconfig}",
        "-n",
        ns,
        f"--keys-configmap={ns}/{KEYS_CM}",
        *extra,
    )
    assert r.returncode != 2, r.stderr
    return r.returncode, [line.split() for line in r.stdout.splitlines()]


def new_key(cp: ControlPlane, kid: str, algorithm: str = jsf.ED25519) -> dict[str, bytes]:
    """`aibom-rollup keys new --secret`: the Secret's files (tls.key, kid)."""
    r = cli(cp, "keys", "new", "--kid", kid, "--algorithm", algorithm, "--secret", f"s-{kid}")
    assert r.returncode == 0, r.stderr
    secret = json.loads(r.stdout)
    return {name: base64.b64decode(value) for name, value in secret["data"].items()}


def mount(tmp: Path, files: dict[str, bytes]) -> Path:
    """Lay out (or update) a Secret volume as the kubelet does: the files live in a
    timestamped directory behind the `..data` symlink, swapped atomically on update.
    Returns the path of tls.key."""
    root = tmp / "secret-volume"
    root.mkdir(exist_ok=True)
    version = root / f"..v{len(list(root.glob('..v*')))}"
    version.mkdir()
    for name, data in files.items():
        (version / name).write_bytes(data)
    tmp_link = root / "..data_tmp"
    tmp_link.symlink_to(version.name)
    tmp_link.replace(root / "..data")
    for name in files:
        link = root / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
    return root / "tls.key"


def published(cp: ControlPlane, ns: str) -> list[str]:
    resp = cp.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{KEYS_CM}")
    if resp.status == 404:
        return []
    keys = json.loads(resp.json()["data"]["jwks.json"])["keys"]
    return [k["kid"] for k in keys]


def signature(cm: dict[str, Any]) -> dict[str, Any]:
    raw = unpack(cm)
    assert raw is not None
    sig: dict[str, Any] = json.loads(raw).get("signature") or {}
    return sig


def signed_with(cp: ControlPlane, ns: str, kid: str, n: int) -> bool:
    cms = docs(cp, ns)
    return len(cms) == n and all(signature(cm).get("keyId") == kid for cm in cms.values())


class DocumentWatch(ConfigMapWatch):
    """Every version of our ConfigMaps' documents the API server stored (watch events)."""

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        super().__init__(cp, ns, selector=MANAGED)
        self.versions: list[tuple[str, bytes]] = []

    def handle(self, event: dict[str, Any]) -> None:
        if event["type"] in ("ADDED", "MODIFIED"):
            raw = unpack(event["object"])
            if raw is not None:
                self.versions.append((event["object"]["metadata"]["name"], raw))


def test_tampering_is_reported_and_repaired_and_counted(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator, tmp_path: Path
) -> None:
    key = mount(tmp_path, new_key(control_plane, "k1"))
    args = (f"--signing-key={key}", f"--keys-configmap={ns}/{KEYS_CM}")
    first = start(*args)
    apply(kubectl, dcd(ns, "kept"))
    name = "aibom-dynamocomponentdeployment-kept"
    cm = wait_doc(control_plane, ns, name)
    original = unpack(cm)
    assert original is not None
    assert signature(cm)["keyId"] == "k1"
    assert cm["metadata"]["annotations"]["aibom.dev/signed-by"] == "k1"
    assert published(control_plane, ns) == ["k1"]
    assert verify(control_plane, ns) == (0, [["valid", f"configmap/{ns}/{name}", "key=k1"]])

    # Edit the data while no annotator runs: verify must see it.
    assert first.stop() == 0
    doc = json.loads(original)
    doc["components"][0]["name"] = "registry.example/evil"
    merge_patch(kubectl, ns, f"configmap/{name}", {"data": {"aibom.json": json.dumps(doc)}})
    code, lines = verify(control_plane, ns)
    assert code == 1, lines
    assert lines[0][:3] == ["invalid", f"configmap/{ns}/{name}", "key=k1"]
    assert " ".join(lines[0][3:]) == "(the signature does not match the document (edited))"
    # The same through a dump, against the published key set given as a file.
    dump = kubectl("get", "cm", "-n", ns, "-l", MANAGED, "-o", "json").stdout
    keys = kubectl("get", "cm", "-n", ns, KEYS_CM, "-o", "json").stdout
    (tmp_path / "keys.json").write_text(keys)
    r = cli(control_plane, "verify", f"--key={tmp_path / 'keys.json'}", "-", stdin=dump)
    assert r.returncode == 1 and r.stdout.startswith("invalid"), (r.stdout, r.stderr)

    # The annotator restores the signed document byte for byte, and counts it.
    second = start(*args, ident="annotator-b")
    wait_for(
        "the edited document restored",
        lambda: unpack(docs(control_plane, ns).get(name) or {}) == original,
        timeout=60,
    )
    wait_for(
        "the repair counted",
        lambda: second.metric(REPAIRED, {"reason": "edited"}) == 1.0,
    )
    assert verify(control_plane, ns)[0] == 0
    # A document stripped of its signature is reported unsigned (exit 4).
    doc.pop("signature")
    r = cli(control_plane, "verify", f"--key={tmp_path / 'keys.json'}", "-", stdin=json.dumps(doc))
    assert r.returncode == 4 and r.stdout.startswith("unsigned")


def test_key_rotation_without_a_gap(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator, tmp_path: Path
) -> None:
    key = mount(tmp_path, new_key(control_plane, "k1"))
    with DocumentWatch(control_plane, ns) as watch:
        running = start(f"--signing-key={key}", f"--keys-configmap={ns}/{KEYS_CM}")
        for name in ("a", "b", "c"):
            apply(kubectl, dcd(ns, name))
        wait_for("3 documents signed by k1", lambda: signed_with(control_plane, ns, "k1", 3))
        assert verify(control_plane, ns)[0] == 0

        # The Secret is updated in place (kubectl apply of a new `keys new
        # --secret`, or cert-manager's renewal): no restart.
        mount(tmp_path, new_key(control_plane, "k2", jsf.ES256))
        wait_for(
            "3 documents re-signed by k2",
            lambda: signed_with(control_plane, ns, "k2", 3),
            timeout=60,
        )
        assert running.alive()
        assert published(control_plane, ns) == ["k1", "k2"]
        code, lines = verify(control_plane, ns)
        assert code == 0 and {line[2] for line in lines} == {"key=k2"}, lines
        # What any consumer could have read at any moment verified against the
        # published set: every stored version of every document is valid.
        keys = jsf.KeySet.parse(
            control_plane.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{KEYS_CM}").json()[
                "data"
            ]["jwks.json"]
        )
    assert len(watch.versions) >= 6, watch.versions
    for name, raw in watch.versions:
        assert jsf.verify_bytes(raw, keys).status is jsf.Status.VALID, name

    # Retire k1: the documents stay valid, and a document still signed by k1
    # would now be reported unknown-key.
    current = kubectl("get", "cm", "-n", ns, KEYS_CM, "-o", "json").stdout
    r = cli(control_plane, "keys", "jwks", "--from", "-", "--retire", "k1", stdin=current)
    assert r.returncode == 0, r.stderr
    kubectl("replace", "-f", "-", input=r.stdout)
    assert published(control_plane, ns) == ["k2"]
    assert verify(control_plane, ns)[0] == 0
    stale = next(raw for _, raw in watch.versions if b'"keyId":"k1"' in raw)
    (tmp_path / "stale.json").write_bytes(stale)
    code, lines = verify_files(control_plane, ns, tmp_path / "stale.json")
    assert code == 3 and lines[0][0] == "unknown-key", lines


def verify_files(cp: ControlPlane, ns: str, *files: Path) -> tuple[int, list[list[str]]]:
    r = cli(
        cp,
        "verify",
        f"--kubeconfig={cp.kubeconfig}",
        f"--keys-configmap={ns}/{KEYS_CM}",
        *map(str, files),
    )
    return r.returncode, [line.split() for line in r.stdout.splitlines()]
