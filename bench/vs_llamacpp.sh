#!/usr/bin/env bash
# sonde against llama.cpp side by side on the CPU (issue 28): builds llama.cpp from a source tree
# outside this repository (or uses its existing build), converts the qwen2.5-0.5b bf16 checkpoint
# with llama.cpp's own gguf-py, checks the logits agree, then times both engines in alternating
# rounds (prefill 16-2048 at equal work, decode, a Dream step) and prints the ratio table.
# The work is done by bench/llamacpp/vs_llamacpp.py (Debian's python3 + numpy + h5py).
#
# usage: bench/vs_llamacpp.sh LLAMA_SRC [--build-dir DIR] [--work DIR] [--out DIR] [--sonde BIN]
#                             [--threads 2] [--rounds 3] [--lengths 16,32,...,2048] [--quick] ...
#        bench/vs_llamacpp.sh --help      every option
#        bench/vs_llamacpp.sh --report OUT   the tables of a finished run again
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
[[ -x $py ]] || py=python3
if [[ ${1:-} == --report ]]; then
  shift
  exec "$py" "$here/llamacpp/report.py" "$@"
fi
exec "$py" "$here/llamacpp/vs_llamacpp.py" "$@"
