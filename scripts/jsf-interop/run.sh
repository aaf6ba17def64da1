#!/usr/bin/env bash
# Sign the example workloads' AIBOMs with both algorithms and verify them with
# aibom-rollup and with the independent verifier (verify.mjs); then edit one
# document and show both call it invalid. Run from anywhere after install.sh;
# its output is recorded in docs/signing.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
ar="$repo/.venv/bin/aibom-rollup"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "node $(node --version), canonicalize $(node -p "require('$here/node_modules/canonicalize/package.json').version")"
"$ar" scan "$repo/examples" -o "$tmp/docs" 2>/dev/null
for alg in Ed25519 ES256; do
  mkdir "$tmp/$alg"
  cp "$tmp"/docs/*/*.json "$tmp/$alg/"
  "$ar" keys new --algorithm "$alg" --kid "interop-$alg" --key-file "$tmp/$alg.pem" > "$tmp/$alg.jwk" 2>/dev/null
  "$ar" keys sign --key-file "$tmp/$alg.pem" --kid "interop-$alg" "$tmp/$alg"/*.json 2>/dev/null
  echo "== $alg: aibom-rollup verify"
  (cd "$tmp" && "$ar" verify --key "$alg.jwk" "$alg"/*.json 2>/dev/null) || echo "exit $?"
  echo "== $alg: node verify.mjs (independent)"
  (cd "$tmp" && node "$here/verify.mjs" "$alg.jwk" "$alg"/*.json) || echo "exit $?"
done
doc="$(ls "$tmp/Ed25519"/*.json | head -1)"
python3 - "$doc" <<'PY'
import json, sys
path = sys.argv[1]
doc = json.load(open(path))
doc["components"][0]["name"] = "registry.example/evil"
json.dump(doc, open(path, "w"))
PY
echo "== one Ed25519 document edited (a component renamed)"
(cd "$tmp" && "$ar" verify --key Ed25519.jwk "Ed25519/$(basename "$doc")" 2>/dev/null) || echo "exit $?"
(cd "$tmp" && node "$here/verify.mjs" Ed25519.jwk "Ed25519/$(basename "$doc")") || echo "exit $?"
