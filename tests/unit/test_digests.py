"""Digests from pod status: container NAME and IMAGE must both match."""

from __future__ import annotations

from typing import Any

import pytest

from aibom_core.digests import observed_digests

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def pod(
    containers: list[tuple[str, str]],
    statuses: list[tuple[str, str, str]],
    *,
    init: bool = False,
) -> dict[str, Any]:
    spec_key, status_key = ("initContainers", "initContainerStatuses") if init else (
        "containers", "containerStatuses")  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {spec_key: [{"name": n, "image": i} for n, i in containers]},
        "status": {status_key: [{"name": n, "image": i, "imageID": d} for n, i, d in statuses]},
    }


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        # containerd form; the status image is the normalised spec image.
        (pod([("main", "nginx")], [("main", "docker.io/library/nginx:latest",
                                    f"docker.io/library/nginx@{D1}")]),
         [("nginx", "main", D1, "/status/containerStatuses/0/imageID")]),
        # dockershim and bare forms.
        (pod([("a", "r/a:1")], [("a", "docker.io/r/a:1", f"docker-pullable://r/a@{D1}")]),
         [("r/a:1", "a", D1, "/status/containerStatuses/0/imageID")]),
        (pod([("a", "r/a:1")], [("a", "docker.io/r/a:1", D2)]),
         [("r/a:1", "a", D2, "/status/containerStatuses/0/imageID")]),
        # Init containers against their own status list.
        (pod([("i", "busybox")], [("i", "busybox", f"busybox@{D1}")], init=True),
         [("busybox", "i", D1, "/status/initContainerStatuses/0/imageID")]),
        # Name mismatch: a status for a container the spec does not have.
        (pod([("main", "nginx")], [("other", "nginx", f"nginx@{D1}")]), []),
        # Image mismatch: the container still runs its previous image.
        (pod([("main", "nginx:1.27")], [("main", "docker.io/library/nginx:1.26",
                                         f"nginx@{D1}")]), []),
        # A pinned spec runs exactly its digest.
        (pod([("main", f"nginx@{D1}")], [("main", "", f"nginx@{D2}")]), []),
        (pod([("main", f"nginx@{D1}")], [("main", f"nginx@{D1}", f"nginx@{D1}")]),
         [(f"nginx@{D1}", "main", D1, "/status/containerStatuses/0/imageID")]),
        # Not pulled yet, or not a digest.
        (pod([("main", "nginx")], [("main", "nginx", "")]), []),
        (pod([("main", "nginx")], [("main", "nginx", "nginx:latest")]), []),
        # Order follows the status list; both containers resolved.
        (pod([("a", "x"), ("b", "y")], [("b", "y", f"y@{D2}"), ("a", "x", f"x@{D1}")]),
         [("y", "b", D2, "/status/containerStatuses/0/imageID"),
          ("x", "a", D1, "/status/containerStatuses/1/imageID")]),
    ],
)  # fmt: skip
def test_observed(obj: dict[str, Any], expected: list[tuple[str, str, str, str]]) -> None:
    assert [(o.image, o.container, o.digest, o.pointer) for o in observed_digests(obj)] == expected


@pytest.mark.parametrize(
    "image_id",
    [
        "nginx@sha256:" + "A" * 64,
        "nginx@SHA256:" + "1" * 64,
        "docker-pullable://nginx@sha256:" + "1" * 63,
        "sha256:" + "1" * 65,
    ],
)
def test_an_invalid_digest_is_kept_but_not_valid(image_id: str) -> None:
    obj = pod([("main", "nginx")], [("main", "docker.io/library/nginx:latest", image_id)])
    (seen,) = observed_digests(obj)
    assert seen.valid is False
    assert seen.digest == image_id.rpartition("@")[2]  # as written, never lowercased
    assert seen.pointer == "/status/containerStatuses/0/imageID"


def test_a_valid_digest_is_valid() -> None:
    obj = pod([("main", "nginx")], [("main", "nginx", f"nginx@{D1}")])
    assert [(o.digest, o.valid) for o in observed_digests(obj)] == [(D1, True)]


def test_an_invalid_digest_of_another_image_is_not_kept() -> None:
    obj = pod([("main", "nginx:1.27")], [("main", "nginx:1.26", "nginx@SHA256:" + "1" * 64)])
    assert observed_digests(obj) == ()


def test_an_init_status_does_not_resolve_a_regular_container() -> None:
    obj = pod([("main", "nginx")], [])
    obj["status"]["initContainerStatuses"] = [{"name": "main", "image": "nginx", "imageID": D1}]
    assert observed_digests(obj) == ()


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "pod",
        {},
        {"spec": {}, "status": None},
        {"spec": [], "status": {}},
        {"spec": {"containers": "x"}, "status": {"containerStatuses": [None, 1, "x"]}},
        {"spec": {"containers": [{"name": "a"}]},
         "status": {"containerStatuses": [{"name": "a", "imageID": D1}]}},
        {"spec": {"containers": [{"name": "a", "image": "x"}]},
         "status": {"containerStatuses": [{"name": ["a"], "imageID": D1},
                                          {"name": "a", "imageID": 5}]}},
    ],
)  # fmt: skip
def test_odd_pods(obj: Any) -> None:
    assert observed_digests(obj) == ()
