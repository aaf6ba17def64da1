"""The policy engines' pins, in one place: the components that run them
(:mod:`tests.controlplane.components.kyverno`, ``.gatekeeper``) and the tools that
build their CLIs (:mod:`tests.controlplane.gotools`) read them from here, so that
neither imports the other (the components package imports every component, and
some components use the tools)."""

from __future__ import annotations

from typing import Final

from tests.controlplane.gobuild import go_ldflags

KYVERNO_VERSION: Final = "v1.19.1"
KYVERNO_MODULE: Final = "github.com/kyverno/kyverno"
KYVERNO_LDFLAGS: Final = go_ldflags(
    {f"{KYVERNO_MODULE}/pkg/version": {"BuildVersion": KYVERNO_VERSION}}
)

GATEKEEPER_VERSION: Final = "v3.23.1"
GATEKEEPER_MODULE: Final = "github.com/open-policy-agent/gatekeeper/v3"
GATEKEEPER_LDFLAGS: Final = go_ldflags(
    {f"{GATEKEEPER_MODULE}/pkg/version": {"Version": GATEKEEPER_VERSION}}
)
