#!/usr/bin/env bash
# scripts/slurm/train.sbatch outside SLURM, with SLURM's environment and a stand-in scontrol: the
# USR1 that SLURM sends before the time limit reaches the ranks through the batch shell, the job
# stops with a checkpoint (exit 3) and requeues itself; the requeued job resumes and finishes.
#   check_sbatch.sh SOURCE_DIR RECIPE
set -u
root=$1; recipe=$2
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
mkdir -p "$out/bin"
printf '#!/bin/sh\necho "scontrol $*" >> %s/calls\n' "$out" >"$out/bin/scontrol"
chmod +x "$out/bin/scontrol"
job() {
  exec env PATH="$out/bin:$PATH" SLURM_SUBMIT_DIR="$root" SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_JOB_ID=77 \
    SLURM_RESTART_COUNT=$1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_rmaps_base_oversubscribe=1 bash "$root/scripts/slurm/train.sbatch" "$recipe" --set run.out_dir="$out" \
    --set run.steps=400 --set tracks.ar.warmstart.steps=0 --set run.save_every=0
}
job 0 >"$out/first.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "step 2/" "$out/first.log" && break; sleep 0.05; done
kill -USR1 $pid
wait $pid; rc=$?
fail=0
[ $rc -eq 3 ] && grep -q "scontrol requeue 77" "$out/calls" 2>/dev/null && grep -q "stopping after step" "$out/first.log" \
  && echo "ok   USR1 to the batch shell: the ranks stop after a checkpoint, exit 3, the job requeues itself" \
  || { echo "FAIL first run: exit $rc"; tail -20 "$out/first.log"; fail=1; }
(job 1) >"$out/second.log" 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q "resume: .* at step" "$out/second.log" && grep -q "done: 400 steps" "$out/second.log" \
  && echo "ok   the requeued job resumes with --resume auto and finishes" \
  || { echo "FAIL requeued run: exit $rc"; tail -20 "$out/second.log"; fail=1; }
exit $fail
