#!/usr/bin/env bash
# Rewrite the config reference table in docs/config.md from `trainrun --config-reference` (the schema is the source).
set -euo pipefail
cd "$(dirname "$0")/.."
table=$(./build/trainrun --config-reference)
awk -v table="$table" '
  /<!-- config-reference:begin/ { print; print table; skip = 1; next }
  /<!-- config-reference:end/   { skip = 0 }
  !skip' docs/config.md > docs/config.md.tmp && mv docs/config.md.tmp docs/config.md
