"""sonde from Python, notebook style: load a checkpoint, capture, steer, generate, plot.

    PYTHONPATH=build/python python3 docs/examples/python_quickstart.py --model models/small

Without --model it makes a tiny random checkpoint with `sonde make-model` (--sonde PATH, default
build/bin/sonde). Its text is gibberish; the shapes and code paths are those of a real model.
The plot needs matplotlib; without it that step is skipped.
"""

import argparse
import os
import subprocess
import tempfile

import numpy as np

import sonde

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", help="a model directory (default: make a tiny one)")
parser.add_argument("--sonde", default="build/bin/sonde", help="the sonde program, to make the model")
parser.add_argument("--out", default=tempfile.mkdtemp(prefix="sonde-quickstart-"), help="where files go")
args = parser.parse_args()

# 1. Load. A directory in Hugging Face layout, or org/name from the local HF cache.
if args.model is None:
    args.model = os.path.join(args.out, "tiny")
    subprocess.run([args.sonde, "make-model", "--arch", "qwen2", "--preset", "tiny", "--out", args.model],
                   check=True, stdout=subprocess.DEVNULL)
model = sonde.Model(args.model)  # backend="threaded", threads=0 (all cores)
L = model.config["num_hidden_layers"]
print(model, f"{L} layers, hidden {model.config['hidden_size']}")
print("hook points:", len(model.hook_points()), "e.g.", model.hook_points()[1])

# 2. Capture: logits and every layer's residual stream, as NumPy arrays.
prompt = "def add(a, b):\n    return a + b"
logits, cache = model.run_with_cache(prompt, hooks="blocks.*.hook_resid_post")
print("logits", logits.shape, "| blocks.0.hook_resid_post", cache["blocks.0.hook_resid_post"].shape)
norms = [np.linalg.norm(cache[f"blocks.{i}.hook_resid_post"], axis=-1).mean() for i in range(L)]
print("mean residual norm per layer:", np.round(norms, 3).tolist())

# 3. Steer: add a direction to an early layer's residual stream with a Python hook. (A real
# steering vector is a difference of means between two sets of prompts' activations.)
layer = max(0, L // 2 - 1)
direction = np.random.default_rng(0).standard_normal(model.config["hidden_size"]).astype(np.float32)
direction *= 2 * norms[layer] / np.linalg.norm(direction)


def steer(x, ctx):  # x: [batch, tokens, hidden], writable; runs at every forward of the call
    x += direction


with model.hooks({f"blocks.{layer}.hook_resid_post": steer}):
    steered_logits, steered = model.run_with_cache(prompt, hooks="blocks.*.hook_resid_post")
steered_norms = [np.linalg.norm(steered[f"blocks.{i}.hook_resid_post"], axis=-1).mean() for i in range(L)]
print(f"steering layer {layer}: logits move by up to {np.abs(steered_logits - logits).max():.3f}; "
      f"top token at the last position {int(logits[-1].argmax())} -> {int(steered_logits[-1].argmax())}")

# 4. Generate: plain and steered, with the last position's residual captured at each token.
plain = model.generate([prompt], max_new_tokens=12, temperature=0.7, seed=1)
with model.hooks({f"blocks.{layer}.hook_resid_post": steer}):
    steered_gen = model.generate([prompt], max_new_tokens=12, temperature=0.7, seed=1,
                                 hooks=f"blocks.{L - 1}.hook_resid_post", positions="generated")
print("plain:  ", repr(plain.completions[0]))
print("steered:", repr(steered_gen.completions[0]))
print("captured", steered_gen.cache[f"blocks.{L - 1}.hook_resid_post"].shape, "generated rows")
for event in model.generate_stream(["Hello"], max_new_tokens=4):
    if isinstance(event, sonde.Token):
        print("token", event.token, repr(model.tokenizer.decode([event.token])))

# 5. Plot the per-layer norm curve (matplotlib optional).
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib is not installed: plot skipped")
else:
    plt.plot(range(L), norms, marker="o", label="plain")
    plt.plot(range(L), steered_norms, marker="o", label=f"steered at layer {layer}")
    plt.xlabel("layer")
    plt.ylabel("mean ||resid_post||")
    plt.legend()
    png = os.path.join(args.out, "norms.png")
    plt.savefig(png)
    print("wrote", png)
