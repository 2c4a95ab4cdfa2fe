#!/usr/bin/python3
"""LLaDA goldens for sonde from llada_reference.py (float64), never from sonde's output.

    /usr/bin/python3 tests/reference/make_llada_goldens.py --sonde build/bin/sonde --out tests/data

For each checkpoint (`sonde make-model --arch llada ...`, the only thing taken from sonde) one file
tests/data/<case>.h5 holding
* forward goldens in make_goldens.py's layout (forward/<prompt>/{input_ids, logits, hidden_states,
  resid_post, attn_z_0, rot_q_0, mlp_post_0}), which tests/models/test_own_goldens.cpp checks on
  every backend;
* generation goldens: the root attribute `llada_generation_cases` (JSON), one entry per case with
  the prompt, generate()'s settings, the seed and the completion of generate.py's algorithm run
  alone after torch.manual_seed(seed) (tests/models/test_llada_goldens.cpp).
Each generation case redraws its prompt (LCG seed + attempt) until every decision clears
THRESHOLDS (far above an f32 engine's error on that quantity), so an f32 engine must agree token
for token. The margins found are recorded with the case.

It also writes tests/data/torch-cpu-rand.json: torch.rand / rand_like draws after
torch.manual_seed, which tests/unit checks TorchCpuRandom against.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llada_reference as ref  # noqa: E402
import qwen2_reference  # noqa: E402  (only for the cross-check below)
from make_goldens import lcg_ids, make_group, rel_err, sha256, write_ds  # noqa: E402

THRESHOLDS = {
    "min_logit_gap": 1e-3,
    "min_gumbel_gap": 1e-3,
    "min_selection_margin_rel": 1e-3,
    "min_random_margin": 1e-7,  # random remasking: no tie between the chosen and the rest
}
MAX_ATTEMPTS = 200

# (name, prompt length, settings); settings use generate()'s names plus the seed.
TINY_CASES = [
    ("greedy_lowconf_steps16_block16", 6, dict(steps=16, gen_length=16, block_length=16)),
    ("greedy_lowconf_steps8_block4", 6, dict(steps=8, gen_length=16, block_length=4)),
    ("greedy_random_steps16_block8_seed3", 5, dict(steps=16, gen_length=16, block_length=8, remasking="random", seed=3)),
    ("greedy_random_steps16_block8_seed4", 9, dict(steps=16, gen_length=16, block_length=8, remasking="random", seed=4)),
    ("temp1_lowconf_steps8_block8_seed5", 6, dict(steps=8, gen_length=16, block_length=8, temperature=1.0, seed=5)),
    ("temp0.7_random_steps16_block4_seed7", 4, dict(steps=16, gen_length=16, block_length=4, temperature=0.7,
                                                  remasking="random", seed=7)),
    ("cfg1.5_lowconf_steps8_block8", 6, dict(steps=8, gen_length=16, block_length=8, cfg_scale=1.5)),
    # 12 masks over 5 steps: 3, 3, 2, 2, 2 (the remainder goes to the first steps)
    ("greedy_lowconf_steps5_gen12", 6, dict(steps=5, gen_length=12, block_length=12)),
]
SMALL_CASES = [
    ("greedy_lowconf_steps8_block4", 7, dict(steps=8, gen_length=16, block_length=4)),
    ("temp0.5_random_steps16_block16_seed11", 7, dict(steps=16, gen_length=16, block_length=16, temperature=0.5,
                                                    remasking="random", seed=11)),
]
FILES = {
    "tiny-llada-f32": (["--arch", "llada", "--preset", "tiny", "--seed", "41"], TINY_CASES),
    "small-llada-bf16": (["--arch", "llada", "--preset", "small", "--dtype", "bf16", "--seed", "42"], SMALL_CASES),
}
EXTRA_HOOKS = {"attn_z_0": "blocks.0.attn.hook_z", "mlp_post_0": "blocks.0.mlp.hook_post",
               "rot_q_0": "blocks.0.attn.hook_rot_q"}


def run_case(model, cfg, length, settings, case_seed):
    """Redraws the prompt until every margin clears its threshold; returns the case entry."""
    s = dict(settings)
    seed = s.pop("seed", 0)
    for attempt in range(MAX_ATTEMPTS):
        prompt = lcg_ids(1000 * case_seed + attempt, length, cfg.V - 8)
        margins = {}
        torch.manual_seed(seed)
        x = ref.generate(model, torch.tensor([prompt]), mask_id=cfg.mask_id, margins=margins, **s)
        if all(v >= THRESHOLDS[k] for k, v in margins.items()):
            completion = x[0, length:].tolist()
            return {"prompt": prompt, "settings": s, "seed": seed, "completion": [int(t) for t in completion],
                    "margins": margins, "attempt": attempt}
    raise SystemExit(f"no prompt of length {length} clears the thresholds for {settings}")


def prompts_for(cfg):
    """make_goldens.py's prompts: p7, p23 (LCG ids below V - 8) and special (eos, 0, V-1, the mask id...)."""
    upper = cfg.V - 8
    eos = cfg.raw["eos_token_id"]
    special = [eos, 0, lcg_ids(3, 1, upper)[0], cfg.V - 1, eos, cfg.V - 2, cfg.mask_id]
    return {"p7": lcg_ids(1, 7, upper), "p23": lcg_ids(2, 23, upper), "special": [int(i) for i in special]}


