#!/usr/bin/env bash
# Installs what tandem needs (idempotent, non-interactive):
#  - Debian 12's packages: compilers, Open MPI, yaml-cpp, spdlog (with Debian's fmt), CLI11, Catch2,
#    nlohmann-json, stb, PCRE2, utf8proc, clang-format, python3-venv;
#  - a project virtual environment (.venv, or $TANDEM_VENV) with the pinned packages of
#    scripts/requirements.txt: PyTorch 2.x, whose LibTorch (CUDA build) tandem links, and the test
#    oracles transformers and tokenizers.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build git pkg-config
  libopenmpi-dev openmpi-bin libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev catch2
  nlohmann-json3-dev libstb-dev libpcre2-dev libutf8proc-dev python3 python3-venv clang-format)

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

venv=${TANDEM_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating the virtual environment $venv"
  /usr/bin/python3 -m venv "$venv"
fi
# pip's own check is slow with torch's many wheels: skip it when the pins are already there.
stamp="$venv/.tandem-requirements"
if ! cmp -s scripts/requirements.txt "$stamp"; then
  start=$(date +%s)
  echo "setup: installing scripts/requirements.txt into $venv (PyTorch's wheel and its CUDA libraries: ~5 GB)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --progress-bar off -r scripts/requirements.txt
  cp scripts/requirements.txt "$stamp"
  echo "setup: pip took $(( $(date +%s) - start )) s"
fi
echo "setup: dependencies present; $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')"
