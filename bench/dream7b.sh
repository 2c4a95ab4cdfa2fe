#!/usr/bin/env bash
# One diffusion step of the dream-7b preset in bf16 over canvases of 64 prompt + 64 masked and
# 128 + 128 tokens: the time of each against issue 19's targets (8 s and 15 s with 2 threads) and
# the peak RSS against 17 GB (issue 6). Each canvas runs in a process of its own: one warm-up step, then the timed one.
#
# The checkpoint is random weights in Hugging Face layout, about 15 GB; it is made once (several
# minutes) in DIR and kept. Check the free disk space first; the run needs about 17 GB of RAM.
#
# usage: bench/dream7b.sh [DIR] [SONDE] [BACKEND] [THREADS]
#        (default: /tmp/sonde-dream7b-bf16, build/bin/sonde or $SONDE, threaded, 2 threads)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-/tmp/sonde-dream7b-bf16}
sonde=${2:-${SONDE:-$here/../build/bin/sonde}}
backend=${3:-threaded}
threads=${4:-2}
[[ -x $sonde ]] || { echo "dream7b: no sonde program at $sonde (give its path as the second argument)" >&2; exit 2; }

if [[ ! -f $dir/config.json ]]; then
  free_gb=$(df -BG --output=avail "$(dirname "$dir")" | tail -1 | tr -dc 0-9)
  echo "warning: making the dream-7b bf16 preset in $dir: about 15 GB of disk ($free_gb GB free) and several minutes" >&2
  if (( free_gb < 20 )); then echo "dream7b: less than 20 GB free beside $dir; not making it" >&2; exit 1; fi
  "$sonde" make-model --arch dream --preset dream-7b --dtype bf16 --out "$dir"
fi

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); backend $backend; $threads threads"
for canvas in "64 128 8" "128 256 15"; do
  read -r prompt tokens target <<< "$canvas"
  json=$("$sonde" bench --model "$dir" --mode diffusion-step --tokens "$tokens" --prompt-tokens "$prompt" --repeat 1 \
    --backend "$backend" --threads "$threads" --json)
  echo "$json"
  /usr/bin/python3 - "$json" "$prompt" "$target" <<'PY'
import json, sys
j, prompt, target = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
gb = j["peak_rss_mb"] / 1024
print(f"one diffusion step over {j['tokens']} tokens ({prompt} + {j['tokens'] - prompt}) on {j['backend']} "
      f"({j['threads']} threads): {j['seconds']:.2f} s (target {target:.0f} s: {'PASS' if j['seconds'] <= target else 'FAIL'}); "
      f"peak RSS {gb:.2f} GiB ({j['peak_rss_mb']:.0f} MB), under 17 GB: {'PASS' if j['peak_rss_mb'] * 2**20 < 17e9 else 'FAIL'}")
PY
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
