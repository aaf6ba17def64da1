"""What the tests still play of a kubelet: a container status a test writes itself.

Pod statuses come from kwok (tests/controlplane/components/kwok.py): every module
whose Pods real controllers and operators make names the ``kwok`` component
(``test_kwok.py``, ``test_lws.py``, ``test_kuberay.py``, ``test_kserve_operator.py``,
``test_nim_operator.py``, ``test_grove.py``, ``test_dynamo.py``, and ``make demo``):
kube-scheduler binds the Pods to kwok's fake Nodes, and kwok's Stages write
them Running and Ready with an ``imageID`` per container (``kwok.image_id``:
one digest per image and Pod). :func:`require_kwok` says so where a helper relies
on it (``chains.py``, ``operators.py``).

The one thing still played is :func:`set_digest`: a test writes, as admin
through ``pods/status``, one container status with a digest it chooses. Used by
``test_annotator.py``, ``test_annotator_restart.py``, ``test_export.py``,
``test_kubectl_aibom.py``, ``test_kubectl_aibom_inventory.py``,
``test_provenance.py`` and ``test_provenance_attacks.py``, for what kwok's Stages
do not do:

- **a digest the test picks, and changes under the same Pod and image**
  (``test_annotator_restart.py`` reports a v2 digest for Pod ``c2-0`` while
  the annotator is down: a node re-pulling a moving tag). kwok's Stages write a
  Pod's status once (``pod-ready`` selects Pods not yet Ready), and their digest
  is fixed by the image and the Pod's name; the tests name each digest by its
  role (``digest("grove-worker")``, ``digest("old-generation")``) so that a
  document shows which report reached it;
- **a container that is not running** (``waiting: ContainerCreating``, not
  ready, as a kubelet reports while it pulls): the release's "fast" Stages go
  straight to Running;
- Pods made by hand (bare, or under hand-played owners) in modules that run no
  scheduler and no kwok: they test the annotator's rules on chains the real
  operators never make (stale owners, forged shapes, late adoption), where the
  digest is the test's input, not the point.
"""

from __future__ import annotations

import pytest

from tests.controlplane import ControlPlane
from tests.controlplane.components import kwok


def require_kwok(cp: ControlPlane) -> None:
    """Fail unless kwok runs: the Pods' statuses are its Stages' (the module must name
    ``kwok`` in ``pytest.mark.components``)."""
    if cp.component(kwok.Kwok.name) is None:
        pytest.fail(
            "Pod statuses come from kwok: name it in the module's"
            ' pytest.mark.components("kwok", ...)',
            pytrace=False,
        )


def set_digest(cp: ControlPlane, ns: str, name: str, image: str, sha: str) -> None:
    """What a kubelet writes while it starts the container ``main`` of Pod ``name``: its
    image and ``imageID`` (``<repository>@<sha>``, the digest the test chose), not yet
    running."""
    repo = image.rsplit(":", 1)[0]
    status = {
        "status": {
            "containerStatuses": [
                {
                    "name": "main",
                    "image": image,
                    "imageID": f"{repo}@{sha}",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ]
        }
    }
    resp = cp.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/{name}/status",
        status,
        content_type="application/merge-patch+json",
    )
    assert resp.ok, resp.body[:500]
