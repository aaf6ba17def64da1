"""Naming an object the way kubectl users do: `deploy/web`, `pods/x`, `Deployment/web`. Pure.

`kubectl aibom` accepts every form kubectl accepts for a kind (Kind, plural,
singular, short name, any of them `.group`-qualified, case-insensitive) and
the stamp's own form `<Kind>/<name>`, as `aibom.dev/root` shows it, so a
value can be pasted from an annotation. The kinds come from the API server's
discovery when live, or from `BUILTIN_KINDS` plus the kinds a dump holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aibom_core.kinds import GroupKind, KindRegistry


@dataclass(frozen=True, slots=True)
class KindInfo:
    group: str
    kind: str
    plural: str
    singular: str = ""
    short_names: tuple[str, ...] = ()
    namespaced: bool = True
    group_kind: GroupKind = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "group_kind", GroupKind(self.group, self.kind))

    def names(self) -> set[str]:
        """Every lowercase name kubectl would accept for this kind."""
        out = {self.kind.lower(), self.plural.lower(), *(s.lower() for s in self.short_names)}
        if self.singular:
            out.add(self.singular.lower())
        return out


def _k(group: str, kind: str, plural: str, *short: str) -> KindInfo:
    return KindInfo(group, kind, plural, kind.lower(), tuple(short))


# The kinds a dump is most likely to hold, with kubectl's short names, for
# offline use (live, discovery replaces this table).
BUILTIN_KINDS: tuple[KindInfo, ...] = (
    _k("", "Pod", "pods", "po"),
    _k("", "ConfigMap", "configmaps", "cm"),
    _k("apps", "ReplicaSet", "replicasets", "rs"),
    _k("apps", "Deployment", "deployments", "deploy"),
    _k("apps", "StatefulSet", "statefulsets", "sts"),
    _k("apps", "DaemonSet", "daemonsets", "ds"),
    _k("batch", "Job", "jobs"),
    _k("batch", "CronJob", "cronjobs", "cj"),
    _k("nvidia.com", "DynamoGraphDeployment", "dynamographdeployments", "dgd"),
    _k("nvidia.com", "DynamoComponentDeployment", "dynamocomponentdeployments", "dcd"),
    _k("apps.nvidia.com", "NIMService", "nimservices"),
    _k("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", "lws"),
    _k("disaggregatedset.x-k8s.io", "DisaggregatedSet", "disaggregatedsets"),
    _k("grove.io", "PodCliqueSet", "podcliquesets", "pcs"),
    _k("grove.io", "PodCliqueScalingGroup", "podcliquescalinggroups", "pcsg"),
    _k("grove.io", "PodClique", "podcliques", "pclq"),
    _k("serving.kserve.io", "InferenceService", "inferenceservices", "isvc"),
    _k("ray.io", "RayService", "rayservices"),
    _k("ray.io", "RayJob", "rayjobs"),
    _k("ray.io", "RayCluster", "rayclusters"),
)


class TargetError(ValueError):
    """A name that names no kind, or more than one; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Target:
    kind: KindInfo
    name: str


def with_registry(kinds: Iterable[KindInfo], registry: KindRegistry) -> list[KindInfo]:
    """`kinds` plus a guessed entry for every registry kind they lack (plural: kind + s)."""
    out = list(kinds)
    have = {k.group_kind for k in out}
    for gk in sorted(registry.tracked | registry.walk_only):
        if gk not in have:
            out.append(KindInfo(gk.group, gk.kind, gk.kind.lower() + "s", gk.kind.lower()))
    return out


def resolve_kind(token: str, kinds: Iterable[KindInfo], registry: KindRegistry) -> KindInfo:
    """The kind `token` names (`deploy`, `Deployment`, `deployments.apps`, ...)."""
    if not token:
        raise TargetError("no kind given (expected KIND/NAME, e.g. deploy/web)")
    pool = list(kinds)
    exact = [k for k in pool if k.kind == token]  # the stamp's own form wins outright
    candidates = exact or _by_name(token, pool)
    if not candidates:
        raise TargetError(f'the server does not have a resource type "{token}"')
    if len(candidates) > 1:
        preferred = [k for k in candidates if registry.is_known(k.group_kind)]
        candidates = preferred or candidates
    if len(candidates) > 1:
        names = ", ".join(f"{k.plural}.{k.group or 'core'}" for k in sorted(candidates, key=_key))
        raise TargetError(f'"{token}" is ambiguous ({names}): qualify it as KIND.GROUP/NAME')
    return candidates[0]


def _key(k: KindInfo) -> tuple[str, str]:
    return (k.group, k.kind)


def _by_name(token: str, pool: list[KindInfo]) -> list[KindInfo]:
    low = token.lower()
    plain = [k for k in pool if low in k.names()]
    if plain or "." not in low:
        return plain
    name, _, group = low.partition(".")
    return [k for k in pool if k.group.lower() == group and name in k.names()]


def parse_target(words: list[str], kinds: Iterable[KindInfo], registry: KindRegistry) -> Target:
    """`KIND/NAME` or `KIND NAME`, as kubectl takes them."""
    if len(words) == 1 and "/" in words[0]:
        kind, _, name = words[0].partition("/")
    elif len(words) == 2 and "/" not in words[0]:
        kind, name = words
    else:
        raise TargetError(
            "expected KIND/NAME or KIND NAME (e.g. deploy/web, Deployment/web), "
            f"got {' '.join(words)!r}"
        )
    if not name or "/" in name:
        raise TargetError(f"{'/'.join(words)!r}: the name must be one path segment")
    return Target(kind=resolve_kind(kind, kinds, registry), name=name)
