"""`aibom-rollup keys` and `aibom-rollup verify` offline; signing through the ConfigMap budget."""

from __future__ import annotations

import base64
import gzip
import io
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from aibom_core import jsf
from aibom_core.bom import validate
from aibom_core.document import unpack
from aibom_rollup.cli import main
from annotator.configmap import fit
from annotator.signing import Signing, load_key, signing_of

DOC = {
    "bomFormat": "CycloneDX",
    "specVersion": "1.6",
    "version": 1,
    "metadata": {
        "timestamp": "2026-01-01T00:00:00Z",
        "component": {"bom-ref": "root", "type": "application", "name": "root"},
    },
    "components": [
        {"bom-ref": f"c{i}", "type": "library", "name": f"component-{i:05d}-{'x' * 40}"}
        for i in range(3)
    ],
}


def run(
    argv: list[str], capsys: pytest.CaptureFixture[str], stdin: bytes = b""
) -> tuple[int, str, str]:
    old = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        code = main(argv)
    finally:
        sys.stdin = old
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def key_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """A key made by `keys new`: (private key file, public JWK file with kid k1)."""
    pem = tmp_path / "k1.pem"
    code, out, err = run(["keys", "new", "--kid", "k1", "--key-file", str(pem)], capsys)
    assert code == 0, err
    jwk = tmp_path / "k1.jwk"
    jwk.write_text(out)
    return pem, jwk


def signed_file(tmp_path: Path, pem: Path, doc: dict[str, Any] = DOC, name: str = "d.json") -> Path:
    key = load_key(str(pem), "k1")
    path = tmp_path / name
    path.write_bytes(jsf.sign_bytes(jsf.dumps(doc), key))
    return path


def test_keys_new_writes_a_private_file_and_prints_the_public_jwk(
    tmp_path: Path, key_file: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    pem, jwk_path = key_file
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    jwk = json.loads(jwk_path.read_text())
    assert jwk["kid"] == "k1" and jwk["kty"] == "OKP" and "d" not in jwk
    assert jsf.public_jwk(jsf.load_private_pem(pem.read_bytes()))["x"] == jwk["x"]
    code, _, err = run(["keys", "new", "--key-file", str(pem)], capsys)
    assert code == 2 and "refusing to overwrite" in err and "Traceback" not in err
    code, _, err = run(["keys", "new"], capsys)
    assert code == 2 and "--key-file" in err


def test_secret_to_jwks_to_rotation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["keys", "new", "--secret", "s1", "--kid", "k1"], capsys)
    assert code == 0
    secret = json.loads(out)
    assert secret["kind"] == "Secret" and secret["metadata"]["namespace"] == "aibom-system"
    assert base64.b64decode(secret["data"]["kid"]) == b"k1"
    (tmp_path / "s1.json").write_text(out)
    code, out, _ = run(
        ["keys", "new", "--secret", "s2", "--kid", "k2", "--algorithm", "ES256"], capsys
    )
    (tmp_path / "s2.json").write_text(out)
    code, out, _ = run(["keys", "jwks", "--add", str(tmp_path / "s1.json")], capsys)
    assert code == 0
    cm1 = json.loads(out)
    assert cm1["metadata"]["name"] == "aibom-signing-keys"
    assert [k["kid"] for k in json.loads(cm1["data"]["jwks.json"])["keys"]] == ["k1"]
    # Rotation: add k2 beside k1, then retire k1.
    code, out, _ = run(
        ["keys", "jwks", "--from", "-", "--add", str(tmp_path / "s2.json")],
        capsys,
        stdin=json.dumps(cm1).encode(),
    )
    both = json.loads(out)
    assert [k["kid"] for k in json.loads(both["data"]["jwks.json"])["keys"]] == ["k1", "k2"]
    # As read from the cluster: its name, namespace and resourceVersion are kept
    # (kubectl replace then fails instead of dropping a key published meanwhile).
    both["metadata"].update(namespace="ops", name="keys", resourceVersion="42")
    code, out, _ = run(
        ["keys", "jwks", "--from", "-", "--retire", "k1"], capsys, stdin=json.dumps(both).encode()
    )
    retired = json.loads(out)
    assert [k["kid"] for k in json.loads(retired["data"]["jwks.json"])["keys"]] == ["k2"]
    assert retired["metadata"] | {"labels": None} == {
        "namespace": "ops",
        "name": "keys",
        "resourceVersion": "42",
        "labels": None,
    }
    code, _, err = run(
        ["keys", "jwks", "--from", "-", "--retire", "nope"], capsys, stdin=json.dumps(both).encode()
    )
    assert code == 2 and "no such key (known: k1, k2)" in err


