"""KubeRay: the real operator (github.com/ray-project/kuberay/ray-operator v1.5.0), as its
own ServiceAccount.

Built from ``modules/kuberay`` (a ``tool`` directive naming upstream's main
package, ``main.go`` at the module root; the Go module proxy serves it); the
build also renders the release, ``kubectl kustomize config/default`` of the
same module (CRDs RayCluster, RayJob, RayService; ServiceAccount
``default/kuberay-operator``; ClusterRole ``kuberay-operator`` from
``config/rbac/role.yaml``; the leader-election Role; bindings) into
``release.yaml``, and keeps the module's samples the tests apply
(``config/samples/ray-service.sample.yaml``, ``ray-job.sample.yaml``) in
``samples/``.

:meth:`Kuberay.start` applies the release (less its Deployment), runs the
operator as ``default/kuberay-operator`` with the release Deployment's
arguments (``--feature-gates=RayClusterStatusConditions=true``), leader
election off (the release's default too) and health and metrics on loopback,
and returns once ``/readyz`` answers and the RayCluster, RayJob and
RayService controllers' workers started. No webhooks: ``config/default`` runs
it without ``ENABLE_WEBHOOKS`` (``config/default-with-webhooks`` is the opt-in
variant, with cert-manager), so it registers none.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar, Final

from tests.controlplane.component import Component, register, rendered
from tests.controlplane.gobuild import GoBuild, module_dir, module_source
from tests.controlplane.kubernetes import kustomize
from tests.controlplane.process import child_env, free_ports, http_ok

MODULE: Final = "github.com/ray-project/kuberay/ray-operator"
#: The KubeRay release (modules/kuberay/go.mod).
VERSION: Final = "v1.5.0"
#: Where the release puts the operator (``config/default``: ``namespace: default``),
#: and as whom it runs.
NAMESPACE: Final = "default"
SERVICE_ACCOUNT: Final = "kuberay-operator"
#: The module's samples the tests and the demo apply, as shipped.
SAMPLES: Final = ("ray-service.sample.yaml", "ray-job.sample.yaml")


def _render(_module: Path, staging: Path) -> None:
    source = module_source(module_dir("kuberay"), MODULE)
    header = f"# kubectl kustomize config/default of {MODULE}@{VERSION} ({source})\n"
    (staging / "release.yaml").write_text(header + kustomize(source / "config" / "default"))
    (staging / "samples").mkdir()
    for name in SAMPLES:
        shutil.copyfile(source / "config" / "samples" / name, staging / "samples" / name)


BUILD: Final = GoBuild(
    name="kuberay",
    version=VERSION,
    mains={"kuberay-operator": MODULE},
    module=module_dir("kuberay"),
    # v1.5.0 has no version variable or flag; its flags prove the build.
    check=("kuberay-operator", ("--help",), "-enable-leader-election"),
    verify=True,
    estimate="about 2 min (5-10 under load)",
    render=_render,
    outputs=("release.yaml", "samples"),
)


def sample(name: str) -> list[dict[str, Any]]:
    """The documents of one of :data:`SAMPLES`, as the module ships them."""
    return rendered(BUILD, f"samples/{name}")


@register
class Kuberay(Component):
    name: ClassVar[str] = "kuberay"
    summary: ClassVar[str] = f"KubeRay operator {VERSION}"
    go_build: ClassVar[GoBuild | None] = BUILD
    #: Its release's CRDs stand while it runs (the vendored ones are the same files
    #: of the same module, without the release's two labels).
    owns_crd_files: ClassVar[tuple[str, ...]] = ("ray.io_",)

    health_port = 0

    def start(self) -> None:
        began = self.began()
        self.apply_release(rendered(BUILD, "release.yaml"))
        kubeconfig = self.run_as(NAMESPACE, SERVICE_ACCOUNT)
        self.health_port, metrics_port = free_ports(2)
        env = child_env()
        env["KUBECONFIG"] = str(kubeconfig)
        self.spawn(
            "kuberay-operator",
            [str(self.dist_dir / "bin" / "kuberay-operator"),
             # config/manager/manager.yaml's arguments:
             "--feature-gates=RayClusterStatusConditions=true",
             "--enable-leader-election=false",
             f"--metrics-addr=127.0.0.1:{metrics_port}",
             f"--health-probe-bind-address=127.0.0.1:{self.health_port}"],
            env=env,
        )  # fmt: skip
        self.wait("/readyz", lambda: http_ok(self.health_port, "/readyz"))
        self.wait("the RayCluster, RayJob and RayService controllers' workers",
                  lambda: self.workers_started("raycluster", "rayjob", "rayservice"))  # fmt: skip
        self.ready_after(began)
