#!/usr/bin/env bash
# One diffusion step of the dream-7b preset in bf16 over a canvas of 64 prompt + 64 masked
# tokens: its time and the peak RSS, and whether the peak stays under 17 GB (issue 6).
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
json=$("$sonde" bench --model "$dir" --mode diffusion-step --tokens 128 --prompt-tokens 64 --repeat 1 \
  --backend "$backend" --threads "$threads" --json)
echo "$json"
/usr/bin/python3 - "$json" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
gb = j["peak_rss_mb"] / 1024
print(f"one diffusion step over {j['tokens']} tokens (64 + 64) on {j['backend']} ({j['threads']} threads): "
      f"{j['seconds']:.2f} s; peak RSS {gb:.2f} GiB ({j['peak_rss_mb']:.0f} MB)")
print(f"peak RSS under 17 GB: {'PASS' if j['peak_rss_mb'] * 2**20 < 17e9 else 'FAIL'}")
PY
