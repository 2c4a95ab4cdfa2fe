#!/usr/bin/env bash
# The exact f32 prefill against the host's FMA peak (issue 28): the peak measured first in the same window
# (bench/isa_peak.cpp on both cores at once: register-only vfmadd231ps zmm), then `sonde bench --mode prefill
# --logits all` at each length, best of REPEAT runs, as tokens/s, GFLOP/s and % of the peak, ROUNDS times.
# GFLOP counts the Linears (2 a weight a token, LM head included) and attention's QK^T and PV over the
# causal half, for the qwen2.5-0.5b shape (the checkpoint DIR: `sonde make-model --preset qwen2.5-0.5b`).
# Needs AVX-512 (isa_peak). Run it alone: every other process moves the figures.
#
# usage: bench/f32_peak.sh DIR [SONDE] [ROUNDS] [LENGTHS]   (default build/bin/sonde, 3, "16 64 128 256 384 512 768 1024")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: bench/f32_peak.sh DIR [SONDE] [ROUNDS] [LENGTHS]}
sonde=${2:-$here/../build/bin/sonde}
rounds=${3:-3}
lengths=${4:-16 64 128 256 384 512 768 1024}
[[ -x $sonde ]] || { echo "f32_peak: no sonde program at $sonde" >&2; exit 2; }
[[ -f $dir/config.json ]] || { echo "f32_peak: $dir/config.json: no such file (make the qwen2.5-0.5b preset there)" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
g++ -O3 -march=native -o "$work/isa_peak" "$here/isa_peak.cpp"
peak() {  # GFLOP/s of the two cores together
  taskset -c 0 "$work/isa_peak" > "$work/p0" & taskset -c 1 "$work/isa_peak" > "$work/p1"; wait
  cat "$work/p0" "$work/p1" | grep -o 'vfmadd231ps zmm [0-9.e+]*' | awk '{s += $3} END {printf "%.1f", s / NR * 2 * 32 / 1e9}'
}
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | awk '/CPU family/{print $3}') model $(lscpu | awk '/^Model:/{print $2}')"
for r in $(seq 1 "$rounds"); do
  p=$(peak)
  echo "round $r: FMA peak, 2 threads at once: $p GFLOP/s; load $(cut -d' ' -f1-3 /proc/loadavg)"
  for t in $lengths; do
    tps=$("$sonde" bench --model "$dir" --mode prefill --tokens "$t" --threads 2 --backend threaded --repeat 3 --logits all \
          | awk '/best/ {print $4}')
    /usr/bin/python3 - "$dir/config.json" "$t" "$tps" "$p" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); t, tps, peak = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
d, f, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
hd = d // nh
linear = 2 * (L * (d * (d + 2 * nkv * hd + d) + 3 * d * f) + d * V)
attention = L * nh * hd * 2 * 2 * (t + 1) / 2
g = tps * (linear + attention) / 1e9
print(f"  {t:5d} tokens: {tps:8.2f} tokens/s {g:7.1f} GFLOP/s {100 * g / peak:5.1f}% of the peak")
PY
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
