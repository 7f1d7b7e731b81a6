#!/usr/bin/env bash
# readme_examples.sh BUILD_DIR SOURCE_DIR -- the shell examples of README.md and then of docs/*.md, copied out and
# run in order as a new user would paste them, in a directory laid out like a fresh clone (build/, configs/,
# models/, scripts/, examples/; tests/ empty, so `--trace tests/golden/...` must create its folder). Each ```c
# block is compiled (as the body of main, against the installed trainrun.h) so the C it shows still builds.
#
# Every ```sh block runs, except the set-up commands (./scripts/setup.sh installs packages and builds: here only the
# files they name are checked). Step counts are cut so the whole script takes well under a minute: a command
# with train.max_steps=N gets N = 30, any other `trainrun CONFIG` command gets train.max_steps=3 and small
# subsets. Each block runs as one bash script (set -euo pipefail) with HOME set to a temporary directory, so the
# embedding example installs, builds and runs as written.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# the ```sh blocks, continuation lines joined, one command per line; blocks separated by a line "#BLOCK"
awk '
  /^```sh$/ {inside = 1; print "#BLOCK"; next}
  /^```/    {inside = 0; next}
  inside {
    line = $0
    if (cont != "") { sub(/^[ \t]+/, " ", line); line = cont line; cont = "" }
    if (line ~ /\\$/) { sub(/\\$/, "", line); cont = line; next }
    print line
  }' "$src/README.md" "$src"/docs/*.md >"$tmp/blocks.txt"
