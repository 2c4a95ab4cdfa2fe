#!/usr/bin/python3
"""Fast-dLLM v2 goldens for sonde from fast_dllm_v2_reference.py (float64), never from sonde's output.

    /usr/bin/python3 tests/reference/make_fast_dllm_v2_goldens.py --sonde build/bin/sonde --out tests/data

For each checkpoint (`sonde make-model --arch fast_dllm_v2 ...`, the only thing taken from sonde)
one file tests/data/<case>.h5 holding
* forward goldens in make_goldens.py's layout (forward/<prompt>/{input_ids, logits, hidden_states,
  resid_post, attn_z_0, rot_q_0, mlp_post_0}), which tests/models/test_own_goldens.cpp checks on
  every backend. The prompts cross block boundaries (bd_size 32: 45 and 70 tokens), so the
  block-causal mask is what they test;
* generation goldens: the root attribute `fdv2_generation_cases` (JSON), one entry per case with
  the prompt, batch_sample's settings and the sequence it returns (greedy), the `edge_*` cases at
  the block edges the published code treats specially (a prompt of exactly one block, two blocks,
  one token short of and past a block); and `fdv2_sampled_cases`: sampled batch_sample (temperature,
  top_p, top_k) with the counter-based draws of docs/generation.md, per case several prompts of
  different lengths, the base seed (prompt r draws with seed + r, as `sonde generate --seed` gives
  them) and each prompt's completion. Each case redraws its prompts (LCG seed + attempt) until
  every decision clears THRESHOLDS (SAMPLED_THRESHOLDS), so an f32 engine must agree token for
  token. tests/models/test_fdv2_generate.cpp runs them through `sonde generate` on every backend.
Before writing, the cached forward (block by block over the KV cache, as batch_sample calls it) is
checked against one full block-causal forward of the same sequence.
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
import fast_dllm_v2_reference as ref  # noqa: E402
from make_goldens import lcg_ids, make_group, rel_err, sha256, write_ds  # noqa: E402

# min_best_margin: random tiny models repeat a token over a block, and the masked slots' confidences
# then differ by little; 1e-6 is still far above an f32 engine's error on a probability.
THRESHOLDS = {"min_logit_gap": 1e-3, "min_threshold_margin": 1e-3, "min_best_margin": 1e-6}
MAX_ATTEMPTS = 60
# Sampled decisions: a draw's distance to the CDF steps around its token, the top-p cut's distance
# to top_p, and the gaps between confidences are probabilities here, where an f32 engine errs by a
# few 1e-6 at these temperatures (logits ~10, error ~1e-5); the top-k gap is in logits.
SAMPLED_THRESHOLDS = {"min_logit_gap": 1e-3, "min_threshold_margin": 1e-3, "min_best_margin": 3e-5,
                      "min_cdf_margin": 3e-5, "min_top_p_margin": 3e-5, "min_top_k_gap": 1e-3}
SAMPLED_ATTEMPTS = 200

# (name, prompt length, batch_sample settings). stop "drawn": the stop token is a token the
# unstopped run generates, so the stop path (pad after it) is exercised on a random model.
TINY_CASES = [
    ("p5_block32_small8_th0.9", 5, dict(block_size=32, max_new_tokens=64, small_block_size=8, threshold=0.9)),
    ("p5_block32_small32_th0.5", 5, dict(block_size=32, max_new_tokens=32, small_block_size=32, threshold=0.5)),
    ("p40_block32_small8_th0.95", 40, dict(block_size=32, max_new_tokens=32, small_block_size=8, threshold=0.95)),
    ("p64_block32_small16_th0.7", 64, dict(block_size=32, max_new_tokens=32, small_block_size=16, threshold=0.7)),
    ("p9_block8_small4_th0.9", 9, dict(block_size=8, max_new_tokens=24, small_block_size=4, threshold=0.9)),
    ("p11_block16_small4_th0.3_stop", 11, dict(block_size=16, max_new_tokens=48, small_block_size=4, threshold=0.3,
                                              stop="drawn")),
    # The block edges: batch_sample forwards a prompt of exactly one block not at all (the first
    # decoded block without it), a longer one's whole blocks into the cache, and a prompt ending on a
    # block boundary gets its next token from the prefill's last logits.
    # A one-block prompt's first decoded block is all masks over an empty cache, the same for every
    # prompt: this model gives each of its slots token 1478 at p = 0.373, so a threshold below that
    # commits them all (above it, the one committed would be decided by rounding noise).
    ("edge_p8_block8_one_block", 8, dict(block_size=8, max_new_tokens=16, small_block_size=4, threshold=0.3)),
    ("edge_p16_block8_two_blocks", 16, dict(block_size=8, max_new_tokens=16, small_block_size=4, threshold=0.9)),
    ("edge_p7_block8_one_short", 7, dict(block_size=8, max_new_tokens=16, small_block_size=4, threshold=0.9)),
    ("edge_p9_block8_one_past", 9, dict(block_size=8, max_new_tokens=16, small_block_size=8, threshold=0.5)),
    ("edge_p32_block32_one_block", 32, dict(block_size=32, max_new_tokens=32, small_block_size=8, threshold=0.3)),
    ("edge_p31_block32_one_short", 31, dict(block_size=32, max_new_tokens=64, small_block_size=8, threshold=0.9)),
    ("edge_p33_block32_one_past", 33, dict(block_size=32, max_new_tokens=32, small_block_size=8, threshold=0.9)),
]
# (name, prompt lengths, settings with the sampling and the base seed). Temperatures of 2-6: this
# random model puts ~0.99 on its top token at temperature 1, so lower ones would draw its argmax
# (at 4 the top-k case still drew the greedy tokens).
TINY_SAMPLED = [
    ("sampled_p6_block8_small4_T3_topp0.9", [6], dict(block_size=8, max_new_tokens=16, small_block_size=4,
                                                      threshold=0.5, temperature=3.0, top_p=0.9, seed=11)),
    ("sampled_p20_block16_small8_T6_topk40", [20], dict(block_size=16, max_new_tokens=32, small_block_size=8,
                                                       threshold=0.3, temperature=6.0, top_p=1.0, top_k=40, seed=5)),
    ("sampled_batch3_block8_small4_T3", [5, 13, 16], dict(block_size=8, max_new_tokens=16, small_block_size=4,
                                                         threshold=0.4, temperature=3.0, top_p=1.0, seed=7)),
]
FILES = {"tiny-fdv2-f32": (["--arch", "fast_dllm_v2", "--preset", "tiny", "--seed", "43"], TINY_CASES, TINY_SAMPLED)}
EXTRA_HOOKS = {"attn_z_0": "blocks.0.attn.hook_z", "mlp_post_0": "blocks.0.mlp.hook_post",
               "rot_q_0": "blocks.0.attn.hook_rot_q"}


def prompts_for(cfg):
    upper = cfg.V - 8
    eos = cfg.raw["eos_token_id"]
    special = [eos, 0, lcg_ids(3, 1, upper)[0], cfg.V - 1, eos, cfg.raw["bos_token_id"], cfg.mask_id]
    return {"p7": lcg_ids(1, 7, upper), "p45": lcg_ids(4, 45, upper),
            "p70": lcg_ids(5, 70, upper), "special": [int(i) for i in special]}


def check_cache_path(model, cfg, ids):
    """batch_sample's calls (whole blocks appended to the cache) equal one full forward."""
    full, _ = model(ids, None, cfg.bd)
    cache, parts = None, []
    for lo in range(0, len(ids), cfg.bd):
        logits, cache = model(ids[lo : lo + cfg.bd], cache, cfg.bd)
        parts.append(logits)
    err = rel_err(torch.cat(parts).numpy(), full.numpy())
    assert err < 1e-12, f"cached and full forwards disagree: {err}"
    return err


