#!/usr/bin/env bash
# CLI contract: --help/--version exit 0; bad flags, bad --set and missing files exit 2 with one line.
set -u
tandem=$1
fail=0
expect_rc() {  # want_rc, description, command...
  local want=$1 what=$2; shift 2
  "$@" >/tmp/tandem_cli_out.$$ 2>&1; local rc=$?
  if [ $rc -ne $want ]; then echo "FAIL $what: exit $rc, want $want"; cat /tmp/tandem_cli_out.$$; fail=1; else echo "ok   $what"; fi
}
expect_rc 0 "--help" "$tandem" --help
expect_rc 0 "--version" "$tandem" --version
"$tandem" --version | grep -q '^tandem [0-9]' || { echo "FAIL --version text"; fail=1; }
expect_rc 0 "check-config (embedded quickstart)" "$tandem" check-config
expect_rc 2 "no subcommand" "$tandem"
expect_rc 2 "unknown flag" "$tandem" check-config --bogus
expect_rc 2 "missing recipe file" "$tandem" check-config --config /nonexistent.yaml
expect_rc 2 "bad --set" "$tandem" check-config --set tracks.ar.rollout.group_size=abc
expect_rc 2 "layout vs world size" "$tandem" check-config --set parallel.dp=3 --world-size 4
expect_rc 0 "--set applied" "$tandem" check-config --set tracks.ar.rollout.group_size=4 --set run.seed=7
"$tandem" check-config --set run.seed=7 | grep -q '^  seed: 7$' || { echo "FAIL --set not in resolved recipe"; fail=1; }
# The resolved recipe is itself a valid recipe that resolves to the same text.
"$tandem" check-config --set optim.lr=2.5e-4 > /tmp/tandem_resolved.$$.yaml
"$tandem" check-config --config /tmp/tandem_resolved.$$.yaml | cmp -s - /tmp/tandem_resolved.$$.yaml \
  || { echo "FAIL resolved recipe does not round-trip"; fail=1; }
# bench rollout: a tiny model prints one JSON object with both comparisons; bad dims exit 2.
tiny_rollout=(bench rollout --hidden-size 32 --layers 1 --heads 4 --kv-heads 2 --vocab 64 --prompt-len 4
              --max-new-tokens 6 --batch 2 --requests 5)
expect_rc 0 "bench rollout (tiny)" "$tandem" "${tiny_rollout[@]}"
"$tandem" "${tiny_rollout[@]}" | grep -q '"kv_cache_speedup".*"continuous_speedup"' \
  || { echo "FAIL bench rollout JSON"; fail=1; }
expect_rc 2 "bench rollout --batch 0" "$tandem" bench rollout --batch 0
# bench train: a tiny workload prints the step figures; bad length files and flags exit 2.
printf '6\n9\n9\n4\n' > /tmp/tandem_lengths.$$
tiny_train=(bench train --lengths /tmp/tandem_lengths.$$ --hidden 32 --layers 1 --heads 2 --vocab 16
            --layout auto --micro-batch-size 2 --steps 1 --warmup 0 --threads 1)
expect_rc 0 "bench train (tiny)" "$tandem" "${tiny_train[@]}"
"$tandem" "${tiny_train[@]}" | grep -q '"mfu".*"tokens_per_s".*"padded_micros":1' \
  || { echo "FAIL bench train JSON (one padding-free micro of the two)"; fail=1; }
printf '6\nabc\n' > /tmp/tandem_lengths_bad.$$
expect_rc 2 "bench train bad lengths file" "$tandem" bench train --lengths /tmp/tandem_lengths_bad.$$
expect_rc 2 "bench train missing lengths file" "$tandem" bench train --lengths /nonexistent
expect_rc 2 "bench train --layout bogus" "$tandem" bench train --lengths /tmp/tandem_lengths.$$ --layout bogus
rm -f /tmp/tandem_cli_out.$$ /tmp/tandem_resolved.$$.yaml /tmp/tandem_lengths.$$ /tmp/tandem_lengths_bad.$$
exit $fail
