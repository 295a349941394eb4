#!/usr/bin/env bash
# Every recipe in the given folder must make `tandem check-config` exit 2 with a one-line error
# containing the text after "# expect:" on the recipe's first line (for an empty recipe, which
# cannot carry that line: the text in <recipe>.expect beside it).
set -u
tandem=$1; dir=$2
fail=0; n=0
for f in "$dir"/*.yaml; do
  n=$((n + 1))
  expect=$(head -1 "$f" | sed -n 's/^# expect: //p')
  [ -s "$f" ] || expect=$(cat "$f.expect" 2>/dev/null)
  [ -n "$expect" ] || { echo "FAIL $f: no '# expect:' line"; fail=1; continue; }
  out=$("$tandem" check-config --config "$f" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL $f: exit $rc, want 2: $out"; fail=1; continue; fi
  if [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ]; then echo "FAIL $f: message is not one line: $out"; fail=1; continue; fi
  case "$out" in
    *"$expect"*) echo "ok   $(basename "$f"): $out" ;;
    *) echo "FAIL $f: message '$out' lacks '$expect'"; fail=1 ;;
  esac
done
[ $n -ge 15 ] || { echo "FAIL: only $n bad recipes"; fail=1; }
exit $fail
