#!/usr/bin/env bash
# Tensor-parallel runs under mpiexec (docs/scale-out.md): the same command lines as one process,
# with --backend sharded. One case per ctest entry:  tp_test.sh SONDE COMPARE CASE [MPIEXEC ARGS...]
#   forward ARCH PRESET DTYPE N   logits and every hook (patterns too) of `sonde forward` on N ranks
#                                 equal one process's within 1e-5 of their magnitude (1e-4 on bf16);
#                                 PRESET may be a model directory (../shared's golden models), used as is
#   generate ARCH PRESET N        greedy decoding token-exact (qwen2: with and without the KV cache,
#                                 and the hooks captured while generating; dream: every algorithm)
#   errors                        bad tensor-parallel layouts: one line, non-zero exit, no hang
#   transport                     on one node Open MPI's PML is ob1 without the interconnect probe
#                                 (one rank and 2), and a user's OMPI_MCA_pml wins
set -euo pipefail
sonde=$1; compare=$2; case=$3; shift 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
work=$(mktemp -d "${TMPDIR:-/tmp}/sonde-tp-XXXXXX")
trap 'st=$?; if [ $st -eq 0 ]; then rm -rf "$work"; else echo "files kept in $work"; fi' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
ids=3,17,250,9,42,1000,7,64,5,88,301,12
tp() {  # tp N ARGS...: sonde ARGS on N tensor-parallel ranks
  local n=$1; shift
  timeout 120 mpiexec -n "$n" --oversubscribe --bind-to none "${mpi[@]}" "$sonde" "$@" --backend sharded \
    --tensor-parallel "$n" --threads 1
}

case $case in
forward)
  arch=$1 preset=$2 dtype=$3 n=$4; shift 4; mpi=("$@")
  tol=1e-5; [ "$dtype" = bf16 ] && tol=1e-4
  if [ -d "$preset" ]; then ln -s "$preset" m
  else "$sonde" make-model --arch "$arch" --preset "$preset" --dtype "$dtype" --out m >/dev/null; fi
  hooks='*,blocks.*.attn.hook_pattern'
  "$sonde" forward --model m --ids "$ids" --hooks "$hooks" --out one.h5 --threads 1 >/dev/null
  tp "$n" forward --model m --ids "$ids" --hooks "$hooks" --out tp.h5 > tp.log 2>&1 || { cat tp.log; fail "forward on $n ranks"; }
  [ "$(grep -c '^wrote tp.h5' tp.log)" = 1 ] || { cat tp.log; fail "expected one report (rank 0's)"; }
  /usr/bin/python3 "$compare" one.h5 tp.h5 "$tol" || fail "forward on $n ranks differs from one process"
  ;;
generate)
  arch=$1 preset=$2 n=$3; shift 3; mpi=("$@")
  "$sonde" make-model --arch "$arch" --preset "$preset" --out m >/dev/null
  runs=()
  if [ "$arch" = qwen2 ]; then
    runs=("--max-new-tokens 12 --temperature 0" "--max-new-tokens 12 --temperature 0 --no-kv-cache")
  else
    for alg in origin maskgit_plus topk_margin entropy; do runs+=("--max-new-tokens 8 --steps 4 --alg $alg --temperature 0"); done
  fi
  for r in "${runs[@]}"; do
    read -r -a flags <<< "$r"
    "$sonde" generate --model m --ids "$ids" --ids 5,6,7 "${flags[@]}" --json --threads 1 > one.json
    tp "$n" generate --model m --ids "$ids" --ids 5,6,7 "${flags[@]}" --json > tp.json 2> tp.log || { cat tp.log; fail "generate $r"; }
    cmp one.json tp.json || { diff one.json tp.json | head; fail "generate $r on $n ranks differs from one process"; }
  done
  # Hooks captured while generating (split ones gathered, the KV cache's rows included).
  hooks='blocks.*.attn.hook_k,blocks.*.attn.hook_z,blocks.*.mlp.hook_post,blocks.*.hook_resid_post'
  "$sonde" generate --model m --ids "$ids" ${runs[0]} --hooks "$hooks" --out one.h5 --threads 1 >/dev/null
  tp "$n" generate --model m --ids "$ids" ${runs[0]} --hooks "$hooks" --out tp.h5 > tp.log 2>&1 || { cat tp.log; fail "generate --hooks"; }
  /usr/bin/python3 "$compare" one.h5 tp.h5 1e-5 || fail "hooks captured while generating on $n ranks differ"
  ;;
errors)
  mpi=("$@")
  "$sonde" make-model --arch qwen2 --preset tiny --out m >/dev/null
  expect_error() {  # expect_error NAME PATTERN CMD...: non-zero, bounded, the pattern once in the output
    local name=$1 pattern=$2 st=0; shift 2
    timeout 60 "$@" > "$name.log" 2>&1 || st=$?
    [ $st -ne 0 ] || fail "$name: exit 0"
    [ $st -ne 124 ] || fail "$name: still running after 60 s"
    [ "$(grep -c -- "$pattern" "$name.log")" = 1 ] || { cat "$name.log"; fail "$name: not one '$pattern'"; }
  }
  expect_error divide "3 ranks per model copy do not divide the job's 2 ranks" \
    mpiexec -n 2 --bind-to none "${mpi[@]}" "$sonde" forward --backend sharded --model m --ids 1,2 --out a.h5 --tensor-parallel 3
  expect_error heads "5 ranks per model copy but the model has 4 query heads" \
    mpiexec -n 5 --oversubscribe --bind-to none "${mpi[@]}" "$sonde" forward --backend sharded --model m --ids 1,2 --out b.h5 --threads 1
  [ ! -e b.h5 ] || fail "heads: an output file was written"
  ;;
transport)
  mpi=("$@")
  "$sonde" make-model --arch qwen2 --preset tiny --out m >/dev/null
  run() { "$@" forward --backend sharded --model m --ids 1,2 --out t.h5 --overwrite --threads 1 > t.log 2>&1 || { cat t.log; fail "$*"; }; }
  export OMPI_MCA_pml_base_verbose=10
  probed() { grep -c 'loaded component \(cm\|ucx\)$' t.log || true; }  # cm opens the MTLs, which probe
  run "$sonde"
  [ "$(grep -c 'component ob1 selected' t.log)" = 1 ] && [ "$(probed)" = 0 ] || { cat t.log; fail "one rank: not ob1 alone"; }
  # Each rank's output to a file of its own: through mpiexec the two ranks' lines can interleave.
  run timeout 60 mpiexec -n 2 --bind-to none --output-filename ranks "${mpi[@]}" "$sonde"
  cat ranks/1/rank.*/std* > t.log
  [ "$(grep -c 'component ob1 selected' t.log)" = 2 ] && [ "$(probed)" = 0 ] || { cat t.log; fail "2 ranks: not ob1 alone"; }
  OMPI_MCA_pml=^ucx run "$sonde"  # the user's choice: every PML but ucx, so cm is opened (and probes)
  [ "$(grep -c 'components_open: found loaded component cm$' t.log)" = 1 ] || { cat t.log; fail "the user's OMPI_MCA_pml was not used"; }
  ;;
*) fail "unknown case $case" ;;
esac
echo "PASS $case $*"
