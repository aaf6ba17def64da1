"""The imageID the kwok component adds to kwok's Pod Stages, and its Python twin.

The templates themselves run in kwok (tests/integration/test_kwok.py checks that a
Pod's statuses equal :func:`kwok.image_id`); here, what the rewrite of the Stages
does to their text, and what :func:`kwok.image_id` computes.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.controlplane.components import kwok

# The shape of kwok v0.8.0's kustomize/stage/pod/fast Stages (pod-ready, pod-complete).
READY = """containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
{{ end }}
phase: Running
"""
COMPLETE = """{{ $root := . }}
containerStatuses:
{{ range $index, $item := .spec.containers }}
- image: {{ $item.image | Quote }}
  name: {{ $item.name | Quote }}
{{ end }}
phase: Succeeded
"""


def stage(kind: str, name: str, template: str | None) -> dict[str, Any]:
    next_: dict[str, Any] = {"statusTemplate": template} if template else {"delete": True}
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind}, "next": next_},
    }


def test_every_container_status_of_the_pod_stages_gets_an_image_id() -> None:
    given = [
        stage("Pod", "pod-ready", READY),
        stage("Pod", "pod-complete", COMPLETE),
        stage("Pod", "pod-delete", None),
        stage("Node", "node-initialize", "- image: {{ .image | Quote }}\nphase: Running\n"),
    ]
    ready, complete, delete, node = kwok.with_image_ids(given)
    text = ready["spec"]["next"]["statusTemplate"]
    assert text.count("  imageID: ") == 2
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("- image:"):
            assert lines[i + 1].startswith('  imageID: {{ if contains "@" .image }}')
            assert 'sha256sum (printf "kwok/%s/%s" .image $.metadata.name)' in lines[i + 1]
    done = complete["spec"]["next"]["statusTemplate"]
    assert done.count("  imageID: ") == 1
    assert 'sha256sum (printf "kwok/%s/%s" $item.image $.metadata.name)' in done
    # What is not a Pod's container status stays as released.
    assert delete == given[2] and node == given[3]
    assert given[0]["spec"]["next"]["statusTemplate"] == READY  # not changed in place


def test_a_status_list_it_does_not_recognise_fails() -> None:
    odd = READY.replace("- image: {{ .image | Quote }}", "- name: {{ .name | Quote }}", 1)
    with pytest.raises(ValueError, match="2 status lists, 1 container entries"):
        kwok.with_image_ids([stage("Pod", "pod-ready", odd)])


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("registry.example/lws/leader:1", "registry.example/lws/leader"),
        ("nginx", "nginx"),
        ("registry.example:5000/team/app", "registry.example:5000/team/app"),
        ("registry.example:5000/team/app:2", "registry.example:5000/team/app"),
    ],
)
def test_image_id_is_the_repository_and_a_digest_of_image_and_pod(
    image: str, repository: str
) -> None:
    hexdigest = hashlib.sha256(f"kwok/{image}/web-1".encode()).hexdigest()
    assert kwok.image_id(image, "web-1") == f"{repository}@sha256:{hexdigest}"
    assert kwok.digest_of(image, "web-1") == f"sha256:{hexdigest}"
    assert kwok.digest_of(image, "web-2") != kwok.digest_of(image, "web-1")


def test_an_image_pinned_by_digest_reports_that_digest() -> None:
    pinned = "sha256:" + "a" * 64
    assert (
        kwok.image_id(f"registry.example/app:1@{pinned}", "p") == f"registry.example/app@{pinned}"
    )
    assert kwok.digest_of(f"registry.example/app@{pinned}", "p") == pinned


def test_pod_digests_cover_init_containers() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"initContainers": [{"name": "i", "image": "a:1"}],
                 "containers": [{"name": "m", "image": "b:1"}]},
    }  # fmt: skip
    assert kwok.pod_digests(pod) == {kwok.digest_of("a:1", "p"), kwok.digest_of("b:1", "p")}
