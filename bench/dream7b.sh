#!/usr/bin/env bash
# One diffusion step of the dream-7b preset in bf16 over canvases of 64 prompt + 64 masked and
# 128 + 128 tokens, per compute mode: the time of each against issue 28's targets with 2 threads
# (exact f32: 8 s and 15 s, as issue 19's; --compute bf16: 5 s and 9 s; int8 over --weights q8 has
# none and is reported) and the peak RSS of the native-weight modes against 17 GB (issue 6). Each canvas and mode runs in a
# process of its own: one warm-up step, then REPEAT timed ones (default 2), the median against the target.
# The first step after the checkpoint is made or evicted reads it from disk: the warm-up takes that.
#
# The checkpoint is random weights in Hugging Face layout, about 15 GB; it is made once (several
# minutes) in DIR and kept. Check the free disk space first; the run needs about 17 GB of RAM.
#
# usage: bench/dream7b.sh [DIR] [SONDE] [BACKEND] [THREADS] [MODES]
#        (default: /tmp/sonde-dream7b-bf16, build/bin/sonde or $SONDE, threaded, 2 threads,
#        MODES "f32 bf16"; add int8 for --weights q8 --compute int8)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-/tmp/sonde-dream7b-bf16}
sonde=${2:-${SONDE:-$here/../build/bin/sonde}}
backend=${3:-threaded}
threads=${4:-2}
repeat=${REPEAT:-2}
modes=${5:-f32 bf16}
[[ -x $sonde ]] || { echo "dream7b: no sonde program at $sonde (give its path as the second argument)" >&2; exit 2; }

if [[ ! -f $dir/config.json ]]; then
  free_gb=$(df -BG --output=avail "$(dirname "$dir")" | tail -1 | tr -dc 0-9)
  echo "warning: making the dream-7b bf16 preset in $dir: about 15 GB of disk ($free_gb GB free) and several minutes" >&2
  if (( free_gb < 20 )); then echo "dream7b: less than 20 GB free beside $dir; not making it" >&2; exit 1; fi
  "$sonde" make-model --arch dream --preset dream-7b --dtype bf16 --out "$dir"
fi

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); backend $backend; $threads threads"
for mode in $modes; do
for canvas in "64 128" "128 256"; do
  read -r prompt tokens <<< "$canvas"
  case "$mode:$tokens" in
    f32:128) target=8 ;; f32:256) target=15 ;; bf16:128) target=5 ;; bf16:256) target=9 ;; int8:*) target=0 ;;
    *) echo "dream7b: unknown mode '$mode' (f32, bf16 or int8)" >&2; exit 2 ;;
  esac
  weights=native; [[ $mode == int8 ]] && weights=q8
  json=$("$sonde" bench --model "$dir" --mode diffusion-step --tokens "$tokens" --prompt-tokens "$prompt" --repeat "$repeat" \
    --backend "$backend" --threads "$threads" --compute "$mode" --weights "$weights" --json)
  echo "$json"
  /usr/bin/python3 - "$json" "$prompt" "$target" "$mode" <<'PY'
import json, sys
j, prompt, target, mode = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
gb = j["peak_rss_mb"] / 1024
t = j["median_seconds"]
verdict = f"target {target:.0f} s: {'PASS' if t <= target else 'FAIL'}" if target > 0 else "no target"
print(f"{mode}: one diffusion step over {j['tokens']} tokens ({prompt} + {j['tokens'] - prompt}) on {j['backend']} "
      f"({j['threads']} threads): median {t:.2f} s, best {j['seconds']:.2f} s of {j['repeat']} ({verdict}); "
      f"peak RSS {gb:.2f} GiB ({j['peak_rss_mb']:.0f} MB)"
      + (f", under 17 GB: {'PASS' if j['peak_rss_mb'] * 2**20 < 17e9 else 'FAIL'}" if mode != "int8" else
         " (the q8 copy beside the checkpoint's mapped pages, which stay clean page cache: no bound)"))
PY
done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
