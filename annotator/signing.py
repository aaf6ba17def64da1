"""The annotator's document signing: the key it signs with, and publishing its public key.

- The key: a PEM file (`--signing-key`), usually the mounted Secret
  `aibom-rollup keys new --secret` made (`tls.key`, and `kid` beside it) or
  a cert-manager Certificate's Secret (`tls.key` only: the key id is then
  the key's RFC 7638 thumbprint, so a renewed key gets a new id by itself).
- Publishing: before it writes its first signed document, the leader makes
  sure its public key is in the JWK set ConfigMap (`--keys-configmap`,
  data `jwks.json`), adding it beside the keys already there (the previous
  key stays published during a rotation; `aibom-rollup keys jwks --retire`
  removes it). Read by list (the annotator's RBAC has no `get`), written by
  create or by a merge patch that carries the resourceVersion it read (a
  concurrent change makes it 409 and it reads again). No new RBAC: the
  annotator already creates and patches ConfigMaps. A document is never
  written signed by a key that is not published.
- Rotation without a restart: the key file is read again every
  `KEY_RECHECK` seconds (a mounted Secret is updated in place by the
  kubelet); a new key is published, then every document is re-signed
  (the ConfigMaps' `<prefix>signed-by` no longer matches).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aibom_core import jsf
from aibom_edge.kube import Kube
from annotator.configmap import FIELD_MANAGER
from annotator.notices import Notices
from annotator.writer import NotLeader, WriteError

log = logging.getLogger("annotator")

MERGE = "application/merge-patch+json"
KEY_RECHECK = 5.0


@dataclass(frozen=True)
class Signing:
    key: jsf.SigningKey
    keys_configmap: tuple[str, str] | None  # (namespace, name); None: the install publishes
    path: str = ""  # where the key was read (re-read: a rotated Secret is picked up)
    kid: str | None = None  # --signing-key-id, if given

    def seal(self, document: bytes) -> bytes:
        return jsf.sign_bytes(document, self.key)

    def reload(self) -> Signing | None:
        """The key file's key if it changed since (a Secret update), else None.

        ValueError when the file cannot be read or holds no usable key: the
        caller keeps signing with the key it has.
        """
        if not self.path:
            return None
        key = load_key(self.path, self.kid)
        if key.jwk == self.key.jwk:
            return None
        return replace(self, key=key)


def load_key(path: str, kid: str | None = None) -> jsf.SigningKey:
    """The signing key of a PEM file; kid: given, else a `kid` file beside it, else thumbprint."""
    p = Path(path)
    try:
        pem = p.read_bytes()
    except OSError as exc:
        raise ValueError(f"--signing-key {path}: {exc.strerror or exc}") from None
    try:
        private = jsf.load_private_pem(pem)
    except jsf.BadKey as exc:
        raise ValueError(f"--signing-key {path}: {exc}") from None
    if not kid:
        beside = p.parent / jsf.SECRET_KID
        if beside.is_file():
            kid = beside.read_text(encoding="utf-8").strip() or None
    return jsf.SigningKey.of(private, kid=kid)


def _message(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message") or body.get("reason") or body)[:300]
    return str(body)[:300]


async def publish(kube: Kube, key: jsf.SigningKey, namespace: str, name: str) -> str:
    """Make sure `key` is in the JWK set ConfigMap: `present`, `added` or `created`."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    for _ in range(5):
        resp = await kube.request(
            "GET", path, params={"fieldSelector": f"metadata.name={name}", "limit": "1"}
        )
        if not resp.ok or not isinstance(resp.body, dict):
            raise WriteError(f"list {namespace}/{name}", resp.status, _message(resp.body))
        items = [i for i in resp.body.get("items") or [] if isinstance(i, dict)]
        if not items:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": jsf.KEYS_CONFIGMAP_LABELS,
                },
                "data": {jsf.KEYS_DATA_KEY: jsf.KeySet.of([key.jwk]).to_json()},
            }
            resp = await kube.request(
                "POST", path, params={"fieldManager": FIELD_MANAGER}, json=body
            )
            if resp.ok:
                return "created"
            if resp.status == 409:  # created meanwhile: read it again
                continue
            raise WriteError(f"create {namespace}/{name}", resp.status, _message(resp.body))
        cm = items[0]
        text = (cm.get("data") or {}).get(jsf.KEYS_DATA_KEY)
        keys = jsf.KeySet({})
        if isinstance(text, str) and text.strip():
            try:
                keys = jsf.KeySet.parse(text)
            except jsf.BadKey as exc:
                raise WriteError(
                    f"read {namespace}/{name}", 422, f"{jsf.KEYS_DATA_KEY} is not a JWK set: {exc}"
                ) from None
        have = keys.keys.get(key.kid)
        if have is not None:
            if jsf.thumbprint(have) != jsf.thumbprint(key.jwk):
                raise WriteError(
                    f"publish {namespace}/{name}",
                    409,
                    f"key id {key.kid!r} is already published for another key",
                )
            return "present"
        meta = cm.get("metadata") or {}
        patch = {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "data": {jsf.KEYS_DATA_KEY: keys.with_key(key.jwk).to_json()},
        }
        resp = await kube.request(
            "PATCH",
            f"{path}/{name}",
            params={"fieldManager": FIELD_MANAGER},
            json=patch,
            content_type=MERGE,
        )
        if resp.ok:
            return "added"
        if resp.status != 409:
            raise WriteError(f"patch {namespace}/{name}", resp.status, _message(resp.body))
        await asyncio.sleep(0.1)
    raise WriteError(f"publish {namespace}/{name}", 409, "the ConfigMap kept changing")


