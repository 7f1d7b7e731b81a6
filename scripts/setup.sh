#!/usr/bin/env bash
# Install what trainrun needs from Debian's archive (only what is missing), then configure and build into build/.
# Usage: scripts/setup.sh [--torch 2.11] [extra cmake args]. Root or sudo is needed only when a package must be
# installed.
#   (default)      Debian's libtorch 1.13.1 (CPU), build folder build/.
#   --torch 2.11   PyTorch 2.11.0's libtorch from its PyPI wheel (CUDA 13.0 build), pinned with hashes in
#                  scripts/torch-2.11.txt, into a venv in the user's cache; compiled against the CUDA toolkit in
#                  $CUDA_HOME (default /usr/local/cuda), build folder build-torch2.11/ (docs/libtorch.md).
set -euo pipefail
cd "$(dirname "$0")/.."
torch_lane=""
if [ "${1:-}" = "--torch" ]; then
  torch_lane="${2:-}"
  shift 2 || { echo "setup: --torch needs a version (2.11)" >&2; exit 2; }
  [ "$torch_lane" = "2.11" ] || { echo "setup: --torch $torch_lane: only 2.11 is pinned (scripts/torch-2.11.txt)" >&2; exit 2; }
fi

packages=(build-essential cmake pkg-config libtorch-dev libyaml-dev libcriterion-dev zlib1g-dev
          libopenblas0-pthread libgloo-dev libcjson-dev libcairo2-dev libssl-dev dataset-fashion-mnist python3-sklearn
          fortunes
          clang libclang-rt-dev libxxhash-dev libpng-dev libturbojpeg0-dev libjpeg62-turbo-dev libprotobuf-c-dev
          protobuf-c-compiler python3-venv python3-dev
          python3-torch iproute2) # python3-torch: torchrun for tests/multinode.sh; python3-dev: Python.h, which
          # torch.compile's generated C++ includes (the 2.11 venv's PyTorch in bench/vs_torch2.py)
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
if [ -z "$torch_lane" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINRUN_WERROR=ON "$@" >/dev/null
  cmake --build build -j"$(nproc)"
  exit 0
fi

# ---- the 2.11 lane ---------------------------------------------------------------------------------------------
# The venv is made with Debian's Python 3.11 (the wheel is cp311); the wheels are downloaded once into the cache
# (pip checks every hash) and installed from there without the network, so a warm cache needs no PyPI at all.
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -x "$cuda_home/bin/nvcc" ] || [ ! -e "$cuda_home/lib64/libcudart.so" ]; then
  echo "setup: the 2.11 lane builds with CUDA: no nvcc / libcudart.so under $cuda_home (set CUDA_HOME)" >&2
  exit 2
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/trainrun"
lock=scripts/torch-2.11.txt
venv="$cache/torch-2.11.0/venv"
stamp="$venv/.trainrun-$(sha256sum "$lock" | cut -c1-16)"
if [ ! -e "$stamp" ]; then
  echo "setup: installing PyTorch 2.11.0 ($lock) into $venv"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  mkdir -p "$cache/wheels"
  pip=("$venv/bin/pip" -q --disable-pip-version-check)
  # download only what the cache lacks, then install from the cache alone
  "${pip[@]}" download --require-hashes --no-deps --only-binary=:all: -d "$cache/wheels" -r "$lock"
  "${pip[@]}" install --require-hashes --no-deps --no-index --find-links "$cache/wheels" -r "$lock"
  touch "$stamp"
fi
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# libtorch_cuda.so finds cuDNN and NCCL through its run path in nvidia/{cudnn,nccl}/lib; those wheels are not
# downloaded (/usr/local/cuda has both, same majors): point the two folders at the toolkit's copies.
for pkg in cudnn nccl; do
  d="$site/nvidia/$pkg"
  if [ ! -e "$d/lib" ]; then mkdir -p "$d" && ln -sfn "$cuda_home/lib64" "$d/lib"; fi
done
missing_libs="$(ldd "$site/torch/lib/libtorch_cuda.so" | grep 'not found' || true)"
if [ -n "$missing_libs" ]; then
  echo "setup: libtorch_cuda.so cannot find:" >&2; echo "$missing_libs" >&2; exit 1
fi
cmake -S . -B build-torch2.11 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINRUN_WERROR=ON \
  -DCMAKE_PREFIX_PATH="$site/torch/share/cmake" -DCUDAToolkit_ROOT="$cuda_home" "$@" >/dev/null
cmake --build build-torch2.11 -j"$(nproc)"
