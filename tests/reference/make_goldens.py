#!/usr/bin/python3
"""Regenerate sonde's own golden files in tests/data from an independent PyTorch reference.

    /usr/bin/python3 tests/reference/make_goldens.py --sonde build/bin/sonde --out tests/data

For each case: `sonde make-model` writes a random-weight checkpoint into a temp dir; this script
reads its config.json and model.safetensors itself, runs the Qwen2 / Dream forward in float64
(qwen2_reference.py) and writes tests/data/<case>.h5. CI never runs this; it only reads the
files. Only make-model is taken from sonde (the weights); every expected number comes from here.

Optional: --validate-shared DIR runs the same reference on DIR/golden/models/* and prints the
normalised error against DIR/golden/*.h5 (an independent check of the reference itself).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen2_reference as ref  # noqa: E402

# name -> make-model arguments (everything after "make-model", without --out)
CASES = {
    "small-qwen2-f32": ["--arch", "qwen2", "--preset", "small", "--seed", "11"],
    "small-dream-f32": ["--arch", "dream", "--preset", "small", "--seed", "12"],
    "tiny-qwen2-bf16": ["--arch", "qwen2", "--preset", "tiny", "--dtype", "bf16", "--seed", "13"],
    "tiny-dream-bf16": ["--arch", "dream", "--preset", "tiny", "--dtype", "bf16", "--seed", "14"],
    "small-qwen2-bf16": ["--arch", "qwen2", "--preset", "small", "--dtype", "bf16", "--seed", "15"],
}

# Datasets besides input_ids/logits, with the sonde hook each corresponds to (documentation only;
# the C++ test holds the mapping).
EXTRA_HOOKS = {
    "attn_z_0": "blocks.0.attn.hook_z",
    "mlp_post_0": "blocks.0.mlp.hook_post",
    "rot_q_0": "blocks.0.attn.hook_rot_q",
}


def lcg_ids(seed, n, upper):
    """n ids in [0, upper) from a 64-bit LCG (Knuth MMIX constants), high bits taken:
    state = state * 6364136223846793005 + 1442695040888963407 (mod 2^64); id = (state >> 33) % upper.
    """
    state = seed & (2**64 - 1)
    out = []
    for _ in range(n):
        state = (state * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        out.append((state >> 33) % upper)
    return out


def prompts_for(cfg):
    """p7, p23: random ids below V - 8 (clear of the special ids make-model puts at the top).
    special: eos, 0, V-1 (Dream: the mask id), bos/pad and ordinary ids mixed, to show that the
    forward pass treats every id as a plain embedding row."""
    V = cfg.V
    upper = V - 8
    raw = cfg.raw
    eos = raw.get("eos_token_id")
    special = [eos, 0, lcg_ids(3, 1, upper)[0], V - 1, eos, raw.get("bos_token_id"), V - 2]
    if raw.get("mask_token_id") is not None:
        special[-1] = raw["mask_token_id"]
    return {
        "p7": lcg_ids(1, 7, upper),
        "p23": lcg_ids(2, 23, upper),
        "special": [int(i) for i in special],
    }


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def rel_err(a, b):
    """max|a - b| / max|b| over the whole array (the sonde tests' normalised error)."""
    return float(np.abs(a - b).max() / np.abs(b).max())


def write_ds(group, name, data, dtype):
    # shuffle + gzip keeps the committed files small; h5py / libhdf5 read them transparently.
    # track_times=False: no timestamps, so regenerating gives identical bytes per dataset.
    group.create_dataset(name, data=np.asarray(data, dtype=dtype), compression="gzip",
                         compression_opts=9, shuffle=True, track_times=False)


def make_group(f, path):
    """create_group without modification times in the object headers, so that regenerating
    yields byte-identical files (no churn in git when nothing changed)."""
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    node = f
    for part in path.split("/"):
        if part not in node:
            h5py.h5g.create(node.id, part.encode(), gcpl=gcpl)
        node = node[part]
    return node


def make_case(sonde, name, mm_args, out_dir):
    with tempfile.TemporaryDirectory(prefix="sonde-golden-") as tmp:
        model_dir = os.path.join(tmp, "model")
        subprocess.run([sonde, "make-model", *mm_args, "--out", model_dir], check=True,
                       stdout=subprocess.DEVNULL)
        cfg, weights = ref.load_model(model_dir)
        model_sha = sha256(os.path.join(model_dir, "model.safetensors"))
        with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        dtypes = sorted({v["dtype"] for k, v in header.items() if k != "__metadata__"})
        assert len(dtypes) == 1, dtypes
        weight_dtype = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtypes[0]]
        arch = "qwen2" if cfg.causal else "dream"
        preset = mm_args[mm_args.index("--preset") + 1]
        prompts = prompts_for(cfg)

        path = os.path.join(out_dir, name + ".h5")
        if os.path.exists(path):
            os.remove(path)
        # File creation list without times: the root group's header then carries no timestamps.
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        fid = h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)
        with h5py.File(fid) as f:
            f.attrs["make_model_args"] = json.dumps(mm_args)
            f.attrs["model_sha256"] = model_sha
            f.attrs["arch"] = arch
            f.attrs["preset"] = preset
            f.attrs["weight_dtype"] = weight_dtype
            f.attrs["torch_version"] = str(torch.__version__)
            f.attrs["reference_precision"] = "float64"
            f.attrs["prompts"] = json.dumps(list(prompts))
            f.attrs["config_json"] = json.dumps(cfg.raw, sort_keys=True)
            f.attrs["hidden_convention"] = (
                "hidden_states[0]=embedding output (hook_embed); hidden_states[k]=output of layer k-1 "
                "for 1<=k<L (blocks.{k-1}.hook_resid_post); hidden_states[L]=final RMSNorm(output of "
                "layer L-1) (ln_final.hook_out). resid_post[i]=raw output of layer i")
            f.attrs["logits_convention"] = "raw lm_head logits per slot, not shifted (also for Dream)"
            f.attrs["extra_hooks"] = json.dumps(EXTRA_HOOKS)
            summary = {}
            for pname, ids in prompts.items():
                o64 = ref.forward(weights, cfg, ids, torch.float64)
                o32 = ref.forward(weights, cfg, ids, torch.float32)
                g = make_group(f, f"forward/{pname}")
                write_ds(g, "input_ids", ids, np.int64)
                write_ds(g, "logits", o64["logits"], np.float32)
                for k in ["hidden_states", "resid_post", *EXTRA_HOOKS]:
                    write_ds(g, k, o64[k], np.float32)
                # How far a plain float32 run of the same math lands (the scale an f32 engine
                # should reach): max|f32 - f64| and that divided by max|f64|.
                lg = (o32["logits"].astype(np.float64), o64["logits"])
                hs = (o32["hidden_states"].astype(np.float64), o64["hidden_states"])
                g.attrs["f32_path_logits_maxabs"] = float(np.abs(lg[0] - lg[1]).max())
                g.attrs["f32_path_logits_maxrel"] = rel_err(*lg)
                g.attrs["f32_path_hidden_maxabs"] = float(np.abs(hs[0] - hs[1]).max())
                g.attrs["f32_path_hidden_maxrel"] = rel_err(*hs)
                worst = max(rel_err(o32[k].astype(np.float64), o64[k]) for k in o64)
                g.attrs["f32_path_max_rel_diff"] = worst
                summary[pname] = (len(ids), worst)
        size = os.path.getsize(path)
        print(f"{name}: {arch} {preset} {weight_dtype} sha256 {model_sha[:12]} -> {path} ({size} B); "
              + ", ".join(f"{p}: T={t} f32 rel {w:.1e}" for p, (t, w) in summary.items()))


