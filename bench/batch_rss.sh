#!/usr/bin/env bash
# RSS of sonde batch over thousands of prompts on the small preset, dumping every layer's
# hook_resid_post: samples RSS every second and prints max - min (goal: within 100 MB).
# usage: bench/batch_rss.sh [BUILD_DIR] [N_PROMPTS]
set -euo pipefail
build=${1:-build}; n=${2:-5000}
sonde="$build/bin/sonde"; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$sonde" make-model --arch qwen2 --preset small --out "$work/model" >/dev/null
for i in $(seq 0 $((n - 1))); do echo "{\"id\": \"p$i\", \"ids\": [$((i % 1000 + 1)), 17, 42, 99, 5]}"; done > "$work/in.jsonl"
"$sonde" batch --model "$work/model" --input "$work/in.jsonl" --output "$work/out.jsonl" --max-new-tokens 16 \
  --temperature 0 --hooks 'blocks.*.hook_resid_post' --acts "$work/acts.h5" 2>/dev/null &
pid=$!; : > "$work/rss"
while kill -0 "$pid" 2>/dev/null; do
  awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null >> "$work/rss" || true; sleep 1
done
wait "$pid"
echo "RSS samples (MB), one per second:"; awk '{printf "%.0f ", $1/1024} END {print ""}' "$work/rss"
# The first samples cover loading; the steady state starts after 3 s.
tail -n +4 "$work/rss" | awk 'NR==1 {mn=$1; mx=$1} {if ($1<mn) mn=$1; if ($1>mx) mx=$1} END {printf "steady max - min: %.1f MB\n", (mx-mn)/1024}'
