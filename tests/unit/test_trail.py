"""The audit trail's pure core (aibom_core/trail.py) and the flags that reach it."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from aibom_core import trail
from aibom_edge.oci import Endpoint
from aibom_edge.oci_client import manifest_bytes, manifest_digest
from aibom_rollup.sources import SourceError
from aibom_rollup.trail_source import change_text, parse_time
from annotator.export import configure_parser, export_of

ROOT = trail.RootId("ml", "DynamoGraphDeployment", "vllm-agg", group="nvidia.com", uid="u-1")
DOC = b'{"bomFormat":"CycloneDX"}'
VERSION = trail.Version(
    root=ROOT,
    cluster="prod-eu",
    digest=trail.digest_of(DOC),
    size=len(DOC),
    input_hash="sha256:" + "ab" * 32,
    created="2026-05-01T12:00:00Z",
    signed_by="k1",
)


def doc(
    *, models: tuple[str, ...] = (), images: dict[str, tuple[str, ...]] | None = None,
    runtimes: tuple[str, ...] = (), owned: tuple[str, ...] = (),
) -> dict[str, Any]:  # fmt: skip
    comps: list[dict[str, Any]] = []
    for m in models:
        name, _, rev = m.partition("@")
        comps.append({"bom-ref": f"model:{m}", "type": "machine-learning-model", "name": name,
                      "version": rev})  # fmt: skip
    for ref, digests in (images or {}).items():
        props = [{"name": "aibom.image.reference", "value": ref}]
        props += [{"name": "aibom.image.digest", "value": d} for d in digests]
        comps.append({"bom-ref": f"image:{ref}", "type": "container", "name": ref,
                      "properties": props})  # fmt: skip
    for r in runtimes:
        name, _, version = r.partition("@")
        comps.append({"bom-ref": f"runtime:{r}", "type": "framework", "name": name,
                      "version": version})  # fmt: skip
    props = [{"name": f"aibom.rollup.owned.{i}", "value": o} for i, o in enumerate(owned)]
    return {"metadata": {"component": {"properties": props}}, "components": comps}


D1 = "sha256:" + "11" * 32
D2 = "sha256:" + "22" * 32


@pytest.mark.parametrize(
    ("old", "new", "added", "removed"),
    [
        (None, doc(models=("Qwen/Qwen3-0.6B@abc",)), {"models": ("Qwen/Qwen3-0.6B@abc",)}, {}),
        (
            doc(images={"nvcr.io/x/vllm:1": (D1,)}, runtimes=("vllm@0.8.5",)),
            doc(images={"nvcr.io/x/vllm:2": (D2,)}, runtimes=("vllm@0.9.0",)),
            {"images": ("nvcr.io/x/vllm:2",), "digests": (D2,), "runtimes": ("vllm@0.9.0",)},
            {"images": ("nvcr.io/x/vllm:1",), "digests": (D1,), "runtimes": ("vllm@0.8.5",)},
        ),
        (
            doc(owned=("Deployment/a",)),
            doc(owned=("Deployment/a", "Deployment/b")),
            {"absorbed": ("Deployment/b",)},
            {},
        ),
        (doc(models=("m@1",)), doc(models=("m@1",)), {}, {}),
    ],
)
def test_diff_says_what_changed_per_aspect(
    old: Any, new: Any, added: dict[str, tuple[str, ...]], removed: dict[str, tuple[str, ...]]
) -> None:
    change = trail.diff(old, new)
    assert {k: v for k, v in change.added.items() if v} == added
    assert {k: v for k, v in change.removed.items() if v} == removed
    assert change.empty == (not added and not removed)


def test_change_text_is_one_line_with_signs() -> None:
    change = trail.diff(doc(models=("a@1",)), doc(models=("b@2",)))
    assert change_text(change) == "+model b@2, -model a@1"
    assert "no change" in change_text(trail.diff(doc(), doc()))


def test_manifest_is_deterministic_and_reads_back() -> None:
    body = trail.manifest(VERSION)
    assert manifest_bytes(body) == manifest_bytes(trail.manifest(VERSION))
    assert body["artifactType"] == "application/vnd.cyclonedx+json"
    assert body["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert body["layers"][0]["digest"] == VERSION.digest
    ann = body["annotations"]
    assert (ann[trail.A_KIND], ann[trail.A_NAME], ann[trail.A_NAMESPACE], ann[trail.A_UID]) == (
        "DynamoGraphDeployment", "vllm-agg", "ml", "u-1",
    )  # fmt: skip
    assert ann[trail.A_CLUSTER] == "prod-eu" and ann[trail.A_INPUT_HASH] == VERSION.input_hash
    assert trail.version_of(body) == VERSION
    assert trail.version_of({"artifactType": "application/spdx+json"}) is None
    # The digest a registry computes is the digest of the bytes the library sends.
    assert manifest_digest(body) == trail.digest_of(manifest_bytes(body))


def test_a_referrer_names_its_subject_and_differs_from_the_version() -> None:
    subject = {"mediaType": trail.MANIFEST_MEDIA_TYPE, "digest": D1, "size": 527}
    body = trail.manifest(VERSION, subject=subject)
    assert body["subject"] == subject
    assert manifest_digest(body) != manifest_digest(trail.manifest(VERSION))


@pytest.mark.parametrize(
    ("prefix", "cluster", "root", "want"),
    [
        ("aibom", "prod-eu", ROOT, "aibom/prod-eu/ml/dynamographdeployment.nvidia.com/vllm-agg"),
        ("", "c", trail.RootId("ns", "Deployment", "web", group="apps"),
         "c/ns/deployment.apps/web"),
        ("a/b/", "Prod EU!", trail.RootId("n", "Job", "x.y", group="batch"),
         "a/b/prod-eu/n/job.batch/x.y"),
    ],
)  # fmt: skip
def test_root_repositories_are_valid_oci_names(
    prefix: str, cluster: str, root: trail.RootId, want: str
) -> None:
    assert trail.check_repository(trail.root_repository(prefix, cluster, root)) == want


def test_tags_are_the_document_digest() -> None:
    assert VERSION.tag == "sha256-" + VERSION.digest.removeprefix("sha256:")
    assert trail.digest_of_tag(VERSION.tag) == VERSION.digest
    assert trail.digest_of_tag("latest") is None
    with pytest.raises(trail.TrailError):
        trail.tag_of("md5:abc")


@pytest.mark.parametrize(
    ("template", "image", "want"),
    [
        ("{host}/{repository}", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
         "nvcr.io/nvidia/ai-dynamo/vllm-runtime"),
        ("{host}/{repository}", "nginx:1.27", "docker.io/library/nginx"),
        ("mirror/{repository}", "nvcr.io/nvidia/x@" + D1, "mirror/nvidia/x"),
        ("{host}/{repository}", "localhost:5000/app:1", "localhost-5000/app"),
        ("{host}/{repository}", "", None),
    ],
)  # fmt: skip
def test_image_repositories_follow_the_template(
    template: str, image: str, want: str | None
) -> None:
    assert trail.image_repository(template, image) == want


def test_a_template_with_other_fields_is_refused() -> None:
    with pytest.raises(trail.TrailError, match="only"):
        trail.image_repository("{registry}/{repository}", "nginx:1")


def test_image_digests_of_a_document_once_each_sorted() -> None:
    body = doc(images={"b.io/x:1": (D2, D1), "a.io/y:2": (D1, "sha256:short")})
    assert trail.image_digests(body) == [("a.io/y:2", D1), ("b.io/x:1", D1), ("b.io/x:1", D2)]


def test_at_is_the_last_version_written_at_or_before() -> None:
    v = [
        trail.Version(ROOT, "c", D1, 1, "h1", "2026-05-01T10:00:00Z"),
        trail.Version(ROOT, "c", D2, 1, "h2", "2026-05-02T10:00:00Z"),
    ]
    assert trail.at(v, "2026-04-30T23:59:59Z") is None
    assert trail.at(v, "2026-05-01T10:00:00Z") == v[0]
    assert trail.at(list(reversed(v)), "2026-05-03T00:00:00Z") == v[1]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2026-05-01", "2026-05-01T23:59:59Z"),
        ("2026-05-01T12:00:00Z", "2026-05-01T12:00:00Z"),
        ("2026-05-01T14:00:00+02:00", "2026-05-01T12:00:00Z"),
        ("2026-05-01 12:00", "2026-05-01T12:00:00Z"),
    ],
)
def test_at_times_are_read_as_utc_seconds(text: str, want: str) -> None:
    assert parse_time(text) == want


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "05/01/2026"])
def test_a_bad_time_is_one_clear_error(text: str) -> None:
    with pytest.raises(SourceError, match="--at"):
        parse_time(text)


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    configure_parser(p)
    p.add_argument("--lease-namespace", default="aibom-system")
    return p.parse_args(list(argv))


def test_export_is_off_without_a_registry_and_its_flags_need_one() -> None:
    assert export_of(_args()) is None
    with pytest.raises(ValueError, match="needs --export-registry"):
        export_of(_args("--export-cluster-id", "x"))


def test_export_flags(tmp_path: Any) -> None:
    creds = tmp_path / "config.json"
    creds.write_text(json.dumps({"auths": {}}))
    got = export_of(
        _args("--export-registry", "registry.example:5000/aibom",
              "--export-registry-credentials", str(creds), "--export-cluster-id", "prod")
    )  # fmt: skip
    assert got is not None
    assert got.endpoint == Endpoint("registry.example:5000", "aibom", None, str(creds), 30.0)
    assert (got.cluster, got.namespace, got.referrers) == ("prod", "aibom-system", True)
    with pytest.raises(ValueError, match="no such file"):
        export_of(_args("--export-registry", "r.example", "--export-ca-file", "/nonexistent"))
    with pytest.raises(ValueError, match="TLS is always used"):
        export_of(_args("--export-registry", "http://r.example"))
    with pytest.raises(ValueError, match="export-image-path"):
        export_of(_args("--export-registry", "r.example", "--export-image-path", "{tag}"))