blocks=$(grep -c '^#BLOCK$' "$tmp/blocks.txt")
[ "$blocks" -ge 4 ] || fail "README.md and docs/ have $blocks sh blocks; expected the set-up, regression, resume and embedding ones"
docblocks=$(cat "$src"/docs/*.md | grep -c '^```sh$' || true)
[ "$docblocks" -ge 3 ] || fail "docs/ has $docblocks sh blocks; expected those of data.md, exit_codes.md and torchscript.md"

# a fresh clone's layout, and a home directory of its own (the embedding example installs into $HOME/.local)
clone=$tmp/clone
mkdir -p "$clone/tests" "$tmp/home"
ln -s "$build" "$clone/build"
for d in configs models scripts examples; do ln -s "$src/$d" "$clone/$d"; done

SMALL="train.max_steps=3 data.train_subset=1200 data.val_size=200 data.test_subset=200"
n=0 ran=0
# one script per block, its commands shortened; a block runs as one `bash -e` script (an export carries on)
emit_block() {
  [ -s "$tmp/block.sh" ] || return 0
  echo "--- README block $n:"
  sed 's/^/    /' "$tmp/block.sh"
  (cd "$clone" && HOME=$tmp/home bash -euo pipefail "$tmp/block.sh") >"$tmp/block.out" 2>&1 \
    || { rc=$?; cat "$tmp/block.out"; fail "README block $n exited $rc"; }
  tail -n 4 "$tmp/block.out" | sed 's/^/  | /'
  ran=$((ran + 1))
}
: >"$tmp/block.sh"
while IFS= read -r line; do
  case "$line" in
    "#BLOCK") emit_block; : >"$tmp/block.sh"; n=$((n + 1)); continue ;;
    ""|"#"*) continue ;;
  esac
  cmd=${line%%  #*}   # a trailing comment after two blanks
  case "$cmd" in
    *scripts/setup.sh*)
      # set-up: the script and what it is told to run exist
      [ -x "$src/scripts/setup.sh" ] || fail "README block $n: scripts/setup.sh is missing or not executable"
      for f in $(grep -o 'configs/[a-z_]*\.yaml' <<<"$cmd"); do [ -f "$src/$f" ] || fail "README: no $f"; done
      echo "--- README block $n (set-up, checked, not run): $cmd"
      continue ;;
    *"./build/trainrun "*)
      if grep -q 'train\.max_steps=' <<<"$cmd"; then
        cmd=$(sed -E 's/train\.max_steps=[0-9]+/train.max_steps=30/g' <<<"$cmd")
      elif grep -q '\./build/trainrun [a-z_/.-]*configs/[a-z_]*\.yaml' <<<"$cmd"; then
        cmd="$cmd $SMALL"
      fi ;;
  esac
  printf '%s\n' "$cmd" >>"$tmp/block.sh"
done <"$tmp/blocks.txt"
emit_block

# what the examples say happened, happened
[ -f "$clone/tests/golden/mlp-300.trace" ] || fail "the regression example did not write tests/golden/mlp-300.trace"
grep -q '^step 30 ' "$clone/tests/golden/mlp-300.trace" || fail "the recorded trace has no step 30"
[ -f "$clone/runs/cnn/summary.json" ] || fail "the resume example left no runs/cnn/summary.json"
[ "$(head -n 1 "$clone/preds.csv")" = "index,target,predicted,p_0,p_1,p_2,p_3,p_4,p_5,p_6,p_7,p_8,p_9" ] \
  || fail "the TorchScript tour's predict wrote no preds.csv with the expected header"
[ "$(wc -l <"$clone/preds.csv")" -eq 201 ] || fail "preds.csv: expected 200 rows (the cut test subset)"
[ -s "$clone/ts.png" ] || fail "the TorchScript tour's plot wrote no ts.png"
[ -s "$clone/ts.pt" ] || fail "the TorchScript tour's export wrote no ts.pt"
# docs/data.md's predictions without labels, docs/torchscript.md's export
lines_of() { wc -l <"$clone/$1"; }
[ "$(head -n 1 "$clone/mlp_preds.csv")" = "index,predicted,p_0,p_1,p_2,p_3,p_4,p_5,p_6,p_7,p_8,p_9" ] \
  || fail "docs/data.md: the IDX predict without labels wrote no mlp_preds.csv with the unlabeled header"
[ "$(lines_of mlp_preds.csv)" -eq 10001 ] || fail "mlp_preds.csv: expected the 10000 test images"
[ "$(head -n 1 "$clone/bc_preds.csv")" = "index,predicted_0,p_0" ] \
  || fail "docs/data.md: the CSV predict without the label column wrote no bc_preds.csv with the unlabeled header"
[ "$(lines_of bc_preds.csv)" -eq 570 ] || fail "bc_preds.csv: expected the table's 569 rows"
[ -s "$clone/ts_mlp.pt" ] || fail "docs/torchscript.md: the export wrote no ts_mlp.pt"
[ "$(lines_of ts_mlp_preds.csv)" -eq 10001 ] || fail "docs/torchscript.md: ts_mlp_preds.csv lacks the 10000 rows"
[ ! -e "$clone/none.csv" ] && [ ! -e "$clone/none.csv.tmp" ] || fail "docs/exit_codes.md: the failed predict left none.csv"
[ -x "$tmp/home/.local/bin/trainrun" ] || fail "the embedding example's install has no bin/trainrun"
for prog in prog prog-static; do
  [ -x "$clone/$prog" ] || fail "the embedding example built no ./$prog"
done

# the ```c blocks: each compiles as the body of main() against the header the embedding example installed
awk -v dir="$tmp" '
  /^```c$/ {inside = 1; n++; f = dir "/cblock" n ".c"; print "#include <stdio.h>\n#include <trainrun/trainrun.h>\nint main(void)\n{" > f; next}
  /^```/ && inside {inside = 0; print "return 0;\n}" > f; close(f); next}
  inside {print > f}' "$src/README.md" "$src"/docs/*.md
cblocks=0
for f in "$tmp"/cblock*.c; do
  [ -e "$f" ] || continue
  cc -std=c11 -Wall -Werror -fsyntax-only -I"$tmp/home/.local/include" "$f" 2>"$tmp/cc.out" \
    || { cat "$f" "$tmp/cc.out"; fail "a \`\`\`c block does not compile: $(head -c 200 "$tmp/cc.out")"; }
  cblocks=$((cblocks + 1))
done
[ "$cblocks" -ge 1 ] || fail "no \`\`\`c block found in README.md or docs/"
echo "readme_examples: OK ($ran blocks run of $blocks, $cblocks C blocks compiled)"
