#!/usr/bin/env bash
# Packs what scripts/gpu/check.sh needs on a bare GPU machine that has PyTorch but no network:
# tandem and its test binaries built here (against the pinned torch, whose LibTorch the GPU
# machine's torch provides at run time), the shared libraries they load that are neither the C
# library nor LibTorch / CUDA / NCCL (yaml-cpp, spdlog, fmt, pcre2, ...), Open MPI's runtime
# (mpirun, its components and help files, their libraries) and the real Qwen2.5 tokenizer files
# the real-size stage uses. One tar.gz of at most 64 MiB plus a manifest, unpacked by check.sh
# into a private prefix (never into /).
#
#   scripts/gpu/pack.sh [OUT_DIR]     default build/gpu-pack (ignored by git; carry it to the GPU)
# Env: TANDEM_BUILD_DIR (default build), TANDEM_PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${TANDEM_BUILD_DIR:-build}
out=${1:-$build/gpu-pack}
: "${TANDEM_PYTHON:=$PWD/.venv/bin/python}"
for f in "$build/tandem" "$build/tests/tandem_tests" "$build/tests/tandem_mpi_tests"; do
  [ -x "$f" ] || { echo "pack: $f missing; build first (scripts/build.sh)" >&2; exit 2; }
done
tok=$build/_deps/tokenizers/qwen2_5
[ -f "$tok/tokenizer.json" ] || bash scripts/fixtures/fetch_tokenizers.sh "$build/_deps/tokenizers" >/dev/null ||
  echo "pack: WARN: no Qwen2.5 tokenizer files (above); check.sh will skip its real_size stage" >&2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/tandem-gpu
mkdir -p "$root/bin" "$root/lib" "$root/openmpi" "$root/tokenizers"
cp "$build/tandem" "$build/tests/tandem_tests" "$build/tests/tandem_mpi_tests" "$root/bin/"
[ -f "$tok/tokenizer.json" ] && cp -r "$tok" "$root/tokenizers/qwen2_5"

# Open MPI's runtime, at its Debian paths under openmpi/ (check.sh sets OPAL_PREFIX to openmpi/usr).
for pkg in openmpi-bin libopenmpi3 openmpi-common; do
  dpkg -L "$pkg" | while read -r f; do
    [ -f "$f" ] || continue
    case "$f" in
      /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | *.a | */include/* | *java* | *fortran* | *mpifh* | \
        *usempi* | *oshmem* | *spml* | *scoll* | *sshmem* | *memheap* | *atomic_*) continue ;;  # C/C++ ranks only
    esac
    mkdir -p "$root/openmpi$(dirname "$f")"
    cp -P "$f" "$root/openmpi$f"
  done
done
cp -rP /etc/openmpi "$root/openmpi/etc/" 2>/dev/null || mkdir -p "$root/openmpi/etc/openmpi"
# mpirun / mpiexec are update-alternatives links on Debian, not the package's files.
for name in mpirun mpiexec; do ln -sf orterun "$root/openmpi/usr/bin/$name"; done

# The libraries every packed ELF loads, but those any Linux with PyTorch has (the C library, the
# C++ runtime) and those the GPU machine's torch brings (LibTorch, CUDA, NCCL).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil\.so|libstdc\+\+|libgcc_s|libtorch|libc10|libcuda|libcudart|libnccl|libnvrtc|libcublas|libcudnn|libcufft|libcurand|libcusparse|libcusolver|libnvJitLink|libnvToolsExt|libcupti|libgomp|libshm|libcaffe2)'
find "$root/bin" "$root/openmpi" -type f \( -name '*.so*' -o -perm -u+x \) | while read -r elf; do
  file -b "$elf" | grep -q ELF || continue
  ldd "$elf" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  case "$path" in */site-packages/*) continue ;; esac  # torch's own NVIDIA libraries (nvshmem, cufile, ...)
  [ -e "$root/lib/$name" ] || cp -L "$path" "$root/lib/$name"
done

"$TANDEM_PYTHON" - "$root/manifest.json" <<'PY'
import json, subprocess, sys, torch
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
json.dump({"torch": torch.__version__.split("+")[0], "torch_cuda": torch.version.cuda, "commit": commit,
           "built_on": subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip()},
          open(sys.argv[1], "w"), indent=1)
PY
mkdir -p "$out"
tar -C "$stage" -czf "$out/tandem-gpu.tar.gz" tandem-gpu
bytes=$(stat -c %s "$out/tandem-gpu.tar.gz")
cp "$root/manifest.json" "$out/manifest.json"
echo "pack: $out/tandem-gpu.tar.gz, $((bytes / 1048576)) MiB ($(find "$root" -type f | wc -l) files)"
[ "$bytes" -le $((64 * 1048576)) ] || { echo "pack: over the 64 MiB that may travel" >&2; exit 1; }