def forward_goldens(f, model_dir, cfg):
    _, weights = ref.load_model(model_dir)
    W64 = {k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64) for k, v in weights.items()}
    W32 = {k: v.to(torch.float32) for k, v in W64.items()}
    for pname, ids in prompts_for(cfg).items():
        o64 = {k: v.numpy() for k, v in ref.forward(W64, cfg, ids)[0].items()}
        o32 = {k: v.numpy() for k, v in ref.forward(W32, cfg, ids, dtype=torch.float32)[0].items()}
        g = make_group(f, f"forward/{pname}")
        write_ds(g, "input_ids", ids, np.int64)
        for k in ["logits", "hidden_states", "resid_post", *EXTRA_HOOKS]:
            write_ds(g, k, o64[k], np.float32)
        g.attrs["f32_path_max_rel_diff"] = max(rel_err(o32[k].astype(np.float64), o64[k]) for k in o64)
    return list(prompts_for(cfg))


def run_case(model, cfg, length, settings, case_seed):
    s = dict(settings)
    drawn_stop = s.pop("stop", None) == "drawn"
    for attempt in range(MAX_ATTEMPTS):
        prompt = [int(t) for t in lcg_ids(1000 * case_seed + attempt, length, cfg.V - 8)]
        stop = cfg.raw["eos_token_id"]
        if drawn_stop:  # a token the run makes in its second generated block, not in the prompt
            free = ref.batch_sample(model, prompt, stop_token=stop, pad_id=cfg.pad_id, mask_id=cfg.mask_id, **s)
            lo = length + s["block_size"] + 3
            cands = [t for t in free[lo:] if t not in prompt and t not in free[length:lo]]
            if not cands:
                continue
            stop = cands[0]
        margins = {}
        seq = ref.batch_sample(model, prompt, stop_token=stop, pad_id=cfg.pad_id, mask_id=cfg.mask_id,
                               margins=margins, **s)
        if all(v >= THRESHOLDS[k] for k, v in margins.items()):
            return {"prompt": prompt, "settings": s, "stop_token": stop, "pad_token": cfg.pad_id,
                    "sequence": [int(t) for t in seq], "completion": ref.completion_of(seq, length, stop),
                    "margins": margins, "attempt": attempt}
    raise SystemExit(f"no prompt of length {length} clears the thresholds for {settings}")