class Signer:
    """The key the documents are signed with now (None: unsigned): published before
    the first document signed with it, replaced when its key file changes."""

    def __init__(
        self,
        kube: Kube,
        signing: Signing | None,
        *,
        is_leader: Callable[[], bool],
        notices: Notices,
        on_rotated: Callable[[], None],
    ) -> None:
        self.kube = kube
        self.signing = signing  # replaced when the key file changes
        self._is_leader = is_leader
        self._notices = notices
        self._on_rotated = on_rotated
        self._key_published = asyncio.Lock()
        self._published_kid: str | None = None

    def signed_by(self) -> str:
        return self.signing.key.kid if self.signing is not None else ""

    async def watch(self) -> None:
        """Pick up a rotated key file; every document is then re-signed with it."""
        while True:
            await asyncio.sleep(KEY_RECHECK)
            current = self.signing
            if current is None:
                return
            try:
                rotated = await asyncio.to_thread(current.reload)
            except ValueError as exc:
                self._notices.once(
                    ("signing-key-unreadable",),
                    "cannot read the signing key file; still signing with the previous key",
                    error=str(exc),
                )
                continue
            # Readable again: a later failure is news, logged again (once).
            self._notices.clear(("signing-key-unreadable",))
            if rotated is None:
                continue
            log.info(
                "signing key changed; re-signing every document",
                extra={"old_kid": current.key.kid, "kid": rotated.key.kid},
            )
            self.signing = rotated
            self._on_rotated()

    async def publish_key(self, signing: Signing) -> None:
        """Publish our public key once, before the first document signed with it."""
        if signing.keys_configmap is None or self._published_kid == signing.key.kid:
            return
        async with self._key_published:
            if self._published_kid == signing.key.kid:
                return
            if not self._is_leader():
                raise NotLeader()
            namespace, name = signing.keys_configmap
            result = await publish(self.kube, signing.key, namespace, name)
            self._published_kid = signing.key.kid
            log.info(
                "signing key published",
                extra={
                    "kid": signing.key.kid,
                    "configmap": f"{namespace}/{name}",
                    "result": result,
                },
            )


def configure_parser(p: argparse.ArgumentParser) -> None:
    """The annotator's signing flags, in their own group."""
    g = p.add_argument_group(
        "document signing (JSF, CycloneDX 1.6 `signature`; docs/signing.md)",
        "With --signing-key, every document carries a JSF signature and its ConfigMap the\n"
        "annotation <prefix>signed-by=<kid>; documents signed by another key are re-signed.\n"
        "The key file is re-read every 5 s: a rotated Secret is picked up without a restart.",
    )
    g.add_argument(
        "--signing-key",
        metavar="FILE",
        help="PEM private key, Ed25519 or ECDSA P-256 (`aibom-rollup keys new`, or a "
        "cert-manager Secret's tls.key; the shipped installs mount one); without it, or "
        "with an empty value, documents are not signed",
    )
    g.add_argument(
        "--signing-key-id",
        metavar="KID",
        help="its key id (default: the `kid` file beside the key, else its RFC 7638 thumbprint)",
    )
    g.add_argument(
        "--keys-configmap",
        metavar="NAMESPACE/NAME",
        default=None,
        help="publish the public key in this JWK set ConfigMap before signing with it "
        f"(default: $POD_NAMESPACE/{jsf.KEYS_CONFIGMAP}, else {jsf.DEFAULT_KEYS_CONFIGMAP}; "
        "'' if the install publishes the keys)",
    )


def signing_of(args: argparse.Namespace) -> Signing | None:
    """Signing settings from the flags; ValueError with a one-line reason."""
    path = getattr(args, "signing_key", None)
    if not path:
        if getattr(args, "signing_key_id", None):
            raise ValueError("--signing-key-id needs --signing-key")
        return None
    kid = getattr(args, "signing_key_id", None)
    key = load_key(path, kid)
    where = getattr(args, "keys_configmap", None)
    if where is None:
        ns = os.environ.get("POD_NAMESPACE") or jsf.KEYS_NAMESPACE
        where = f"{ns}/{jsf.KEYS_CONFIGMAP}"
    if not where:
        return Signing(key, None, path, kid)
    ns, _, name = where.partition("/")
    if not ns or not name or "/" in name:
        raise ValueError(f"--keys-configmap: expected NAMESPACE/NAME, got {where!r}")
    return Signing(key, (ns, name), path, kid)
