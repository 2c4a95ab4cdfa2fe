#!/usr/bin/env bash
# Usage: install_package.sh BUILD_DIR SOURCE_DIR PYTHON
# The installable package: a fresh prefix from `cmake --install`; the out-of-tree plugin of
# docs/writing-a-plugin.md (docs/examples/add_only_plugin) built with find_package(sonde) and
# found by the installed `sonde plugins` through SONDE_PLUGIN_PATH, then run by `sonde forward`;
# and `import sonde` from the prefix alone (no build tree on any path).
set -euo pipefail
build=$1 src=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/sonde/run.h include/sonde/plugin.h lib/cmake/sonde/sondeConfig.cmake lib/cmake/sonde/SondePlugin.cmake; do
  test -f "$prefix/$f" || { echo "not installed: $f"; exit 1; }
done

cmake -S "$src/docs/examples/add_only_plugin" -B "$work/plugin" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/plugin" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
so="$work/plugin/lib/sonde/backend/add-only.so"
test -f "$so" || { echo "the plugin build made no $so"; exit 1; }

sonde="$prefix/bin/sonde"
plugins=$(SONDE_PLUGIN_PATH="$work/plugin/lib/sonde" "$sonde" plugins)
echo "$plugins"
grep -q "^backend add-only 0.1.0 $so" <<<"$plugins" || { echo "sonde plugins did not list $so"; exit 1; }
grep -q "^rejected" <<<"$plugins" && { echo "a plugin was rejected"; exit 1; }
"$sonde" make-model --arch qwen2 --preset tiny --out "$work/tiny" >/dev/null
SONDE_PLUGIN_PATH="$work/plugin/lib/sonde" "$sonde" forward --model "$work/tiny" --ids 1,2,3 --backend add-only \
  --out "$work/a.h5" | grep -q "backend add-only" || { echo "forward on add-only failed"; exit 1; }

cd "$work"
site=$(ls -d "$prefix"/lib*/python3/dist-packages)
env -i HOME="$work" PATH=/usr/bin:/bin PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 "$python" - "$prefix" "$work/tiny" <<'PY'
import sys
import sonde
prefix, model_dir = sys.argv[1], sys.argv[2]
assert sonde.__file__.startswith(prefix), sonde.__file__
assert sonde._sonde.__file__.startswith(prefix), sonde._sonde.__file__
model = sonde.Model(model_dir)
logits, cache = model.run_with_cache([1, 2, 3], hooks="blocks.0.hook_resid_post")
assert logits.shape == (3, model.config["vocab_size"]) and cache["blocks.0.hook_resid_post"].shape[0] == 3
print("import sonde from the prefix:", sonde.__file__)
PY
echo "install_package: ok"