def run_sampled(model, cfg, lengths, settings, case_seed):
    """Every prompt of the case sampled with seed + r; all decisions clear SAMPLED_THRESHOLDS."""
    s = dict(settings)
    base = s.pop("seed")
    stop = cfg.raw["eos_token_id"]
    for attempt in range(SAMPLED_ATTEMPTS):
        prompts = [[int(t) for t in lcg_ids(5000 * case_seed + 100 * attempt + r, n, cfg.V - 8)]
                   for r, n in enumerate(lengths)]
        margins, seqs = {}, []
        for r, prompt in enumerate(prompts):
            seqs.append(ref.batch_sample(model, prompt, stop_token=stop, pad_id=cfg.pad_id, mask_id=cfg.mask_id,
                                         margins=margins, seed=base + r, **s))
        if all(v >= SAMPLED_THRESHOLDS[k] for k, v in margins.items()):
            greedy = [ref.batch_sample(model, p, stop_token=stop, pad_id=cfg.pad_id, mask_id=cfg.mask_id,
                                       **{k: v for k, v in s.items() if k not in ("temperature", "top_p", "top_k")})
                      for p in prompts]
            # The same prompts with other seeds: each must change the tokens, or the case could not
            # tell one seed (or stream word) from another.
            other = [ref.batch_sample(model, p, stop_token=stop, pad_id=cfg.pad_id, mask_id=cfg.mask_id,
                                      seed=base + 1000 + r, **s) for r, p in enumerate(prompts)]
            if any(o == q for o, q in zip(other, seqs)):
                continue
            return {"prompts": prompts, "settings": s, "seed": base, "stop_token": stop, "pad_token": cfg.pad_id,
                    "completions": [ref.completion_of(q, len(p), stop) for q, p in zip(seqs, prompts)],
                    "greedy_completions": [ref.completion_of(q, len(p), stop) for q, p in zip(greedy, prompts)],
                    "other_seed_completions": [ref.completion_of(q, len(p), stop) for q, p in zip(other, prompts)],
                    "margins": margins, "attempt": attempt}
    raise SystemExit(f"no prompts of lengths {lengths} clear the sampled thresholds for {settings}")


def make_file(sonde, name, mm_args, cases, sampled, out_dir):
    with tempfile.TemporaryDirectory(prefix="sonde-fdv2-") as tmp:
        model_dir = os.path.join(tmp, "model")
        subprocess.run([sonde, "make-model", *mm_args, "--out", model_dir], check=True, stdout=subprocess.DEVNULL)
        model = ref.Model(model_dir)
        cfg = model.cfg
        print(f"cached vs full forward: rel err {check_cache_path(model, cfg, prompts_for(cfg)['p70']):.1e}")
        path = os.path.join(out_dir, name + ".h5")
        if os.path.exists(path):
            os.remove(path)
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        fid = h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)
        with h5py.File(fid) as f:
            f.attrs["make_model_args"] = json.dumps(mm_args)
            f.attrs["model_sha256"] = sha256(os.path.join(model_dir, "model.safetensors"))
            f.attrs["arch"] = "fast_dllm_v2"
            f.attrs["preset"] = mm_args[mm_args.index("--preset") + 1]
            f.attrs["torch_version"] = str(torch.__version__)
            f.attrs["reference"] = ("tests/reference/fast_dllm_v2_reference.py (modeling.py, "
                                    "generation_functions.py batch_sample), float64")
            f.attrs["config_json"] = json.dumps(cfg.raw, sort_keys=True)
            f.attrs["extra_hooks"] = json.dumps(EXTRA_HOOKS)
            f.attrs["prompts"] = json.dumps(forward_goldens(f, model_dir, cfg))
            entries = []
            for i, (cname, length, settings) in enumerate(cases):
                e = run_case(model, cfg, length, settings, i + 1)
                e["name"] = cname
                entries.append(e)
                print(f"{name}/{cname}: attempt {e['attempt']}, {len(e['completion'])} tokens, margins "
                      + ", ".join(f"{k} {v:.2e}" for k, v in e["margins"].items()))
            f.attrs["fdv2_generation_cases"] = json.dumps(entries)
            sampled_entries = []
            for i, (cname, lengths, settings) in enumerate(sampled):
                e = run_sampled(model, cfg, lengths, settings, i + 1)
                e["name"] = cname
                sampled_entries.append(e)
                differ = sum(a != b for c, g in zip(e["completions"], e["greedy_completions"]) for a, b in zip(c, g))
                print(f"{name}/{cname}: attempt {e['attempt']}, {[len(c) for c in e['completions']]} tokens, "
                      f"{differ} differ from greedy, margins " + ", ".join(f"{k} {v:.2e}" for k, v in e["margins"].items()))
            f.attrs["fdv2_sampled_cases"] = json.dumps(sampled_entries)
        print(f"{name}: -> {path} ({os.path.getsize(path)} B), {model.forwards} reference forwards")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--files", nargs="*", default=list(FILES))
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    for name in a.files:
        make_file(os.path.abspath(a.sonde), name, *FILES[name], a.out)


if __name__ == "__main__":
    main()
