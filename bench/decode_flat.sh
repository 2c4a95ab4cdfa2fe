#!/usr/bin/env bash
# Decode tokens/s for 16, 64, 128, 256 and 512 generated tokens on the tiny and small presets,
# each with the ratio to the 16-token figure. With the KV cache a step costs about the same at
# any length, so the ratios stay near 1 (on the small preset attention over 640 cached keys is
# no longer negligible next to its 3M weights, so expect a mild fall at 512). For contrast the
# last column runs the same decode with --no-kv-cache (every step recomputes the whole prefix),
# which falls roughly as 1 / (prompt + tokens).
#
# usage: bench/decode_flat.sh [SONDE] [BACKEND] [THREADS]   (default: build/bin/sonde, sonde's
#        default backend, 2 threads); SONDE may also come from $SONDE.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sonde=${1:-${SONDE:-$here/../build/bin/sonde}}
backend=${2:-}
threads=${3:-2}
[[ -x $sonde ]] || { echo "decode_flat: no sonde program at $sonde (give its path as the first argument)" >&2; exit 2; }
work=$(mktemp -d /tmp/sonde-decode-flat.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); threads $threads; prompt 128 tokens; best of 3"
for preset in tiny small; do
  "$sonde" make-model --arch qwen2 --preset "$preset" --out "$work/$preset" >/dev/null
  base=""
  printf '\n%-6s %8s %12s %8s %16s  %s\n' preset tokens "tokens/s" "vs 16" "no-cache tok/s" backend
  for n in 16 64 128 256 512; do
    args=(bench --model "$work/$preset" --mode decode --tokens "$n" --prompt-tokens 128 --threads "$threads" --json)
    [[ -n $backend ]] && args+=(--backend "$backend")
    rate_of() { /usr/bin/python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["tokens_per_s"], j["backend"])' "$1"; }
    read -r rate name < <(rate_of "$("$sonde" "${args[@]}" --repeat 3)")
    read -r slow _ < <(rate_of "$("$sonde" "${args[@]}" --no-kv-cache --repeat 1)")
    [[ -z $base ]] && base=$rate
    ratio=$(/usr/bin/python3 -c "print(f'{$rate / $base:.2f}')")
    printf '%-6s %8d %12.1f %7sx %16.1f  %s\n' "$preset" "$n" "$rate" "$ratio" "$slow" "$name"
  done
done
