#!/usr/bin/env bash
# `sonde batch` writes the same files through the step-level engine as the micro-batches wrote
# before it (issue 27): results byte for byte, and every dataset and attribute of the activations
# file (less model_path) by digest. The expected files were made by the last main before the
# engine (55b1436, `--make`); this runs the current program on the same inputs and compares.
# The `compute` attribute (--compute, later) is left out of the digest and checked to be f32.
# usage: batch_before_engine.sh SONDE DATA_DIR [--make]
set -euo pipefail
sonde=$1; data=$2; make=${3:-}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
digest() {
  /usr/bin/python3 - "$1" <<'PY'
import hashlib, json, sys, h5py, numpy as np
out = []
def attrs(o):
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in sorted(o.attrs.items()) if k not in ("model_path", "compute")}
with h5py.File(sys.argv[1], "r") as f:
    # --compute (issue 28) came after these files: its attribute is new, the default run's is f32.
    assert f.attrs["compute"] == "f32", f.attrs["compute"]
    root = attrs(f)
    # The sampling settings a run config's decoding entries record (temperature, top_p, top_k,
    # eos_penalty: issue 33) came after these files too: they are dropped before the digest, and the
    # config's digest attribute, checked first against the file's own JSON, is taken again.
    cfg = root["run_config_json"]
    assert hashlib.sha256(cfg.encode()).hexdigest() == root["run_config_sha256"], "run_config_sha256"
    j = json.loads(cfg)
    for d in j.get("decoding", []):
        for k in ("temperature", "top_p", "top_k", "eos_penalty"):
            d.pop(k, None)
    root["run_config_json"] = json.dumps(j, separators=(",", ":"))
    root["run_config_sha256"] = hashlib.sha256(root["run_config_json"].encode()).hexdigest()
    out.append(("/", repr(root)))
    def visit(name, o):
        if isinstance(o, h5py.Dataset):
            a = o[()]
            out.append((name, str(a.dtype), str(a.shape), hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest(), repr(attrs(o))))
        else:
            out.append((name, repr(attrs(o))))
    f.visititems(visit)
for row in out:
    print("\t".join(row))
PY
}
run_case() {  # name arch args...
  local name=$1 arch=$2; shift 2
  "$sonde" make-model --arch "$arch" --preset tiny --seed 7 --out "$work/$name-model" > /dev/null
  "$sonde" batch --model "$work/$name-model" --backend reference --input "$data/$name.jsonl" \
    --output "$work/$name.out.jsonl" --acts "$work/$name.h5" --batch-size 3 --max-new-tokens 8 --seed 3 "$@" > /dev/null 2>&1
  digest "$work/$name.h5" > "$work/$name.h5.digest"
  if [ "$make" = --make ]; then
    cp "$work/$name.out.jsonl" "$data/$name.out.jsonl"
    cp "$work/$name.h5.digest" "$data/$name.h5.digest"
    return
  fi
  cmp "$data/$name.out.jsonl" "$work/$name.out.jsonl" || { echo "$name: results differ"; diff "$data/$name.out.jsonl" "$work/$name.out.jsonl" | head; exit 1; }
  diff "$data/$name.h5.digest" "$work/$name.h5.digest" > "$work/d" || { echo "$name: activations differ"; head -20 "$work/d"; exit 1; }
  echo "$name: results and activations equal those made before the engine"
}
run_case qwen2 qwen2 --hooks 'blocks.1.hook_resid_post,blocks.0.attn.hook_z'
run_case dream dream --hooks 'blocks.1.hook_resid_post' --steps 8 --diffusion-capture all
