#!/usr/bin/env bash
# Installs what tandem needs from Debian 12's packages (idempotent, non-interactive) and selects
# OpenBLAS for libblas.so.3: Debian's LibTorch calls whatever BLAS the alternatives system picks,
# and the reference BLAS it falls back to is ~12x slower.
set -euo pipefail

packages=(build-essential cmake ninja-build git
  libtorch-dev libopenmpi-dev openmpi-bin libyaml-cpp-dev libspdlog-dev libcli11-dev catch2
  nlohmann-json3-dev libstb-dev libpcre2-dev pkg-config libopenblas0-openmp python3-torch python3-numpy python3-matplotlib python3-jinja2 clang-format)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

blas=/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3
current=$(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || true)
if [ -e "$blas" ] && [ "$current" != "$blas" ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo update-alternatives --set libblas.so.3-x86_64-linux-gnu "$blas"
fi
echo "setup: dependencies present; libblas.so.3 -> $(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu)"
