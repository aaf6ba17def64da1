"""JCS (RFC 8785) and JSF signatures on AIBOM documents (aibom_core.jcs, aibom_core.jsf)."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aibom_core import jsf
from aibom_core.bom import build_document, validate
from aibom_core.dump import load
from aibom_core.graph import build_graph
from aibom_core.jcs import (
    CanonicalizationError,
    canonicalize,
    canonicalize_reference,
    number,
)
from aibom_core.kinds import default_registry
from aibom_core.rollup import inventory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# RFC 8032 section 7.1, TEST 1: a fixed key makes the expected bytes checkable.
RFC8032_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")


# -- JCS ------------------------------------------------------------------------------

# RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
RFC8785_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "text"), RFC8785_NUMBERS)
def test_numbers_as_rfc8785_appendix_b(bits: str, text: str) -> None:
    (value,) = struct.unpack(">d", bytes.fromhex(bits))
    assert number(value) == text


def test_our_confidence_floats_are_written_as_javascript_does() -> None:
    # json.dumps writes 1.0 and 0.0; a JCS verifier in any language writes 1 and 0.
    assert canonicalize({"a": [1.0, 0.8, 0.5, 0.0, 1, 10**21]}) == b'{"a":[1,0.8,0.5,0,1,1e+21]}'


def test_rfc8785_section_3_2_2_example() -> None:
    text = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonicalize(json.loads(text)) == expected.encode()


def test_members_sort_by_utf16_code_units() -> None:
    # RFC 8785 section 3.2.3: U+1F600 (a surrogate pair, D83D...) sorts before U+FB33.
    obj = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    order = [v for v in json.loads(canonicalize(obj)).values()]
    assert order == [
        "Carriage Return",
        "One",
        "Control",
        "Latin Small Letter O With Diaeresis",
        "Euro Sign",
        "Emoji: Grinning Face",
        "Hebrew Letter Dalet With Dagesh",
    ]
    # Python's own sort (by code point) would put the emoji last: this is not sorted().
    assert sorted(obj)[-1] == "\U0001f600"


def test_the_fast_path_writes_what_the_reference_path_writes(documents: list[bytes]) -> None:
    values: list[Any] = [json.loads(d) for d in documents]
    for bits, _ in RFC8785_NUMBERS:
        values.append({"n": struct.unpack(">d", bytes.fromhex(bits))[0]})
    values += [
        {"a": [1.0, -0.0, 0.0001, 1e-5, 1e15, 1e16, 2**53, 2**53 + 1, 0.1 + 0.2]},
        {"\u20ac": 1, "\U0001f600": 2, "\ufb33": 3, "z": {"\x7f": "\u2028\x00\x1f"}},
        [True, False, None, "é😀", {"b": 1, "a": 2, "B": 3}],
    ]
    for value in values:
        assert canonicalize(value) == canonicalize_reference(value), value


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"a": {1, 2}}, {1: "x"}, "\ud800"])
def test_values_jcs_cannot_represent_are_refused(bad: Any) -> None:
    with pytest.raises(CanonicalizationError):
        canonicalize(bad)


# -- documents --------------------------------------------------------------------------


def _documents() -> list[bytes]:
    objs: list[Any] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        objs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    dump = load([(json.dumps({"kind": "List", "items": objs}).encode(), "examples")])
    graph = build_graph(dump.objects, default_registry())
    return [
        build_document(e.view, graph.registry, tool_version="0.1.0").json_bytes
        for e in inventory(graph)
    ]


@pytest.fixture(scope="module")
def documents() -> list[bytes]:
    docs = _documents()
    assert len(docs) >= 5
    return docs


@pytest.fixture(params=jsf.ALGORITHMS)
def key(request: pytest.FixtureRequest) -> jsf.SigningKey:
    return jsf.SigningKey.of(jsf.generate(request.param), kid=f"test-{request.param}")


def test_signed_documents_pass_the_strict_validator_and_verify(
    documents: list[bytes], key: jsf.SigningKey
) -> None:
    keys = jsf.KeySet.of([key.jwk])
    for doc in documents:
        signed = jsf.sign_bytes(doc, key)
        validate(signed)  # cyclonedx-python-lib JsonStrictValidator(V1_6)
        verdict = jsf.verify_bytes(signed, keys)
        assert verdict == jsf.Verdict(jsf.Status.VALID, key.kid)
        sig = json.loads(signed)["signature"]
        assert sig["algorithm"] == key.algorithm and sig["keyId"] == key.kid
        assert "=" not in sig["value"] and "+" not in sig["value"] and "/" not in sig["value"]
        # Our format is kept: the unsigned document plus one member.
        unsigned = json.loads(signed)
        del unsigned["signature"]
        assert jsf.dumps(unsigned) == doc


def test_signing_is_deterministic_for_both_algorithms(
    documents: list[bytes], key: jsf.SigningKey
) -> None:
    doc = documents[0]
    assert jsf.sign_bytes(doc, key) == jsf.sign_bytes(doc, key)
    # Re-signing a signed document replaces the signature, it does not nest one.
    assert jsf.sign_bytes(jsf.sign_bytes(doc, key), key) == jsf.sign_bytes(doc, key)


def test_ed25519_signature_of_a_fixed_key_is_stable(documents: list[bytes]) -> None:
    # Pins the exact bytes: a change to canonicalization or the signature object
    # changes this value, and documents written before would stop verifying.
    key = jsf.SigningKey.of(Ed25519PrivateKey.from_private_bytes(RFC8032_SEED), kid="rfc8032-1")
    doc = b'{"bomFormat":"CycloneDX","specVersion":"1.6","version":1,"x":[1.0,0.8]}'
    sig = json.loads(jsf.sign_bytes(doc, key))["signature"]
    assert sig["publicKey"]["x"] == "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    assert sig["value"] == (
        "JTrqd0QYto1ySo6UBaHSLTmKY_oE04prI4NCsRWwvsd-xVn1sqo_iSvu33XT0GS3nUTLHBsBc6JPMoOheG2GBA"
    )


def _tamper(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    cur: Any = out
    for step in path[:-1]:
        cur = cur[step]
    cur[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["components", 0, "name"], "evil"),
        (["components", 0, "properties", 0, "value"], "verified"),
        (["metadata", "timestamp"], "2030-01-01T00:00:00Z"),
        (["version"], 2),
        (["serialNumber"], "urn:uuid:00000000-0000-0000-0000-000000000000"),
    ],
)
def test_any_edit_makes_the_document_invalid(
    documents: list[bytes], key: jsf.SigningKey, path: list[Any], value: Any
) -> None:
    signed = json.loads(jsf.sign_bytes(documents[0], key))
    edited = _tamper(signed, path, value)
    verdict = jsf.verify(edited, jsf.KeySet.of([key.jwk]))
    assert verdict.status is jsf.Status.INVALID, verdict


def test_removing_a_component_or_adding_a_member_is_invalid(
    documents: list[bytes], key: jsf.SigningKey
) -> None:
    keys = jsf.KeySet.of([key.jwk])
    signed = json.loads(jsf.sign_bytes(documents[0], key))
    fewer = copy.deepcopy(signed)
    fewer["components"].pop()
    assert jsf.verify(fewer, keys).status is jsf.Status.INVALID
    more = dict(signed, externalReferences=[{"type": "website", "url": "https://x"}])
    assert jsf.verify(more, keys).status is jsf.Status.INVALID


def test_reformatting_the_bytes_is_not_an_edit(documents: list[bytes], key: jsf.SigningKey) -> None:
    signed = jsf.sign_bytes(documents[0], key)
    pretty = json.dumps(json.loads(signed), indent=3, ensure_ascii=True).encode()
    assert jsf.verify_bytes(pretty, jsf.KeySet.of([key.jwk])).status is jsf.Status.VALID


def test_a_forger_with_their_own_key_is_caught(documents: list[bytes], key: jsf.SigningKey) -> None:
    trusted = jsf.KeySet.of([key.jwk])
    edited = json.loads(documents[0])
    edited["components"][0]["name"] = "evil"
    # Same kid as the trusted key, own key embedded and used: the embedded key
    # is not the published one.
    forger = jsf.SigningKey.of(jsf.generate(key.algorithm), kid=key.kid)
    forged = jsf.sign(edited, forger)
    assert jsf.verify(forged, trusted) == jsf.Verdict(
        jsf.Status.INVALID, key.kid, f"the embedded publicKey is not key {key.kid!r}"
    )
    # Without the embedded key, the signature does not match the trusted key.
    del forged["signature"]["publicKey"]
    forged2 = dict(forged)
    assert jsf.verify(forged2, trusted).status is jsf.Status.INVALID
    # Under its own kid: not a key we trust.
    other = jsf.sign(edited, jsf.SigningKey.of(jsf.generate(key.algorithm), kid="mallory"))
    assert jsf.verify(other, trusted) == jsf.Verdict(
        jsf.Status.UNKNOWN_KEY, "mallory", "key 'mallory' is not among the trusted keys"
    )


def test_unsigned_unknown_and_lookup_by_embedded_key(
    documents: list[bytes], key: jsf.SigningKey
) -> None:
    assert jsf.verify_bytes(documents[0], jsf.KeySet({})).status is jsf.Status.UNSIGNED
    signed = json.loads(jsf.sign_bytes(documents[0], key))
    assert jsf.verify(signed, jsf.KeySet({})).status is jsf.Status.UNKNOWN_KEY
    # Published under another kid: found by the embedded key's thumbprint only
    # when the signature names no kid (a named kid must match).
    renamed = jsf.KeySet.of([dict(key.jwk, kid="other-name")])
    assert jsf.verify(signed, renamed).status is jsf.Status.UNKNOWN_KEY
    # JSF allows a signature with only an embedded key (no keyId).
    sig = {"algorithm": key.algorithm, "publicKey": jsf.public_jwk(key.private)}
    body: dict[str, Any] = dict(json.loads(documents[0]), signature=sig)
    value = jsf._sign_raw(key.private, canonicalize(body))
    body["signature"] = dict(sig, value=jsf.b64url(value))
    assert jsf.verify(body, renamed) == jsf.Verdict(jsf.Status.VALID, "other-name")


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("excludes", ["components"]),
        ("signers", []),
        ("certificatePath", []),
        ("algorithm", "HS256"),
        ("algorithm", "none"),
        ("value", 5),
    ],
)
def test_unsupported_or_malformed_signatures_are_invalid(
    documents: list[bytes], key: jsf.SigningKey, member: str, value: Any
) -> None:
    signed = json.loads(jsf.sign_bytes(documents[0], key))
    signed["signature"][member] = value
    assert jsf.verify(signed, jsf.KeySet.of([key.jwk])).status is jsf.Status.INVALID


def test_repeated_member_names_are_invalid(documents: list[bytes], key: jsf.SigningKey) -> None:
    signed = jsf.sign_bytes(documents[0], key)
    # A second "version" member: Python keeps the last, other parsers the first.
    doubled = signed[:-1] + b',"version":1}'
    assert jsf.verify_bytes(doubled, jsf.KeySet.of([key.jwk])).status is jsf.Status.INVALID
    assert jsf.verify_bytes(b"[1]", jsf.KeySet({})).status is jsf.Status.INVALID
    assert jsf.verify_bytes(b"{", jsf.KeySet({})).status is jsf.Status.INVALID


def test_keys_round_trip_and_unsupported_keys_are_refused() -> None:
    for alg in jsf.ALGORITHMS:
        priv = jsf.generate(alg)
        again = jsf.load_private_pem(jsf.private_pem(priv))
        assert jsf.public_jwk(again) == jsf.public_jwk(priv)
        key = jsf.SigningKey.of(priv)
        assert key.kid == jsf.thumbprint(key.jwk)  # default kid: RFC 7638 thumbprint
        jwks = jsf.KeySet.of([key.jwk])
        assert jsf.KeySet.parse(jwks.to_json()) == jwks
    with pytest.raises(jsf.BadKey, match="secp384r1"):
        jsf.SigningKey.of(ec.generate_private_key(ec.SECP384R1()))
    with pytest.raises(jsf.BadKey, match="PEM"):
        jsf.load_private_pem(b"not a key")
    with pytest.raises(jsf.BadKey, match="unsupported JWK"):
        jsf.KeySet.parse('{"keys": [{"kty": "RSA", "n": "x", "e": "AQAB"}]}')


def test_rfc7638_thumbprint_example() -> None:
    # RFC 8037 appendix A.3: the thumbprint of the RFC 8032 test key 1.
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
    assert jsf.thumbprint(jwk) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
