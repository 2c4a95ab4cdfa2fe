#!/usr/bin/env python3
"""The Python package's overhead (issue 17), printed as ratios against baselines of the same run.

1. run_with_cache(ids) against the CLI engine's own forward pass over the same tokens
   (`sonde bench --mode prefill`, in-process timing, median of --repeat); target <= 1.05.
2. run_with_cache with hooks captured against the CLI's `sonde forward --hooks` of the same
   prompt, each minus its run without hooks (the capture's cost in each; files vs arrays).
3. A Python hook that does nothing: the extra time per hook call (target < 20 us).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--model DIR] [--sonde build/bin/sonde]

Without --model it makes the `small` preset. Runs alternate between the two sides, so load
changes on a shared machine hit both.
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import sonde

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--model")
p.add_argument("--sonde", default="build/bin/sonde")
p.add_argument("--tokens", type=int, default=128)
p.add_argument("--repeat", type=int, default=9)
p.add_argument("--threads", type=int, default=0)
args = p.parse_args()
tmp = tempfile.mkdtemp(prefix="sonde-pybench-")
if not args.model:
    args.model = os.path.join(tmp, "small")
    subprocess.run([args.sonde, "make-model", "--arch", "qwen2", "--preset", "small", "--out", args.model],
                   check=True, stdout=subprocess.DEVNULL)

model = sonde.Model(args.model, threads=args.threads)
L = model.config["num_hidden_layers"]
ids = [(7 * i + 3) % 1000 + 10 for i in range(args.tokens)]
hooks = "blocks.*.hook_resid_post"


def py_forward(**kw):
    t = time.perf_counter()
    model.run_with_cache(ids, **kw)
    return time.perf_counter() - t


def cli_prefill():
    out = subprocess.run([args.sonde, "bench", "--model", args.model, "--mode", "prefill", "--tokens",
                          str(args.tokens), "--repeat", "3", "--threads", str(args.threads), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["median_seconds"]


def cli_forward(with_hooks):
    out = os.path.join(tmp, "f.h5")
    cmd = [args.sonde, "forward", "--model", args.model, "--ids", ",".join(map(str, ids)), "--out", out,
           "--overwrite", "--threads", str(args.threads)]
    if with_hooks:
        cmd += ["--hooks", hooks]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


for _ in range(3):
    py_forward(hooks=None)  # warm-up: plans, buffers
py, cli = [], []
for _ in range(args.repeat):
    cli.append(cli_prefill())
    py.append(statistics.median(py_forward(hooks=None) for _ in range(3)))
ratio = statistics.median(py) / statistics.median(cli)
print(f"1. forward of {args.tokens} tokens: run_with_cache {statistics.median(py) * 1e3:.2f} ms, "
      f"sonde bench prefill {statistics.median(cli) * 1e3:.2f} ms (medians): ratio {ratio:.3f}; "
      f"best {min(py) / min(cli):.3f} (target <= 1.05)")

py_cap, cli_cap = [], []
for _ in range(args.repeat):
    cli_cap.append(cli_forward(True) - cli_forward(False))
    py_cap.append(py_forward(hooks=hooks) - py_forward(hooks=None))
print(f"2. capturing {hooks} ({L} hooks): run_with_cache +{statistics.median(py_cap) * 1e3:.2f} ms, "
      f"sonde forward --hooks +{statistics.median(cli_cap) * 1e3:.2f} ms")

# The hook's cost is small beside a forward of the small preset: measure it on the tiny one, in a
# generation of 64 tokens (one graph and plan for all its decode steps, so what is left is the
# calls), best of many alternating runs (the best is the least disturbed by other load). It
# includes the edit node's copy of the hooked tensor.
tiny = os.path.join(tmp, "tiny")
subprocess.run([args.sonde, "make-model", "--arch", "qwen2", "--preset", "tiny", "--out", tiny], check=True,
               stdout=subprocess.DEVNULL)
model = sonde.Model(tiny, threads=1)
Lt, new = model.config["num_hidden_layers"], 64
noop = {f"blocks.{i}.hook_resid_post": (lambda x, ctx: None) for i in range(Lt)}


def gen():
    t = time.perf_counter()
    model.generate([ids[:8]], max_new_tokens=new)
    return time.perf_counter() - t


plain, hooked = [], []
for _ in range(4 * args.repeat):
    plain.append(gen())
    with model.hooks(noop):
        hooked.append(gen())
calls = Lt * new  # a prefill and new - 1 decode steps, each calling every hook once
per_call = (min(hooked) - min(plain)) / calls
print(f"3. a Python hook that does nothing: {per_call * 1e6:.1f} us per call (tiny preset, {calls} calls per "
      f"generation, best of {len(plain)}: {min(plain) * 1e3:.2f} ms without, {min(hooked) * 1e3:.2f} ms with; "
      f"target < 20 us)")
