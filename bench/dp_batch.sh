#!/usr/bin/env bash
# Data-parallel batch (docs/scale-out.md): the same prompts through `sonde batch` as
#   A: 1 process x 1 thread, B: 1 process x 2 threads, C: mpiexec -n 2 x 1 thread (--backend sharded)
# in one run, best of REPS each; prints the times and the ratios C vs A (target >= 1.8x) and C vs B
# (target >= 1.0x), and checks that C's results equal A's. The job must be long against mpiexec's
# start (about half a second): on the small preset 200 prompts take under a second, so the
# default is the qwen2.5-0.5b shape. A rank's time is set by its number of micro-batches (each
# decode step streams every weight once, whatever its rows): 200 prompts in micro-batches of 8
# are 25 for one process and 13 for the busier of two ranks (26/25 of the work), so the default
# is 400 prompts (25 per rank); the script prints the counts.
# usage: bench/dp_batch.sh [BUILD_DIR] [N_PROMPTS] [REPS] [PRESET] [NEW_TOKENS] [BATCH_SIZE]
set -euo pipefail
build=${1:-build}; n=${2:-400}; reps=${3:-3}; preset=${4:-qwen2.5-0.5b}; new_tokens=${5:-24}; batch_size=${6:-8}
sonde="$(cd "$build" && pwd)/bin/sonde"; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
"$sonde" make-model --arch qwen2 --preset "$preset" --dtype bf16 --out "$work/model" >/dev/null
for i in $(seq 0 $((n - 1))); do
  len=$((4 + i % 13)); ids=$(seq -s, $((i % 500 + 1)) $((i % 500 + len)))
  echo "{\"id\": \"p$i\", \"ids\": [$ids]}"
done > "$work/in.jsonl"
args=(batch --model "$work/model" --input "$work/in.jsonl" --max-new-tokens "$new_tokens" --temperature 0 --overwrite
      --batch-size "$batch_size")
best() {  # best() NAME CMD...: the fastest of $reps runs, in seconds
  local name=$1 b=""; shift
  for _ in $(seq "$reps"); do
    local t0 t1 t; t0=$(date +%s.%N); "$@" --output "$work/$name.jsonl" >/dev/null 2>&1; t1=$(date +%s.%N)
    t=$(echo "$t1 - $t0" | bc); if [ -z "$b" ] || [ "$(echo "$t < $b" | bc)" = 1 ]; then b=$t; fi
  done
  echo "$b"
}
a=$(best a "$sonde" "${args[@]}" --threads 1)
b=$(best b "$sonde" "${args[@]}" --threads 2)
c=$(best c mpiexec -n 2 --bind-to none "$sonde" "${args[@]}" --threads 1 --backend sharded)
cmp -s "$work/a.jsonl" "$work/c.jsonl" && same="equal" || same="DIFFER"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); $preset bf16, $new_tokens new tokens, micro-batches of $batch_size"
per_rank=$(( (n + 1) / 2 )); echo "micro-batches: $(( (n + batch_size - 1) / batch_size )) in one process, $(( (per_rank + batch_size - 1) / batch_size )) on the busier rank"
echo "prompts $n: 1x1 ${a}s  1x2 ${b}s  2 ranks x1 ${c}s  results of 2 ranks vs 1 process: $same"
echo "2 ranks x 1 thread vs 1 process x 1 thread: $(echo "scale=2; $a / $c" | bc)x (target >= 1.8)"
echo "2 ranks x 1 thread vs 1 process x 2 threads: $(echo "scale=2; $b / $c" | bc)x (target >= 1.0)"
