#!/usr/bin/env bash
# Lints the goose migrations with squawk (all its default rules, PostgreSQL 15),
# pinned by package-lock.json in this directory.
#
# Contract:
#   - Each file's Up section is linted with every default rule. A file without
#     `-- +goose NO TRANSACTION` is linted as goose runs it: in one transaction
#     (--assume-in-transaction), so CREATE INDEX CONCURRENTLY there fails too.
#   - The Down section is linted with the same rules except ban-drop-table and
#     ban-drop-column: a Down removes what its Up added, which the previous
#     release ignores (expand/contract, docs/operations/upgrades.md); its locks
#     still count, since `migrate down` runs under a live fleet too.
#   - baseline.txt lists, one line per past migration, the rules that file
#     breaks and why. Only files numbered <= last_baselined may be listed; a
#     listed rule that no longer fires is an error too (the baseline only
#     shrinks). Any other finding fails the run, naming file, line and rule.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-migrations}" # relative to the repository root (make runs it there)
baseline="${2:-$here/baseline.txt}" # a second argument replaces it (tests only)
last_baselined=20 # migrations after 00020 get no exclusions
down_excluded="ban-drop-table,ban-drop-column"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "migration-lint needs Node.js >= 20 and npm (e.g. apt-get install nodejs npm)" >&2
  exit 1
fi
if [ ! -x "$here/node_modules/.bin/squawk" ]; then
  # npm ci installs exactly the locked version (and its platform binary
  # package from the npm registry) and checks the integrity hashes.
  npm ci --prefix "$here" --no-audit --no-fund --loglevel=error >&2
fi
# The native binary of the platform package, run directly: the node wrapper
# in .bin costs half a second per file.
squawk="$(cd "$here" && node -e 'process.stdout.write(require("squawk-cli/js/index.js").getBinaryPath())')"

declare -A allowed=()
while read -r file rules reason; do
  case "$file" in ''|'#'*) continue ;; esac
  if [ -z "$reason" ]; then
    echo "migration-lint: $baseline: $file lists no reason" >&2; exit 1
  fi
  num="${file%%_*}"
  if ! [[ "$num" =~ ^[0-9]+$ ]] || [ "$((10#$num))" -gt "$last_baselined" ]; then
    echo "migration-lint: $baseline: $file is not a past migration (<= $last_baselined); new migrations may not be baselined" >&2; exit 1
  fi
  if [ ! -f "$dir/$file" ]; then
    echo "migration-lint: $baseline: $file is not in $dir" >&2; exit 1
  fi
  allowed[$file]="$rules"
done < "$baseline"

# part FILE up|down: the file with the other section's lines blanked, so the
# line numbers squawk reports are the file's own.
part() {
  awk -v want="$2" '
    /^--[ \t]*\+goose[ \t]+Down/ { down = 1 }
    { if ((want == "down") == (down == 1)) print; else print "" }' "$1"
}

fail=0 files=0
shopt -s nullglob
migrations=("$dir"/*.sql)
if [ "${#migrations[@]}" = 0 ]; then
  echo "migration-lint: no .sql files in $dir" >&2; exit 1
fi
for f in "${migrations[@]}"; do
  name="$(basename "$f")"
  files=$((files + 1))
  tx=(--assume-in-transaction)
  if grep -Eq '^--[[:space:]]*\+goose[[:space:]]+NO[[:space:]]+TRANSACTION' "$f"; then tx=(); fi
  found=""
  for section in up down; do
    excl=()
    if [ "$section" = down ]; then excl=(--exclude="$down_excluded"); fi
    out="$(part "$f" "$section" | "$squawk" --pg-version=15.0 --reporter=gcc "${tx[@]}" "${excl[@]}" \
      --stdin-filepath="$f" 2>&1 || true)"
    while IFS= read -r line; do
      [ -n "$line" ] || continue
      if ! [[ "$line" =~ ^[^\ ]+:\ (warning|error):\ ([a-z0-9-]+)\  ]]; then
        echo "$line"; fail=1; continue # not a finding squawk names (e.g. a crash)
      fi
      rule="${BASH_REMATCH[2]}"
      found+=" $rule"
      if [[ ",${allowed[$name]:-}," != *",$rule,"* ]]; then
        # squawk's gcc reporter counts lines and columns from 0; editors from 1.
        printf '%s\n' "$line" | awk -F: -v OFS=: '{ $2 += 1; $3 += 1; print }'
        fail=1
      fi
    done <<< "$out"
  done
  if [ -n "${allowed[$name]:-}" ]; then
    IFS=, read -r -a listed <<< "${allowed[$name]}"
    for rule in "${listed[@]}"; do
      if [[ " $found " != *" $rule "* ]]; then
        echo "migration-lint: $baseline: $name lists $rule, which no longer fires: remove it" >&2; fail=1
      fi
    done
  fi
done

if [ "$fail" != 0 ]; then
  echo "migration-lint: $dir breaks squawk's rules (above: file:line:column rule); make the migration online (docs/operations/upgrades.md) — new migrations may not be added to $baseline" >&2
  exit 1
fi
echo "migration-lint: $files migrations in $dir are clean (squawk $("$squawk" --version | awk '{print $2}'), PostgreSQL 15 rules, baseline $(basename "$baseline"))"
