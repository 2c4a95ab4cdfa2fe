#!/usr/bin/env bash
# Tensor parallelism (docs/scale-out.md): `sonde bench` prefill and decode on
#   A: 1 process x 2 threads, B: mpiexec -n 2 x 1 thread (--backend sharded --tensor-parallel 2)
# in one run; prints tokens/s, the ratios B vs A (target >= 0.85x) and the peak RSS of each rank
# against the one process's (target <= 0.6x on dream-7b).
# usage: bench/tp.sh [BUILD_DIR] [PRESET] [DTYPE] [REPEAT]   (PRESET: small, qwen2.5-0.5b, dream-7b ...)
set -euo pipefail
build=${1:-build}; preset=${2:-small}; dtype=${3:-bf16}; repeat=${4:-3}
sonde="$(cd "$build" && pwd)/bin/sonde"; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
arch=qwen2; [ "$preset" = dream-7b ] && arch=dream
"$sonde" make-model --arch "$arch" --preset "$preset" --dtype "$dtype" --out "$work/model" >/dev/null
field() { /usr/bin/python3 -c "import json,sys; j=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(j$1)"; }
modes=("prefill --tokens 128")
[ "$arch" = qwen2 ] && modes+=("decode --tokens 32 --prompt-tokens 32")
for m in "${modes[@]}"; do
  read -r -a args <<< "$m"
  a=$("$sonde" bench --model "$work/model" --mode "${args[@]}" --repeat "$repeat" --threads 2 --json)
  b=$(mpiexec -n 2 --bind-to none "$sonde" bench --model "$work/model" --mode "${args[@]}" --repeat "$repeat" \
      --threads 1 --backend sharded --tensor-parallel 2 --json)
  ta=$(echo "$a" | field '["tokens_per_s"]'); tb=$(echo "$b" | field '["tokens_per_s"]')
  ra=$(echo "$a" | field '["peak_rss_mb"]'); rb=$(echo "$b" | field '["rank_peak_rss_mb"]')
  echo "$preset $dtype ${args[0]}: 1 process x 2 threads $(printf %.1f "$ta") tokens/s; 2 ranks x 1 thread $(printf %.1f "$tb") tokens/s"
  echo "  2 ranks x 1 thread vs 1 process x 2 threads: $(echo "scale=2; $tb / $ta" | bc)x (target >= 0.85)"
  echo "  peak RSS: 1 process $(printf %.0f "$ra") MB; per rank $rb MB; largest rank vs 1 process:" \
    "$(/usr/bin/python3 -c "print(f'{max($rb) / $ra:.2f}x')") (target <= 0.6 on dream-7b)"
done
