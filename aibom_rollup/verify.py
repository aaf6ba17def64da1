"""Check the JSF signatures of AIBOM documents: files, kubectl dumps, or the cluster's ConfigMaps.

Sources (several may be given):
  FILE or -       a CycloneDX document, a ConfigMap, or a List of them
                  (`kubectl get cm -o json`; JSON or YAML); `aibom.json.gz`
                  binaryData is decoded
  (none)          every AIBOM ConfigMap (label app.kubernetes.io/managed-by=
                  aibom-rollup) of the current kubeconfig context's namespace,
                  or of -n NAMESPACE, or of every namespace with -A

Keys: --key FILE (repeatable): a JWK set, a JWK, a PEM public or private key,
or the JWK set ConfigMap as JSON. Without --key, the JWK set the annotator
publishes in the cluster (--keys-configmap, default
aibom-system/aibom-signing-keys, data key jwks.json) is trusted.

One line per document: STATUS SOURCE [key id] [why]. Statuses:
  valid        signed by a trusted key, not changed since
  invalid      changed after signing (edited), or a malformed/forged signature
  unknown-key  signed by a key that is not among the trusted keys
  unsigned     no signature

Exit codes (the worst document decides):
  0  every document is valid
  1  at least one document is invalid
  2  bad input or usage (unreadable file, no keys, cluster unreachable)
  3  none invalid, but at least one signed by an unknown key
  4  none invalid or unknown, but at least one unsigned (or no document found)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from aibom_core import jsf
from aibom_core.document import MANAGED_SELECTOR, PackedDocumentError, unpack
from aibom_edge.kubeconfig import context_namespace
from aibom_edge.listing import list_all
from aibom_edge.options import UsageError, add_cluster_options, read_input

EXIT = {
    jsf.Status.VALID: 0,
    jsf.Status.INVALID: 1,
    jsf.Status.UNKNOWN_KEY: 3,
    jsf.Status.UNSIGNED: 4,
}
_SEVERITY = [jsf.Status.VALID, jsf.Status.UNSIGNED, jsf.Status.UNKNOWN_KEY, jsf.Status.INVALID]


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "sources",
        nargs="*",
        metavar="FILE|-",
        help="documents or ConfigMap dumps (default: the cluster's AIBOM ConfigMaps)",
    )
    add_key_options(p)
    cluster = p.add_argument_group("cluster")
    add_cluster_options(cluster)
    scope = cluster.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", "--namespace", help="check this namespace (default: the context's namespace)"
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="check every namespace")
    p.add_argument(
        "-o", "--output", choices=["text", "json"], default="text", help="(default: %(default)s)"
    )


def add_key_options(p: argparse.ArgumentParser) -> None:
    """--key and --keys-configmap: which keys a signature is checked against (verify, and
    kubectl aibom get/history)."""
    keys = p.add_argument_group("keys")
    keys.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="FILE",
        help="trusted key(s): JWK set, JWK, PEM key, or the key ConfigMap as JSON (repeatable)",
    )
    keys.add_argument(
        "--keys-configmap",
        default=jsf.DEFAULT_KEYS_CONFIGMAP,
        metavar="NAMESPACE/NAME",
        help="without --key: trust the JWK set published here (default: %(default)s)",
    )


@dataclass(frozen=True)
class Checked:
    source: str
    verdict: jsf.Verdict


# -- reading documents -------------------------------------------------------------


def _cm_name(cm: dict[str, Any]) -> str:
    meta = cm.get("metadata") or {}
    return f"configmap/{meta.get('namespace', '')}/{meta.get('name', '')}".replace("//", "/")


def documents_in(raw: bytes, source: str) -> Iterator[tuple[str, bytes | None, str]]:
    """(name, document bytes or None, error) for each document a file holds."""
    text = raw.decode("utf-8", "replace")
    try:
        data: Any = json.loads(text)
        docs: list[Any] = [data]
        is_json = True
    except ValueError:
        is_json = False
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise UsageError(f"{source}: neither JSON nor YAML ({exc})".splitlines()[0]) from None
    for doc in docs:
        if not isinstance(doc, dict):
            raise UsageError(f"{source}: not a CycloneDX document, ConfigMap or List")
        if "bomFormat" in doc or "specVersion" in doc:
            # The raw bytes: JSON parsers differ on repeated member names, and
            # verify_bytes refuses them; re-serialising would hide them.
            yield source, raw if is_json and len(docs) == 1 else json.dumps(doc).encode(), ""
        elif doc.get("kind") == "ConfigMap":
            yield from _configmap(doc)
        elif doc.get("kind") == "List" or str(doc.get("kind", "")).endswith("List"):
            items = doc.get("items") or []
            cms = [
                i
                for i in items
                if isinstance(i, dict) and i.get("kind", "ConfigMap") == "ConfigMap"
            ]
            for cm in cms:
                yield from _configmap(cm)
        else:
            raise UsageError(f"{source}: not a CycloneDX document, ConfigMap or List")


def _configmap(cm: dict[str, Any]) -> Iterator[tuple[str, bytes | None, str]]:
    name = _cm_name(cm)
    try:
        doc = unpack(cm)  # the one bounded reader (aibom_core.document)
    except PackedDocumentError as exc:
        yield name, None, str(exc)
        return
    if doc is not None:
        yield name, doc, ""


# -- keys ---------------------------------------------------------------------------


def keys_of_text(raw: bytes, source: str) -> jsf.KeySet:
    """A JWK set, a JWK, a PEM key (private or public), or the keys ConfigMap."""
    try:
        if b"-----BEGIN" in raw:
            if b"PRIVATE KEY-----" in raw:
                priv = jsf.load_private_pem(raw)
                return jsf.KeySet.of([jsf.SigningKey.of(priv).jwk])
            pub = jsf.load_public_pem(raw)
            return jsf.KeySet.of([jsf.public_jwk(pub)])
        try:
            data = json.loads(raw)
        except ValueError:
            data = yaml.safe_load(raw)
        if isinstance(data, dict) and data.get("kind") == "ConfigMap":
            text = (data.get("data") or {}).get(jsf.KEYS_DATA_KEY)
            if not isinstance(text, str):
                raise jsf.BadKey(f"the ConfigMap has no data key {jsf.KEYS_DATA_KEY}")
            return jsf.KeySet.parse(text)
        return jsf.KeySet.parse(json.dumps(data))
    except (jsf.BadKey, yaml.YAMLError) as exc:
        raise UsageError(f"{source}: {str(exc).splitlines()[0]}") from None


def _split_ref(text: str) -> tuple[str, str]:
    ns, _, name = text.partition("/")
    if not ns or not name or "/" in name:
        raise UsageError(f"--keys-configmap: expected NAMESPACE/NAME, got {text!r}")
    return ns, name


# -- cluster -------------------------------------------------------------------------


LIST_PAGE = 500


async def _list(kube: Any, path: str, selector: str | None) -> list[dict[str, Any]]:
    """Every AIBOM ConfigMap at `path` (the one paged list: a 410 on a continue relists)."""

    async def refused(resp: Any) -> None:
        raise UsageError(f"GET {path}: HTTP {resp.status}: {_message(resp.body)}")

    items, _ = await list_all(
        lambda query: kube.request("GET", path, params=query),
        {"labelSelector": selector} if selector else {},
        limit=LIST_PAGE,
        refused=refused,
    )
    return items


def _message(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message") or body.get("reason") or body)[:300]
    return str(body)[:300]


async def _from_cluster(
    args: argparse.Namespace, *, want_docs: bool, want_keys: bool
) -> tuple[list[dict[str, Any]], jsf.KeySet | None, str]:
    from aibom_edge.kube import Kube, KubeError

    scope = "all namespaces"
    try:
        async with Kube.from_kubeconfig(args.kubeconfig, context=args.context) as kube:
            keys = None
            if want_keys:
                ns, name = _split_ref(args.keys_configmap)
                resp = await kube.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
                if resp.status == 404:
                    raise UsageError(
                        f"no --key given and the key ConfigMap {ns}/{name} does not exist "
                        "(is signing enabled? see docs/signing.md)"
                    )
                if not resp.ok or not isinstance(resp.body, dict):
                    raise UsageError(
                        f"cannot read the key ConfigMap {ns}/{name}: HTTP {resp.status}: "
                        f"{_message(resp.body)}"
                    )
                keys = keys_of_text(json.dumps(resp.body).encode(), f"configmap {ns}/{name}")
            cms: list[dict[str, Any]] = []
            if want_docs:
                if args.all_namespaces:
                    path = "/api/v1/configmaps"
                else:
                    ns = args.namespace or await asyncio.to_thread(
                        context_namespace, args.kubeconfig, args.context
                    )
                    scope = f"namespace {ns}"
                    path = f"/api/v1/namespaces/{ns}/configmaps"
                cms = await _list(kube, path, MANAGED_SELECTOR)
            return cms, keys, scope
    except (KubeError, TimeoutError, OSError) as exc:
        raise UsageError(f"cannot reach the cluster: {str(exc) or type(exc).__name__}") from None


# -- the command ----------------------------------------------------------------------


def check(sources: list[tuple[str, bytes | None, str]], keys: jsf.KeySet) -> list[Checked]:
    out = []
    for name, doc, error in sources:
        if doc is None:
            out.append(Checked(name, jsf.Verdict(jsf.Status.INVALID, None, error)))
        else:
            out.append(Checked(name, jsf.verify_bytes(doc, keys)))
    return out


def exit_code(results: list[Checked]) -> int:
    if not results:
        return EXIT[jsf.Status.UNSIGNED]
    worst = max((r.verdict.status for r in results), key=_SEVERITY.index)
    return EXIT[worst]


def run(args: argparse.Namespace) -> int:
    keys: jsf.KeySet | None = None
    if args.key:
        merged: dict[str, Any] = {}
        for path in args.key:
            merged.update(keys_of_text(read_input(path), path).keys)
        keys = jsf.KeySet(merged)
    if args.sources and (args.namespace or args.all_namespaces):
        raise UsageError("-n/-A select cluster ConfigMaps: give them without FILE arguments")
    if sum(1 for s in args.sources if s == "-") > 1:
        raise UsageError("stdin (-) can be read only once")
    found: list[tuple[str, bytes | None, str]] = []
    for source in args.sources:
        found += list(documents_in(read_input(source), source))
    scope = ", ".join(args.sources)
    want_docs = not args.sources
    if want_docs or keys is None:
        cms, cluster_keys, scope_c = asyncio.run(
            _from_cluster(args, want_docs=want_docs, want_keys=keys is None)
        )
        keys = keys if keys is not None else cluster_keys
        if want_docs:
            scope = scope_c
            for cm in cms:
                found += list(_configmap(cm))
    assert keys is not None
    results = check(found, keys)
    if args.output == "json":
        records = [
            {
                "source": r.source,
                "status": r.verdict.status.value,
                "keyId": r.verdict.kid,
                **({"detail": r.verdict.detail} if r.verdict.detail else {}),
            }
            for r in results
        ]
        json.dump({"documents": records}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for r in results:
            parts = [f"{r.verdict.status.value:<11}", r.source]
            if r.verdict.kid:
                parts.append(f"key={r.verdict.kid}")
            if r.verdict.detail:
                parts.append(f"({r.verdict.detail})")
            print("  ".join(parts))
    if not results:
        print(f"aibom-rollup verify: no AIBOM documents found in {scope}", file=sys.stderr)
    else:
        counts = {s: sum(1 for r in results if r.verdict.status is s) for s in jsf.Status}
        summary = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
        print(f"aibom-rollup verify: {len(results)} document(s): {summary}", file=sys.stderr)
    return exit_code(results)
