#!/usr/bin/env bash
# Data-parallel `sonde batch` under mpiexec (docs/scale-out.md), as a user runs it. One case per
# ctest entry:  dp_batch_test.sh SONDE CHECK_JOIN CASE [MPIEXEC ARGS...]
#   equal ARCH N   mpiexec -n N gives results and per-prompt activations equal to one process
#   tp             mpiexec -n 2 --tensor-parallel 2 (one copy split over two ranks): equal too
#   kill           SIGKILL of one rank ends the job; --resume completes it, equal to one process
#   errors         bad input across ranks: one line, non-zero exit of the whole job, no hang
#   features ARCH N  with an SAE: sparse activations (--sae-sparse) and the feature dashboard
#                  (--feature-stats) of mpiexec -n N equal one process's (compare_features.py)
#   features_kill  the features case under the kill case: SIGKILL of one rank, --resume, and the
#                  joined dashboard equals one uninterrupted process's (compare_features.py)
#   edges          issue 29's rough edges: mpiexec without --backend sharded (one line, no run),
#                  an empty --acts folder made beforehand (taken), a one-process --resume of the
#                  data-parallel run's outputs (one line saying so)
#   rerun          --overwrite of a larger job's outputs by a smaller one, down to a copy with no
#                  prompt: the old run's counts neither show nor break the new one
set -euo pipefail
sonde=$1; check=$2; case=$3; shift 3
src=$(cd "$(dirname "$check")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
work=$(mktemp -d "${TMPDIR:-/tmp}/sonde-mpi-XXXXXX")
keep() { echo "files kept in $work"; }
trap 'st=$?; if [ $st -eq 0 ]; then rm -rf "$work"; else keep; fi' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

dataset() {  # dataset N: N prompts of mixed lengths
  for i in $(seq 0 $(($1 - 1))); do echo "{\"id\": \"p$i\", \"prompt\": \"item $i: $(seq -s ' ' 1 $((i % 7 + 1)))\"}"; done > in.jsonl
}

# Waits (up to 60 s: a loaded host starts slowly) until rank 1 of the job $job has committed
# prompts, then sets victim to one of that job's ranks: a child of this mpiexec, never another
# run's process that matches the same command line.
wait_commit_then_pick_victim() {
  for _ in $(seq 1200); do
    [ -s dp.jsonl.parts/rank-1.jsonl ] && break; sleep 0.05
  done
  [ -s dp.jsonl.parts/rank-1.jsonl ] || { cat kill.log; fail "rank 1 committed nothing within 60 s"; }
  victim=$(pgrep -P "$job" -n -f -- "--output dp.jsonl" | head -1)
  [ -n "$victim" ] || fail "no rank of this job to kill"
}

case $case in
equal)
  arch=$1 n=$2; shift 2
  "$sonde" make-model --arch "$arch" --preset tiny --out m >/dev/null
  dataset 200
  gen=(--max-new-tokens 6 --temperature 0 --batch-size 3)
  [ "$arch" = dream ] && gen=(--max-new-tokens 6 --steps 3 --batch-size 3)
  "$sonde" batch --model m --input in.jsonl --output one.jsonl "${gen[@]}" --threads 1 \
    --hooks 'blocks.*.hook_resid_post,blocks.0.mlp.hook_post' --acts one.h5 2>/dev/null
  timeout 120 mpiexec -n "$n" --oversubscribe --bind-to none "$@" "$sonde" batch --backend sharded --model m \
    --input in.jsonl --output dp.jsonl "${gen[@]}" --threads 1 --hooks 'blocks.*.hook_resid_post,blocks.0.mlp.hook_post' \
    --acts acts > dp.log 2>&1 || { cat dp.log; fail "mpiexec -n $n batch exited $?"; }
  cmp one.jsonl dp.jsonl || fail "results differ from one process"
  [ "$(ls acts | tr '\n' ' ')" = "$(for r in $(seq 0 $((n - 1))); do printf 'rank-%d.h5 ' "$r"; done)run.h5 " ] || fail "acts/ holds $(ls acts)"
  /usr/bin/python3 "$check" one.h5 acts/run.h5 || fail "run.h5 differs from one process's file"
  [ "$(grep -c 'done:' dp.log)" = 1 ] || { cat dp.log; fail "expected one summary (rank 0's)"; }
  ;;
