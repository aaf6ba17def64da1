"""Our JSF signatures verify with an independent implementation (scripts/jsf-interop).

The verifier there is JavaScript: RFC 8785 by `canonicalize` (the reference JCS
implementation) and signatures by Node's crypto (OpenSSL); it shares no code
with aibom_core.jcs or aibom_core.jsf. It needs Node and its one npm package:
`scripts/jsf-interop/install.sh` installs it (the recorded run is in
docs/signing.md). Without them this test skips and says why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aibom_core import jsf
from tests.unit.test_jsf import _documents

INTEROP = Path(__file__).resolve().parents[2] / "scripts" / "jsf-interop"
NODE = shutil.which("node")
INSTALLED = (INTEROP / "node_modules" / "canonicalize" / "package.json").is_file()

pytestmark = pytest.mark.skipif(
    NODE is None or not INSTALLED,
    reason="the independent JSF verifier is not installed: needs node on PATH and "
    "scripts/jsf-interop/install.sh (npm ci)",
)

# What JCS implementations get wrong: numbers in exponent form or with a
# trailing .0, member names outside the BMP next to U+E000..U+FFFF, escapes.
TRICKY: dict[str, Any] = {
    "bomFormat": "CycloneDX",
    "specVersion": "1.6",
    "version": 1,
    "numbers": [1.0, 0.8, 1e-7, 1e21, 1e20, 123456789012345680000.0, -0.0, 5e-324, 0.1 + 0.2],
    "names": {"\u20ac": 1, "\U0001f600": 2, "\ufb33": 3, "\r": 4, "\u0080": 5, "a": 6},
    "text": 'quote " backslash \\ tab \t nul \u0000 del \u007f line-sep \u2028 é 😀',
}


def node_verify(tmp_path: Path, keys: jsf.KeySet, docs: list[bytes]) -> tuple[int, list[str]]:
    (tmp_path / "jwks.json").write_text(keys.to_json())
    paths = []
    for i, doc in enumerate(docs):
        p = tmp_path / f"doc{i}.json"
        p.write_bytes(doc)
        paths.append(str(p))
    assert NODE is not None
    r = subprocess.run(
        [NODE, str(INTEROP / "verify.mjs"), str(tmp_path / "jwks.json"), *paths],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 2, r.stderr
    return r.returncode, [line.split()[0] for line in r.stdout.splitlines()]


@pytest.mark.parametrize("algorithm", jsf.ALGORITHMS)
def test_node_verifies_our_signatures(tmp_path: Path, algorithm: str) -> None:
    key = jsf.SigningKey.of(jsf.generate(algorithm), kid=f"interop-{algorithm}")
    keys = jsf.KeySet.of([key.jwk])
    docs = [jsf.sign_bytes(d, key) for d in [*_documents(), jsf.dumps(TRICKY)]]
    code, statuses = node_verify(tmp_path, keys, docs)
    assert (code, statuses) == (0, ["valid"] * len(docs))


@pytest.mark.parametrize("algorithm", jsf.ALGORITHMS)
def test_node_rejects_what_we_reject(tmp_path: Path, algorithm: str) -> None:
    # The other direction of the same check: a verifier that said "valid" to
    # everything would pass the test above.
    key = jsf.SigningKey.of(jsf.generate(algorithm), kid="k")
    keys = jsf.KeySet.of([key.jwk])
    signed = json.loads(jsf.sign_bytes(jsf.dumps(TRICKY), key))
    edited = dict(signed, numbers=[*TRICKY["numbers"][:-1], 0.3])
    code, statuses = node_verify(tmp_path, keys, [jsf.dumps(edited)])
    assert (code, statuses) == (1, ["invalid"])
    assert jsf.verify(edited, keys).status is jsf.Status.INVALID
