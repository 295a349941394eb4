#!/usr/bin/env bash
# The house style holds everywhere: every C++ file is as clang-format (.clang-format, Google style,
# 120 columns) writes it, and no line of a C++ source or CMake file exceeds 120 characters (what
# clang-format cannot break: long string literals and comments).
set -u
root=$1
cd "$root" || exit 1
command -v clang-format >/dev/null || { echo "FAIL: clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }
mapfile -t cpp < <(git ls-files '*.cpp' '*.h' 2>/dev/null || find apps common core models parallel runtime tests -name '*.cpp' -o -name '*.h')
fail=0
if ! clang-format --style=file --dry-run -Werror "${cpp[@]}" 2>"${TMPDIR:-/tmp}/tandem_format.log"; then
  echo "FAIL: clang-format would change these files (run: clang-format -i --style=file <file>):"
  grep -o '^[^:]*:[0-9]*' "${TMPDIR:-/tmp}/tandem_format.log" | sort -u | head -20
  fail=1
fi
mapfile -t all < <(git ls-files '*.cpp' '*.h' 'CMakeLists.txt' '*/CMakeLists.txt' 2>/dev/null)
"$TANDEM_PYTHON" - "${all[@]}" <<'PY' || fail=1
import sys
bad = [(f, i + 1, len(l.rstrip("\n"))) for f in sys.argv[1:] for i, l in enumerate(open(f, encoding="utf-8"))
       if len(l.rstrip("\n")) > 120]
for f, n, w in bad[:20]:
    print(f"FAIL: {f}:{n}: {w} characters (at most 120)")
print(f"ok   {len(sys.argv) - 1} files, no line over 120 characters" if not bad else "", end="\n" if not bad else "")
sys.exit(1 if bad else 0)
PY
[ $fail -eq 0 ] && echo "ok   ${#cpp[@]} C++ files as clang-format writes them"
exit $fail
