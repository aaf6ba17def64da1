"""Image references: normalisation, purls, status imageIDs, tag versions."""

from __future__ import annotations

import pytest

from aibom_core.images import (
    canonical,
    digest_of_image_id,
    invalid_digest_of_image_id,
    oci_purl,
    parse_image,
    same_image,
    valid_digest,
    version_of_tag,
)

D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64


@pytest.mark.parametrize(
    ("written", "normalised"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.27", "docker.io/library/nginx:1.27"),
        ("docker.io/nginx", "docker.io/library/nginx:latest"),
        ("index.docker.io/library/nginx:latest", "docker.io/library/nginx:latest"),
        ("registry-1.docker.io/library/nginx", "docker.io/library/nginx:latest"),
        ("lmsysorg/sglang:latest", "docker.io/lmsysorg/sglang:latest"),
        ("vllm/vllm-openai:v0.8.5", "docker.io/vllm/vllm-openai:v0.8.5"),
        ("nvcr.io/nim/meta/llama-3.2-1b:1.12.0", "nvcr.io/nim/meta/llama-3.2-1b:1.12.0"),
        ("localhost:5000/team/img:dev", "localhost:5000/team/img:dev"),
        ("localhost/img", "localhost/img:latest"),
        ("myreg:5000/img", "myreg:5000/img:latest"),
        ("NVCR.IO/nvidia/x:1", "nvcr.io/nvidia/x:1"),
        (f"repo@{D1}", f"docker.io/library/repo@{D1}"),
        (f"gcr.io/x/y:1@{D1}", f"gcr.io/x/y:1@{D1}"),
        # OCI digests are lowercase hex of a fixed length: anything else is
        # kept as written, never normalised into a valid-looking digest.
        ("repo@sha256:" + "A" * 64, "repo@sha256:" + "A" * 64),
        ("repo@SHA256:" + "a" * 64, "repo@SHA256:" + "a" * 64),
        ("repo@sha256:" + "a" * 63, "repo@sha256:" + "a" * 63),
        ("repo@sha512:" + "a" * 64, "repo@sha512:" + "a" * 64),
        ("repo@sha512:" + "a" * 128, "docker.io/library/repo@sha512:" + "a" * 128),
        # Written as upstream ships it (an unexpanded template variable): kept.
        ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:${VERSION}",
         "nvcr.io/nvidia/ai-dynamo/vllm-runtime:${VERSION}"),
        # Not references: kept as written, never "normalised" into something else.
        ("x@md5:1", "x@md5:1"),
        ("nginx:", "nginx:"),
        (" nginx ", "docker.io/library/nginx:latest"),
    ],
)  # fmt: skip
def test_canonical(written: str, normalised: str) -> None:
    assert canonical(written) == normalised


@pytest.mark.parametrize("written", ["", "   ", "a b", "\t"])
def test_no_reference(written: str) -> None:
    assert parse_image(written) is None


@pytest.mark.parametrize(
    ("ref", "digest", "purl"),
    [
        ("nginx", None, "pkg:oci/nginx?repository_url=docker.io/library/nginx&tag=latest"),
        (
            "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
            D1,
            f"pkg:oci/vllm-runtime@{D1}"
            "?repository_url=nvcr.io/nvidia/ai-dynamo/vllm-runtime&tag=1.3.1",
        ),
        # The purl spec lowercases the oci name; repository_url keeps the path.
        (
            "localhost:5000/Team/MyImg:v1",
            None,
            "pkg:oci/myimg?repository_url=localhost:5000/Team/MyImg&tag=v1",
        ),
        # Qualifier values are percent-encoded.
        (
            "nvcr.io/x/rt:${VERSION}",
            None,
            "pkg:oci/rt?repository_url=nvcr.io/x/rt&tag=%24%7BVERSION%7D",
        ),
        # Digest-pinned without a tag: no tag qualifier.
        (f"repo@{D1}", D1, f"pkg:oci/repo@{D1}?repository_url=docker.io/library/repo"),
        ("x@md5:1", None, None),
    ],
)
def test_oci_purl(ref: str, digest: str | None, purl: str | None) -> None:
    assert oci_purl(ref, digest) == purl


