#!/usr/bin/env bash
# Rewrite the config reference table in README.md from `trainrun --config-reference` (the schema is the source).
set -euo pipefail
cd "$(dirname "$0")/.."
table=$(./build/trainrun --config-reference)
awk -v table="$table" '
  /<!-- config-reference:begin/ { print; print table; skip = 1; next }
  /<!-- config-reference:end/   { skip = 0 }
  !skip' README.md > README.md.tmp && mv README.md.tmp README.md
