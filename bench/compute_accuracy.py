#!/usr/bin/python3
"""Error of each --compute mode against the float64 PyTorch reference (tests/data goldens).

Usage: /usr/bin/python3 bench/compute_accuracy.py --sonde build/bin/sonde [--backend threaded]
       [--data tests/data] [--modes f32,bf16,int8]

For every golden of tests/data made by tests/reference/make_goldens.py (a `make_model_args`
attribute; the model is rebuilt with `sonde make-model`), every prompt and every mode: one
`sonde forward` with the golden's hooks, then per prompt
  - logits: max|err| / max|ref| (normalised), and max|err| itself;
  - hooks: the worst normalised error over hook_embed, every blocks.*.hook_resid_post and
    ln_final.hook_out (the Hugging Face hidden states);
  - greedy agreement: positions whose argmax equals the reference's, of all positions.
Prints one row per golden and mode (the worst prompt's errors, agreement summed over prompts).
int8 runs with --weights q8 (its weights); f32 and bf16 with the native ones.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")


def norm_err(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--backend", default="threaded")
    ap.add_argument("--data", default=str(Path(__file__).resolve().parent.parent / "tests" / "data"))
    ap.add_argument("--modes", default="f32,bf16,int8")
    a = ap.parse_args()
    goldens = []
    for f in sorted(Path(a.data).glob("*.h5")):
        with h5py.File(f, "r") as h:
            if "make_model_args" in h.attrs and "forward" in h:
                goldens.append(f)
    print(f"{'golden':<18} {'mode':<5} {'logits norm':>11} {'logits max':>10} {'hooks norm':>10} {'greedy':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for g in goldens:
            with h5py.File(g, "r") as h:
                args = json.loads(h.attrs["make_model_args"])
                prompts = json.loads(h.attrs["prompts"])
            model = Path(tmp) / g.stem
            run([a.sonde, "make-model", *args, "--out", str(model)])
            for mode in a.modes.split(","):
                worst_norm = worst_max = worst_hooks = 0.0
                agree = total = 0
                for p in prompts:
                    with h5py.File(g, "r") as h:
                        ids = h[f"forward/{p}/input_ids"][()]
                        ref_logits = h[f"forward/{p}/logits"][()]
                        hidden = h[f"forward/{p}/hidden_states"][()]
                    out = Path(tmp) / f"{g.stem}-{p}-{mode}.h5"
                    cmd = [a.sonde, "forward", "--model", str(model), "--backend", a.backend, "--compute", mode,
                           "--ids", ",".join(str(int(i)) for i in ids), "--out", str(out),
                           "--hooks", "hook_embed,blocks.*.hook_resid_post,ln_final.hook_out"]
                    if mode == "int8":
                        cmd += ["--weights", "q8"]
                    run(cmd)
                    with h5py.File(out, "r") as o:
                        logits = o["logits"][()]
                        L = hidden.shape[0] - 1
                        acts = [o["acts/hook_embed"][()]] + [o[f"acts/blocks.{k}.hook_resid_post"][()] for k in range(L - 1)]
                        acts.append(o["acts/ln_final.hook_out"][()])
                    worst_norm = max(worst_norm, norm_err(logits, ref_logits))
                    worst_max = max(worst_max, float(np.max(np.abs(logits - ref_logits))))
                    worst_hooks = max(worst_hooks, max(norm_err(x, hidden[k]) for k, x in enumerate(acts)))
                    agree += int(np.sum(np.argmax(logits, -1) == np.argmax(ref_logits, -1)))
                    total += logits.shape[0]
                print(f"{g.stem:<18} {mode:<5} {worst_norm:>11.2e} {worst_max:>10.2e} {worst_hooks:>10.2e} "
                      f"{agree:>4}/{total:<3}", flush=True)


if __name__ == "__main__":
    main()