@pytest.mark.parametrize(
    ("image_id", "digest"),
    [
        (f"docker-pullable://nginx@{D1}", D1),
        (f"docker.io/library/nginx@{D1}", D1),
        (D1, D1),
        (f"docker://{D1}", D1),
        ("sha512:" + "a" * 128, "sha512:" + "a" * 128),
        (f"repo@sha512:{'b' * 128}", "sha512:" + "b" * 128),
        # Invalid per the OCI grammar: no digest (kept as evidence, below).
        ("sha256:" + "A" * 64, None),
        ("repo@sha256:" + "a" * 63 + "A", None),
        ("SHA256:" + "a" * 64, None),
        ("repo@sha256:" + "a" * 65, None),
        ("sha512:" + "a" * 64, None),
        ("md5:" + "a" * 32, None),
        ("", None),
        ("docker.io/library/nginx:latest", None),
        ("sha256:abc", None),
    ],
)
def test_digest_of_image_id(image_id: str, digest: str | None) -> None:
    assert digest_of_image_id(image_id) == digest


@pytest.mark.parametrize(
    ("image_id", "invalid"),
    [
        ("sha256:" + "A" * 64, "sha256:" + "A" * 64),
        ("docker-pullable://repo@SHA256:" + "a" * 64, "SHA256:" + "a" * 64),
        ("repo@sha256:" + "a" * 63, "sha256:" + "a" * 63),
        ("repo@md5:" + "a" * 32, "md5:" + "a" * 32),
        ("sha256:abc", "sha256:abc"),
        # Valid digests and values that are no digest attempt at all.
        (D1, None),
        (f"repo@{D1}", None),
        ("sha512:" + "a" * 128, None),
        ("docker.io/library/nginx:latest", None),
        ("", None),
        ("repo@", None),
    ],
)
def test_invalid_digest_of_image_id(image_id: str, invalid: str | None) -> None:
    assert invalid_digest_of_image_id(image_id) == invalid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (D1, True),
        ("sha512:" + "0" * 128, True),
        ("sha256:" + "A" * 64, False),
        ("SHA256:" + "a" * 64, False),
        ("sha256:" + "a" * 63, False),
        ("sha256:" + "a" * 65, False),
        ("sha256:" + "g" * 64, False),
        ("sha512:" + "a" * 64, False),
        (" " + D1, False),
        ("sha384:" + "a" * 96, False),
        ("", False),
    ],
)
def test_valid_digest(value: str, valid: bool) -> None:
    assert valid_digest(value) is valid


@pytest.mark.parametrize(
    ("spec", "status", "same"),
    [
        ("nginx", "docker.io/library/nginx:latest", True),
        ("nginx:1.27", "docker.io/library/nginx:1.27", True),
        ("nginx:1.27", "docker.io/library/nginx:1.26", False),
        ("nginx", "docker.io/library/httpd:latest", False),
        (f"repo@{D1}", f"docker.io/library/repo@{D1}", True),
        (f"repo@{D1}", f"docker.io/library/repo@{D2}", False),
        (f"repo@{D1}", "docker.io/library/repo:1", True),
        # A bare image ID or nothing names no image: it cannot contradict.
        ("nginx", D2, True),
        ("nginx", "", True),
    ],
)
def test_same_image(spec: str, status: str, same: bool) -> None:
    assert same_image(spec, status) is same


@pytest.mark.parametrize(
    ("tag", "version"),
    [
        ("v0.8.5", "0.8.5"),
        ("1.3.1", "1.3.1"),
        ("24.08-trtllm-python-py3", "24.08"),
        ("0.4.0.post1-cu124", "0.4.0.post1"),
        ("1.0.0-rc1", "1.0.0-rc1"),
        ("latest", None),
        ("my-tag", None),
        ("${VERSION}", None),
        ("2", None),
        (None, None),
        ("", None),
    ],
)
def test_version_of_tag(tag: str | None, version: str | None) -> None:
    assert version_of_tag(tag) == version
