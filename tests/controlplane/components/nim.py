"""The NVIDIA NIM operator (github.com/NVIDIA/k8s-nim-operator), as its own ServiceAccount.

The module proxy refuses ``github.com/NVIDIA/k8s-nim-operator`` here (403
"This module version is not available"), so it is built from the source tree
``nim-operator-src/`` beside the checkout (main at the commit pinned below, the
one the vendored NIM CRDs come from), with its own ``vendor/`` (no proxy at
all) and ``patches/nim-operator.patch``: the operator renders everything it
creates from templates at the absolute path ``/manifests`` (its image's copy of
the repository's ``manifests/``); the patch lets an environment variable point
the renderer at the build's copy. The build also renders the release,
``kubectl kustomize config/default`` (its CRDs, Namespace, ServiceAccount,
ClusterRole ``k8s-nim-operator-manager-role`` from ``config/rbac/role.yaml``,
bindings) into ``release.yaml``, and keeps the samples the tests apply in
``samples/``.

Webhooks: off, as that release runs it (``config/default`` sets no
``ENABLE_WEBHOOKS`` and leaves ``../webhook`` commented out). NVIDIA's Helm
chart turns them on (``operator.admissionController.enabled: true``), but that
cannot run out of cluster as built: the NIMService validator's constructor
calls ``rest.InClusterConfig()`` (``internal/webhook/apps/v1alpha1/
nimservice_webhook.go``), which reads ``KUBERNETES_SERVICE_HOST`` and the token
at ``/var/run/secrets/kubernetes.io/serviceaccount/``, and the operator exits:
``unable to create webhook ... failed to get in-cluster config: unable to load
in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT
must be defined``. The webhooks only validate NIMService and NIMCache specs;
they make nothing.

:meth:`Nim.start` requires the LeaderWorkerSet controller (multi-node
NIMServices become LeaderWorkerSets, and the operator watches them only if
their CRD exists when it starts); it watches KServe InferenceServices too when
their CRD exists (the vendored minimal one, or KServe's own when ``kserve`` was
started first). Its cache is filtered on ``app.kubernetes.io/managed-by=
k8s-nim-operator`` (``cmd/main.go``): it only sees children it labelled. Its
NIMCache path needs a registry and the kubelet's ``pods/log`` (the model
manifest is read from a Pod's log, ``internal/k8sutil.GetPodLogs``, also
through ``rest.InClusterConfig()``), neither of which exists here.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar, Final

from tests.controlplane.component import Component, register, rendered
from tests.controlplane.components.kserve import NAMESPACE as KSERVE_NAMESPACE
from tests.controlplane.gobuild import GoBuild, SourceTree
from tests.controlplane.kubernetes import kustomize
from tests.controlplane.paths import PACKAGE_DIR
from tests.controlplane.process import child_env, free_ports, http_ok

MODULE: Final = "github.com/NVIDIA/k8s-nim-operator"
#: main, 2026-08-19 (SOURCES.md): the commit of the vendored NIM CRDs.
COMMIT: Final = "f63f74d7ad22eaea7943cc640e545f4ccdbb8077"
VERSION: Final = f"main-{COMMIT[:8]}"
#: Where the release puts the operator, and as whom it runs.
NAMESPACE: Final = "k8s-nim-operator-system"
SERVICE_ACCOUNT: Final = "k8s-nim-operator-controller-manager"
PATCH: Final = PACKAGE_DIR / "patches" / "nim-operator.patch"


#: The operator's samples the tests and the demo apply (config/samples/nim/serving/).
SAMPLES: Final = (
    "standalone/no-precaching/llm-emptydir.yaml",
    "advanced/multi-node/multi-node-nimservice.yaml",
    "kserve/standard/llm.yaml",
)


def _render(source: Path, staging: Path) -> None:
    header = f"# kubectl kustomize config/default of {MODULE}@{COMMIT}\n"
    (staging / "release.yaml").write_text(header + kustomize(source / "config" / "default"))
    shutil.copytree(source / "manifests", staging / "manifests")
    for name in SAMPLES:
        target = staging / "samples" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / "config" / "samples" / "nim" / "serving" / name, target)


BUILD: Final = GoBuild(
    name="nim-operator",
    version=VERSION,
    mains={"nim-operator": "./cmd"},
    # The module's version query is the commit: the proxy refuses it, so the
    # build takes the source tree (which must be at this commit).
    source=SourceTree(
        module=MODULE,
        version=COMMIT,
        commit=COMMIT,
        tree="nim-operator-src",
        patch=PATCH,
        vendor=True,
    ),
    check=("nim-operator", ("--help",), "-health-probe-bind-address"),
    estimate="about 4 min (15-25 under load)",
    render=_render,
    outputs=("release.yaml", "manifests", "samples"),
)


def sample(name: str) -> list[dict[str, Any]]:
    """The documents of one of :data:`SAMPLES`, as the operator's repository has them."""
    return rendered(BUILD, f"samples/{name}")


@register
class Nim(Component):
    name: ClassVar[str] = "nim"
    summary: ClassVar[str] = f"NIM operator {VERSION}"
    go_build: ClassVar[GoBuild | None] = BUILD
    requires: ClassVar[tuple[str, ...]] = ("lws",)
    #: Its release's NIMService and NIMCache CRDs stand while it runs.
    owns_crd_files: ClassVar[tuple[str, ...]] = ("apps.nvidia.com_",)

    health_port = 0

    def start(self) -> None:
        began = self.began()
        self.apply_release(rendered(BUILD, "release.yaml"))
        kubeconfig = self.run_as(NAMESPACE, SERVICE_ACCOUNT)
        (self.health_port,) = free_ports(1)
        env = child_env()
        env.update(
            KUBECONFIG=str(kubeconfig),
            # As the Helm chart's Deployment sets them; ENABLE_WEBHOOKS as config/default.
            OPERATOR_NAMESPACE=NAMESPACE, WATCH_NAMESPACE="",
            # Where KServe's inferenceservice-config is (the kserve component's
            # namespace): the operator otherwise looks for KServe's controller
            # Deployment (control-plane=kserve-controller-manager), which a local
            # process does not have. Its own knob (internal/utils/kserve.go).
            KSERVE_NAMESPACE=KSERVE_NAMESPACE,
            AIBOM_NIM_MANIFESTS_DIR=str(self.dist_dir / "manifests"),
        )  # fmt: skip
        self.spawn(
            "nim-operator",
            # Metrics stay off (the binary's default "0"); leader election off (its default).
            [str(self.dist_dir / "bin" / "nim-operator"),
             f"--health-probe-bind-address=127.0.0.1:{self.health_port}"],
            env=env,
        )  # fmt: skip
        self.wait("/readyz", lambda: http_ok(self.health_port, "/readyz"))
        self.wait("the NIMService and NIMCache controllers' workers",
                  lambda: self.workers_started("nimservice", "nimcache"))  # fmt: skip
        self.ready_after(began)
