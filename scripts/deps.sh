#!/usr/bin/env bash
# deps.sh: make sure the Debian packages the kit needs are installed.
# Installs the missing ones with apt-get when it can (root, or sudo without a
# password); otherwise prints the exact command to run and fails.
#   deps.sh          what building, the demo, the benchmarks, the slides, the
#                    tour and the simulated cluster need
#   deps.sh --test   and what only the test suite uses: a headless browser
#                    that screenshots the slides, and PIL to read them
#   deps.sh --list   print both lists' packages, one a line, and install nothing
# A fresh Debian 12 (minbase + build-essential + git) has the rest: what a
# script, suite or Makefile recipe calls comes from one of these packages or
# from the base system (tests/deps.bats checks every command they call).
set -euo pipefail

# column: bsdextrautils; ip, tc: iproute2; pgrep, pkill, ps: procps
packages=(build-essential openmpi-bin libopenmpi-dev libopenblas-dev libopenblas-openmp-dev
          gnuplot-nox bats fortunes-min python3 libxml2-utils pandoc bsdextrautils iproute2
          procps)
test_packages=(chromium python3-pil)
case "${1:-}" in
    "") ;;
    --test) packages+=("${test_packages[@]}") ;;
    --list) printf '%s\n' "${packages[@]}" "${test_packages[@]}"; exit 0 ;;
    *) echo "deps: usage: deps.sh [--test | --list]" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
