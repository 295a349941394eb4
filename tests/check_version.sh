#!/usr/bin/env bash
# `tandem --version` names the LibTorch it was built on and states CUDA and NCCL compiled in (CI's
# build links the CUDA LibTorch of PyTorch's wheel), and exactly one cudart and one NCCL are loaded,
# both the wheel's (nvidia/ beside torch/ in the project's virtual environment), not the toolkit's.
# Usage: check_version.sh TANDEM
set -u
tandem=$1
out=$("$tandem" --version 2>&1); rc=$?
echo "$out"
fail=0
bad() { echo "FAIL $1"; fail=1; }
[ $rc -eq 0 ] || bad "exit $rc"
torch_version=$("$TANDEM_PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])')
nvidia=$("$TANDEM_PYTHON" -c 'import os, torch; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia")))')
grep -q "^LibTorch $torch_version (CUDA build)$" <<<"$out" || bad "no 'LibTorch $torch_version (CUDA build)' line"
grep -q "^CUDA: compiled in; runtime [0-9][0-9.]* from " <<<"$out" || bad "CUDA is not compiled in"
grep -q "^NCCL: compiled in; [0-9][0-9.]* from " <<<"$out" || bad "NCCL is not compiled in"
for lib in cudart nccl; do
  line=$(grep -i "^${lib/cudart/CUDA}:" <<<"$out")
  paths=${line##* from }
  n=$(tr ',' '\n' <<<"$paths" | grep -c "lib$lib")
  [ "$n" -eq 1 ] || bad "$lib: $n copies loaded: $paths"
  [[ "$(realpath -m "$paths")" == "$nvidia"/* ]] || bad "$lib loaded from $paths, not from the wheel's $nvidia"
done
[ $fail -eq 0 ] && echo "ok   LibTorch $torch_version with CUDA and NCCL; one cudart and one NCCL, the wheel's"
exit $fail
