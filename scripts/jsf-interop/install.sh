#!/usr/bin/env bash
# Install the independent JSF verifier's one dependency (canonicalize, the
# reference RFC 8785 implementation; Apache-2.0, no dependencies of its own)
# from the npm registry, exactly as package-lock.json pins it. Needs Node >= 18.
# tests/unit/test_jsf_interop.py runs it once this is installed (and skips,
# saying so, when it is not).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
