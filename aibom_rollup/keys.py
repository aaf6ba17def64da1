"""Document-signing keys: create one, and edit the JWK set that publishes the public keys.

  keys new    create a private key (Ed25519 by default, or ES256 = ECDSA P-256)
              and write it to --key-file (mode 0600) and/or print a Secret
              manifest (--secret NAME; data `tls.key` and `kid`, the layout
              the annotator mounts). Without --secret, prints the public JWK.
              The key id is --kid, or the key's RFC 7638 thumbprint.

  keys jwks   print the JWK set ConfigMap (data `jwks.json`): start from
              --from FILE|- (the current ConfigMap as JSON, e.g. `kubectl get
              cm -n aibom-system aibom-signing-keys -o json`), --add keys
              (a PEM key, a Secret manifest from `keys new`, a JWK or a JWK
              set), --retire KID. Output is deterministic (keys sorted by kid).

  keys sign   sign CycloneDX documents in place (e.g. `scan -o DIR`'s output)
              with --key-file (kid: --kid, else the key's thumbprint).

The annotator publishes its own key in that ConfigMap when it starts signing
(it keeps the keys already there), so `keys jwks` is for installs that
publish the keys themselves and for retiring an old key after a rotation:

  kubectl get cm -n aibom-system aibom-signing-keys -o json \\
    | aibom-rollup keys jwks --from - --retire OLD-KID | kubectl replace -f -
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from aibom_core import jsf
from aibom_edge.files import write_atomic
from aibom_edge.options import UsageError, read_input
from aibom_rollup.verify import keys_of_text


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    new = sub.add_parser("new", help="create a signing key (file and/or Secret manifest)")
    new.add_argument(
        "--algorithm",
        choices=jsf.ALGORITHMS,
        default=jsf.ED25519,
        help="(default: %(default)s; ES256 signs with RFC 6979 deterministic nonces)",
    )
    new.add_argument("--kid", help="key id (default: the key's RFC 7638 thumbprint)")
    new.add_argument("--key-file", metavar="FILE", help="write the private key here (PEM, 0600)")
    new.add_argument("--secret", metavar="NAME", help="print a Secret manifest with this name")
    new.add_argument("-n", "--namespace", default=jsf.KEYS_NAMESPACE, help="(default: %(default)s)")
    sign = sub.add_parser("sign", help="sign CycloneDX JSON documents in place")
    sign.add_argument("--key-file", required=True, metavar="FILE", help="PEM private key")
    sign.add_argument("--kid", help="key id (default: the key's RFC 7638 thumbprint)")
    sign.add_argument("documents", nargs="+", metavar="DOC", help="CycloneDX JSON files")
    jwks = sub.add_parser("jwks", help="print the JWK set ConfigMap (add, retire keys)")
    jwks.add_argument("--from", dest="source", metavar="FILE|-", help="the current ConfigMap")
    jwks.add_argument("--add", action="append", default=[], metavar="FILE", help="(repeatable)")
    jwks.add_argument("--retire", action="append", default=[], metavar="KID", help="(repeatable)")
    jwks.add_argument(
        "--name", help=f"(default: the --from ConfigMap's, else {jsf.KEYS_CONFIGMAP})"
    )
    jwks.add_argument(
        "-n", "--namespace", help=f"(default: the --from ConfigMap's, else {jsf.KEYS_NAMESPACE})"
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def secret_manifest(key: jsf.SigningKey, *, name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": jsf.KEYS_CONFIGMAP_LABELS},
        "type": "Opaque",
        "data": {
            jsf.SECRET_KEY: _b64(jsf.private_pem(key.private)),
            jsf.SECRET_KID: _b64(key.kid.encode()),
        },
    }


def keys_configmap(
    keys: jsf.KeySet, *, name: str, namespace: str, resource_version: str | None = None
) -> dict[str, Any]:
    """The JWK set ConfigMap; with the resourceVersion read, `kubectl replace` fails
    (409) instead of dropping a key the annotator published meanwhile."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": jsf.KEYS_CONFIGMAP_LABELS,
    }
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {jsf.KEYS_DATA_KEY: keys.to_json()},
    }


