"""The AIBOM ConfigMap format in one module (aibom_core.document): what the annotator
writes, every reader reads, under whatever prefix the stamp keys use."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import CollectorRegistry

from aibom_core import trail
from aibom_core.document import (
    DATA_KEY,
    DATA_KEY_GZ,
    MANAGED_SELECTOR,
    DocLabels,
    configmap_name,
    gzipped,
    is_document,
    pack,
    pack_gzipped,
    unpack,
)
from aibom_core.objects import ObjRef
from aibom_edge.kube import KubeResponse
from aibom_edge.oci import Endpoint
from aibom_rollup.sources import doc_of
from annotator.configmap import configmap_body, fit
from annotator.export import Exporter, ExportMetrics, ExportSettings

PREFIX = "example.com/"
ROOT = ObjRef("apps", "Deployment", "ns", "web", "u-web")
DOC = json.dumps({"bomFormat": "CycloneDX", "components": [{"name": "x" * 64}] * 50}).encode()


def test_what_is_packed_unpacks() -> None:
    assert unpack({"data": pack(DOC)}) == DOC
    assert unpack({"binaryData": pack_gzipped(gzipped(DOC))}) == DOC
    assert gzipped(DOC) == gzipped(DOC)  # deterministic: same document, same bytes
    assert set(pack(DOC)) == {DATA_KEY} and set(pack_gzipped(b"")) == {DATA_KEY_GZ}


def written(document: bytes, *, limit: int, labels: DocLabels) -> dict[str, Any]:
    return configmap_body(
        ROOT,
        api_version="apps/v1",
        name=configmap_name(ROOT.kind, ROOT.name),
        payload=fit(document, limit=limit),
        input_hash="h1",
        generator="aibom-rollup/t",
        labels=labels,
        signed_by="k1",
    )


def test_every_reader_reads_what_the_annotator_writes_under_any_prefix() -> None:
    labels = DocLabels(PREFIX)
    for limit in (1 << 20, 1024):  # as it is, and gzip-compressed
        cm = written(DOC, limit=limit, labels=labels)
        assert is_document(cm) and cm["metadata"]["name"] == "aibom-deployment-web"
        assert unpack(cm) == DOC
        doc = doc_of(cm, prefix=PREFIX)  # kubectl aibom
        assert doc is not None and doc.root_hop == "apps/Deployment/web" and doc.raw == DOC
    assert labels.selector == MANAGED_SELECTOR


class OneConfigMap:
    """The API's answer to the exporter's look-up of a root's document."""

    def __init__(self, cm: dict[str, Any]) -> None:
        self.cm = cm
        self.selectors: list[str] = []

    async def request(self, method: str, path: str, **kw: Any) -> KubeResponse:
        selector = kw["params"]["labelSelector"]
        self.selectors.append(selector)
        key, _, value = selector.partition("=")
        labels = self.cm["metadata"]["labels"]
        return KubeResponse(200, {"items": [self.cm] if labels.get(key) == value else []}, {})


async def test_the_exporter_finds_the_document_under_the_configured_prefix() -> None:
    # It looked the document up by `aibom.dev/root-uid` and read `aibom.dev/`
    # annotations whatever the prefix: under another one, it found nothing.
    labels = DocLabels(PREFIX)
    api = OneConfigMap(written(DOC, limit=1 << 20, labels=labels))
    exporter = Exporter(
        api,  # type: ignore[arg-type]
        ExportSettings(Endpoint("registry.example"), namespace="aibom-system", cluster="c"),
        ExportMetrics(CollectorRegistry()),
        is_leader=lambda: True,
        client=object(),  # type: ignore[arg-type]  # no push happens here
        labels=labels,
    )
    root = trail.RootId("ns", "Deployment", "web", group="apps", uid="u-web")
    assert await exporter._current(root) == (DOC, "h1", "k1")
    assert api.selectors == [f"{PREFIX}root-uid=u-web"]
