#!/usr/bin/env bash
# Issue 28's Dream-7B generation: a dual-cache + confidence-threshold (0.9) generation of 256 tokens after a
# 64-token prompt, block 32, 2 threads, in each compute mode (f32, bf16, int8 over --weights q8); prints per mode
# the tokens, the steps (--history), the time from the session's "loaded" debug line to the process's exit
# (loading and the q8 copy excluded) and tokens/s. Random weights are never 0.9-confident, so every step commits
# one token: 256 steps, one refresh per block of 32 and cached steps between. 20-40 minutes a mode on 2 cores.
#
# usage: bench/dream7b_dual.sh [DIR] [SONDE] [MODES]   (default /tmp/sonde-dream7b-bf16 (bench/dream7b.sh makes
#        it), build/bin/sonde, "f32 bf16 int8")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-/tmp/sonde-dream7b-bf16}
sonde=${2:-$here/../build/bin/sonde}
modes=${3:-f32 bf16 int8}
[[ -x $sonde ]] || { echo "dream7b_dual: no sonde program at $sonde" >&2; exit 2; }
[[ -f $dir/config.json ]] || { echo "dream7b_dual: $dir/config.json: no such file (bench/dream7b.sh makes the preset)" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
ids=$(seq -s, 1000 1063)
cat "$dir"/*.safetensors > /dev/null  # into the page cache, outside the timing
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | awk '/CPU family/{print $3}') model $(lscpu | awk '/^Model:/{print $2}')"
for mode in $modes; do
  weights=native; [[ $mode == int8 ]] && weights=q8
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  "$sonde" generate --model "$dir" --ids "$ids" --max-new-tokens 256 --diffusion-mode dual-cache --block-size 32 \
      --alg confidence_threshold --threshold 0.9 --backend threaded --threads 2 --compute "$mode" --weights "$weights" \
      --json --history --log-level debug > "$work/out.json" 2> "$work/err.txt"
  end=$(date +%H:%M:%S.%N)
  /usr/bin/python3 - "$mode" "$end" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$work" <<'PY'
import json, re, sys
mode, end, l0, l1, work = sys.argv[1:]
loaded = re.search(r"\[(\d+):(\d+):([\d.]+)\] \[debug\] loaded ", open(f"{work}/err.txt").read()).groups()
sec = lambda h, m, s: int(h) * 3600 + int(m) * 60 + float(s)
dt = sec(*end.split(":")) - sec(*loaded)
dt += 86400 if dt < 0 else 0  # past midnight
j = json.loads(open(f"{work}/out.json").read().splitlines()[0])
steps, n = len(j["history"]), len(j["completion_ids"])
print(f"{mode}: {n} tokens in {steps} steps (dual cache, threshold 0.9, block 32): {dt:.1f} s after loading, "
      f"{n / dt:.2f} tokens/s, {dt / steps:.2f} s a step; load {l0} -> {l1}")
PY
done
