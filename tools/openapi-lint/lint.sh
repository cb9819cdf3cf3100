#!/usr/bin/env bash
# Lints docs/openapi.yaml with Redocly CLI's `recommended` ruleset, pinned by
# package-lock.json in this directory. Clean means no errors AND no
# warnings: Redocly exits 0 on warnings, so the JSON totals decide.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
spec="${1:-docs/openapi.yaml}" # relative to the repository root (make runs it there)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "openapi-lint needs Node.js >= 20.19 and npm (e.g. apt-get install nodejs npm, or https://nodejs.org)" >&2
  exit 1
fi
# No usage telemetry and no update check from a test run.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
redocly="$here/node_modules/.bin/redocly"
if [ ! -x "$redocly" ]; then
  # npm ci installs exactly the locked version and checks its integrity hash.
  npm ci --prefix "$here" --no-audit --no-fund --loglevel=error >&2
fi

json="$("$redocly" lint --extends=recommended --format=json "$spec" 2>/dev/null || true)"
if ! printf '%s' "$json" | node -e '
  let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
    const t = JSON.parse(s).totals;
    process.exit(t.errors === 0 && t.warnings === 0 ? 0 : 1);
  });' 2>/dev/null; then
  "$redocly" lint --extends=recommended --format=stylish "$spec" 2>/dev/null || true
  echo "openapi-lint: $spec is not clean under Redocly's recommended rules (errors and warnings both fail)" >&2
  exit 1
fi
echo "openapi-lint: $spec is clean (Redocly CLI $("$redocly" --version 2>/dev/null), recommended rules)"
