#!/usr/bin/env bash
# Kill soak: `sonde batch` killed at N random moments (SIGKILL, SIGINT, SIGTERM mixed), over six
# configurations (Qwen2 and Dream; results only, --acts, --acts --compress); each killed run is
# resumed once with --resume, to the end, and
# compared with an uninterrupted run of the same configuration: the results file byte for byte,
# every HDF5 dataset bit for bit. Prints "K/N identical" (and how many runs the signal really
# interrupted). Not part of CI (minutes of work).
# usage: bench/kill_soak.sh N [BUILD_DIR] [SEED]
set -euo pipefail
n=${1:?usage: bench/kill_soak.sh N [BUILD_DIR] [SEED]}; build=${2:-build}; seed=${3:-1}
sonde="$(cd "$build" && pwd)/bin/sonde"; py=/usr/bin/python3
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
RANDOM=$seed

"$sonde" make-model --arch qwen2 --preset tiny --seed 7 --out "$work/qwen2" >/dev/null
"$sonde" make-model --arch dream --preset tiny --seed 8 --out "$work/dream" >/dev/null
for i in $(seq 0 239); do
  echo "{\"id\": \"p$i\", \"ids\": [$((i % 1000 + 1)), $((i / 7 + 3)), 42, 99, 5]}"
done > "$work/in.jsonl"

cat > "$work/same.py" <<'PY'
import sys, h5py
def names(f):
    out = []
    f.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) else None)
    return sorted(out)
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    if names(a) != names(b) or int(a.attrs["complete"]) != 1 or int(b.attrs["complete"]) != 1:
        sys.exit(1)
    for n in names(a):
        x, y = a[n][()], b[n][()]
        if x.shape != y.shape or x.tobytes() != y.tobytes():
            print("differs:", n); sys.exit(1)
PY

configs=(qwen2:none qwen2:acts qwen2:compress dream:none dream:acts dream:compress)
args_of() {  # config tag
  local arch=${1%%:*} kind=${1##*:}
  local a=(batch --model "$work/$arch" --input "$work/in.jsonl" --output "$work/$2.jsonl" --max-new-tokens 6
           --temperature 0.7 --seed 3 --batch-size 4 --checkpoint-every 8)
  [ "$arch" = dream ] && a+=(--steps 6)
  [ "$kind" != none ] && a+=(--hooks 'hook_embed,blocks.*.hook_resid_post' --acts "$work/$2.h5")
  [ "$kind" = compress ] && a+=(--compress)
  printf '%s\n' "${a[@]}"
}

declare -A secs
for c in "${configs[@]}"; do  # the uninterrupted runs, and how long each takes
  t=${c//:/-}
  mapfile -t a < <(args_of "$c" "ref-$t")
  t0=$(date +%s%N); "$sonde" "${a[@]}" 2>/dev/null; t1=$(date +%s%N)
  secs[$c]=$(( (t1 - t0) / 1000000 ))
done

same=0; interrupted=0; signals=(KILL INT TERM)
for i in $(seq 1 "$n"); do
  c=${configs[$((RANDOM % ${#configs[@]}))]}; t=${c//:/-}; sig=${signals[$((RANDOM % 3))]}
  rm -f "$work"/run.*
  mapfile -t a < <(args_of "$c" run)
  delay_ms=$(( RANDOM % (secs[$c] * 9 / 10 + 1) ))  # mostly before the end: loading, writing, closing
  "$sonde" "${a[@]}" 2>/dev/null & pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -s "$sig" "$pid" 2>/dev/null || true
  code=0; { wait "$pid"; } 2>/dev/null || code=$?
  [ "$code" -ne 0 ] && interrupted=$((interrupted + 1))
  if [ "$code" -ne 0 ]; then
    "$sonde" "${a[@]}" --resume 2>"$work/resume.log" || { echo "run $i ($c, SIG$sig): resume failed: $(tail -1 "$work/resume.log")"; continue; }
  fi
  ok=1
  cmp -s "$work/run.jsonl" "$work/ref-$t.jsonl" || ok=0
  if [ "$ok" = 1 ] && [ "${c##*:}" != none ]; then $py "$work/same.py" "$work/ref-$t.h5" "$work/run.h5" || ok=0; fi
  if [ "$ok" = 1 ]; then same=$((same + 1)); else echo "run $i ($c, SIG$sig after ${delay_ms} ms): differs"; fi
done
echo "$interrupted of $n runs were interrupted by the signal (the others finished first)"
echo "$same/$n identical"
