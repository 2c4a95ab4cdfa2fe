#!/usr/bin/env bash
# The shape sweep (issue 19): prefill at 16 to 2048 tokens, one Dream diffusion step over 128 and
# 256 tokens, and decode, on random checkpoints of the qwen2.5-0.5b shape (Qwen2 and Dream), each
# as tokens/s, GFLOP/s and the fraction of gemm_bench's 512-row bf16 rate for the same backend,
# measured in the same run (the host's other tenants move every figure; compare within a run).
#
# usage: bench/shapes.sh [--weights native|q8] [--threads N] [--repeat N] [--lengths L1,L2,..]
#                        [--dir DIR] [--sonde PATH] [--torch]
#   DIR keeps the two checkpoints (about 1 GB each; made once); default /tmp/sonde-shapes.
#   --torch: PyTorch's prefill at the same lengths beside it (bench/vs_pytorch.py --lengths).
# GFLOP/s counts the Linears (2 flops per weight per token, LM head included) and attention's
# QK^T and PV (causal: half the pairs); the attention's share grows with length, stated per row.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
weights=native threads=2 repeat=3 dir=/tmp/sonde-shapes torch=0
lengths=16,64,128,256,384,511,512,1024,2048
sonde=${SONDE:-$here/../build/bin/sonde}
gemm_bench=${GEMM_BENCH:-$here/../build/bin/gemm_bench}
while (( $# )); do
  case $1 in
    --weights) weights=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --lengths) lengths=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --sonde) sonde=$2; shift 2 ;;
    --torch) torch=1; shift ;;
    *) echo "shapes: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x $sonde ]] || { echo "shapes: no sonde program at $sonde" >&2; exit 2; }
[[ -x $gemm_bench ]] || { echo "shapes: no gemm_bench at $gemm_bench (build the bench targets)" >&2; exit 2; }
mkdir -p "$dir"
[[ -f $dir/qwen/config.json ]] || "$sonde" make-model --preset qwen2.5-0.5b --dtype bf16 --out "$dir/qwen" >/dev/null
[[ -f $dir/dream/config.json ]] || "$sonde" make-model --arch dream --preset qwen2.5-0.5b --dtype bf16 --out "$dir/dream" >/dev/null

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); threaded, $threads threads, weights $weights, best of $repeat"
gemm_json=$("$gemm_bench" --backends threaded --threads "$threads" --repeat "$repeat" --json | tail -1)
echo "$gemm_json" >"$dir/last-gemm.json"
runs=()
bench() { "$sonde" bench --backend threaded --threads "$threads" --weights "$weights" --repeat "$repeat" --json "$@"; }
for L in ${lengths//,/ }; do runs+=("$(bench --model "$dir/qwen" --mode prefill --tokens "$L")"); done
for L in 128 256; do runs+=("$(bench --model "$dir/dream" --mode diffusion-step --tokens "$L")"); done
runs+=("$(bench --model "$dir/qwen" --mode decode --tokens 32 --prompt-tokens 128)")
printf '%s\n' "${runs[@]}" >"$dir/last-sweep.jsonl"
torch_json=""
if (( torch )); then
  torch_json=$(/usr/bin/python3 "$here/vs_pytorch.py" --model "$dir/qwen" --sonde "$sonde" --threads "$threads" \
    --repeat "$repeat" --lengths "$lengths" --json | tail -1)
fi

/usr/bin/python3 - "$dir/qwen/config.json" "$gemm_json" "$dir/last-sweep.jsonl" "$torch_json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
gemm = json.loads(sys.argv[2])
runs = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
torch = json.loads(sys.argv[4]) if sys.argv[4] else {}
h, f, L_, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
dh = h // nh
linear = L_ * (2 * h * h + 2 * h * nkv * dh + 3 * h * f) + h * V  # weights per token, LM head included

def flops(mode, T, P):
    """(total, attention) flops of one timed unit: a prefill of T, a diffusion step over T, one decode token at P."""
    if mode == "prefill":
        att = L_ * 4 * nh * dh * T * (T + 1) / 2
        return 2 * linear * T + att, att
    if mode == "diffusion-step":
        att = L_ * 4 * nh * dh * T * T
        return 2 * linear * T + att, att
    att = L_ * 4 * nh * dh * P
    return 2 * linear + att, att

rows = [r for r in gemm["rows"] if r["impl"] == "threaded" and r["weights"] == "bf16" and r["shape"].startswith("512x")]
gemm_rate = sum(r["gflops"] * r["seconds"] for r in rows) / sum(r["seconds"] for r in rows)  # total flops / total time
print(f"gemm_bench, threaded bf16, 512-row shapes: {gemm_rate:.1f} GFLOP/s (the 1.00 below)\n")
print(f"{'workload':<26}{'tokens/s':>10}{'median':>10}{'GFLOP/s':>10}{'of GEMM':>9}{'attn %':>8}{'torch tok/s':>13}")
ref512 = None
for r in runs:
    T = r["tokens"]
    total, att = flops(r["mode"], T, r.get("prompt_tokens", 0) + T // 2)
    per_s = 1 / r["seconds"] if r["mode"] != "decode" else r["tokens_per_s"]
    g = total * per_s / 1e9
    name = {"prefill": f"prefill {T}", "diffusion-step": f"dream step {T}", "decode": f"decode after {r.get('prompt_tokens')}"}[r["mode"]]
    tq = torch.get(str(T)) if r["mode"] == "prefill" else None
    print(f"{name:<26}{r['tokens_per_s']:>10.1f}{r['median_tokens_per_s']:>10.1f}{g:>10.1f}{g / gemm_rate:>9.2f}"
          f"{100 * att / total:>7.1f}%{(f'{tq:.1f}' if tq else '-'):>13}")
    if r["mode"] == "prefill" and T == 512:
        ref512 = r["tokens_per_s"]
if ref512:
    print("\nprefill tokens/s against 512 tokens (target >= 0.80 from 64 up, attention's growth aside):")
    print("  " + ", ".join(f"{r['tokens']}: {r['tokens_per_s'] / ref512:.2f}" for r in runs if r["mode"] == "prefill"))
PY
