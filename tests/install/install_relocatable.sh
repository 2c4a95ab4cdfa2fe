#!/usr/bin/env bash
# Usage: install_relocatable.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
mv "$work/prefix" "$work/moved"   # rpaths are $ORIGIN-relative, so the move must not matter
sonde="$work/moved/bin/sonde"
plugins=$(env -u SONDE_PLUGIN_PATH "$sonde" plugins)
echo "$plugins"
for want in "backend reference" "backend cpu-blas" "model qwen2" "model dream" "sink hdf5"; do
  grep -q "^$want .* $work/moved/lib/sonde/" <<<"$plugins" || { echo "missing from the moved install: $want"; exit 1; }
done
grep -q "^rejected" <<<"$plugins" && { echo "the moved install rejected a plugin"; exit 1; }
cd "$work"
"$sonde" demo --dir "$work/demo" >"$work/demo.log"
test -s "$work/demo/acts.h5" || { cat "$work/demo.log"; echo "demo wrote no file"; exit 1; }
echo "install_relocatable: ok"
