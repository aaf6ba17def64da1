"""Which configuration a command-line reader uses, and the namespace it defaults to.

One answer for every reader (`kubectl aibom`, `aibom-rollup verify`, the
trail commands) and for the client itself (`aibom_edge.kube.Kube.from_kubeconfig`):
the kubeconfig given, else `$KUBECONFIG`, else `~/.kube/config` when it exists,
else the in-cluster service account. The default namespace follows the same
choice, as kubectl's does: the chosen context's `namespace`, or the service
account's own namespace in a Pod; `default` when neither says.
"""

from __future__ import annotations

import os
from pathlib import Path

# Where the kubelet mounts the Pod's namespace (with the service account's token).
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_KUBECONFIG = "~/.kube/config"


def kubeconfig_path(kubeconfig: str | None) -> str | None:
    """The kubeconfig to read (`$KUBECONFIG` may list several); None: in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return path
    return DEFAULT_KUBECONFIG if Path(DEFAULT_KUBECONFIG).expanduser().exists() else None


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace a command defaults to, as kubectl defaults it. Sync (reads files)."""
    path = kubeconfig_path(kubeconfig)
    if path is None:
        try:
            return SA_NAMESPACE.read_text().strip() or "default"
        except OSError:
            return "default"
    from kubernetes import config  # heavy; only for cluster mode

    try:
        contexts, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=path
        )
    except Exception:  # the library raises many kinds on a malformed file
        return "default"  # the client's own load reports the problem properly
    if context:
        chosen = next((c for c in contexts or [] if c.get("name") == context), None)
    else:
        chosen = active
    ns = ((chosen or {}).get("context") or {}).get("namespace")
    return str(ns) if ns else "default"
