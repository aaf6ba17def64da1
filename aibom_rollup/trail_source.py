"""The audit trail, read back: a root's versions (`history`) and the documents at a time (`--at`).

Reads what the annotator exported (annotator/export.py) from the OCI registry
through `aibom_edge.oci` (the ORAS SDK), off the event loop:

- `history(...)`: every version of one root (the tags `sha256-<hex>` of its
  repository), each with its document, oldest first; `changes(...)` says what
  each changed from the one before (`aibom_core.trail.diff`), and each
  document's signature state is checked against the keys given.
- `RegistrySource`: the `Source` of `get`, `find`, `models` and `runtimes`
  `--at TIME`: every root repository of the cluster (`/v2/_catalog`, under
  `<prefix>/<cluster>/`), and for each the version in force at TIME (the last
  one written at or before it); a root whose first version is later is left
  out. `explain` and `tree` need objects: the trail holds none, and says so.

Where the registry lives (`--registry HOST[:PORT][/PREFIX]`), its credentials
(a docker config file) and CA, and the cluster id come from the flags or from
`AIBOM_EXPORT_REGISTRY`, `AIBOM_EXPORT_CREDENTIALS`, `AIBOM_EXPORT_CA_FILE`,
`AIBOM_CLUSTER_ID`: the annotator's `--export-*` values.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aibom_core import jsf, trail
from aibom_core.document import configmap_name
from aibom_core.kindnames import offline_kinds
from aibom_core.kinds import KindInfo, KindRegistry
from aibom_core.objects import Obj
from aibom_core.walk import Fetched, OwnerRequest
from aibom_edge.oci import Endpoint, OciError
from aibom_rollup.sources import Doc, SourceError


@dataclass(frozen=True, slots=True)
class Entry:
    """One version of a root's history, with its document and what it changed."""

    version: trail.Version
    document: bytes
    verdict: jsf.Verdict
    change: trail.Change


# (flag, metavar, environment variable, what it is)
TRAIL_OPTIONS = (
    ("--registry", "HOST[:PORT][/PREFIX]", "AIBOM_EXPORT_REGISTRY",
     "the annotator's --export-registry"),
    ("--registry-credentials", "FILE", "AIBOM_EXPORT_CREDENTIALS",
     "a docker config JSON with the registry's credentials (else anonymous)"),
    ("--registry-ca-file", "FILE", "AIBOM_EXPORT_CA_FILE",
     "PEM CA bundle of the registry (else the system's)"),
    ("--cluster-id", "ID", "AIBOM_CLUSTER_ID",
     "the annotator's --export-cluster-id (else the UID of namespace kube-system of the "
     "cluster, as the annotator's default)"),
)  # fmt: skip


