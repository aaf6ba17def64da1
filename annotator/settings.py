"""The annotator's settings: what its flags say (`annotator.flags`), in one object
passed whole to the controller and its parts."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from aibom_core.document import DocLabels
from aibom_core.kinds import CONFIGMAP, NAMESPACE, GroupKind, KindRegistry
from aibom_core.opt_in import DEFAULT_OPT_IN
from aibom_core.stamp import Keys
from aibom_core.walk import DEFAULT_MAX_DEPTH
from aibom_edge.reflector import DEFAULT_PAGE_SIZE
from annotator.configmap import MAX_DATA_BYTES
from annotator.export import ExportSettings
from annotator.plan import sources_salt
from annotator.signing import Signing

STAMP_MODES = ("opted-in", "all", "off")


def wanted_kinds(registry: KindRegistry) -> tuple[GroupKind, ...]:
    """Every kind the annotator lists and watches, in order: the registry's tracked and
    walk-only kinds, Namespaces and (ours, by label) ConfigMaps."""
    return tuple(sorted(registry.tracked | registry.walk_only | {NAMESPACE, CONFIGMAP}))


@dataclass(frozen=True)
class Settings:
    registry: KindRegistry
    tool_version: str
    keys: Keys = field(default_factory=Keys)
    namespace_label: tuple[str, str] = DEFAULT_OPT_IN
    max_depth: int = DEFAULT_MAX_DEPTH
    workers: int = 16  # writes in flight; etcd batches concurrent writes
    page_size: int = DEFAULT_PAGE_SIZE
    watch_timeout: int = 300
    rediscovery_interval: float = 30.0
    stamp_mode: str = "opted-in"
    stamp_settle: float = 2.0
    write_qps: float = 500.0  # a cap near the API server's own rate (docs)
    write_burst: int = 500
    stamp_qps: float = 10.0
    stamp_burst: int = 50
    size_limit: int = MAX_DATA_BYTES
    forbidden_retry: float = 30.0
    sync_timeout: float = 30.0
    watch_idle_timeout: float = 90.0
    # Provenance: the webhook's edge-proof key; trust every edge instead.
    provenance_key: bytes | None = None
    trust_owner_references: bool = False
    signing: Signing | None = None  # sign every document (annotator.signing)
    export: ExportSettings | None = None  # push every version to a registry (annotator.export)

    @property
    def generator(self) -> str:
        return f"aibom-rollup/{self.tool_version}"

    @property
    def labels(self) -> DocLabels:
        return DocLabels(self.keys.prefix)

    @functools.cached_property
    def sources_salt(self) -> str:
        """What besides the objects a document depends on (`annotator.plan.sources_salt`)."""
        return sources_salt(
            self.registry,
            tool_version=self.tool_version,
            prefix=self.keys.prefix,
            trust_all=self.trust_owner_references,
            max_depth=self.max_depth,
            provenance_key=self.provenance_key,
        )