def cross_check(weights, cfg, ids):
    """The LLaDA forward equals qwen2_reference's bidirectional (Dream) forward on the same weights
    under Qwen2's names with zero q/k/v biases, up to RoPE's inv_freq rounding (LLaDA builds it in
    float32): two independently written forwards of the same published architecture."""
    names = {"wte": "model.embed_tokens", "ln_f": "model.norm", "ff_out": "lm_head"}
    block = {"attn_norm": "input_layernorm", "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
             "v_proj": "self_attn.v_proj", "attn_out": "self_attn.o_proj", "ff_norm": "post_attention_layernorm",
             "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "ff_out": "mlp.down_proj"}
    qw = {}
    for k, v in weights.items():
        parts = k.split(".")  # model.transformer.blocks.i.name.weight or model.transformer.name.weight
        if parts[2] == "blocks":
            qw[f"model.layers.{parts[3]}.{block[parts[4]]}.weight"] = v
        else:
            qw[names[parts[2]] + ".weight"] = v
    for i in range(cfg.L):
        for proj, n in [("q_proj", cfg.nh), ("k_proj", cfg.nkv), ("v_proj", cfg.nkv)]:
            qw[f"model.layers.{i}.self_attn.{proj}.bias"] = np.zeros(n * cfg.d, dtype=np.float32)
    qcfg = qwen2_reference.Config({"hidden_size": cfg.H, "num_hidden_layers": cfg.L, "num_attention_heads": cfg.nh,
                                   "num_key_value_heads": cfg.nkv, "intermediate_size": cfg.I, "vocab_size": cfg.V,
                                   "rms_norm_eps": cfg.eps, "rope_theta": cfg.theta, "tie_word_embeddings": cfg.tied,
                                   "model_type": "Dream"})
    a = qwen2_reference.forward(qw, qcfg, ids)["logits"]
    W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64) for k, v in weights.items()}
    b = ref.forward(W, cfg, torch.tensor([ids]))["logits"][0].numpy()
    err = rel_err(a, b)
    assert err < 1e-5, f"llada_reference and qwen2_reference disagree: {err}"
    return err


