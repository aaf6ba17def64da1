"""A played kubelet, until kwok plays the nodes: Pod statuses with image digests.

There is no kubelet in the test control plane. :class:`Kubelet` reports every
Pod of a namespace Running and Ready through ``pods/status``, as a kubelet
would once the containers run, with an ``imageID`` per container (init
containers too, as terminated) whose digest is :func:`digest_of` the image and
the Pod's name: one digest per Pod and image, as if each node had pulled a
moving tag at its own time, so a document can show that every Pod's report
reached it (a digest names at most 3 Pods in a document). A Pod whose spec
images change, or a new Pod, is reported again; nothing else is touched.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

from aibom_core.objects import Obj
from tests.controlplane import ControlPlane
from tests.integration.support import items


def digest_of(image: str, pod: str) -> str:
    """The digest the played kubelet reports for `image` in Pod `pod`."""
    return "sha256:" + hashlib.sha256(f"lws-test/{image}/{pod}".encode()).hexdigest()


def image_id(image: str, pod: str) -> str:
    return f"{image.rsplit(':', 1)[0]}@{digest_of(image, pod)}"


class Kubelet:
    """``with Kubelet(cp, ns):`` reports the namespace's Pods until the block ends."""

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        self.cp, self.ns = cp, ns
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
            try:
                for pod in items(self.cp, f"/api/v1/namespaces/{self.ns}/pods"):
                    self._report(pod, reported)
            except (OSError, AssertionError) as exc:  # transient; keep going
                self.errors.append(repr(exc))

    def _report(self, pod: Obj, reported: dict[str, tuple[str, ...]]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        if meta.get("deletionTimestamp"):
            return
        images = tuple(c["image"] for c in [*spec.get("initContainers", []), *spec["containers"]])
        if reported.get(meta["uid"]) == images:
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        def status(c: Obj, state: dict[str, Any], ready: bool) -> Obj:
            return {
                "name": c["name"], "image": c["image"],
                "imageID": image_id(c["image"], meta["name"]),
                "ready": ready, "started": ready, "restartCount": 0, "state": state,
            }  # fmt: skip

        done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now,
                               "finishedAt": now}}  # fmt: skip
        patch = {
            "status": {
                "phase": "Running",
                "podIP": "10.1.0.1",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                ],
                "initContainerStatuses": [
                    status(c, done, False) for c in spec.get("initContainers", [])
                ],
                "containerStatuses": [
                    status(c, {"running": {"startedAt": now}}, True) for c in spec["containers"]
                ],
            }
        }
        resp = self.cp.request(
            "PATCH",
            f"/api/v1/namespaces/{self.ns}/pods/{meta['name']}/status",
            patch,
            content_type="application/merge-patch+json",
        )
        if resp.ok:
            reported[meta["uid"]] = images
