"""Every component the harness can run beside the control plane, one module each.

Importing this package registers them all (``component.REGISTRY``); add a
module here and to the import list below to add one.
"""

from __future__ import annotations

from tests.controlplane.components import (
    dynamo,
    gatekeeper,
    grove,
    kserve,
    kuberay,
    kwok,
    kyverno,
    lws,
    nim,
    registry,
    scheduler,
    volcano,
)

__all__ = [
    "dynamo",
    "gatekeeper",
    "grove",
    "kserve",
    "kuberay",
    "kwok",
    "kyverno",
    "lws",
    "nim",
    "registry",
    "scheduler",
    "volcano",
]
