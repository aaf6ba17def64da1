"""A played kubelet: Pods reported Running and Ready, with each container's image digest.

There is no kubelet on the test control plane (no node runs anything), so Pods
stay Pending and their statuses never name an ``imageID``, which is where the
AIBOM's digests come from. :class:`Kubelet` writes what a kubelet would once the
containers run, through ``pods/status`` (as admin), for every Pod of the
namespaces it is given: phase Running, conditions Ready and ContainersReady,
``containerStatuses`` running and ready, ``initContainerStatuses`` terminated
with exit code 0 (init containers complete before the main ones start), each
with ``imageID: <repository>@<digest_of(image, pod)>``. One digest per Pod and
image, as if each node had pulled a moving tag at its own time, so a document
shows which Pods' reports reached it. A Pod whose spec images change, or a new
Pod, is reported again; nothing else about the Pods is touched.

It stands in until a real fake-node runtime (kwok) replaces it; operators whose
readiness depends on Pod status (LeaderWorkerSet's rolling update, KubeRay's
RayCluster ``Ready`` state) see the same statuses a kubelet would write.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Iterable, Iterator

from aibom_core.objects import Obj
from tests.controlplane import ControlPlane
from tests.controlplane.components import kwok
from tests.integration.support import items


def digest_of(image: str, pod: str) -> str:
    """The digest the played kubelet reports for `image` in Pod `pod`."""
    return "sha256:" + hashlib.sha256(f"kubelet/{image}/{pod}".encode()).hexdigest()


def image_id(image: str, pod: str) -> str:
    """``imageID`` as a kubelet writes it: the repository (no tag) and the digest."""
    return f"{image.rsplit(':', 1)[0]}@{digest_of(image, pod)}"


def pod_digests(pod: Obj) -> set[str]:
    """What the played kubelet reports for every container (init ones too) of `pod`."""
    spec, name = pod["spec"], pod["metadata"]["name"]
    containers = [*spec.get("initContainers", []), *spec["containers"]]
    return {digest_of(c["image"], name) for c in containers}


class Kubelet:
    """Reports every Pod of `namespaces` Running and Ready with its images' digests."""

    def __init__(self, cp: ControlPlane, *namespaces: str) -> None:
        self.cp, self.namespaces = cp, namespaces
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        reported: dict[str, tuple[str, ...]] = {}
        while not self._stop.wait(0.3):
            for ns in self.namespaces:
                try:
                    for pod in items(self.cp, f"/api/v1/namespaces/{ns}/pods"):
                        self._report(ns, pod, reported)
                except (OSError, AssertionError) as exc:  # transient; keep going
                    self.errors.append(repr(exc))

    def _report(self, ns: str, pod: Obj, reported: dict[str, tuple[str, ...]]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        if meta.get("deletionTimestamp"):
            return
        images = tuple(c["image"] for c in [*spec.get("initContainers", []), *spec["containers"]])
        if reported.get(meta["uid"]) == images:
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch = {
            "status": {
                "phase": "Running",
                "podIP": "10.1.0.1",
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                ],
                "initContainerStatuses": _statuses(
                    spec.get("initContainers", []), meta["name"],
                    {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}},
                    ready=False,
                ),
                "containerStatuses": _statuses(
                    spec["containers"], meta["name"], {"running": {"startedAt": now}}, ready=True
                ),
            }
        }  # fmt: skip
        resp = self.cp.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{meta['name']}/status",
            patch,
            content_type="application/merge-patch+json",
        )
        if resp.ok:
            reported[meta["uid"]] = images


def _statuses(containers: Iterable[Obj], pod: str, state: Obj, *, ready: bool) -> list[Obj]:
    return [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": image_id(c["image"], pod),
            "ready": ready,
            "started": ready,
            "restartCount": 0,
            "state": state,
        }
        for c in containers
    ]


# -- kwok where it runs, this played kubelet elsewhere ----------------------------------


def kwok_reports(cp: ControlPlane) -> bool:
    """Pod statuses come from kwok's Stages: the ``kwok`` component runs (its module
    names it), and kube-scheduler binds the Pods to its fake Nodes."""
    return cp.component(kwok.Kwok.name) is not None


def reported_digests(cp: ControlPlane, pod: Obj) -> set[str]:
    """The digests reported for every container of ``pod``: by kwok's Stages where kwok
    runs, else by the played kubelet."""
    return kwok.pod_digests(pod) if kwok_reports(cp) else pod_digests(pod)


@contextlib.contextmanager
def pod_statuses(cp: ControlPlane, *namespaces: str) -> Iterator[Kubelet | None]:
    """The Pods of ``namespaces`` get their statuses: from kwok where it runs (nothing to
    do here: None), else from a played :class:`Kubelet` for the block (yielded, so that
    the caller may check its ``errors``)."""
    if kwok_reports(cp):
        yield None
        return
    with Kubelet(cp, *namespaces) as kubelet:
        yield kubelet
