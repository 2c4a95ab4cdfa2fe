#!/usr/bin/env bash
# Same-run A/B of `sonde bench --mode prefill` between sonde binaries on one checkpoint,
# interleaved (the host is shared: compare only within a run), tokens/s per round.
# usage: bench/ab_prefill.sh MODEL TOKENS ROUNDS WEIGHTS SONDE1 SONDE2 ...
set -euo pipefail
model=$1 tokens=$2 rounds=$3 weights=$4; shift 4
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); prefill $tokens tokens, weights $weights, 2 threads"
for ((r = 1; r <= rounds; r++)); do
  line="round $r:"
  for s in "$@"; do
    t=$("$s" bench --model "$model" --mode prefill --tokens "$tokens" --backend threaded --threads 2 --weights "$weights" \
          --repeat 2 --json | /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_s"], 1))')
    line+=" $t"
  done
  echo "$line"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
