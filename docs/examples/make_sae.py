#!/usr/bin/python3
"""Writes a random sparse autoencoder in SAELens's on-disk layout: a folder holding `cfg.json` and
`sae_weights.safetensors` (and with `--sparsity` a `sparsity.safetensors`, SAELens's log10 feature
densities, here random). For demos and tests; nothing here is trained.

    /usr/bin/python3 docs/examples/make_sae.py --arch standard --d-in 64 --d-sae 256 \
        --hook blocks.0.hook_resid_post --out my-sae

Layouts (`--layout`): `flat`, the cfg.json of SAELens up to v5 (hook_name at the top level, TopK
as architecture "standard" with activation_fn_str "topk"), or `v6`, the nested `metadata` object
of SAELens 6 (architecture "topk" with a top-level `k`). Weights (SAELens's names and shapes):
W_enc [d_in, d_sae], W_dec [d_sae, d_out], b_enc [d_sae], b_dec [d_out], threshold [d_sae]
(jumprelu), b_gate, b_mag, r_mag [d_sae] (gated, no b_enc). d_out = d_in except for transcoders.
Only numpy and the standard library: the safetensors file is written by hand (u64 header
length, JSON header, little-endian data), bf16 by rounding float32 to nearest even.
"""
import argparse
import json
import os
import struct

import numpy as np

ARCHS = ("standard", "jumprelu", "topk", "gated", "transcoder", "jumprelu_transcoder")


def bf16_bits(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest, ties to even
    return rounded.astype(np.uint16)


def write_safetensors(path, tensors, dtype):
    """tensors: {name: float32 array}; dtype 'F32' or 'BF16'. Names sorted, data 8-byte aligned."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        raw = (bf16_bits(a) if dtype == "BF16" else a).astype("<u2" if dtype == "BF16" else "<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def random_weights(arch, d_in, d_sae, d_out, rng):
    s = 1.0 / np.sqrt(d_in)
    w = {
        "W_enc": rng.uniform(-s, s, (d_in, d_sae)),
        "W_dec": rng.uniform(-1, 1, (d_sae, d_out)) / np.sqrt(d_sae) * 2,
        "b_dec": rng.normal(0, 0.05, d_out),
    }
    if arch == "gated":
        w["b_gate"] = rng.normal(0, 0.1, d_sae)
        w["b_mag"] = rng.normal(0, 0.1, d_sae)
        w["r_mag"] = rng.normal(0, 0.2, d_sae)
    else:
        w["b_enc"] = rng.normal(0, 0.1, d_sae)
    if arch in ("jumprelu", "jumprelu_transcoder"):
        w["threshold"] = rng.uniform(0.0, 0.3, d_sae)
    return {k: v.astype(np.float32) for k, v in w.items()}


def config(a):
    transcoder = a.arch.endswith("transcoder")
    dtype = "bfloat16" if a.dtype == "bf16" else "float32"
    meta = {"model_name": a.model_name, "hook_name": a.hook, "hook_head_index": None, "prepend_bos": True,
            "context_size": 128, "dataset_path": "random", "sae_lens_version": "6.0.0"}
    if a.layout == "v6":
        cfg = {"architecture": a.arch, "d_in": a.d_in, "d_sae": a.d_sae, "dtype": dtype, "device": "cpu",
               "apply_b_dec_to_input": a.apply_b_dec and not transcoder,
               "normalize_activations": a.norm, "reshape_activations": "none", "metadata": meta}
        if a.arch == "topk":
            cfg["k"] = a.k
    else:
        arch = "standard" if a.arch == "topk" else a.arch
        cfg = {"architecture": arch, "d_in": a.d_in, "d_sae": a.d_sae, "dtype": dtype, "device": "cpu",
               "model_name": a.model_name, "hook_name": a.hook, "hook_layer": layer_of(a.hook),
               "hook_head_index": None, "activation_fn_str": "topk" if a.arch == "topk" else "relu",
               "activation_fn_kwargs": {"k": a.k} if a.arch == "topk" else {},
               "apply_b_dec_to_input": a.apply_b_dec and not transcoder, "finetuning_scaling_factor": False,
               "context_size": 128, "dataset_path": "random", "normalize_activations": a.norm,
               "sae_lens_training_version": "5.0.0"}
    if transcoder:
        cfg.update({"d_out": a.d_out or a.d_in, "hook_name_out": a.hook_out, "hook_layer_out": layer_of(a.hook_out),
                    "hook_head_index_out": None})
    return cfg


def layer_of(hook):
    parts = (hook or "").split(".")
    return int(parts[1]) if len(parts) > 1 and parts[0] == "blocks" and parts[1].isdigit() else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", choices=ARCHS, default="standard")
    p.add_argument("--d-in", type=int, required=True)
    p.add_argument("--d-sae", type=int, required=True)
    p.add_argument("--d-out", type=int, default=0, help="transcoders: the output hook's width (default d_in)")
    p.add_argument("--hook", required=True, help="the hook read (SAELens hook_name)")
    p.add_argument("--hook-out", default="", help="transcoders: the hook written (hook_name_out)")
    p.add_argument("--k", type=int, default=8, help="topk: features kept per row")
    p.add_argument("--norm", default="none", choices=("none", "expected_average_only_in", "constant_norm_rescale"))
    p.add_argument("--no-apply-b-dec", dest="apply_b_dec", action="store_false")
    p.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    p.add_argument("--layout", choices=("flat", "v6"), default="v6")
    p.add_argument("--model-name", default="random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sparsity", action="store_true", help="also sparsity.safetensors: log10 densities in [-5, -1)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.arch.endswith("transcoder") and not a.hook_out:
        p.error("--hook-out is required for transcoders")
    os.makedirs(a.out, exist_ok=True)
    w = random_weights(a.arch, a.d_in, a.d_sae, a.d_out or a.d_in, np.random.RandomState(a.seed))
    write_safetensors(os.path.join(a.out, "sae_weights.safetensors"), w, "BF16" if a.dtype == "bf16" else "F32")
    if a.sparsity:
        density = np.random.RandomState(a.seed + 1).uniform(-5, -1, a.d_sae)
        write_safetensors(os.path.join(a.out, "sparsity.safetensors"), {"sparsity": density}, "F32")
    with open(os.path.join(a.out, "cfg.json"), "w") as f:
        json.dump(config(a), f, indent=2)
    return w


if __name__ == "__main__":
    main()