def _write_private(path: Path, pem: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f"{path}: exists; refusing to overwrite a key") from None
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)


def _new(args: argparse.Namespace) -> int:
    if not args.key_file and not args.secret:
        raise UsageError("keys new: give --key-file FILE and/or --secret NAME")
    if args.kid is not None and not args.kid.strip():
        raise UsageError("--kid must not be empty")
    key = jsf.SigningKey.of(jsf.generate(args.algorithm), kid=args.kid)
    if args.key_file:
        _write_private(Path(args.key_file), jsf.private_pem(key.private))
    if args.secret:
        json.dump(secret_manifest(key, name=args.secret, namespace=args.namespace), sys.stdout)
    else:
        json.dump(key.jwk, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    print(f"aibom-rollup keys: created {key.algorithm} key {key.kid}", file=sys.stderr)
    return 0


def _keys_of_secret(raw: bytes, source: str) -> jsf.KeySet | None:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("kind") != "Secret":
        return None
    values = data.get("data") or {}
    try:
        pem = base64.b64decode(values.get(jsf.SECRET_KEY, ""), validate=True)
        kid = base64.b64decode(values.get(jsf.SECRET_KID, ""), validate=True).decode() or None
        key = jsf.SigningKey.of(jsf.load_private_pem(pem), kid=kid)
    except (ValueError, jsf.BadKey) as exc:
        raise UsageError(f"{source}: {str(exc).splitlines()[0]}") from None
    return jsf.KeySet.of([key.jwk])


def _jwks(args: argparse.Namespace) -> int:
    if [args.source, *args.add].count("-") > 1:
        raise UsageError("stdin (-) can be read only once")
    keys = jsf.KeySet({})
    meta: dict[str, Any] = {}
    if args.source:
        raw = read_input(args.source)
        keys = keys_of_text(raw, args.source)
        with contextlib.suppress(ValueError):
            source = json.loads(raw)
            if isinstance(source, dict) and isinstance(source.get("metadata"), dict):
                meta = source["metadata"]
    for path in args.add:
        raw = read_input(path)
        added = _keys_of_secret(raw, path) or keys_of_text(raw, path)
        for jwk in added.keys.values():
            keys = keys.with_key(jwk)
    for kid in args.retire:
        if kid not in keys.keys:
            known = ", ".join(sorted(keys.keys)) or "none"
            raise UsageError(f"--retire {kid}: no such key (known: {known})")
        keys = keys.without(kid)
    cm = keys_configmap(
        keys,
        name=args.name or str(meta.get("name") or jsf.KEYS_CONFIGMAP),
        namespace=args.namespace or str(meta.get("namespace") or jsf.KEYS_NAMESPACE),
        resource_version=str(meta.get("resourceVersion") or "") or None,
    )
    json.dump(cm, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _sign(args: argparse.Namespace) -> int:
    try:
        key = jsf.SigningKey.of(jsf.load_private_pem(read_input(args.key_file)), kid=args.kid)
    except jsf.BadKey as exc:
        raise UsageError(f"{args.key_file}: {exc}") from None
    signed = []
    for path in args.documents:
        try:
            doc = jsf.parse_document(read_input(path))
        except ValueError as exc:
            raise UsageError(f"{path}: not a JSON document: {exc}") from None
        if doc.get("bomFormat") != "CycloneDX":
            raise UsageError(f"{path}: not a CycloneDX document")
        signed.append((Path(path), jsf.dumps(jsf.sign(doc, key))))
    for path, data in signed:  # all read and signed first: no half-signed set
        write_atomic(path, data)
    print(
        f"aibom-rollup keys: signed {len(signed)} document(s) with key {key.kid}", file=sys.stderr
    )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.keys_command == "new":
        return _new(args)
    if args.keys_command == "sign":
        return _sign(args)
    return _jwks(args)
