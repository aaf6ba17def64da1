"""The export and unsigned kustomize components against the annotator's real parser."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from aibom_rollup.cli import build_parser
from annotator.export import export_of
from annotator.signing import signing_of
from tests.unit.manifest_docs import ANNOTATOR, MANIFESTS, apply_component, components, only


def _args(component: str) -> tuple[list[str], dict[str, Any]]:
    docs = copy.deepcopy(components())
    apply_component(docs, MANIFESTS / "components" / component)
    spec = only(docs, "Deployment", ANNOTATOR)["spec"]["template"]["spec"]
    return list(spec["containers"][0]["args"]), spec


def test_a_default_install_signs() -> None:
    dep = only(components(), "Deployment", ANNOTATOR)
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    parsed = build_parser(args).parse_args(args)
    assert parsed.signing_key == "/etc/aibom-rollup/signing/tls.key"


def test_unsigned_is_one_component_away() -> None:
    args, _ = _args("unsigned")
    parsed = build_parser(args).parse_args(args)
    assert parsed.signing_key == ""
    assert signing_of(parsed) is None


def test_the_export_component_mounts_what_its_flags_read() -> None:
    args, spec = _args("export")
    parsed = build_parser(args).parse_args(args)
    assert parsed.export_registry == "registry.example.com/aibom"
    creds = Path(parsed.export_registry_credentials)
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "export-registry")
    volume = next(v for v in spec["volumes"] if v["name"] == "export-registry")
    assert creds.parent == Path(mount["mountPath"]) and mount["readOnly"] is True
    assert creds.name == ".dockerconfigjson"  # the key of a kubernetes.io/dockerconfigjson Secret
    assert volume["secret"]["secretName"] == "aibom-rollup-export-registry"
    parsed.export_registry_credentials = None  # the file exists only in the Pod
    settings = export_of(parsed)
    assert settings is not None and settings.endpoint.host == "registry.example.com"
    assert settings.endpoint.prefix == "aibom"
