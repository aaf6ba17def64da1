// An independent JSF (JSON Signature Format 0.82) verifier for CycloneDX
// documents, written from the JSF specification, not from aibom-rollup's code:
// RFC 8785 canonicalization by `canonicalize` (the reference JavaScript JCS
// implementation, by an RFC 8785 author), keys and signatures by Node's own
// crypto (OpenSSL). It trusts the keys of a JWK set file, never the
// document's embedded key alone.
//
//   node verify.mjs JWKS.json DOC.json...     (prints "<status> <file>", one a line)
//
// Exit: 0 all valid, 1 any invalid, 2 usage, 3 unknown key, 4 unsigned.
import { readFileSync } from "node:fs";
import { createPublicKey, verify } from "node:crypto";
import canonicalize from "canonicalize";

const [jwksPath, ...docs] = process.argv.slice(2);
if (!jwksPath || docs.length === 0) {
  console.error("usage: node verify.mjs JWKS.json DOC.json...");
  process.exit(2);
}
const jwks = JSON.parse(readFileSync(jwksPath, "utf8"));
const trusted = new Map((jwks.keys ?? [jwks]).map((k) => [k.kid, k]));

function check(doc) {
  const sig = doc.signature;
  if (sig === undefined) return ["unsigned"];
  // JSF: the signature object minus "value", in place, canonicalized with the document.
  const { value, ...rest } = sig;
  const jwk = trusted.get(sig.keyId);
  if (!jwk) return ["unknown-key", sig.keyId];
  const key = createPublicKey({ key: jwk, format: "jwk" });
  const data = Buffer.from(canonicalize({ ...doc, signature: rest }), "utf8");
  const raw = Buffer.from(value, "base64url");
  let ok;
  if (sig.algorithm === "Ed25519" && jwk.kty === "OKP" && jwk.crv === "Ed25519") {
    ok = verify(null, data, key, raw);
  } else if (sig.algorithm === "ES256" && jwk.kty === "EC" && jwk.crv === "P-256") {
    // JWA: the signature is r||s (IEEE P1363), not DER.
    ok = verify("sha256", data, { key, dsaEncoding: "ieee-p1363" }, raw);
  } else {
    return ["invalid", `algorithm ${sig.algorithm} does not fit key ${sig.keyId}`];
  }
  return ok ? ["valid", sig.keyId] : ["invalid", sig.keyId];
}

const rank = { valid: 0, unsigned: 1, "unknown-key": 2, invalid: 3 };
const code = { valid: 0, unsigned: 4, "unknown-key": 3, invalid: 1 };
let worst = "valid";
for (const path of docs) {
  const [status, detail] = check(JSON.parse(readFileSync(path, "utf8")));
  console.log([status, path, detail].filter(Boolean).join(" "));
  if (rank[status] > rank[worst]) worst = status;
}
process.exit(code[worst]);