def validate_shared(shared):
    gdir = os.path.join(shared, "golden")
    for m in sorted(os.listdir(os.path.join(gdir, "models"))):
        cfg, w = ref.load_model(os.path.join(gdir, "models", m))
        with h5py.File(os.path.join(gdir, m + ".h5"), "r") as f:
            for p in f["forward"]:
                g = f["forward"][p]
                o = ref.forward(w, cfg, [int(i) for i in g["input_ids"][()]])
                errs = {k: rel_err(o[k], g[k][()]) for k in ["logits", "hidden_states", "resid_post"]}
                print(f"shared {m} {p}: " + ", ".join(f"{k} {e:.1e}" for k, e in errs.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sonde", required=True, help="path to the sonde program (for make-model)")
    ap.add_argument("--out", required=True, help="output directory (tests/data)")
    ap.add_argument("--cases", nargs="*", default=list(CASES), help="subset of cases")
    ap.add_argument("--validate-shared", metavar="DIR", help="also check the reference on DIR/golden")
    a = ap.parse_args()
    torch.set_num_threads(1)  # fixed reduction order -> identical numbers on every run
    if a.validate_shared:
        validate_shared(a.validate_shared)
    os.makedirs(a.out, exist_ok=True)
    for name in a.cases:
        make_case(os.path.abspath(a.sonde), name, CASES[name], a.out)


if __name__ == "__main__":
    main()
