"""The guard check: whether the provenance guard the API server enforces is ours.

Every rediscovery reads the ValidatingAdmissionPolicy and its binding
(`aibom_core.guard.in_force`: they exist, deny, select our opt-in label)
and tells the cache (`ClusterState.set_binding`), which says which keys
the verdict changes; a namespace whose guard is opted out is reported,
and the unproven edges are counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aibom_core.guard import BINDING_NAME, POLICY_NAME, in_force
from aibom_edge.kube import Kube, KubeError
from annotator.cache import ClusterState, Dirty
from annotator.gauges import Gauges
from annotator.metrics import Metrics
from annotator.notices import Notices
from annotator.settings import Settings

log = logging.getLogger("annotator")


class GuardWatch:
    def __init__(
        self,
        kube: Kube,
        *,
        settings: Settings,
        state: ClusterState,
        metrics: Metrics,
        notices: Notices,
        gauges: Gauges,
        dirty: Callable[[Dirty], None],
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.state = state
        self.metrics = metrics
        self.notices = notices
        self.gauges = gauges
        self._dirty = dirty  # where the keys the verdict changes go
        self._seen: tuple[bool, bool] = (False, False)  # (binding found, in force)

    async def check(self) -> None:
        """Whether the guard the API server enforces is ours (`aibom_core.guard.in_force`:
        the policy and its binding exist, deny, select our opt-in label); report
        opted-in namespaces whose guard is opted out, and count unproven edges."""
        settings = self.settings
        try:
            binding = await self.kube.admission_policy_object(
                "validatingadmissionpolicybindings", BINDING_NAME, timeout=10
            )
            policy = await self.kube.admission_policy_object(
                "validatingadmissionpolicies", POLICY_NAME, timeout=10
            )
        except (KubeError, TimeoutError) as exc:
            self.notices.once(
                ("guard-binding",),
                "cannot read the provenance guard's policy and binding: no namespace counts "
                "as guarded",
                binding=BINDING_NAME,
                error=str(exc)[:300],
            )
            binding = policy = None
            why: str | None = "unreadable"
        else:
            why = in_force(policy, binding, settings.registry, settings.namespace_label)
        found = binding is not None
        guarding = why is None
        if (found, guarding) != self._seen:
            self._seen = (found, guarding)
            msg = "provenance guard binding " + ("found" if found else "absent")
            if found and not guarding:
                msg += ", but it does not guard the opted-in namespaces: " + str(why)
            log.log(
                logging.INFO if guarding or not found else logging.WARNING,
                msg,
                extra={"binding": BINDING_NAME, "guarding": guarding},
            )
        self.metrics.guard_in_force.set(1 if guarding else 0)
        self._dirty(self.state.set_binding(guarding))
        disabled = [ns for ns in self.state.opted_in_namespaces() if self.state.guard_disabled(ns)]
        self.metrics.guard_disabled.set(len(disabled))
        for ns in disabled:
            self.notices.once(
                ("guard-disabled", ns),
                "opted-in namespace has the provenance guard disabled: nothing refuses a "
                "forged ownerReference there at admission",
                namespace=ns,
            )
        self.gauges.report_unproven()