features)
  arch=$1 n=$2; shift 2
  "$sonde" make-model --arch "$arch" --preset tiny --out m >/dev/null
  dataset 40
  gen=(--max-new-tokens 6 --temperature 0 --batch-size 3 --threads 1 --sae "$src/tests/data/sae/topk_flat" --sae-sparse nonzero
       --hooks 'blocks.1.hook_resid_post.hook_sae_acts_post,blocks.1.hook_resid_post.hook_sae_recons')
  [ "$arch" = dream ] && gen+=(--steps 3 --diffusion-capture all)
  "$sonde" batch --model m --input in.jsonl --output one.jsonl "${gen[@]}" --acts one.h5 --feature-stats one_f.h5 2>/dev/null
  timeout 120 mpiexec -n "$n" --oversubscribe --bind-to none "$@" "$sonde" batch --backend sharded --model m \
    --input in.jsonl --output dp.jsonl "${gen[@]}" --acts acts --feature-stats feats > dp.log 2>&1 \
    || { cat dp.log; fail "mpiexec -n $n batch exited $?"; }
  cmp one.jsonl dp.jsonl || fail "results differ from one process"
  [ "$(ls feats | tr '\n' ' ')" = "$(for r in $(seq 0 $((n - 1))); do printf 'rank-%d.h5 ' "$r"; done)run.h5 " ] || fail "feats/ holds $(ls feats)"
  /usr/bin/python3 "$check" one.h5 acts/run.h5 || fail "run.h5 differs from one process's file"
  /usr/bin/python3 "$src/tests/mpi/compare_features.py" one_f.h5 feats/run.h5 acts/run.h5 \
    || fail "the joined feature file differs from one process's"
  ;;
features_kill)
  "$sonde" make-model --arch qwen2 --preset tiny --out m >/dev/null
  dataset 300
  gen=(--max-new-tokens 8 --temperature 0 --batch-size 2 --checkpoint-every 2 --threads 1 --sae "$src/tests/data/sae/topk_flat"
       --sae-sparse nonzero --hooks 'blocks.1.hook_resid_post.hook_sae_acts_post')
  "$sonde" batch --model m --input in.jsonl --output one.jsonl "${gen[@]}" --acts one.h5 --feature-stats one_f.h5 2>/dev/null
  mpiexec -n 2 --bind-to none "$@" "$sonde" batch --backend sharded --model m --input in.jsonl --output dp.jsonl \
    "${gen[@]}" --acts acts --feature-stats feats > kill.log 2>&1 &
  job=$!
  wait_commit_then_pick_victim
  kill -9 "$victim"
  if wait "$job"; then fail "the job exited 0 after a rank was killed"; fi
  [ ! -e dp.jsonl ] || fail "a killed job joined its results"
  [ ! -e feats/run.h5 ] || fail "a killed job joined its feature statistics"
  timeout 120 mpiexec -n 2 --bind-to none "$@" "$sonde" batch --backend sharded --model m --input in.jsonl \
    --output dp.jsonl "${gen[@]}" --acts acts --feature-stats feats --resume > resume.log 2>&1 \
    || { cat resume.log; fail "resume exited $?"; }
  n=$(sed -n 's/.*resuming after \([0-9]*\) committed prompts.*/\1/p' resume.log)
  [ -n "$n" ] && [ "$n" -gt 0 ] && [ "$n" -lt 300 ] || { cat resume.log; fail "the resume did not continue a partly committed run"; }
  cmp one.jsonl dp.jsonl || fail "resumed results differ from one process"
  # The activations after a kill are the kill case's (check_join.py takes 8 s here); the top
  # contexts are still looked up in them, row by row, by compare_features.py.
  /usr/bin/python3 "$src/tests/mpi/compare_features.py" one_f.h5 feats/run.h5 acts/run.h5 --exact-sums \
    || fail "the resumed joined feature file differs from one uninterrupted process's"
  echo "resumed after $n of 300 prompts"
  ;;
tp)
  "$sonde" make-model --arch qwen2 --preset tiny --out m >/dev/null
  dataset 30
  gen=(--max-new-tokens 6 --temperature 0 --batch-size 3 --threads 1 --hooks 'blocks.*.hook_resid_post')
  "$sonde" batch --model m --input in.jsonl --output one.jsonl "${gen[@]}" --acts one.h5 2>/dev/null
  timeout 120 mpiexec -n 2 --bind-to none "$@" "$sonde" batch --backend sharded --tensor-parallel 2 --model m \
    --input in.jsonl --output tp.jsonl "${gen[@]}" --acts acts > tp.log 2>&1 || { cat tp.log; fail "tp batch exited $?"; }
  cmp one.jsonl tp.jsonl || fail "results differ from one process"
  [ "$(ls acts | tr '\n' ' ')" = "rank-0.h5 run.h5 " ] || fail "acts/ holds $(ls acts)"
  /usr/bin/python3 "$check" one.h5 acts/run.h5 1e-5 || fail "run.h5 differs from one process's file"
  ;;
