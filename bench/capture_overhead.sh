#!/usr/bin/env bash
# Cost of capturing every layer's hook_resid_post at all positions during sonde batch, against
# the same run without hooks, on the small preset. Prints both times and the ratio (goal <= 1.15).
# usage: bench/capture_overhead.sh [BUILD_DIR] [N_PROMPTS]
set -euo pipefail
build=${1:-build}; n=${2:-200}
sonde="$build/bin/sonde"; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$sonde" make-model --arch qwen2 --preset small --out "$work/model" >/dev/null
for i in $(seq 0 $((n - 1))); do echo "{\"id\": \"p$i\", \"ids\": [$((i % 1000 + 1)), 17, 42, 99, 5, 6, 7, 8]}"; done > "$work/in.jsonl"
run() { local t0 t1; t0=$(date +%s.%N); "$sonde" batch --model "$work/model" --input "$work/in.jsonl" --output "$work/$1.jsonl" \
  --max-new-tokens 32 --temperature 0 --overwrite "${@:2}" 2>/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
run warm >/dev/null
plain=$(run plain)
hooks=$(run hooks --hooks 'blocks.*.hook_resid_post' --acts "$work/acts.h5")
echo "no hooks: ${plain}s  every layer's hook_resid_post: ${hooks}s  ratio: $(echo "scale=3; $hooks / $plain" | bc)"
