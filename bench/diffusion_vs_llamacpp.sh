#!/usr/bin/env bash
# sonde against llama.cpp's llama-diffusion-cli on one Dream or LLaDA checkpoint (issue 33): converts it
# to GGUF (BF16 with bench/llamacpp/gguf_convert_dlm.py, Q8_0 with llama-quantize) unless the GGUFs exist,
# checks the two engines' tokens agree (bench/llamacpp/agreement_dlm.py, skipped with AGREE=0), then times
# seconds per denoising step and tokens/s for each generation length, engines alternating within a round.
# Every conversion and measurement runs as its own command under the bench lock
# (flock /work/bench.lock nice -n -20 ...), each a few minutes at most at the 7-8B shapes.
#
# usage: bench/diffusion_vs_llamacpp.sh MODEL_DIR LLAMA_BUILD_BIN [OUT_DIR]
#   MODEL_DIR        a sonde make-model --arch dream|llada checkpoint (bf16 for the 7-8B shapes)
#   LLAMA_BUILD_BIN  llama.cpp's build/bin with llama-diffusion-cli and llama-quantize; its source tree
#                    (two levels up) gives gguf-py
#   OUT_DIR          GGUFs, results.jsonl, agreement.json (default /tmp/dlm-vs-llama/<model name>)
# environment: TOKENS ("64 256"), ROUNDS (1), STEPS (5: llama.cpp steps per measurement), THREADS (2),
#   CONFIGS (which rows; default llama-bf16 llama-q8 sonde-exact sonde-exact-bf16 sonde-exact-q8
#   sonde-dual-thr-bf16 sonde-dual-4-bf16 sonde-dual-4-q8; also sonde-dual-thr (f32 compute) and
#   sonde-dual-thr-q8), SONDE (build/bin/sonde), LOCK (/work/bench.lock),
#   AGREE (1), PROMPT.
#   bench/diffusion_vs_llamacpp.sh --report RESULTS.jsonl   the tables of a finished run
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if [[ ${1:-} == --report ]]; then exec "$py" "$here/llamacpp/diffusion_bench.py" report "$2"; fi
[[ $# -ge 2 ]] || { sed -n '2,19p' "$0" >&2; exit 2; }
model=$(cd "$1" && pwd)
bin=$(cd "$2" && pwd)
name=$(basename "$model")
out=${3:-/tmp/dlm-vs-llama/$name}
sonde=${SONDE:-$here/../build/bin/sonde}
lock=${LOCK:-/work/bench.lock}
tokens=${TOKENS:-64 256}
rounds=${ROUNDS:-1}
steps=${STEPS:-5}
threads=${THREADS:-2}
configs=${CONFIGS:-llama-bf16 llama-q8 sonde-exact sonde-exact-bf16 sonde-exact-q8 sonde-dual-thr-bf16 sonde-dual-4-bf16 sonde-dual-4-q8}
prompt=${PROMPT:-The capital of France is}
[[ -f $model/config.json ]] || { echo "diffusion_vs_llamacpp: $model/config.json: no such file" >&2; exit 2; }
[[ -x $bin/llama-diffusion-cli ]] || { echo "diffusion_vs_llamacpp: $bin/llama-diffusion-cli: no such program" >&2; exit 2; }
[[ -x $sonde ]] || { echo "diffusion_vs_llamacpp: $sonde: no such program (set SONDE)" >&2; exit 2; }
export PYTHONPATH=$bin/../../gguf-py
locked() { flock "$lock" nice -n -20 "$@"; }
mkdir -p "$out"
bf16=$out/$name-bf16.gguf
q8=$out/$name-q8_0.gguf

if [[ ! -f $bf16 ]]; then
  locked "$py" "$here/llamacpp/gguf_convert_dlm.py" --write "$model" "$bf16.part"
  locked "$py" "$here/llamacpp/gguf_convert_dlm.py" --check "$model" "$bf16.part"
  mv "$bf16.part" "$bf16"
fi
if [[ ! -f $q8 && " $configs " == *" llama-q8 "* ]]; then
  locked "$bin/llama-quantize" "$bf16" "$q8" Q8_0 "$threads" > "$out/quantize.log" 2>&1
fi
if [[ ${AGREE:-1} == 1 ]]; then
  locked "$py" "$here/llamacpp/agreement_dlm.py" --llama "$bin" --sonde "$sonde" --model "$model" --gguf "$bf16" \
    --threads "$threads" --new-tokens 16 --prompt "$prompt" --json "$out/agreement.json" || echo "agreement: tokens differ (see $out/agreement.json)"
fi

echo "llama.cpp: $(git -C "$bin/../.." rev-parse --short HEAD 2>/dev/null || echo unknown); sonde: $("$sonde" --version 2>/dev/null || true)"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
m() { locked "$py" "$here/llamacpp/diffusion_bench.py" measure "$@" --out "$out/results.jsonl" --model "$model" \
        --sonde "$sonde" --threads "$threads" --prompt "$prompt"; }
for ((r = 1; r <= rounds; r++)); do
  for g in $tokens; do
    for c in $configs; do
      case $c in
        llama-bf16) m llama --label "llama.cpp BF16" --gguf "$bf16" --llama "$bin" --steps "$steps" --tokens "$g" ;;
        llama-q8) m llama --label "llama.cpp Q8_0" --gguf "$q8" --llama "$bin" --steps "$steps" --tokens "$g" ;;
        sonde-exact) m sonde-step --label "sonde exact (bf16 weights, f32 compute)" --tokens "$g" ;;
        sonde-exact-bf16) m sonde-step --label "sonde exact (bf16 weights, bf16 compute)" --compute bf16 --tokens "$g" ;;
        sonde-exact-q8) m sonde-step --label "sonde exact (q8 weights, int8 compute)" --weights q8 --compute int8 --tokens "$g" ;;
        sonde-dual-thr) m sonde-gen --label "sonde dual cache + threshold 0.9 (f32 compute)" --tokens "$g" ;;
        sonde-dual-thr-bf16) m sonde-gen --label "sonde dual cache + threshold 0.9 (bf16 compute)" --compute bf16 --tokens "$g" ;;
        sonde-dual-thr-q8) m sonde-gen --label "sonde dual cache + threshold 0.9 (q8, int8)" --weights q8 --compute int8 \
                             --tokens "$g" ;;
        sonde-dual-4-bf16) m sonde-gen --label "sonde dual cache, 4 slots/step (bf16 compute)" --per-step 4 --compute bf16 \
                             --tokens "$g" ;;
        sonde-dual-4-q8) m sonde-gen --label "sonde dual cache, 4 slots/step (q8, int8)" --per-step 4 --weights q8 \
                           --compute int8 --tokens "$g" ;;
        *) echo "diffusion_vs_llamacpp: unknown config '$c'" >&2; exit 2 ;;
      esac
    done
  done
done
"$py" "$here/llamacpp/diffusion_bench.py" report "$out/results.jsonl"
