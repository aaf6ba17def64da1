"""The tracked-kind registry: which kinds get an AIBOM, which are walked through.

Kinds are identified by API group + Kind, never by apiVersion. The registry is
configuration (a YAML document), not code, so a user adds a kind without a
release. Pure: parsing takes text, never a path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml


@dataclass(frozen=True, order=True, slots=True)
class GroupKind:
    """An API group and a Kind: the identity of a kind across versions."""

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
# right for every kind below. `aibom-rollup policy` needs it.
tracked:
  - {group: apps, kind: Deployment}
  - {group: apps, kind: StatefulSet}
  - {group: apps, kind: DaemonSet}
  - {group: batch, kind: Job}
  - {group: batch, kind: CronJob}
  - {group: nvidia.com, kind: DynamoGraphDeployment}
  - {group: nvidia.com, kind: DynamoComponentDeployment}
  - {group: apps.nvidia.com, kind: NIMService}
  - {group: leaderworkerset.x-k8s.io, kind: LeaderWorkerSet}
  # KServe v1beta1: a root of its own (predictor model, storageUri, runtime),
  # and under a NIMService with inferencePlatform: kserve.
  - {group: serving.kserve.io, kind: InferenceService}
walkOnly:
  - {group: apps, kind: ReplicaSet}
  - {group: "", kind: Pod}
  - {group: grove.io, kind: PodCliqueSet}
  - {group: grove.io, kind: PodCliqueScalingGroup}
  - {group: grove.io, kind: PodClique}
  # Chains the design does not list but real clusters have (docs/architecture.md):
  # DynamoGraphDeployment -> DisaggregatedSet -> LeaderWorkerSet. Walked,
  # never reported.
  - {group: disaggregatedset.x-k8s.io, kind: DisaggregatedSet}
  # KServe Serverless mode: InferenceService -> Knative Service ->
  # Configuration -> Revision -> Deployment. Walked, never reported.
  - {group: serving.knative.dev, kind: Service}
  - {group: serving.knative.dev, kind: Configuration}
  - {group: serving.knative.dev, kind: Revision}
"""


class RegistryError(ValueError):
    """The kind configuration is not what we expect; the message says where."""


# What the API server accepts: a group is a DNS subdomain (or empty: core), a
# Kind a CamelCase identifier, a resource a DNS-1035 label (a CRD's plural).
_GROUP = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$")
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_RESOURCE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ENTRY_KEYS = frozenset({"group", "kind", "resource"})


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
class KindRegistry:
    """Tracked kinds (reported) and walk-only intermediates (never reported)."""

    tracked: frozenset[GroupKind]
    walk_only: frozenset[GroupKind]
    # Plural API resources given in the configuration; the others are guessed
    # (`resource_of`).
    resources: Mapping[GroupKind, str] = field(default_factory=dict)

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
        )


def _parse_entries(
    raw: Any, *, field: str, source: str, resources: dict[GroupKind, str]
) -> frozenset[GroupKind]:
    """The kinds of one list; configured plural resources go into `resources`."""
    if raw is None:
        return frozenset()
    if not isinstance(raw, list):
        raise RegistryError(f"{source}: `{field}` must be a list of {{group, kind}}")
    out: set[GroupKind] = set()
    for i, entry in enumerate(raw):
        at = f"{source}: {field}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("kind"), str):
            raise RegistryError(f"{at} needs a string `kind`")
        unknown = sorted(str(k) for k in set(entry) - _ENTRY_KEYS)
        if unknown:
            raise RegistryError(
                f"{at}: unknown key(s) {', '.join(unknown)} (an entry has group, kind, resource)"
            )
        group = entry.get("group", "")
        if not isinstance(group, str):
            raise RegistryError(f"{at}.group must be a string")
        if "/" in group:
            raise RegistryError(
                f"{at}.group {group!r} looks like an apiVersion;"
                " kinds are matched by group only (for example `nvidia.com`)"
            )
        if not _GROUP.match(group):
            raise RegistryError(
                f"{at}.group {group!r} is not an API group (a lowercase DNS name"
                " such as `ray.io`, or empty for the core group)"
            )
        kind = entry["kind"]
        if not _KIND.match(kind):
            raise RegistryError(
                f"{at}.kind {kind!r} is not a Kind (letters and digits, such as `RayService`)"
            )
        gk = GroupKind(group, kind)
        if "resource" in entry:
            resource = entry["resource"]
            if not isinstance(resource, str) or not _RESOURCE.match(resource):
                raise RegistryError(
                    f"{at}.resource {resource!r} is not a plural resource name (lowercase"
                    " letters, digits and '-', as in `kubectl api-resources`: `rayservices`)"
                )
            if resources.get(gk, resource) != resource:
                raise RegistryError(
                    f"{at}.resource {resource!r}: {gk} is also given resource {resources[gk]!r}"
                )
            resources[gk] = resource
        out.add(gk)
    return frozenset(out)


def parse_registry(text: str, *, source: str = "kinds config") -> tuple[KindRegistry, bool]:
    """Parse a registry document; returns it and whether it replaces the default."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{source}: not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{source}: expected a mapping with `tracked` and `walkOnly`")
    unknown = set(doc) - {"tracked", "walkOnly", "replace"}
    if unknown:
        raise RegistryError(f"{source}: unknown keys {sorted(unknown)}")
    resources: dict[GroupKind, str] = {}
    registry = KindRegistry(
        tracked=_parse_entries(
            doc.get("tracked"), field="tracked", source=source, resources=resources
        ),
        walk_only=_parse_entries(
            doc.get("walkOnly"), field="walkOnly", source=source, resources=resources
        ),
        resources=resources,
    )
    return registry, bool(doc.get("replace", False))


def default_registry() -> KindRegistry:
    """The built-in registry: every kind docs/architecture.md names."""
    registry, _ = parse_registry(DEFAULT_KINDS_YAML, source="built-in kinds")
    return registry


def registry_from_config(text: str, *, source: str) -> KindRegistry:
    """The default registry extended (or replaced) by a user's config text."""
    user, replace = parse_registry(text, source=source)
    return user if replace else default_registry().merged(user)