def forward_goldens(f, model_dir, cfg):
    _, weights = ref.load_model(model_dir)
    W64 = {k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64) for k, v in weights.items()}
    W32 = {k: v.to(torch.float32) for k, v in W64.items()}
    prompts = prompts_for(cfg)
    print(f"cross-check against qwen2_reference: rel err {cross_check(weights, cfg, prompts['p23']):.1e}")
    for pname, ids in prompts.items():
        t = torch.tensor([ids])
        o64 = {k: v.numpy() for k, v in ref.forward(W64, cfg, t, torch.float64).items()}
        o32 = {k: v.numpy() for k, v in ref.forward(W32, cfg, t, torch.float32).items()}
        o64["logits"], o32["logits"] = o64["logits"][0], o32["logits"][0]
        g = make_group(f, f"forward/{pname}")
        write_ds(g, "input_ids", ids, np.int64)
        for k in ["logits", "hidden_states", "resid_post", *EXTRA_HOOKS]:
            write_ds(g, k, o64[k], np.float32)
        g.attrs["f32_path_max_rel_diff"] = max(rel_err(o32[k].astype(np.float64), o64[k]) for k in o64)
    return list(prompts)


def make_file(sonde, name, mm_args, cases, out_dir):
    with tempfile.TemporaryDirectory(prefix="sonde-llada-") as tmp:
        model_dir = os.path.join(tmp, "model")
        subprocess.run([sonde, "make-model", *mm_args, "--out", model_dir], check=True, stdout=subprocess.DEVNULL)
        model = ref.Model(model_dir)
        cfg = model.cfg
        path = os.path.join(out_dir, name + ".h5")
        if os.path.exists(path):
            os.remove(path)
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        fid = h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)
        with h5py.File(fid) as f:
            f.attrs["make_model_args"] = json.dumps(mm_args)
            f.attrs["model_sha256"] = sha256(os.path.join(model_dir, "model.safetensors"))
            f.attrs["arch"] = "llada"
            f.attrs["preset"] = mm_args[mm_args.index("--preset") + 1]
            f.attrs["torch_version"] = str(torch.__version__)
            f.attrs["reference"] = "tests/reference/llada_reference.py (modeling_llada.py, generate.py), float64"
            f.attrs["config_json"] = json.dumps(cfg.raw, sort_keys=True)
            f.attrs["extra_hooks"] = json.dumps(EXTRA_HOOKS)
            f.attrs["prompts"] = json.dumps(forward_goldens(f, model_dir, cfg))
            entries = []
            for i, (cname, length, settings) in enumerate(cases):
                e = run_case(model, cfg, length, settings, i + 1)
                e["name"] = cname
                entries.append(e)
                print(f"{name}/{cname}: attempt {e['attempt']}, completion {e['completion']}, margins "
                      + ", ".join(f"{k} {v:.2e}" for k, v in e["margins"].items()))
            f.attrs["llada_generation_cases"] = json.dumps(entries)
        print(f"{name}: -> {path} ({os.path.getsize(path)} B)")


def torch_rand_values(out_dir):
    """Draws the unit test compares TorchCpuRandom with: positions in a long float32 and float64
    stream (past ATen's parallel grain of 32768 elements), a [2, 3, 5] rand_like, seeds > 2^32."""
    def pick(t, idx):
        return {str(i): float(t[i]) for i in idx}

    idx = [0, 1, 2, 31, 32767, 32768, 99999]
    out = {}
    for seed in [0, 42, 2**32 + 7]:
        torch.manual_seed(seed)
        f32 = torch.rand(100000)
        torch.manual_seed(seed)
        f64 = torch.rand(100000, dtype=torch.float64)
        torch.manual_seed(seed)
        like = torch.rand_like(torch.zeros(2, 3, 5), dtype=torch.float64).flatten()
        nxt = torch.rand(4)  # float32 draws after 30 float64 ones: the stream continues
        out[str(seed)] = {"f32": pick(f32, idx), "f64": pick(f64, idx), "like_f64": [float(v) for v in like],
                          "then_f32": [float(v) for v in nxt]}
    path = os.path.join(out_dir, "torch-cpu-rand.json")
    with open(path, "w") as fh:
        json.dump({"torch_version": str(torch.__version__), "indices": idx, "seeds": out}, fh, indent=1)
        fh.write("\n")
    print(f"torch rand values -> {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--files", nargs="*", default=list(FILES))
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    torch_rand_values(a.out)
    for name in a.files:
        make_file(os.path.abspath(a.sonde), name, *FILES[name], a.out)


if __name__ == "__main__":
    main()