def add_trail_options(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    for flag, metavar, env, what in TRAIL_OPTIONS:
        p.add_argument(flag, metavar=metavar, default=os.environ.get(env), help=f"{what} (${env})")


def endpoint_of(args: argparse.Namespace) -> Endpoint:
    if not args.registry:
        raise SourceError(
            "no registry: give --registry HOST[:PORT][/PREFIX] (the annotator's "
            "--export-registry) or set AIBOM_EXPORT_REGISTRY"
        )
    for flag in ("registry_credentials", "registry_ca_file"):
        path = getattr(args, flag)
        if path and not os.path.isfile(path):
            raise SourceError(f"--{flag.replace('_', '-')} {path}: no such file")
    try:
        return Endpoint.parse(
            args.registry, ca_file=args.registry_ca_file, auth_file=args.registry_credentials
        )
    except ValueError as exc:
        raise SourceError(str(exc)) from None


_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2})?(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")


def parse_time(text: str) -> str:
    """`--at` as the trail writes times: RFC 3339 UTC to the second. A date alone means
    its end (which roots ran X *on* that date: what was in force at 23:59:59 UTC)."""
    text = text.strip()
    if not _TIME.match(text):
        raise SourceError(
            f"--at {text!r}: give a date or an RFC 3339 time (2026-05-01, 2026-05-01T12:00:00Z)"
        )
    if len(text) == 10:
        text += "T23:59:59Z"
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
    except ValueError as exc:
        raise SourceError(f"--at {text!r}: {exc}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Trail:
    """The exported versions of one cluster's roots, read from the registry."""

    def __init__(self, endpoint: Endpoint, cluster: str) -> None:
        self.endpoint = endpoint
        self.cluster = cluster
        from aibom_edge.oci_client import Client  # the ORAS SDK and requests: only here

        self.client = Client(endpoint)

    def repository(self, root: trail.RootId) -> str:
        return trail.root_repository(self.endpoint.prefix, self.cluster, root)

    async def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except OciError as exc:
            raise SourceError(f"registry {self.endpoint.host}: {exc}") from None

    async def versions(self, repository: str) -> list[trail.Version]:
        """Every version in a root's repository, oldest first."""
        tags = await self._call(self.client.tags, repository)
        found = []
        for tag in tags:
            if trail.digest_of_tag(tag) is None:
                continue
            manifest = await self._call(self.client.manifest, repository, tag)
            version = trail.version_of(manifest)
            if version is not None:
                found.append(version)
        return trail.in_order(found)

    async def document(self, repository: str, version: trail.Version) -> bytes:
        data: bytes = await self._call(self.client.blob, repository, version.digest)
        if trail.digest_of(data) != version.digest:
            raise SourceError(f"{repository}: the blob of {version.digest} does not match it")
        return data

    async def history(self, root: trail.RootId, keys: jsf.KeySet) -> list[Entry]:
        repository = self.repository(root)
        out: list[Entry] = []
        before: Any = None
        for version in await self.versions(repository):
            if root.uid and version.root.uid and version.root.uid != root.uid:
                continue  # a namesake: another object that had the name before
            data = await self.document(repository, version)
            try:
                body = json.loads(data)
            except ValueError as exc:
                raise SourceError(
                    f"{repository}@{version.digest}: not a JSON document: {exc}"
                ) from None
            out.append(Entry(version, data, jsf.verify_bytes(data, keys), trail.diff(before, body)))
            before = body
        return out

    async def repositories(self) -> list[str]:
        prefix = trail.cluster_prefix(self.endpoint.prefix, self.cluster)
        names: list[str] = await self._call(self.client.catalog)
        return sorted(n for n in names if n.startswith(prefix))


class RegistrySource:
    """`get`/`find`/`models`/`runtimes` as they would have answered at a time."""

    def __init__(
        self,
        history: Trail,
        when: str,
        *,
        registry: KindRegistry,
        default_namespace: str = "default",
    ) -> None:
        self.trail = history
        self.when = when
        self.registry = registry
        self.default_namespace = default_namespace
        self.skipped: list[str] = []  # versions that are no JSON document, said once each
        self._docs: list[Doc] | None = None

    async def kinds(self) -> list[KindInfo]:
        return offline_kinds(self.registry)

    def _no_objects(self) -> SourceError:
        return SourceError(
            "the trail holds documents, not objects: explain and tree need a cluster"
        )

    async def get(self, kind: KindInfo, namespace: str, name: str) -> Obj | None:
        return None  # "no AIBOM at that time" is said by the caller

    async def fetch_owner(self, req: OwnerRequest) -> Fetched:
        raise self._no_objects()

    async def graph(self, namespace: str | None) -> Any:
        raise self._no_objects()

    async def _all(self) -> list[Doc]:
        if self._docs is not None:
            return self._docs
        docs = []
        for repository in await self.trail.repositories():
            version = trail.at(await self.trail.versions(repository), self.when)
            if version is None:
                continue
            data = await self.trail.document(repository, version)
            try:
                body = json.loads(data)
            except ValueError as exc:
                self.skipped.append(f"{repository}@{version.digest}: not a JSON document: {exc}")
                continue
            root = version.root
            group = root.group or "core"
            docs.append(
                Doc(
                    namespace=root.namespace,
                    configmap=configmap_name(root.kind, root.name),
                    root_hop=f"{group}/{root.kind}/{root.name}",
                    raw=data,
                    body=body,
                )
            )
        self._docs = sorted(docs, key=lambda d: (d.namespace, d.root, d.root_hop))
        return self._docs

    async def documents(self, namespace: str | None, selector: str | None) -> list[Doc]:
        if selector:
            raise SourceError("-l selects ConfigMaps; the trail has none (drop -l with --at)")
        return [d for d in await self._all() if namespace is None or d.namespace == namespace]

    async def document(self, namespace: str, kind: str, name: str) -> Doc | None:
        want = f"{kind}/{name}"
        return next(
            (d for d in await self._all() if d.namespace == namespace and d.root == want), None
        )


# -- rendering ---------------------------------------------------------------------------


def change_text(change: trail.Change) -> str:
    """`+model X, -digest sha256:..`: one line (`(first version)` handled by the caller)."""
    names = {
        "models": "model",
        "runtimes": "runtime",
        "images": "image",
        "digests": "digest",
        "absorbed": "absorbed",
        "unproven": "unproven",
    }
    words = []
    for aspect in trail.ASPECTS:
        words += [f"+{names[aspect]} {v}" for v in change.added.get(aspect, ())]
        words += [f"-{names[aspect]} {v}" for v in change.removed.get(aspect, ())]
    return ", ".join(words) if words else "(no change in models, runtimes, images, workloads)"


def history_data(root: trail.RootId, repository: str, entries: list[Entry]) -> dict[str, Any]:
    return {
        "root": {"namespace": root.namespace, "kind": root.kind, "name": root.name},
        "repository": repository,
        "versions": [
            {
                "created": e.version.created,
                "digest": e.version.digest,
                "inputHash": e.version.input_hash,
                "uid": e.version.root.uid,
                "signedBy": e.version.signed_by,
                "signature": {"status": e.verdict.status.value, "keyId": e.verdict.kid},
                "changes": {
                    "added": {a: list(v) for a, v in e.change.added.items() if v},
                    "removed": {a: list(v) for a, v in e.change.removed.items() if v},
                },
            }
            for e in entries
        ],
    }


def short(digest: str) -> str:
    return digest[:19]
