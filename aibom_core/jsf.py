"""Signed AIBOMs: JSON Signature Format (JSF 0.82) on the CycloneDX BOM root. Pure.

CycloneDX 1.6 puts an enveloped JSF signature in the BOM's `signature`
member. Ours is a JSF "signaturecore":

    "signature": {
      "algorithm": "Ed25519" | "ES256",
      "keyId":     "<kid>",                      the key's id in the published JWK set
      "publicKey": {"kty": "OKP", "crv": "Ed25519", "x": "..."}   (or EC P-256 x, y)
      "value":     "<base64url, no padding>"
    }

Signing (JSF section "Signature Creation"): put the signature object without
`value` on the document, canonicalize the WHOLE document with JCS (RFC 8785,
`aibom_core.jcs`), sign those bytes, add `value`. Verifying undoes it: remove
`value`, canonicalize, check. So every byte of the document is covered, the
signature's algorithm, keyId and publicKey included; only `value` is not.

Algorithms: `Ed25519` (JSF names EdDSA by curve, not RFC 8037's `EdDSA`) is
the default: deterministic by construction (RFC 8032), 64-byte signatures,
fast. `ES256` (ECDSA P-256 with SHA-256, the JWA signature format: r||s,
32 bytes each, not DER) uses RFC 6979 deterministic nonces
(`cryptography`'s `ECDSA(..., deterministic_signing=True)`), so the same
document and key give the same bytes with either algorithm.

Verification never trusts the embedded `publicKey` on its own: the key comes
from the caller's key set (the published JWK set, or a key file), looked up by
`keyId` (or, without one, by the embedded key's RFC 7638 thumbprint); an
embedded key that differs from the published key of that id is `invalid`.
A document whose JSON repeats an object member name is `invalid` too (two
parsers could read different documents from it). JSF `excludes`, multiple
signatures and chains are refused (`invalid`): nothing we write uses them,
and `excludes` would leave fields unsigned.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from aibom_core.jcs import CanonicalizationError, canonicalize

SIGNATURE = "signature"
ED25519 = "Ed25519"
ES256 = "ES256"
ALGORITHMS = (ED25519, ES256)
# Where the public keys are published: a ConfigMap holding a JWK set.
KEYS_CONFIGMAP = "aibom-signing-keys"
KEYS_NAMESPACE = "aibom-system"  # the shipped manifests' namespace
DEFAULT_KEYS_CONFIGMAP = f"{KEYS_NAMESPACE}/{KEYS_CONFIGMAP}"
# Its labels, whoever writes it (the annotator publishing, `aibom-rollup keys`).
KEYS_CONFIGMAP_LABELS = {
    "app.kubernetes.io/name": "aibom-rollup",
    "app.kubernetes.io/component": "signing-keys",
}
KEYS_DATA_KEY = "jwks.json"
# The Secret `aibom-rollup keys new --secret` writes (cert-manager's key name).
SECRET_KEY = "tls.key"
SECRET_KID = "kid"
_P256_BYTES = 32

PrivateKey = Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = Ed25519PublicKey | ec.EllipticCurvePublicKey


class BadKey(ValueError):
    """A key that cannot be used (wrong type or curve, unreadable PEM or JWK)."""


class Status(StrEnum):
    VALID = "valid"
    INVALID = "invalid"  # the document or its signature was changed (or is malformed)
    UNKNOWN_KEY = "unknown-key"  # signed, but with no key we were given
    UNSIGNED = "unsigned"


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Status
    kid: str | None = None
    detail: str = ""


# -- encoding helpers ---------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    if not isinstance(text, str) or "=" in text:
        raise ValueError("not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not base64url: {exc}") from None


def dumps(doc: Mapping[str, Any]) -> bytes:
    """Our document bytes (aibom_core.bom.render's format): sorted keys, compact, UTF-8."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# -- keys -----------------------------------------------------------------------------


def algorithm_of(key: PrivateKey | PublicKey) -> str:
    if isinstance(key, Ed25519PrivateKey | Ed25519PublicKey):
        return ED25519
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        if isinstance(key.curve, ec.SECP256R1):
            return ES256
        raise BadKey(f"ECDSA curve {key.curve.name} is not supported (use P-256: ES256)")
    raise BadKey(f"{type(key).__name__} keys are not supported (use Ed25519 or ECDSA P-256)")


def public_jwk(key: PrivateKey | PublicKey) -> dict[str, str]:
    """The JWK of a public key: only the members JSF's `publicKey` allows."""
    pub = (
        key.public_key() if isinstance(key, Ed25519PrivateKey | ec.EllipticCurvePrivateKey) else key
    )
    if algorithm_of(pub) == ED25519:
        assert isinstance(pub, Ed25519PublicKey)
        raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}
    assert isinstance(pub, ec.EllipticCurvePublicKey)
    nums = pub.public_numbers()
    return {
        "kty": "EC",
        "crv": "P-256",
        "x": b64url(nums.x.to_bytes(_P256_BYTES, "big")),
        "y": b64url(nums.y.to_bytes(_P256_BYTES, "big")),
    }


def thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638 JWK thumbprint (SHA-256, base64url): the default key id."""
    required = ("crv", "kty", "x", "y") if jwk.get("kty") == "EC" else ("crv", "kty", "x")
    try:
        members = {name: str(jwk[name]) for name in required}
    except KeyError as exc:
        raise BadKey(f"JWK lacks {exc.args[0]!r}") from None
    return b64url(hashlib.sha256(canonicalize(members)).digest())


def public_key_of_jwk(jwk: Mapping[str, Any]) -> PublicKey:
    kty, crv = jwk.get("kty"), jwk.get("crv")
    try:
        if kty == "OKP" and crv == "Ed25519":
            return Ed25519PublicKey.from_public_bytes(b64url_decode(str(jwk.get("x", ""))))
        if kty == "EC" and crv == "P-256":
            x = b64url_decode(str(jwk.get("x", "")))
            y = b64url_decode(str(jwk.get("y", "")))
            if len(x) != _P256_BYTES or len(y) != _P256_BYTES:
                raise ValueError("P-256 coordinates must be 32 bytes")
            return ec.EllipticCurvePublicNumbers(
                int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
            ).public_key()
    except ValueError as exc:
        raise BadKey(f"bad {kty}/{crv} JWK: {exc}") from None
    raise BadKey(f"unsupported JWK (kty {kty!r}, crv {crv!r}): use OKP/Ed25519 or EC/P-256")


@dataclass(frozen=True)
class SigningKey:
    """A private key and the id it is published under."""

    private: PrivateKey
    kid: str

    @property
    def algorithm(self) -> str:
        return algorithm_of(self.private)

    @property
    def jwk(self) -> dict[str, str]:
        """The public JWK as published in the JWK set (with kid, alg, use)."""
        return {**public_jwk(self.private), "kid": self.kid, "alg": self.algorithm, "use": "sig"}

    @classmethod
    def of(cls, private: PrivateKey, kid: str | None = None) -> SigningKey:
        algorithm_of(private)  # refuse unsupported keys early
        return cls(private, kid or thumbprint(public_jwk(private)))


def generate(algorithm: str = ED25519) -> PrivateKey:
    if algorithm == ED25519:
        return Ed25519PrivateKey.generate()
    if algorithm == ES256:
        return ec.generate_private_key(ec.SECP256R1())
    raise BadKey(f"unknown algorithm {algorithm!r} (one of {', '.join(ALGORITHMS)})")


def private_pem(key: PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted (it lives in a Secret or a 0600 file)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_private_pem(pem: bytes) -> PrivateKey:
    """A PKCS#8 or SEC1 (`EC PRIVATE KEY`, cert-manager's ECDSA encoding) PEM key."""
    key = _load_pem(
        lambda: serialization.load_pem_private_key(pem, password=None),
        "an unencrypted PEM private key",
    )
    if not isinstance(key, Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
        raise _unsupported(key)
    algorithm_of(key)
    return key


def load_public_pem(pem: bytes) -> PublicKey:
    key = _load_pem(lambda: serialization.load_pem_public_key(pem), "a PEM public key")
    if not isinstance(key, Ed25519PublicKey | ec.EllipticCurvePublicKey):
        raise _unsupported(key)
    algorithm_of(key)
    return key


_T = TypeVar("_T")


def _load_pem(load: Callable[[], _T], what: str) -> _T:
    try:
        return load()
    except (ValueError, TypeError) as exc:
        raise BadKey(f"not {what} ({exc})") from None


def _unsupported(key: object) -> BadKey:
    return BadKey(f"{type(key).__name__} keys are not supported (use Ed25519 or P-256)")


# -- key sets -------------------------------------------------------------------------


@dataclass(frozen=True)
class KeySet:
    """Public keys by kid: what a verifier trusts."""

    keys: Mapping[str, Mapping[str, Any]]  # kid -> JWK

    @classmethod
    def of(cls, jwks: Iterable[Mapping[str, Any]]) -> KeySet:
        out: dict[str, Mapping[str, Any]] = {}
        for jwk in jwks:
            public_key_of_jwk(jwk)  # refuse a bad key up front
            kid = str(jwk.get("kid") or thumbprint(jwk))
            out[kid] = dict(jwk, kid=kid)
        return cls(out)

    @classmethod
    def parse(cls, text: str | bytes) -> KeySet:
        """A JWK set (`{"keys": [...]}`) or a single JWK, as JSON."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise BadKey(f"not JSON: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("keys"), list):
            return cls.of(k for k in data["keys"] if isinstance(k, dict))
        if isinstance(data, dict) and "kty" in data:
            return cls.of([data])
        raise BadKey('neither a JWK set ({"keys": [...]}) nor a JWK')

    def to_json(self) -> str:
        """The JWK set, keys sorted by kid; deterministic."""
        keys = [dict(self.keys[kid], kid=kid) for kid in sorted(self.keys)]
        return json.dumps({"keys": keys}, sort_keys=True, indent=2) + "\n"

    def with_key(self, jwk: Mapping[str, Any]) -> KeySet:
        return KeySet({**self.keys, str(jwk["kid"]): dict(jwk)})

    def without(self, kid: str) -> KeySet:
        return KeySet({k: v for k, v in self.keys.items() if k != kid})


# -- signing --------------------------------------------------------------------------


def _sign_raw(key: PrivateKey, data: bytes) -> bytes:
    if isinstance(key, Ed25519PrivateKey):
        return key.sign(data)
    der = key.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
    r, s = decode_dss_signature(der)
    return r.to_bytes(_P256_BYTES, "big") + s.to_bytes(_P256_BYTES, "big")


def sign(doc: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """A copy of `doc` carrying a JSF signature by `key` (an old signature is replaced)."""
    out = {k: v for k, v in doc.items() if k != SIGNATURE}
    out[SIGNATURE] = {
        "algorithm": key.algorithm,
        "keyId": key.kid,
        "publicKey": public_jwk(key.private),
    }
    value = _sign_raw(key.private, canonicalize(out))
    out[SIGNATURE] = {**out[SIGNATURE], "value": b64url(value)}
    return out


def sign_bytes(document: bytes, key: SigningKey) -> bytes:
    """Sign our document bytes; the result keeps our format (sorted, compact)."""
    return dumps(sign(json.loads(document), key))


# -- verifying ------------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise ValueError(f"member {name!r} appears twice in one object")
        out[name] = value
    return out


def parse_document(document: bytes | str) -> dict[str, Any]:
    """The JSON object of a document; ValueError on bad JSON or repeated member names."""
    data = json.loads(document, object_pairs_hook=_no_duplicates)
    if not isinstance(data, dict):
        raise ValueError("the document is not a JSON object")
    return data


def _verify_raw(key: PublicKey, algorithm: str, value: bytes, data: bytes) -> bool:
    try:
        if algorithm == ED25519 and isinstance(key, Ed25519PublicKey):
            key.verify(value, data)
            return True
        if algorithm == ES256 and isinstance(key, ec.EllipticCurvePublicKey):
            if len(value) != 2 * _P256_BYTES:
                return False
            r = int.from_bytes(value[:_P256_BYTES], "big")
            s = int.from_bytes(value[_P256_BYTES:], "big")
            key.verify(encode_dss_signature(r, s), data, ec.ECDSA(hashes.SHA256()))
            return True
    except InvalidSignature:
        return False
    return False


def verify(doc: Mapping[str, Any], keys: KeySet) -> Verdict:
    """Check the JSF signature of a parsed document against trusted keys."""
    sig = doc.get(SIGNATURE)
    if sig is None:
        return Verdict(Status.UNSIGNED)
    if not isinstance(sig, dict):
        return Verdict(Status.INVALID, None, "signature is not an object")
    kid = sig.get("keyId")
    kid = kid if isinstance(kid, str) else None
    for unsupported in ("signers", "chain", "excludes", "certificatePath"):
        if unsupported in sig:
            return Verdict(Status.INVALID, kid, f"JSF {unsupported!r} is not accepted")
    algorithm, value = sig.get("algorithm"), sig.get("value")
    if algorithm not in ALGORITHMS:
        return Verdict(Status.INVALID, kid, f"algorithm {algorithm!r} is not accepted")
    if not isinstance(value, str):
        return Verdict(Status.INVALID, kid, "signature has no value")
    embedded = sig.get("publicKey")
    if embedded is not None and not isinstance(embedded, dict):
        return Verdict(Status.INVALID, kid, "publicKey is not an object")
    if kid is None and embedded is None:
        return Verdict(Status.INVALID, None, "signature names no key (no keyId, no publicKey)")
    if kid is None:
        assert isinstance(embedded, dict)
        try:
            tp = thumbprint(embedded)
        except BadKey as exc:
            return Verdict(Status.INVALID, None, str(exc))
        kid = next((k for k, j in keys.keys.items() if _same_key(j, embedded)), None)
        if kid is None:
            return Verdict(Status.UNKNOWN_KEY, None, f"no trusted key has thumbprint {tp}")
    jwk = keys.keys.get(kid)
    if jwk is None and isinstance(embedded, dict):
        # A key trusted without a name of its own (a PEM file: its kid is its
        # thumbprint) vouches for its signatures whatever keyId they carry.
        with contextlib.suppress(BadKey):
            jwk = keys.keys.get(thumbprint(embedded))
    if jwk is None:
        return Verdict(Status.UNKNOWN_KEY, kid, f"key {kid!r} is not among the trusted keys")
    if embedded is not None and not _same_key(jwk, embedded):
        return Verdict(Status.INVALID, kid, f"the embedded publicKey is not key {kid!r}")
    try:
        public = public_key_of_jwk(jwk)
        if algorithm_of(public) != algorithm:
            return Verdict(Status.INVALID, kid, f"key {kid!r} is not an {algorithm} key")
        raw = b64url_decode(value)
        signed = {k: v for k, v in doc.items() if k != SIGNATURE}
        signed[SIGNATURE] = {k: v for k, v in sig.items() if k != "value"}
        data = canonicalize(signed)
    except (ValueError, CanonicalizationError) as exc:
        return Verdict(Status.INVALID, kid, str(exc))
    if _verify_raw(public, algorithm, raw, data):
        return Verdict(Status.VALID, kid)
    return Verdict(Status.INVALID, kid, "the signature does not match the document (edited)")


def verify_bytes(document: bytes | str, keys: KeySet) -> Verdict:
    """`verify` on raw bytes; malformed JSON or repeated member names are `invalid`."""
    try:
        doc = parse_document(document)
    except ValueError as exc:
        return Verdict(Status.INVALID, None, f"not a JSON document: {exc}")
    return verify(doc, keys)


def _same_key(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    try:
        return thumbprint(a) == thumbprint(b)
    except BadKey:
        return False
