#!/usr/bin/env bash
# Decode against its memory-bandwidth bound, several times over a few minutes: each line is one
# `sonde bench --mode decode` (its own in-process bound: the weights one step reads, streamed
# before and after every timed run), then the spread. On a shared host the bandwidth moves with
# the neighbours (45 to 80 GB/s seen on the 2-core VM), and with it how close to the bound a
# compute-bound GEMV can get; one run says little.
#
# usage: bench/decode_bound.sh MODEL_DIR [SONDE] [BACKEND] [THREADS] [RUNS] [PAUSE_S]
#        (defaults: build/bin/sonde, sonde's default backend, 2 threads, 8 runs, 15 s apart)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=${1:?usage: bench/decode_bound.sh MODEL_DIR [SONDE] [BACKEND] [THREADS] [RUNS] [PAUSE_S]}
sonde=${2:-${SONDE:-$here/../build/bin/sonde}}
backend=${3:-}
threads=${4:-2}
runs=${5:-8}
pause=${6:-15}
[[ -x $sonde ]] || { echo "decode_bound: no sonde program at $sonde" >&2; exit 2; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $threads threads; decode 64 tokens after 128; best of 3 per run"
printf '%4s %10s %12s %12s %10s %10s\n' run "tok/s" "GB/s read" "bound tok/s" "of bound" "median"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "$runs"); do
  args=(bench --model "$model" --mode decode --tokens 64 --prompt-tokens 128 --threads "$threads" --repeat 3 --json)
  [[ -n $backend ]] && args+=(--backend "$backend")
  "$sonde" "${args[@]}" | tee -a "$out" | /usr/bin/python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
cols = (j["tokens_per_s"], j["bandwidth_gb_s"], j["bound_tokens_per_s"], 100 * j["bound_fraction"], 100 * j["median_bound_fraction"])
print("%4s %10.2f %12.1f %12.2f %9.0f%% %9.0f%%" % ((sys.argv[1],) + cols))' "$r"
  [[ $r -lt $runs ]] && sleep "$pause"
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
f = sorted(r["bound_fraction"] for r in rows)
bw = [r["bandwidth_gb_s"] for r in rows]
print(f"\nbound fraction over {len(f)} runs: min {100 * f[0]:.0f}%, median {100 * statistics.median(f):.0f}%, "
      f"max {100 * f[-1]:.0f}%; bandwidth read {min(bw):.1f} to {max(bw):.1f} GB/s")
for lo, hi in ((0, 55), (55, 200)):
    sel = [r["bound_fraction"] for r in rows if lo <= r["bandwidth_gb_s"] < hi]
    if sel:
        print(f"  runs with the read at {lo}-{hi if hi < 200 else '...'} GB/s: {len(sel)}, median {100 * statistics.median(sel):.0f}% of bound")
PY
