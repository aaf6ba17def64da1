"""The AIBOM ConfigMap: label values, body, size handling (gzip, truncation)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from typing import Any

import pytest

from aibom_core.bom import RootView, build_document, validate
from aibom_core.document import MANAGED_BY_LABEL, DocLabels, label_value, unpack
from aibom_core.kinds import default_registry
from aibom_core.objects import ObjRef
from annotator.configmap import configmap_body, fit, is_current, truncate
from tests.unit.kobj import mk

REG = default_registry()
LABELS = DocLabels()
ROOT = ObjRef("nvidia.com", "DynamoGraphDeployment", "ns", "g", "1234-uid")
VALID = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.mark.parametrize(
    "value",
    [
        "g",
        "a" * 63,
        "a" * 64,
        "x" * 253,
        "my.dotted.name-" + "b" * 100,
        "ends-with-dash-" + "c" * 60 + "-",
        "",
        "-leading",
        "has/slash",
    ],
)
def test_label_values_are_valid_and_distinct(value: str) -> None:
    out = label_value(value)
    assert len(out) <= 63 and VALID.match(out), out
    if len(value) <= 63 and VALID.match(value):
        assert out == value
    else:
        assert out != label_value(value + "x")


def _noise(i: int, n: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()[:n]


def doc(n_components: int, n_owned: int, pad: int = 0) -> bytes:
    """A real document (aibom_core.bom) of a graph with containers and owned workloads."""
    containers = [
        {
            "name": f"c{i}",
            "image": f"registry.example/{_noise(i, pad + 8)}/c{i}:1",
        }
        for i in range(n_components)
    ]
    root = mk(
        "DynamoGraphDeployment",
        "g",
        spec={
            "components": [
                {"name": "w", "type": "worker", "podTemplate": {"spec": {"containers": containers}}}
            ]
        },
    )
    owned = tuple(mk("Deployment", f"d{i:03d}", root) for i in range(n_owned))
    view = RootView(root=root, status="root", reason=None, owned=owned, pods=())
    return build_document(view, REG, tool_version="test").json_bytes


def test_small_documents_go_into_data_as_is() -> None:
    d = doc(3, 2)
    p = fit(d, limit=1 << 20)
    assert p.encoding == "json"
    assert p.data == {"aibom.json": d.decode()}
    assert not p.binary_data


def test_large_compressible_documents_are_gzipped_deterministically() -> None:
    d = doc(30, 20)
    assert len(d) > 4096
    p = fit(d, limit=4096)
    assert p.encoding == "gzip"
    raw = base64.b64decode(p.binary_data["aibom.json.gz"])
    assert gzip.decompress(raw) == d
    assert p.size == len(raw) <= 4096
    assert fit(d, limit=4096) == p  # same bytes every time (mtime 0)


def test_too_large_even_gzipped_is_truncated_and_says_so() -> None:
    d = doc(120, 80, pad=40)
    limit = 6000
    assert len(gzip.compress(d)) > limit
    p = fit(d, limit=limit)
    assert p.encoding == "truncated" and p.truncated
    assert p.size <= limit
    raw = gzip.decompress(base64.b64decode(p.binary_data["aibom.json.gz"]))
    validate(raw)  # still CycloneDX 1.6 under the strict schema
    cut = json.loads(raw)
    props = {x["name"]: x["value"] for x in cut["metadata"]["properties"]}
    assert props["aibom.truncated"] == "true"
    assert "does not fit" in props["aibom.truncated.reason"]
    full = json.loads(d)
    kept = len(cut["components"])
    assert 0 < kept < len(full["components"])
    assert int(props["aibom.truncated.omitted-components"]) == p.omitted_components
    assert p.omitted_components == len(full["components"]) - kept
    owned = [
        x["name"]
        for x in cut["metadata"]["component"]["properties"]
        if x["name"].startswith("aibom.rollup.owned.")
    ]
    # The kept owned entries are the first ones, indices 0..n-1.
    assert owned == [f"aibom.rollup.owned.{i}" for i in range(len(owned))]
    assert int(props["aibom.truncated.omitted-owned"]) == 80 - len(owned) == p.omitted_owned
    refs = {c["bom-ref"] for c in cut["components"]} | {cut["metadata"]["component"]["bom-ref"]}
    for dep in cut["dependencies"]:
        assert dep["ref"] in refs and set(dep.get("dependsOn", [])) <= refs
    assert fit(d, limit=limit) == p


def test_truncate_refuses_when_nothing_fits() -> None:
    with pytest.raises(ValueError, match="empty document"):
        truncate(doc(5, 5), limit=10)


def body(**kw: Any) -> dict[str, Any]:
    return configmap_body(
        ROOT,
        api_version="nvidia.com/v1beta1",
        name="aibom-dynamographdeployment-g",
        payload=fit(doc(1, 1)),
        input_hash=kw.get("input_hash", "h1"),
        generator="aibom-rollup/1",
        labels=LABELS,
    )


def test_body_has_the_contract_fields() -> None:
    b = body()
    meta = b["metadata"]
    assert b["apiVersion"] == "v1" and b["kind"] == "ConfigMap"
    assert meta["labels"] == {
        MANAGED_BY_LABEL: "aibom-rollup",
        "aibom.dev/root-kind": "DynamoGraphDeployment",
        "aibom.dev/root-name": "g",
        "aibom.dev/root-uid": "1234-uid",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "nvidia.com/v1beta1",
            "kind": "DynamoGraphDeployment",
            "name": "g",
            "uid": "1234-uid",
        }
    ]
    assert "controller" not in meta["ownerReferences"][0]
    assert meta["annotations"]["aibom.dev/document-for"] == "nvidia.com/DynamoGraphDeployment/g"
    assert meta["annotations"]["aibom.dev/encoding"] == "json"
    assert unpack(b) == doc(1, 1)


def test_is_current_compares_hash_generator_labels_and_owner() -> None:
    stored = body()
    assert is_current(stored, ROOT, input_hash="h1", generator="aibom-rollup/1", labels=LABELS)
    assert not is_current(stored, ROOT, input_hash="h2", generator="aibom-rollup/1", labels=LABELS)
    assert not is_current(stored, ROOT, input_hash="h1", generator="aibom-rollup/2", labels=LABELS)
    assert not is_current(None, ROOT, input_hash="h1", generator="aibom-rollup/1", labels=LABELS)
    other = ObjRef(ROOT.group, ROOT.kind, ROOT.namespace, ROOT.name, "new-uid")
    assert not is_current(stored, other, input_hash="h1", generator="aibom-rollup/1", labels=LABELS)
    stored["metadata"]["labels"].pop("aibom.dev/root-name")
    assert not is_current(stored, ROOT, input_hash="h1", generator="aibom-rollup/1", labels=LABELS)


def test_long_root_names_get_valid_labels_and_full_name_annotation() -> None:
    long = ObjRef("apps", "Deployment", "ns", "d" * 250, "u")
    b = configmap_body(
        long,
        api_version="apps/v1",
        name="x",
        payload=fit(b"{}"),
        input_hash="h",
        generator="g",
        labels=LABELS,
    )
    value = b["metadata"]["labels"]["aibom.dev/root-name"]
    assert len(value) <= 63 and VALID.match(value)
    assert b["metadata"]["annotations"]["aibom.dev/document-for"] == "apps/Deployment/" + "d" * 250


def test_a_gzipped_document_is_never_more_than_a_reader_unpacks() -> None:
    """What the annotator writes, every reader can read: a document that gzips into
    the budget but expands past the readers' bound is cut like one that does not fit."""
    d = doc(30, 20)
    within = fit(d, limit=4096, unpacked_limit=len(d))
    assert within.encoding == "gzip"
    cut = fit(d, limit=4096, unpacked_limit=len(d) - 1)
    assert cut.encoding == "truncated"
    raw = unpack({"binaryData": dict(cut.binary_data)})
    assert raw is not None and len(raw) < len(d)