kill)
  "$sonde" make-model --arch qwen2 --preset tiny --out m >/dev/null
  dataset 400
  gen=(--max-new-tokens 12 --temperature 0 --batch-size 2 --checkpoint-every 2 --threads 1)
  "$sonde" batch --model m --input in.jsonl --output one.jsonl "${gen[@]}" --hooks 'blocks.*.hook_resid_post' --acts one.h5 2>/dev/null
  mpiexec -n 2 --bind-to none "$@" "$sonde" batch --backend sharded --model m --input in.jsonl --output dp.jsonl \
    "${gen[@]}" --hooks 'blocks.*.hook_resid_post' --acts acts > kill.log 2>&1 &
  job=$!
  wait_commit_then_pick_victim
  kill -9 "$victim"
  t0=$(date +%s)
  if wait "$job"; then fail "the job exited 0 after a rank was killed"; fi
  [ $(( $(date +%s) - t0 )) -lt 30 ] || fail "the job took more than 30 s to end after a rank was killed"
  [ ! -e dp.jsonl ] || fail "a killed job joined its results"
  timeout 120 mpiexec -n 2 --bind-to none "$@" "$sonde" batch --backend sharded --model m --input in.jsonl \
    --output dp.jsonl "${gen[@]}" --hooks 'blocks.*.hook_resid_post' --acts acts --resume > resume.log 2>&1 \
    || { cat resume.log; fail "resume exited $?"; }
  grep -q "resuming after" resume.log || { cat resume.log; fail "the resume did not continue a committed run"; }
  # One count of what earlier runs committed, the whole job's, in the note and the summary alike.
  [ "$(grep -c "resuming after" resume.log)" = 1 ] || { cat resume.log; fail "more than one resume note"; }
  n=$(sed -n 's/.*resuming after \([0-9]*\) committed prompts.*/\1/p' resume.log)
  grep -q "done: $((400 - n)) prompts ($n before this run)" resume.log || { cat resume.log; fail "the summary counts other than the note's $n"; }
  cmp one.jsonl dp.jsonl || fail "resumed results differ from one process"
  /usr/bin/python3 "$check" one.h5 acts/run.h5 || fail "resumed run.h5 differs from one process's file"
  ;;
errors)
  "$sonde" make-model --arch qwen2 --preset tiny --out m >/dev/null
  dataset 10
  base=(batch --backend sharded --model m --input in.jsonl --max-new-tokens 2 --threads 1)
  expect_error() {  # expect_error NAME PATTERN CMD...: non-zero, bounded, the pattern in the output
    local name=$1 pattern=$2 st=0; shift 2
    timeout 60 "$@" > "$name.log" 2>&1 || st=$?
    [ $st -ne 0 ] || fail "$name: exit 0"
    [ $st -ne 124 ] || fail "$name: still running after 60 s"
    grep -q -- "$pattern" "$name.log" || { cat "$name.log"; fail "$name: no '$pattern'"; }
  }
  expect_error tp "^sonde batch: error: .*3 ranks per model copy do not divide the job's 2 ranks" \
    mpiexec -n 2 --bind-to none "$@" "$sonde" "${base[@]}" --output a.jsonl --tensor-parallel 3
  touch file.h5
  expect_error acts_file "file.h5 is a file, but a data-parallel run (2 model copies)" \
    mpiexec -n 2 --bind-to none "$@" "$sonde" "${base[@]}" --output b.jsonl --hooks blocks.0.hook_resid_post --acts file.h5 --overwrite
  expect_error options "rank 1 has other options or input than rank 0's" \
    mpiexec --bind-to none "$@" -n 1 "$sonde" "${base[@]}" --output c.jsonl : -n 1 "$sonde" "${base[@]}" --output c.jsonl --seed 5
  expect_error model "" \
    mpiexec --bind-to none "$@" -n 1 "$sonde" "${base[@]}" --output d.jsonl : -n 1 "$sonde" batch --backend sharded \
    --model nosuch --input in.jsonl --max-new-tokens 2 --threads 1 --output d.jsonl
  grep -q "nosuch" model.log || { cat model.log; fail "model: the error does not name the model"; }
  [ ! -e d.jsonl ] || fail "model: a results file was written"
  ;;
