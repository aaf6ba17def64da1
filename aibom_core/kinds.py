"""The tracked-kind registry: which kinds get an AIBOM, which are walked through.

Kinds are identified by API group + Kind, never by apiVersion. The registry is
configuration (a YAML document), not code, so a user adds a kind without a
release. Pure: parsing takes text, never a path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class GroupKind(NamedTuple):
    """An API group and a Kind: the identity of a kind across versions.

    A tuple: it hashes and compares at C speed (the walk, the graph and the
    inventory look a kind up several times per object: a fifth of a 100,000
    object scan's index time as a dataclass).
    """

    group: str
    kind: str

    def __str__(self) -> str:
        return f"{self.group or 'core'}/{self.kind}"


def group_of(api_version: str) -> str:
    """The API group of an apiVersion: `apps/v1` -> `apps`, `v1` -> `` (core)."""
    group, sep, _ = api_version.rpartition("/")
    return group if sep else ""


def group_kind_of(obj: dict[str, Any]) -> GroupKind:
    """The GroupKind of a raw object."""
    return GroupKind(group_of(str(obj.get("apiVersion", ""))), str(obj.get("kind", "")))


# The kinds the code itself names, declared once (everything else is the
# registry's: configuration).
POD: Final = GroupKind("", "Pod")
CONFIGMAP: Final = GroupKind("", "ConfigMap")
NAMESPACE: Final = GroupKind("", "Namespace")
REPLICA_SET: Final = GroupKind("apps", "ReplicaSet")
DEPLOYMENT: Final = GroupKind("apps", "Deployment")
STATEFUL_SET: Final = GroupKind("apps", "StatefulSet")
DAEMON_SET: Final = GroupKind("apps", "DaemonSet")
JOB: Final = GroupKind("batch", "Job")


# The built-in registry, as the YAML a user would write (`aibom-rollup kinds`
# prints it). Kept in code, not a data file, so the core reads no files.
DEFAULT_KINDS_YAML = """\
# The built-in kind registry. Kinds are matched by API group + Kind, never by
# apiVersion (Dynamo owner references say nvidia.com/v1alpha1 or v1beta1
# depending on the operator's version).
#
# tracked:   kinds that get their own AIBOM when they are a root, and are listed
#            in their root's aibom.rollup.owned.<i> properties otherwise.
# walkOnly:  intermediates the walk passes through; never reported, never listed.
# Only these kinds are walked: an ownerReference to any other kind is not an
# edge of the roll-up (docs/provenance-guard.md).
# Add a kind with `--kinds FILE` (same shape); entries are merged with these
# unless the file says `replace: true`. An entry may name its plural API
# resource (`resource: rayservices`); without it the resource is the
# lowercased kind plus `s` (`es` after an s, `ies` for a final y), which is
# right for every kind below. `aibom-rollup policy` needs it. `shortNames` are
# kubectl's, for naming objects offline (`kubectl aibom --from-file`,
# `aibom-rollup history deploy/web`); live, the API server's discovery says.
tracked:
  - {group: apps, kind: Deployment, shortNames: [deploy]}
  - {group: apps, kind: StatefulSet, shortNames: [sts]}
  - {group: apps, kind: DaemonSet, shortNames: [ds]}
  - {group: batch, kind: Job}
  - {group: batch, kind: CronJob, shortNames: [cj]}
  - {group: nvidia.com, kind: DynamoGraphDeployment, shortNames: [dgd]}
  - {group: nvidia.com, kind: DynamoComponentDeployment, shortNames: [dcd]}
  - {group: apps.nvidia.com, kind: NIMService}
  - {group: leaderworkerset.x-k8s.io, kind: LeaderWorkerSet, shortNames: [lws]}
  # Grove's own API: what a user applies (Grove's samples) and what a Dynamo
  # graph on the Grove provider makes; its PodCliques and scaling groups are
  # always the operator's (walkOnly below).
  - {group: grove.io, kind: PodCliqueSet, shortNames: [pcs]}
  # KServe v1beta1: a root of its own (predictor model, storageUri, runtime),
  # and under a NIMService with inferencePlatform: kserve.
  - {group: serving.kserve.io, kind: InferenceService, shortNames: [isvc]}
  # KubeRay (ray.io): RayService -> RayCluster -> Pods; RayJob -> RayCluster and
  # RayJob -> submitter Job -> Pods. A RayCluster is applied on its own too, so
  # it is tracked: its own AIBOM as a root, listed as owned under the others.
  - {group: ray.io, kind: RayService}
  - {group: ray.io, kind: RayJob}
  - {group: ray.io, kind: RayCluster}
walkOnly:
  - {group: apps, kind: ReplicaSet, shortNames: [rs]}
  - {group: "", kind: Pod, shortNames: [po]}
  - {group: grove.io, kind: PodCliqueScalingGroup, shortNames: [pcsg]}
  - {group: grove.io, kind: PodClique, shortNames: [pclq]}
  # Chains the design does not list but real clusters have (docs/architecture.md):
  # DynamoGraphDeployment -> DisaggregatedSet -> LeaderWorkerSet. Walked,
  # never reported.
  - {group: disaggregatedset.x-k8s.io, kind: DisaggregatedSet}
  # KServe Serverless mode: InferenceService -> Knative Service ->
  # Configuration -> Revision -> Deployment. Walked, never reported.
  - {group: serving.knative.dev, kind: Service, shortNames: [kservice, ksvc]}
  - {group: serving.knative.dev, kind: Configuration, shortNames: [config, cfg]}
  - {group: serving.knative.dev, kind: Revision, shortNames: [rev]}
"""


class RegistryError(ValueError):
    """The kind configuration is not what we expect; the message says where."""


# What the API server accepts: a group is a DNS subdomain (or empty: core), a
# Kind a CamelCase identifier, a resource a DNS-1035 label (a CRD's plural).
_GROUP = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$")
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_RESOURCE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def default_resource(kind: str) -> str:
    """The plural resource guessed from a Kind, as Kubernetes' UnsafeGuessKindToResource does.

    `Deployment` -> `deployments`, `Ingress` -> `ingresses`, `Policy` -> `policies`.
    """
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


@dataclass(frozen=True, slots=True)
class KindInfo:
    """A kind as kubectl names it: its plural resource, singular and short names."""

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


@dataclass(frozen=True, slots=True)
class KindRegistry:
    """Tracked kinds (reported) and walk-only intermediates (never reported)."""

    tracked: frozenset[GroupKind]
    walk_only: frozenset[GroupKind]
    # Plural API resources given in the configuration; the others are guessed
    # (`resource_of`).
    resources: Mapping[GroupKind, str] = field(default_factory=dict)
    # kubectl's short names given in the configuration (`shortNames`).
    short_names: Mapping[GroupKind, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        both = self.tracked & self.walk_only
        if both:
            names = ", ".join(sorted(str(gk) for gk in both))
            raise RegistryError(f"kinds both tracked and walk-only: {names}")

    def is_tracked(self, gk: GroupKind) -> bool:
        return gk in self.tracked

    def is_known(self, gk: GroupKind) -> bool:
        return gk in self.tracked or gk in self.walk_only

    def resource_of(self, gk: GroupKind) -> str:
        """The plural API resource of a kind: as configured, else `default_resource`."""
        return self.resources.get(gk) or default_resource(gk.kind)

    def merged(self, other: KindRegistry) -> KindRegistry:
        """This registry plus another's kinds; a kind the other tracks stops being walk-only.

        A resource the other names wins over this one's."""
        tracked = self.tracked | other.tracked
        return KindRegistry(
            tracked=tracked,
            walk_only=(self.walk_only | other.walk_only) - tracked,
            resources={**self.resources, **other.resources},
            short_names={**self.short_names, **other.short_names},
        )

    def kind_info(self, gk: GroupKind) -> KindInfo:
        """A kind as kubectl names it: its plural (`resource_of`) and the short names
        configured (none for a kind the registry does not hold)."""
        short = self.short_names.get(gk, ())
        return KindInfo(gk.group, gk.kind, self.resource_of(gk), gk.kind.lower(), short)


class _Entry(BaseModel):
    """One `{group, kind, resource, shortNames}` entry; `resource` "" when not given."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    group: str = Field("", pattern=_GROUP.pattern)
    kind: str = Field(pattern=_KIND.pattern)
    resource: str = Field("", pattern=_RESOURCE.pattern)
    short_names: list[Annotated[str, Field(pattern=_RESOURCE.pattern)]] = Field(
        default_factory=list, alias="shortNames"
    )


class _Config(BaseModel):
    """The registry document: strict types, no unknown keys (a typo is an error)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    tracked: list[_Entry] = Field(default_factory=list)
    walk_only: list[_Entry] = Field(default_factory=list, alias="walkOnly")
    replace: bool = False

    @field_validator("tracked", "walk_only", mode="before")
    @classmethod
    def _absent_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value


def _message(source: str, errors: Sequence[Mapping[str, Any]]) -> str:
    """The first validation error as one line that names the field (`tracked[0].group`)."""
    error = errors[0]
    loc, value = error["loc"], error["input"]
    if not loc:
        return f"{source}: expected a mapping with `tracked` and `walkOnly`"
    if len(loc) == 1:
        if error["type"] == "extra_forbidden":
            unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
            return f"{source}: unknown keys {unknown}"
        if loc[0] == "replace":
            return f"{source}: `replace` must be true or false, got {value!r}"
        return f"{source}: `{loc[0]}` must be a list of {{group, kind}}"
    at = f"{source}: {loc[0]}[{loc[1]}]"
    name = loc[2] if len(loc) > 2 else None
    if error["type"] == "extra_forbidden":
        unknown = sorted(
            str(e["loc"][2])
            for e in errors
            if e["loc"][:2] == loc[:2] and e["type"] == "extra_forbidden"
        )
        return (
            f"{at}: unknown key(s) {', '.join(unknown)} "
            "(an entry has group, kind, resource, shortNames)"
        )
    if name is None or (name == "kind" and error["type"] != "string_pattern_mismatch"):
        return f"{at} needs a string `kind`"
    if name == "group" and error["type"] != "string_pattern_mismatch":
        return f"{at}.group must be a string"
    if name == "group" and "/" in value:
        return (
            f"{at}.group {value!r} looks like an apiVersion;"
            " kinds are matched by group only (for example `nvidia.com`)"
        )
    return f"{at}.{name} {value!r} is not {_WHAT[str(name)]}"


_WHAT = {
    "group": "an API group (a lowercase DNS name such as `ray.io`, or empty for the core group)",
    "kind": "a Kind (letters and digits, such as `RayService`)",
    "resource": "a plural resource name (lowercase letters, digits and '-', as in "
    "`kubectl api-resources`: `rayservices`)",
    "shortNames": "a list of short names (lowercase letters, digits and '-', as in "
    "`kubectl api-resources`: `[deploy]`)",
}


def _kinds(
    entries: list[_Entry],
    *,
    field: str,
    source: str,
    resources: dict[GroupKind, str],
    short_names: dict[GroupKind, tuple[str, ...]],
) -> frozenset[GroupKind]:
    """The kinds of one list; configured plural resources go into `resources`, short
    names into `short_names`."""
    out: set[GroupKind] = set()
    for i, entry in enumerate(entries):
        gk = GroupKind(entry.group, entry.kind)
        if entry.short_names:
            known = short_names.get(gk, ())
            short_names[gk] = tuple(dict.fromkeys([*known, *entry.short_names]))
        if entry.resource:
            if resources.get(gk, entry.resource) != entry.resource:
                raise RegistryError(
                    f"{source}: {field}[{i}].resource {entry.resource!r}: {gk} is also given "
                    f"resource {resources[gk]!r}"
                )
            resources[gk] = entry.resource
        out.add(gk)
    return frozenset(out)


def parse_registry(text: str, *, source: str = "kinds config") -> tuple[KindRegistry, bool]:
    """Parse a registry document; returns it and whether it replaces the default."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{source}: not YAML: {exc}") from None
    try:
        config = _Config.model_validate(doc)
    except ValidationError as exc:
        raise RegistryError(_message(source, exc.errors())) from None
    resources: dict[GroupKind, str] = {}
    short: dict[GroupKind, tuple[str, ...]] = {}
    tracked = _kinds(
        config.tracked, field="tracked", source=source, resources=resources, short_names=short
    )
    walk_only = _kinds(
        config.walk_only, field="walkOnly", source=source, resources=resources, short_names=short
    )
    registry = KindRegistry(
        tracked=tracked, walk_only=walk_only, resources=resources, short_names=short
    )
    return registry, config.replace


def default_registry() -> KindRegistry:
    """The built-in registry: every kind docs/architecture.md names."""
    registry, _ = parse_registry(DEFAULT_KINDS_YAML, source="built-in kinds")
    return registry


def registry_from_config(text: str, *, source: str) -> KindRegistry:
    """The default registry extended (or replaced) by a user's config text."""
    user, replace = parse_registry(text, source=source)
    return user if replace else default_registry().merged(user)


def catalogue(registry: KindRegistry) -> tuple[KindInfo, ...]:
    """Every kind of a registry as kubectl names it (`KindRegistry.kind_info`)."""
    return tuple(registry.kind_info(gk) for gk in sorted(registry.tracked | registry.walk_only))


# The kind catalogue, for naming objects offline (`kubectl aibom --from-file`,
# `aibom-rollup history`; live, discovery replaces it): the built-in registry's
# kinds, their plurals and short names as DEFAULT_KINDS_YAML gives them, and
# the kinds read but never walked.
BUILTIN_KINDS: Final[tuple[KindInfo, ...]] = (
    *catalogue(default_registry()),
    KindInfo(CONFIGMAP.group, CONFIGMAP.kind, "configmaps", "configmap", ("cm",)),
)
