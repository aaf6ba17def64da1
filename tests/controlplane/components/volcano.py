"""Volcano's PodGroup API, and a scheduler that answers to Volcano's name.

Why: the Dynamo operator turns a multinode component into a LeaderWorkerSet only
when both the LeaderWorkerSet API and Volcano's ``scheduling.volcano.sh`` API are
served (``cmd/main.go``: ``LWSEnabled = lwsDetected && volcanoDetected``); it then
makes a Volcano PodGroup beside each LeaderWorkerSet and sets the Pods'
``schedulerName: volcano``. Without this component that path is refused.

What is real and what is not:

- **The CRD is Volcano's**, made the way Volcano makes it: ``controller-gen crd``
  over the API types of ``volcano.sh/apis`` v1.12.2 (the version the Dynamo
  operator's go.mod requires; its ``+kubebuilder`` markers give the names, short
  names, printer columns and defaults), built from ``modules/volcano`` through
  the one builder. Only ``podgroups.scheduling.volcano.sh`` is installed (the
  operator reads and writes nothing else of the group).
- **Volcano's scheduler (vc-scheduler) and controllers do not run**: gang
  scheduling and the PodGroup's status are not played. A second kube-scheduler
  (the control plane's own build, as ``system:kube-scheduler``) with one profile,
  ``schedulerName: volcano``, binds the Pods that name Volcano to kwok's Nodes,
  one by one, as the default profile binds the others. The roll-up does not
  depend on how a Pod was bound, only on who made it and what its status says.

Its ``stop`` deletes the CRD, so that an operator started later on the same
control plane does not detect an API that no longer has this component behind it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, ClassVar, Final

from tests.controlplane.component import Component, register, rendered
from tests.controlplane.components.scheduler import serve
from tests.controlplane.gobuild import BuildError, GoBuild, module_dir

#: volcano.sh/apis, as modules/volcano/go.mod (and the Dynamo operator) pin it.
VERSION: Final = "v1.12.2"
#: controller-tools, as modules/volcano/go.mod pins it (built against Kubernetes 1.32,
#: the modules volcano.sh/apis v1.12.2 requires).
CONTROLLER_TOOLS: Final = "v0.17.3"
TYPES: Final = "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
CRD: Final = "podgroups.scheduling.volcano.sh"
SCHEDULER_NAME: Final = "volcano"


def _render(module: Path, staging: Path) -> None:
    """``podgroups.yaml``: ``controller-gen crd:crdVersions=v1`` over the types package
    (as Volcano's ``make manifests`` does), only the PodGroup CRD kept."""
    out = staging / "crd"
    res = subprocess.run(
        [str(staging / "bin" / "controller-gen"), "crd:crdVersions=v1", f"paths={TYPES}",
         f"output:crd:dir={out}"],
        cwd=module, capture_output=True, text=True, check=False,
        env=dict(os.environ, GOFLAGS="-mod=readonly"),  # it runs `go list`
    )  # fmt: skip
    made = out / f"scheduling.volcano.sh_{CRD.split('.')[0]}.yaml"
    if res.returncode != 0 or not made.is_file():
        raise BuildError(f"controller-gen crd over {TYPES} failed: {res.stderr[-2000:]}")
    header = f"# controller-gen {CONTROLLER_TOOLS} crd:crdVersions=v1 paths={TYPES}@{VERSION}\n"
    (staging / "podgroups.yaml").write_text(header + made.read_text())


BUILD: Final = GoBuild(
    name="volcano",
    version=VERSION,
    mains={"controller-gen": "sigs.k8s.io/controller-tools/cmd/controller-gen"},
    module=module_dir("volcano"),
    check=("controller-gen", ("--version",), CONTROLLER_TOOLS),
    verify=True,
    estimate="about 1 min",
    render=_render,
    outputs=("podgroups.yaml",),
)


def crd() -> dict[str, Any]:
    """The PodGroup CRD (built and rendered unless cached)."""
    (doc,) = rendered(BUILD, "podgroups.yaml")
    return doc


@register
class Volcano(Component):
    name: ClassVar[str] = "volcano"
    summary: ClassVar[str] = (
        f"Volcano's PodGroup CRD ({VERSION}) and a kube-scheduler answering to 'volcano'"
    )
    go_build: ClassVar[GoBuild | None] = BUILD
    #: kwok's Nodes take the Pods (and kube-scheduler's build is the control plane's).
    requires: ClassVar[tuple[str, ...]] = ("kwok",)

    port = 0

    def start(self) -> None:
        began = self.began()
        self.plane.apply([crd()])
        self.plane.wait_established([CRD])
        self.port = serve(self, "kube-scheduler-volcano", [SCHEDULER_NAME])
        self.ready_after(began)

    def stop(self) -> None:
        super().stop()
        if self.plane.running:
            self.plane.delete_crd(CRD)