def test_verify_statuses_and_exit_codes(
    tmp_path: Path, key_file: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    pem, jwk = key_file
    good = signed_file(tmp_path, pem)
    code, out, err = run(["verify", "--key", str(jwk), str(good)], capsys)
    assert (code, out.split()) == (0, ["valid", str(good), "key=k1"])
    assert "1 document(s): 1 valid" in err
    # The private key file is trusted too (its public half).
    assert run(["verify", "--key", str(pem), str(good)], capsys)[0] == 0
    # A PEM has no kid: it vouches for its own signatures whatever keyId they carry,
    # and for no one else's.
    other_kid = tmp_path / "other-kid.json"
    other_kid.write_bytes(jsf.sign_bytes(jsf.dumps(DOC), load_key(str(pem), "k7")))
    code, out, _ = run(["verify", "--key", str(pem), str(other_kid)], capsys)
    assert (code, out.split()[0]) == (0, "valid"), out
    assert run(["verify", "--key", str(jwk), str(other_kid)], capsys)[0] == 3
    stranger = tmp_path / "stranger.pem"
    assert run(["keys", "new", "--kid", "k1", "--key-file", str(stranger)], capsys)[0] == 0
    code, out, _ = run(["verify", "--key", str(stranger), str(good)], capsys)
    assert (code, out.split()[0]) == (3, "unknown-key"), out

    edited = json.loads(good.read_bytes())
    edited["components"][0]["name"] = "evil"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(edited))
    code, out, _ = run(["verify", "--key", str(jwk), str(good), str(bad)], capsys)
    assert code == 1
    assert out.splitlines()[1].startswith(f"invalid      {bad}  key=k1  (the signature does not")

    plain = tmp_path / "plain.json"
    plain.write_bytes(jsf.dumps(DOC))
    code, out, _ = run(["verify", "--key", str(jwk), str(good), str(plain)], capsys)
    assert code == 4 and out.splitlines()[1].startswith("unsigned")

    other = tmp_path / "other.jwk"
    other.write_text(json.dumps(jsf.SigningKey.of(jsf.generate(), kid="k9").jwk))
    code, out, _ = run(["verify", "--key", str(other), str(good), str(plain)], capsys)
    assert code == 3 and out.startswith("unknown-key")

    code, out, _ = run(["verify", "-o", "json", "--key", str(jwk), str(bad)], capsys)
    record = json.loads(out)["documents"][0]
    assert record["status"] == "invalid" and record["keyId"] == "k1"


