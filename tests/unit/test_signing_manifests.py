"""The signing kustomize components (manifests/components/signing*) against the real parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aibom_core import jsf
from aibom_rollup.cli import build_parser
from tests.unit.manifest_docs import ANNOTATOR, components, only

COMPONENTS = Path(__file__).resolve().parents[2] / "manifests" / "components"


def _ops() -> list[dict[str, Any]]:
    kust = yaml.safe_load((COMPONENTS / "signing" / "kustomization.yaml").read_text())
    assert kust["kind"] == "Component"
    (patch,) = kust["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "aibom-rollup-annotator"}
    ops: list[dict[str, Any]] = yaml.safe_load(patch["patch"])
    return ops


def test_the_patched_annotator_parses_and_reads_the_mounted_key() -> None:
    dep = only(components(), "Deployment", ANNOTATOR)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    ops = _ops()
    args = [*container["args"], *(o["value"] for o in ops if o["path"].endswith("/args/-"))]
    parsed = build_parser(args).parse_args(args)
    mount = next(o["value"] for o in ops if o["path"].endswith("/volumeMounts/-"))
    volume = next(o["value"] for o in ops if o["path"].endswith("/volumes/-"))
    assert Path(parsed.signing_key).parent == Path(mount["mountPath"])
    assert Path(parsed.signing_key).name == jsf.SECRET_KEY
    assert mount["readOnly"] is True and mount["name"] == volume["name"]
    assert volume["secret"]["secretName"] == "aibom-rollup-signing-key"
    assert "optional" not in volume["secret"]  # fail closed: never unsigned by accident
    # Readable by the annotator's group only (it runs as 65532, not root).
    fs_group = next(o["value"] for o in ops if o["path"].endswith("/fsGroup"))
    assert (
        fs_group
        == only(components(), "Deployment", ANNOTATOR)["spec"]["template"]["spec"][
            "securityContext"
        ]["runAsGroup"]
    )
    assert volume["secret"]["defaultMode"] == 0o440


def test_cert_manager_issues_the_same_secret_with_a_supported_key() -> None:
    cert = yaml.safe_load((COMPONENTS / "signing-cert-manager" / "certificate.yaml").read_text())
    volume = next(o["value"] for o in _ops() if o["path"].endswith("/volumes/-"))
    assert cert["spec"]["secretName"] == volume["secret"]["secretName"]
    key = cert["spec"]["privateKey"]
    # Ed25519 needs PKCS#8; cert-manager's ECDSA P-256 (SEC1) would load too.
    assert (key["algorithm"], key["encoding"]) == ("Ed25519", "PKCS8")