rerun)
  "$sonde" make-model --arch qwen2 --preset tiny --out m >/dev/null
  base=(batch --backend sharded --model m --max-new-tokens 3 --temperature 0 --threads 1 --output dp.jsonl --overwrite)
  dataset 10 && mv in.jsonl ten.jsonl && dataset 1 && mv in.jsonl one.jsonl
  "$sonde" batch --model m --input one.jsonl --max-new-tokens 3 --temperature 0 --threads 1 --output single.jsonl 2>/dev/null
  timeout 120 mpiexec -n 2 --bind-to none "$@" "$sonde" "${base[@]}" --input ten.jsonl > ten.log 2>&1 \
    || { st=$?; cat ten.log; fail "the 10-prompt job exited $st"; }
  timeout 120 mpiexec -n 2 --bind-to none "$@" "$sonde" "${base[@]}" --input one.jsonl > one.log 2>&1 \
    || { st=$?; cat one.log; fail "the 1-prompt job over the 10-prompt job's outputs exited $st"; }
  cmp single.jsonl dp.jsonl || fail "results differ from one process"
  grep -q "progress: .* 1/1 prompts" one.log || { cat one.log; fail "no progress line of 1/1"; }
  if grep "progress:" one.log | grep -v " 1/1 prompts" | grep -q .; then cat one.log; fail "a progress line counts another run"; fi
  grep -q "done: 1 prompts (0 before this run)" one.log || { cat one.log; fail "the summary counts another run"; }
  ;;
edges)
  "$sonde" make-model --arch qwen2 --preset tiny --out m >/dev/null
  dataset 6
  base=(batch --model m --input in.jsonl --max-new-tokens 2 --threads 1)
  st=0
  timeout 60 mpiexec -n 2 --bind-to none "$@" "$sonde" "${base[@]}" --output u.jsonl > unsharded.log 2>&1 || st=$?
  [ $st -ne 0 ] || { cat unsharded.log; fail "unsharded: exit 0"; }
  [ "$(grep -c 'sonde batch: error:' unsharded.log)" = 1 ] || { cat unsharded.log; fail "unsharded: not one error line"; }
  grep -q "sonde batch: error: --backend: started by mpiexec as 2 processes.*add --backend sharded" unsharded.log \
    || { cat unsharded.log; fail "unsharded: the line does not say to add --backend sharded"; }
  [ ! -e u.jsonl ] || fail "unsharded: a results file was written"
  mkdir acts
  timeout 120 mpiexec -n 2 --bind-to none "$@" "$sonde" "${base[@]}" --backend sharded --output dp.jsonl \
    --hooks blocks.0.hook_resid_post --acts acts > empty_dir.log 2>&1 || { cat empty_dir.log; fail "an empty --acts folder was refused"; }
  [ -e acts/run.h5 ] || { ls acts; fail "no acts/run.h5"; }
  st=0  # refused before the job forms, on every rank: one line
  timeout 60 mpiexec -n 2 --bind-to none "$@" "$sonde" "${base[@]}" --backend sharded --output dp.jsonl > exists.log 2>&1 || st=$?
  [ $st -ne 0 ] || fail "existing output: exit 0"
  [ "$(grep -c 'sonde batch: error:' exists.log)" = 1 ] || { cat exists.log; fail "existing output: not one error line"; }
  grep -q "sonde batch: error: --output: dp.jsonl exists" exists.log || { cat exists.log; fail "existing output: no line naming it"; }
  st=0
  timeout 60 "$sonde" "${base[@]}" --output dp.jsonl --hooks blocks.0.hook_resid_post --acts acts --resume > one.log 2>&1 || st=$?
  [ $st -eq 2 ] || { cat one.log; fail "one-process resume: exit $st, not 2"; }
  [ "$(wc -l < one.log)" = 1 ] || { cat one.log; fail "one-process resume: not one line"; }
  grep -q "sonde batch: error: --acts: acts is the directory of a data-parallel run.*resume it under mpiexec" one.log \
    || { cat one.log; fail "one-process resume: the line does not say what the folder is"; }
  ;;
*) fail "unknown case $case" ;;
esac
echo "PASS $case $*"
