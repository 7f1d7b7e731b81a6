#!/usr/bin/env bash
# Run after every other test (ctest fixture cleanup): the tests' TMPDIR, $1, must be empty. Whatever a test left
# there is named and removed, and the test fails.
set -u
dir=$1
left=$(find "$dir" -mindepth 1 -maxdepth 1 2>/dev/null)
if [ -n "$left" ]; then
  echo "tmp_left_empty: left behind in $dir by the tests:"
  du -sh $left 2>/dev/null || echo "$left"
  find "$dir" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  exit 1
fi
echo "tmp_left_empty: $dir is empty"
