#!/usr/bin/env bash
# Usage: install_relocatable.sh BUILD_DIR
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")/../.." && pwd)  # the checkout (the script cds away below)
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
# sonde report inlines the plotting library from the install's own copy (share/sonde/report/web),
# which page.cpp looks at before the checkout's: the moved install must carry it and use it.
if [ -d "$src/report/web/node_modules/vega" ]; then
  test -s "$work/moved/share/sonde/report/web/node_modules/vega/build/vega.min.js" ||
    { echo "the install lacks the report's plotting library"; exit 1; }
  "$sonde" report "$work/demo/acts.h5" --out "$work/demo/report.html" >/dev/null
  grep -q "vega-embed" "$work/demo/report.html" || { echo "the report from the moved install has no plotting library"; exit 1; }
fi
echo "install_relocatable: ok"
