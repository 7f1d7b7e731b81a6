#!/usr/bin/env bash
# Install what trainrun needs from Debian's archive (only what is missing), then configure and build into build/.
# Usage: scripts/setup.sh [extra cmake args]. Root or sudo is needed only when a package must be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libtorch-dev libyaml-dev libcriterion-dev zlib1g-dev
          libopenblas0-pthread libgloo-dev libcjson-dev libcairo2-dev libssl-dev dataset-fashion-mnist python3-sklearn
          fortunes
          clang libclang-rt-dev libxxhash-dev libpng-dev libturbojpeg0-dev libjpeg62-turbo-dev libprotobuf-c-dev
          protobuf-c-compiler python3-venv
          python3-torch iproute2) # python3-torch: torchrun for tests/multinode.sh
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# TensorBoard, for tests/test_tfevents.c to read the event files back with TensorBoard itself: every package pinned
# with its hash (tests/tensorboard/requirements.txt), into a venv in the user's cache (CI caches the folder and
# pip's downloads); made again when the requirements change. Without PyPI the test skips its TensorBoard part and
# says so. TRAINRUN_NO_TENSORBOARD=1 skips this step.
tb_venv="${XDG_CACHE_HOME:-$HOME/.cache}/trainrun/tensorboard-venv"
tb_req=tests/tensorboard/requirements.txt
if [ -z "${TRAINRUN_NO_TENSORBOARD:-}" ] && ! cmp -s "$tb_req" "$tb_venv/requirements.txt" 2>/dev/null; then
  echo "setup: installing TensorBoard into $tb_venv"
  rm -rf "$tb_venv"
  if /usr/bin/python3 -m venv "$tb_venv" &&
     "$tb_venv/bin/pip" install -q --disable-pip-version-check --require-hashes --only-binary=:all: -r "$tb_req"; then
    cp "$tb_req" "$tb_venv/requirements.txt"
  else
    echo "setup: warning: TensorBoard could not be installed; test_tfevents skips its TensorBoard check" >&2
    rm -rf "$tb_venv"
  fi
fi

# Warnings are errors here (CI builds with this script): a new warning fails the build instead of scrolling by.
# A compiler newer than Debian's may warn where ours does not: pass -DTRAINRUN_WERROR=OFF to build anyway.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINRUN_WERROR=ON "$@" >/dev/null
cmake --build build -j"$(nproc)"
