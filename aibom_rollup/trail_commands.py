"""`history`, `--at` and signature states: the audit trail's side of `kubectl aibom` and
`aibom-rollup` (one code path for both; `trail_source` reads the registry).

- `history ROOT`: the root's versions from the registry (time, input hash,
  digest, signature state) and what each changed from the one before; `-o
  json|yaml` has every field.
- `--at TIME` on `get`, `find`, `models`, `runtimes`: the same questions of the
  documents in force at that time (`trail_source.RegistrySource`).
- `signatures(...)`: each document's JSF state (`valid`, `invalid`,
  `unsigned`, `unknown-key`) against the keys given (`--key`) or the JWK set
  the annotator publishes (`--keys-configmap`), for `get`'s SIGNATURE column.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from aibom_core import jsf, trail
from aibom_core.kinds import KindRegistry
from aibom_edge.kube import Kube
from aibom_edge.options import UsageError, read_input
from aibom_rollup import render
from aibom_rollup.sources import Doc, Source, SourceError
from aibom_rollup.trail_source import (
    RegistrySource,
    Trail,
    add_trail_options,
    change_text,
    endpoint_of,
    history_data,
    parse_time,
    short,
)
from aibom_rollup.verify import add_key_options, keys_of_text

__all__ = ["add_at_option", "add_history_parser", "add_key_options", "at_source", "keys_for",
           "run_history", "signatures"]  # fmt: skip

# Options of these commands that take a value (kubectl_aibom.hoist must know them).
VALUED = frozenset(
    {"--at", "--registry", "--registry-credentials", "--registry-ca-file", "--cluster-id",
     "--key", "--keys-configmap"}
)  # fmt: skip


def add_at_option(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the audit trail (the annotator's --export-registry)")
    g.add_argument(
        "--at",
        metavar="TIME",
        help="answer from the documents in force at TIME (a date: its end, UTC; or RFC 3339), "
        "read from the export registry instead of the cluster",
    )
    add_trail_options(g)


def add_history_parser(sub: Any, parents: Sequence[argparse.ArgumentParser]) -> None:
    h = sub.add_parser(
        "history",
        parents=list(parents),
        help="a root's AIBOM versions from the export registry, and what each changed",
        description="Every version of the root's AIBOM the annotator exported (its "
        "--export-registry): when it was written, its input hash and digest, its "
        "signature state, and what changed from the version before (models, runtimes, "
        "images, digests, absorbed and unproven workloads). Oldest first.",
    )
    h.add_argument("target", nargs="+", metavar="ROOT", help="e.g. Deployment/web, dgd/vllm-agg")
    h.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml"], default="table")
    g = h.add_argument_group("the audit trail (the annotator's --export-registry)")
    add_trail_options(g)
    add_key_options(h)


async def keys_for(args: argparse.Namespace, kube: Kube | None) -> jsf.KeySet:
    """`--key` files, else the published JWK set (empty when there is none to read)."""
    if getattr(args, "key", None):
        merged: dict[str, Any] = {}
        for path in args.key:
            try:
                merged.update(keys_of_text(read_input(path), path).keys)
            except UsageError as exc:
                raise SourceError(str(exc)) from None
        return jsf.KeySet(merged)
    if kube is None:
        return jsf.KeySet({})
    ns, _, name = str(getattr(args, "keys_configmap", jsf.DEFAULT_KEYS_CONFIGMAP)).partition("/")
    resp = await kube.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
    if not resp.ok or not isinstance(resp.body, dict):
        return jsf.KeySet({})  # not published (or not readable): signed ones are unknown-key
    try:
        return keys_of_text(json.dumps(resp.body).encode(), f"configmap {ns}/{name}")
    except UsageError:
        return jsf.KeySet({})


def signatures(docs: Sequence[Doc], keys: jsf.KeySet) -> dict[tuple[str, str], str]:
    """(namespace, root) -> the signature state of its document."""
    return {(d.namespace, d.root): jsf.verify_bytes(d.raw, keys).status.value for d in docs}


async def cluster_id(args: argparse.Namespace, kube: Kube | None) -> str:
    if args.cluster_id:
        return str(args.cluster_id)
    if kube is None:
        raise SourceError(
            "no cluster id: give --cluster-id (the annotator's --export-cluster-id) or set "
            "AIBOM_CLUSTER_ID"
        )
    resp = await kube.request("GET", "/api/v1/namespaces/kube-system")
    if not resp.ok or not isinstance(resp.body, dict):
        raise SourceError(
            f"cannot read namespace kube-system (HTTP {resp.status}) for the cluster id: give "
            "--cluster-id"
        )
    return str(resp.body["metadata"]["uid"])


async def at_source(
    args: argparse.Namespace, kube: Kube | None, registry: KindRegistry, namespace: str
) -> Source:
    when = parse_time(args.at)
    history = Trail(endpoint_of(args), await cluster_id(args, kube))
    return RegistrySource(history, when, registry=registry, default_namespace=namespace)


async def run_history(
    args: argparse.Namespace,
    *,
    root: trail.RootId,
    kube: Kube | None,
    out: TextIO,
) -> int:
    history = Trail(endpoint_of(args), await cluster_id(args, kube))
    entries = await history.history(root, await keys_for(args, kube))
    repository = history.repository(root)
    if args.output in ("json", "yaml"):
        data = history_data(root, repository, entries)
        if args.output == "json":
            out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        else:
            out.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        return 0
    if not entries:
        print(
            f"No versions of {root.ref} (namespace {root.namespace}) in "
            f"{history.endpoint.host}/{repository}.",
            file=sys.stderr,
        )
        return 0
    header = ["TIME", "INPUT HASH", "DIGEST", "SIGNATURE", "CHANGES"]
    wide = args.output == "wide"
    rows = []
    for i, e in enumerate(entries):
        status = e.verdict.status.value + (f" ({e.verdict.kid})" if e.verdict.kid else "")
        changes = change_text(e.change)
        if i == 0:
            changes = "(first version) " + changes
        v = e.version
        rows.append(
            [
                v.created,
                v.input_hash if wide else short(v.input_hash),
                v.digest if wide else short(v.digest),
                status,
                render.clean(changes),
            ]
        )
    out.write(f"history of {render.clean(root.ref)} (namespace {root.namespace}): ")
    out.write(f"{history.endpoint.host}/{repository}\n")
    out.write(render.table(header, rows))
    return 0
