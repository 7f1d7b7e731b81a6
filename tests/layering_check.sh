#!/usr/bin/env bash
# layering_check.sh [SRC] -- the layers of runtime/src (docs/architecture.md) hold: a file includes headers of its own
# folder or of a folder below it, never above, and no file depends on a file that depends on it.
#
#   cli/ -> core/ -> io/ -> config/ -> util/        (each may include the folders to its right, and the shim)
#
# Outside runtime/src: "trainrun_shim.h" (the shim's C ABI, and its trainrun_shim_export.h) is below every folder but util/, which needs nothing;
# "trainrun/trainrun.h" (the embedding API, implemented in core/trainrun*.c) is for core/ and cli/ only;
# "tensorboard/NAME.pb-c.h" (protoc-c's C for runtime/proto/tensorboard/NAME.proto) for io/ and above. Any other
# quoted include is an error: a header nobody can place in a layer.
# cli/train.[ch] (`trainrun CONFIG`) is a user of the embedding API like any application: besides its own header it
# includes "trainrun/trainrun.h" and util/ headers only, no core/, io/ or config/ header and not the shim.
# Dependencies between files: a module is a .c and its .h (X_internal.h belongs to X); `tsort` fails on a loop.
# Before checking SRC (default: the runtime/src next to this script) it checks that it catches a violation and a
# loop in a small made-up tree, so it cannot pass by checking nothing. Exit 0: clean; 1: what is wrong, listed.
set -euo pipefail
layers=(util config io core cli)   # lowest first: a file in layers[i] may include headers of layers[0..i]

rank_of() { local i; for i in "${!layers[@]}"; do [ "${layers[$i]}" = "$1" ] && { echo "$i"; return; }; done; echo -1; }

# check SRC: prints each violation, returns 1 if there was one
check() {
    local src=$1 bad=0 layer file inc home hrank rank mod dep pairs
    declare -A where=()
    for layer in "${layers[@]}"; do
        [ -d "$src/$layer" ] || { echo "layering: no folder $src/$layer"; return 1; }
        for file in "$src/$layer"/*.h; do [ -e "$file" ] && where[$(basename "$file")]=$layer; done
    done
    local strays
    strays=$(find "$src" -maxdepth 1 -type f -name '*.[ch]')
    [ -z "$strays" ] || { echo "layering: files outside the layer folders: $strays"; bad=1; }
    pairs=$(mktemp)
    for layer in "${layers[@]}"; do
        rank=$(rank_of "$layer")
        for file in "$src/$layer"/*.[ch]; do
            [ -e "$file" ] || continue
            mod=$(basename "$file"); mod=${mod%.[ch]}; mod=${mod%_internal}
            echo "$mod $mod" >>"$pairs"
            while read -r inc; do
                if [ "$layer/$mod" = cli/train ] && [ "$inc" != trainrun/trainrun.h ] && [ "$inc" != train.h ] &&
                   [ "${where[$inc]:-}" != util ]; then
                    echo "layering: cli/$(basename "$file") includes $inc: the command line's train uses the embedding API alone"
                    bad=1
                fi
                case "$inc" in
                trainrun_shim.h | trainrun_shim_export.h)
                    [ "$layer" != util ] || { echo "layering: $layer/$(basename "$file") includes the shim"; bad=1; }
                    continue ;;
                tensorboard/*.pb-c.h)  # protoc-c's code of runtime/proto (build/proto), for io/ and above
                    [ "$(rank_of "$layer")" -ge "$(rank_of io)" ] \
                        || { echo "layering: $layer/$(basename "$file") includes the generated $inc"; bad=1; }
                    continue ;;
                trainrun/trainrun.h)
                    [ "$layer" = core ] || [ "$layer" = cli ] \
                        || { echo "layering: $layer/$(basename "$file") includes the embedding API"; bad=1; }
                    continue ;;
                esac
                home=${where[$inc]:-}
                if [ -z "$home" ]; then echo "layering: $layer/$(basename "$file") includes $inc, in no layer"; bad=1; continue; fi
                hrank=$(rank_of "$home")
                if [ "$hrank" -gt "$rank" ]; then
                    echo "layering: $layer/$(basename "$file") includes $home/$inc (a layer above $layer)"; bad=1
                fi
                dep=${inc%.h}; dep=${dep%_internal}
                [ "$dep" = "$mod" ] || echo "$mod $dep" >>"$pairs"
            done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
        done
    done
    if ! tsort "$pairs" >/dev/null 2>"$pairs.err"; then
        echo "layering: files that depend on each other: $(grep -v 'input contains a loop' "$pairs.err" | sed 's/^tsort: //' | tr '\n' ' ')"
        bad=1
    fi
    rm -f "$pairs" "$pairs.err"
    return $bad
}

here=$(cd "$(dirname "$0")" && pwd)
src=${1:-$here/../runtime/src}

# The check catches what it is for: an upward include and a loop, in a made-up tree.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for layer in "${layers[@]}"; do mkdir -p "$tmp/$layer"; done
printf '#include "b.h"\n' >"$tmp/util/a.h"
printf '#include "a.h"\n' >"$tmp/core/b.h"
out=$(check "$tmp") && { echo "layering: the self-test tree passed"; exit 1; }
grep -q 'util/a.h includes core/b.h' <<<"$out" || { echo "layering: the self-test missed util -> core: $out"; exit 1; }
printf '' >"$tmp/util/a.h"
printf '#include "b.h"\n' >"$tmp/core/a.c"
printf '#include "a.h"\n#include "c.h"\n' >"$tmp/core/b.h"
printf '#include "b.h"\n' >"$tmp/core/c.h"
out=$(check "$tmp") && { echo "layering: the self-test loop b -> c -> b passed"; exit 1; }
grep -q 'depend on each other' <<<"$out" || { echo "layering: the self-test missed a loop: $out"; exit 1; }
rm -f "$tmp"/core/*
printf '#include "b.h"\n' >"$tmp/cli/train.c"
printf '' >"$tmp/core/b.h"
out=$(check "$tmp") && { echo "layering: the self-test cli/train.c -> core/b.h passed"; exit 1; }
grep -q 'uses the embedding API alone' <<<"$out" || { echo "layering: the self-test missed train.c's core include: $out"; exit 1; }

check "$src" || exit 1
n=$(find "$src" -name '*.[ch]' | wc -l)
echo "layering: $n files in ${layers[*]}: no upward include, no loop"