def test_verify_reads_configmap_dumps_with_gzip(
    tmp_path: Path, key_file: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    pem, jwk = key_file
    signed = signed_file(tmp_path, pem).read_bytes()
    plain_cm = {"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}
    cm_json = dict(plain_cm, data={"aibom.json": signed.decode()})
    packed = base64.b64encode(gzip.compress(signed)).decode()
    cm_gz = {
        "kind": "ConfigMap",
        "metadata": {"name": "b", "namespace": "n"},
        "binaryData": {"aibom.json.gz": packed},
    }
    tampered = json.loads(signed)
    tampered["version"] = 7
    cm_bad = {
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "n"},
        "binaryData": {
            "aibom.json.gz": base64.b64encode(gzip.compress(jsf.dumps(tampered))).decode()
        },
    }
    cm_junk = {
        "kind": "ConfigMap",
        "metadata": {"name": "d", "namespace": "n"},
        "binaryData": {"aibom.json.gz": base64.b64encode(b"not gzip").decode()},
    }
    dump = {"apiVersion": "v1", "kind": "List", "items": [cm_json, cm_gz, cm_bad, cm_junk]}
    code, out, _ = run(["verify", "--key", str(jwk), "-"], capsys, stdin=json.dumps(dump).encode())
    lines = [line.split()[:2] for line in out.splitlines()]
    assert lines == [
        ["valid", "configmap/n/a"],
        ["valid", "configmap/n/b"],
        ["invalid", "configmap/n/c"],
        ["invalid", "configmap/n/d"],
    ]
    assert code == 1


def test_verify_bad_input_is_one_line_exit_2(
    tmp_path: Path, key_file: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    pem, jwk = key_file
    junk = tmp_path / "junk.txt"
    junk.write_text("{{{ not json: [")
    for argv in (
        ["verify", "--key", str(jwk), str(tmp_path / "missing.json")],
        ["verify", "--key", str(junk), str(signed_file(tmp_path, pem))],
        ["verify", "--key", str(jwk), str(junk)],
        [
            "verify",
            str(signed_file(tmp_path, pem)),
            "--kubeconfig",
            str(tmp_path / "no-kubeconfig"),
        ],
    ):
        code, _, err = run(argv, capsys)
        assert code == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_signed_document_cut_to_fit_is_signed_again(key_file: tuple[Path, Path]) -> None:
    pem, jwk = key_file
    key = load_key(str(pem), "k1")
    big = dict(
        DOC,
        components=[
            {
                "bom-ref": f"c{i}",
                "type": "library",
                "name": base64.b64encode(bytes([i % 251]) * 90 + i.to_bytes(4, "big")).decode(),
            }
            for i in range(1500)
        ],
    )
    signing = Signing(key, None)
    signed = signing.seal(jsf.dumps(big))
    payload = fit(signed, limit=8_000, seal=signing.seal)
    assert payload.truncated
    stored = unpack({"binaryData": dict(payload.binary_data)})
    assert stored is not None
    validate(stored)
    keys = jsf.KeySet.parse(jwk.read_text())
    assert jsf.verify_bytes(stored, keys).status is jsf.Status.VALID
    # Without seal, the cut document carries no stale signature.
    unsealed = unpack({"binaryData": dict(fit(signed, limit=8_000).binary_data)})
    assert unsealed is not None and b'"signature"' not in unsealed


def test_annotator_signing_flags(
    tmp_path: Path, key_file: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pem, _ = key_file
    from argparse import Namespace

    monkeypatch.setenv("POD_NAMESPACE", "ops")
    s = signing_of(Namespace(signing_key=str(pem), signing_key_id=None, keys_configmap=None))
    assert s is not None and s.keys_configmap == ("ops", "aibom-signing-keys")
    assert s.key.kid == jsf.thumbprint(s.key.jwk)
    # A mounted Secret: tls.key with kid beside it.
    mount = tmp_path / "mount"
    mount.mkdir()
    (mount / "tls.key").write_bytes(pem.read_bytes())
    (mount / "kid").write_text("k1\n")
    s = signing_of(
        Namespace(signing_key=str(mount / "tls.key"), signing_key_id=None, keys_configmap="")
    )
    assert s is not None and s.key.kid == "k1" and s.keys_configmap is None
    assert signing_of(Namespace(signing_key=None, signing_key_id=None, keys_configmap=None)) is None
    with pytest.raises(ValueError, match="needs --signing-key"):
        signing_of(Namespace(signing_key=None, signing_key_id="x", keys_configmap=None))
    with pytest.raises(ValueError, match="No such file"):
        signing_of(
            Namespace(signing_key=str(tmp_path / "nope"), signing_key_id=None, keys_configmap=None)
        )
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        signing_of(Namespace(signing_key=str(pem), signing_key_id=None, keys_configmap="x"))


def test_keys_sign_signs_files_in_place(
    tmp_path: Path, key_file: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    pem, jwk = key_file
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(jsf.dumps(DOC))
    b.write_bytes(jsf.dumps(dict(DOC, version=2)))
    code, _, err = run(
        ["keys", "sign", "--key-file", str(pem), "--kid", "k1", str(a), str(b)], capsys
    )
    assert code == 0, err
    code, out, _ = run(["verify", "--key", str(jwk), str(a), str(b)], capsys)
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["valid", "valid"]
    # Not CycloneDX: nothing is written.
    c = tmp_path / "c.json"
    c.write_text('{"kind": "Pod"}')
    before = a.read_bytes()
    code, _, err = run(["keys", "sign", "--key-file", str(pem), str(a), str(c)], capsys)
    assert code == 2 and "not a CycloneDX document" in err and a.read_bytes() == before


def test_signing_reload_sees_a_new_key_only(tmp_path: Path, key_file: tuple[Path, Path]) -> None:
    from argparse import Namespace

    pem, _ = key_file
    live = tmp_path / "live.pem"
    live.write_bytes(pem.read_bytes())
    s = signing_of(Namespace(signing_key=str(live), signing_key_id=None, keys_configmap=""))
    assert s is not None and s.reload() is None
    live.write_bytes(jsf.private_pem(jsf.generate(jsf.ES256)))
    rotated = s.reload()
    assert rotated is not None and rotated.key.algorithm == jsf.ES256
    assert rotated.key.kid != s.key.kid and rotated.path == s.path
    live.write_text("garbage")
    with pytest.raises(ValueError, match="not an unencrypted PEM private key"):
        rotated.reload()
