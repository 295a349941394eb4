#!/usr/bin/env bash
# A killed, hung or failing rank takes the whole job down with a non-zero exit within the
# collective timeout + 10 s, leaving no process behind.
set -u
prog=$1; mpirun=$2; timeout_s=${3:-5}
fail=0
run_case() {  # mode
  local mode=$1 dir; dir=$(mktemp -d)
  local start; start=$(date +%s%N)
  # The outer timeout is a hard stop far beyond the bound, so a regression fails instead of hanging CI.
  timeout -s KILL $((timeout_s * 4 + 30)) $mpirun --oversubscribe --allow-run-as-root -np 2 \
    "$prog" "$mode" "$dir" "$timeout_s" >"$dir/log" 2>&1 &
  local launcher=$!
  if [ "$mode" = kill ]; then
    for _ in $(seq 100); do [ -s "$dir/pid.1" ] && break; sleep 0.1; done
    sleep 1
    kill -KILL "$(cat "$dir/pid.1")"
  fi
  wait $launcher; local rc=$?
  local elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  # A rank still alive (not a zombie awaiting its reaper) after the launcher returned is a leak.
  sleep 1
  local left=0
  for f in "$dir"/pid.*; do
    local st; st=$(ps -o stat= -p "$(cat "$f")" 2>/dev/null)
    [ -n "$st" ] && [ "${st:0:1}" != Z ] && left=$((left + 1))
  done
  local bound_ms=$(( (timeout_s + 10) * 1000 ))
  if [ $rc -ne 0 ] && [ $left -eq 0 ] && [ $elapsed_ms -lt $bound_ms ]; then
    echo "ok   $mode: exit $rc after ${elapsed_ms} ms (bound ${bound_ms} ms), no process left"
  else
    echo "FAIL $mode: exit $rc after ${elapsed_ms} ms (bound ${bound_ms} ms), $left processes left"; tail -20 "$dir/log"; fail=1
    for f in "$dir"/pid.*; do kill -KILL "$(cat "$f")" 2>/dev/null; done
  fi
  rm -rf "$dir"
}
run_case kill
run_case hang
run_case throw
exit $fail
