"""A real Kubernetes control plane, and the real components around it, for the
integration tests, the local demo and the benches (README.md beside this file).

One module per part, each behind a small interface:

==========================  ==================================================
``gobuild``                 the one builder of every Go program (cache, lock,
                            progress, build once)
``kubernetes``              the Kubernetes binaries' build (etcd, kube-apiserver,
                            kube-controller-manager, kube-scheduler, kubectl)
``etcd``, ``apiserver``,    the core processes
``controllermanager``
``plane``                   :class:`ControlPlane`: the core plus components
``component``               the shape of a component, and its registry
``components/<name>.py``    one component each (``lws``, ...)
``identity``                CA, client and serving certificates, kubeconfigs,
                            the API server's identity toward webhooks
``process``                 one child process; readiness waits
``gotools``                 helm and promtool
``__main__``                ``python -m tests.controlplane build|up|down|status``
==========================  ==================================================

The names below are the API the tests, the demo and the benches use::

    with ControlPlane() as cp:        # or ControlPlane(components=("lws",)).start()
        cp.server, cp.kubeconfig, cp.ca_file, cp.ca_bundle, cp.admin_cert_file, ...
        cp.request("GET", "/version") -> ApiResponse(status, body, headers, .json(), .ok)
        cp.kubectl("get", "ns", kubeconfig=None, input=None, check=True)
        cp.issue_identity(user, groups) / cp.restricted_kubeconfig(user, groups)
        cp.service_account_kubeconfig(ns, name, path, seconds)
        cp.issue_serving_cert(name) -> ServingCert(cert_file, key_file, ca_file)
        cp.install_crds(), cp.install_crd(path), cp.delete_crd(name), cp.apply(items)
        cp.start_component("lws") -> Component; cp.component(name); cp.stop_component(name)
        cp.restart_apiserver()
"""

from __future__ import annotations

from tests.controlplane import components as components
from tests.controlplane.apiserver import OidcIssuer
from tests.controlplane.component import REGISTRY, Component
from tests.controlplane.gobuild import BuildError, SourceMissing
from tests.controlplane.identity import ClientIdentity, ServingCert, WebhookCaller, webhook_caller
from tests.controlplane.kubernetes import (
    BINARIES,
    ETCD_VERSION,
    K8S_VERSION,
    ensure_binaries,
    kubectl_path,
)
from tests.controlplane.objects import HARNESS_APPLY, bind_rules, copy_json, owner_reference
from tests.controlplane.paths import REPO_ROOT, cache_dir, shared_dir
from tests.controlplane.plane import (
    DEFAULT_CRD_FILES,
    ApiResponse,
    ControlPlane,
    Kubectl,
    running_control_plane,
)
from tests.controlplane.process import ControlPlaneError, child_env, kubectl_env

__all__ = [
    "BINARIES",
    "DEFAULT_CRD_FILES",
    "ETCD_VERSION",
    "K8S_VERSION",
    "REGISTRY",
    "REPO_ROOT",
    "ApiResponse",
    "BuildError",
    "SourceMissing",
    "ClientIdentity",
    "Component",
    "ControlPlane",
    "ControlPlaneError",
    "Kubectl",
    "OidcIssuer",
    "ServingCert",
    "WebhookCaller",
    "HARNESS_APPLY",
    "bind_rules",
    "cache_dir",
    "child_env",
    "kubectl_env",
    "copy_json",
    "ensure_binaries",
    "kubectl_path",
    "owner_reference",
    "running_control_plane",
    "shared_dir",
    "webhook_caller",
]
