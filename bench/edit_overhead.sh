#!/usr/bin/env bash
# Cost of edits during generation: `sonde generate` on the small preset with 4 edits (a steering
# add at two layers, a head ablation, a projection) against the same generation without, run
# alternately several times (the host is shared: the medians are compared). Goal: ratio <= 1.05.
# usage: bench/edit_overhead.sh [BUILD_DIR] [RUNS] [NEW_TOKENS]
set -euo pipefail
build=${1:-build}; runs=${2:-5}; n=${3:-128}
sonde="$build/bin/sonde"; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
[[ -x $sonde ]] || { echo "edit_overhead: no sonde program at $sonde" >&2; exit 2; }
"$sonde" make-model --arch qwen2 --preset small --out "$work/model" >/dev/null
H=$(/usr/bin/python3 -c "import json; print(json.load(open('$work/model/config.json'))['hidden_size'])")
/usr/bin/python3 - "$work" "$H" <<'PY'
import json, struct, sys
work, H = sys.argv[1], int(sys.argv[2])
def npy(path, values):  # a float32 .npy without numpy
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<%df" % len(values), *values))
npy(f"{work}/v.npy", [((i * 37) % 11 - 5) / 10 for i in range(H)])
edits = [{"hook": "blocks.1.hook_resid_post", "op": "add", "vector": f"{work}/v.npy", "scale": 0.5},
         {"hook": "blocks.2.hook_resid_post", "op": "add", "vector": f"{work}/v.npy", "scale": 0.5},
         {"hook": "blocks.1.attn.hook_z", "op": "zero", "heads": [0]},
         {"hook": "blocks.3.hook_resid_mid", "op": "project_out", "direction": f"{work}/v.npy"}]
json.dump({"edits": edits}, open(f"{work}/edits.json", "w"))
PY
gen() { local t0 t1; t0=$(date +%s.%N); "$sonde" generate --model "$work/model" --ids 1,17,42,99,5,6,7,8 --ids 3,4,5 \
  --max-new-tokens "$n" --json "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
gen >/dev/null  # warm the page cache
plain=(); edited=()
for r in $(seq 1 "$runs"); do
  plain+=("$(gen)"); edited+=("$(gen --edits "$work/edits.json")")
  echo "run $r: no edits ${plain[-1]}s, 4 edits ${edited[-1]}s"
done
/usr/bin/python3 - "${plain[*]}" "${edited[*]}" <<'PY'
import statistics, sys
p, e = (statistics.median(map(float, a.split())) for a in sys.argv[1:3])
print(f"median: no edits {p:.3f}s, 4 edits {e:.3f}s, ratio {e / p:.3f} (goal <= 1.05)")
PY
