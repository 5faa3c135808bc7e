#!/usr/bin/env bash
# deps.sh: make sure the Debian packages the kit needs are installed.
# Installs the missing ones with apt-get when it can (root, or sudo without a
# password); otherwise prints the exact command to run and fails.
#   deps.sh          what building, the demo, the benchmarks, the slides, the
#                    tour and the simulated cluster need
#   deps.sh --test   and what only the test suite uses: a headless browser
#                    that screenshots the slides, PIL to read them, and
#                    yamllint for the CI files
#   deps.sh --gpu    only what `make test-gpu` and `make bench-gpu` need (no
#                    slides, charts or corpora: on a GPU machine without root,
#                    these are usually there already), and then the CUDA
#                    toolkit, cuBLAS and NCCL, which are NVIDIA's packages:
#                    it says which is missing and where it looked, and
#                    installs none (CUDA_HOME, NCCL_HOME and NVCC as the
#                    Makefile has them)
#   deps.sh --list   print the first two lists' packages, one a line, and install nothing
# A fresh Debian 12 (minbase + build-essential + git) has the rest: what a
# script, suite or Makefile recipe calls comes from one of these packages or
# from the base system (tests/deps.bats checks every command they call).
set -euo pipefail

# column: bsdextrautils; ip, tc: iproute2; pgrep, pkill, ps: procps
# libdnnl-dev: oneDNN, mixed precision's bf16 GEMMs on the CPU (half_gemm.h)
packages=(build-essential openmpi-bin libopenmpi-dev libopenblas-dev libopenblas-openmp-dev
          libdnnl-dev gnuplot-nox bats fortunes-min python3 libxml2-utils pandoc bsdextrautils iproute2
          procps)
test_packages=(chromium python3-pil yamllint)
gpu_packages=(build-essential openmpi-bin libopenmpi-dev libopenblas-dev libopenblas-openmp-dev
              libdnnl-dev bats python3 procps)
gpu=0
case "${1:-}" in
    "") ;;
    --test) packages+=("${test_packages[@]}") ;;
    --gpu) packages=("${gpu_packages[@]}"); gpu=1 ;;
    --list) printf '%s\n' "${packages[@]}" "${test_packages[@]}"; exit 0 ;;
    *) echo "deps: usage: deps.sh [--test | --gpu | --list]" >&2; exit 2 ;;
esac

# The CUDA pieces the GPU build compiles and links against, one line each
# that is missing
cuda_missing() {
    local cuda=${CUDA_HOME:-/usr/local/cuda}
    local nccl=${NCCL_HOME:-$cuda} nvcc=${NVCC:-$cuda/bin/nvcc}
    command -v "$nvcc" > /dev/null ||
        echo "deps: nvcc not found at $nvcc: install the CUDA toolkit, or set CUDA_HOME (or NVCC)"
    [ -e "$cuda/include/cublas_v2.h" ] ||
        echo "deps: cuBLAS not found ($cuda/include/cublas_v2.h): it comes with the CUDA toolkit; set CUDA_HOME"
    [ -e "$nccl/include/nccl.h" ] || [ -e /usr/include/nccl.h ] ||
        echo "deps: nccl.h not found in $nccl/include nor /usr/include: install NCCL (NVIDIA's libnccl-dev), or set NCCL_HOME"
}
check_cuda() {
    local why
    why=$(cuda_missing)
    [ -z "$why" ] || { echo "$why" >&2; exit 1; }
}
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    [ "$gpu" -eq 0 ] || check_cuda
    exit 0
fi

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
echo "deps: installing missing packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo="sudo"
else
    echo "deps: missing packages and no root rights. Run:" >&2
    echo "  sudo apt-get update && sudo $cmd" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q || { echo "deps: apt-get update failed; run: sudo apt-get update && sudo $cmd" >&2; exit 1; }
$sudo $cmd -q || { echo "deps: install failed; run: sudo $cmd" >&2; exit 1; }
[ "$gpu" -eq 0 ] || check_cuda
