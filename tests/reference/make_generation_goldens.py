#!/usr/bin/python3
"""Generation goldens for sonde from an independent float64 PyTorch reference.

    /usr/bin/python3 tests/reference/make_generation_goldens.py --sonde build/bin/sonde --out tests/data \
        --shared ../shared [--validate-shared ../shared]

Covers what ../shared/golden leaves out (model-spec §1.3, §3, §4):

* Qwen2 greedy autoregressive decoding (16 tokens) of a **left-padded batch** of 3 prompts of
  different lengths: positions cumsum(mask) - 1 with pad slots at 1, causal + key mask, fully
  masked (pad) query rows output 0. Once with f32 weights (tiny), once with bf16 weights (small).
* Dream diffusion_generate, temperature 0: `topk_margin` (steps 16 and 4), `entropy` with
  `top_p = 0.9` (top_p changes the confidences even at temperature 0), `maskgit_plus` with bf16
  weights, and a left-padded batch of 2 prompts under the pairwise mask
  `am[:,None,None,:] & am[:,None,:,None]` (positions cumsum(am) - 1, pad slots 1).

Only `sonde make-model` is taken from sonde (the weights). The forward is qwen2_reference.py's
math (RMSNorm, rotate_half RoPE, GQA, SiLU MLP), extended here by explicit position ids and an
attention mask; it is checked against qwen2_reference.forward on unpadded input before use.

Every decision is kept away from a tie: prompts are re-drawn deterministically (LCG seed + attempt)
until the smallest greedy logit gap, diffusion selection margin, top1-top2 probability gap and
top_p cumulative-mass margin clear THRESHOLDS (each ~10-1000x an f32 engine's error on that
quantity), so an f32 engine must agree exactly. The margins are recorded. A file holds one checkpoint; its `generation_cases` root
attribute (JSON) lists every case with the CLI settings and the row groups the test reads.
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
from make_goldens import lcg_ids, make_group, sha256  # noqa: E402

# Smallest distance of every decision from its tie, per kind of decision (an f32 engine lands
# about 1e-6 relative from float64 on logits, i.e. ~1e-6 on logit gaps and entropies, ~1e-6
# relative on probabilities and ~1e-7 on top_p's cumulative mass):
THRESHOLDS = {
    "min_logit_gap": 1e-3,             # argmax: top1 - top2 logit (AR greedy; each revealed slot)
    "min_selection_margin_rel": 1e-3,  # maskgit_plus / topk_margin: (last chosen - first unchosen)
                                       # confidence over the row's largest |confidence| (probs ~1e-2)
    "min_selection_margin": 1e-4,      # entropy: last chosen - first unchosen, in nats
    "min_top_p_margin": 1e-6,          # top_p: min |cumsum - p| over every masked slot's sorted probs
}
MAX_ATTEMPTS = 400
MAX_NEW = 16
EPS = 1e-3

# file name -> (make-model args, case list). A case: ("ar", name, prompt lengths) or
# ("diffusion", name, prompt lengths, settings); more than one prompt length = a left-padded batch.
FILES = {
    "gen-tiny-qwen2-f32": (
        ["--arch", "qwen2", "--preset", "tiny", "--seed", "31"],
        [("ar", "batch3", [4, 11, 7])],
    ),
    "gen-small-qwen2-bf16": (
        ["--arch", "qwen2", "--preset", "small", "--dtype", "bf16", "--seed", "32"],
        [("ar", "batch3", [9, 3, 14])],
    ),
    "gen-tiny-dream-f32": (
        ["--arch", "dream", "--preset", "tiny", "--seed", "33"],
        [
            ("diffusion", "p6/topk_margin_steps16", [6], {"alg": "topk_margin", "steps": 16}),
            ("diffusion", "p6/topk_margin_steps4", [6], {"alg": "topk_margin", "steps": 4}),
            ("diffusion", "p6/entropy_topp0.9_steps16", [6], {"alg": "entropy", "steps": 16, "top_p": 0.9}),
            ("diffusion", "batch2/entropy_steps16", [5, 12], {"alg": "entropy", "steps": 16}),
            ("diffusion", "batch2/maskgit_plus_steps4", [12, 5], {"alg": "maskgit_plus", "steps": 4}),
        ],
    ),
    # make-model's tied Qwen2 checkpoints mostly repeat the last prompt token under greedy decoding,
    # which pins little; the shared tiny Qwen2 (weights drawn so that every layer matters) gives
    # varied continuations. Read from ../shared/golden at test time (skipped when absent).
    "gen-shared-tiny-qwen2-f32": (
        {"shared_model": "golden/models/tiny-qwen2-float32-v2048"},
        [("ar", "batch3", [4, 11, 7]), ("ar", "batch2", [13, 2])],
    ),
    "gen-small-dream-bf16": (
        ["--arch", "dream", "--preset", "small", "--dtype", "bf16", "--seed", "34"],
        [
            ("diffusion", "p7/maskgit_plus_steps4", [7], {"alg": "maskgit_plus", "steps": 4}),
            ("diffusion", "p7/maskgit_plus_steps16", [7], {"alg": "maskgit_plus", "steps": 16}),
        ],
    ),
}


def write_ds(group, name, data, dtype):
    """Small datasets: contiguous (no chunk index, no compression, which would only add bytes),
    no timestamps, so regenerating gives identical files."""
    group.create_dataset(name, data=np.asarray(data, dtype=dtype), track_times=False)


# ----------------------------------------------------------------------------- forward
# make_edit_goldens.py steers the diffusion reference: EDIT(layer, x, pos) -> x is applied to each
# layer's output (blocks.{layer}.hook_resid_post) when set; STEP is the denoising step running.
EDIT = None
STEP = 0


class Model:
    def __init__(self, model_dir):
        self.cfg, weights = ref.load_model(model_dir)
        self.weights = weights
        self.W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64) for k, v in weights.items()}
        with open(os.path.join(model_dir, "generation_config.json")) as f:
            self.gen = json.load(f)


def rope_cos_sin_at(pos, d, theta, dtype):
    """qwen2_reference.rope_cos_sin for arbitrary positions pos [B, T]: inv_freq evaluated in
    float64 and rounded to float32, angle = fl32(pos) * inv_freq in float32, cos/sin in `dtype`."""
    i = torch.arange(0, d, 2, dtype=torch.float64)
    inv_freq = (1.0 / (theta ** (i / d))).to(torch.float32)
    angle = pos.to(torch.float32)[..., None] * inv_freq  # [B, T, d/2], float32 product
    emb = torch.cat([angle, angle], dim=-1).to(dtype)
    return torch.cos(emb), torch.sin(emb)


def forward_batch(m, ids, pos, allowed):
    """Logits [B, T, V] (float64). ids, pos: [B, T] long; allowed: [B, T(query), T(key)] bool or
    None (no mask: Dream without padding). Fully masked query rows give attention output 0."""
    cfg, W = m.cfg, m.W
    B, T = ids.shape
    nh, nkv, d = cfg.nh, cfg.nkv, cfg.d
    E = W["model.embed_tokens.weight"]
    x = E[ids]
    cos, sin = rope_cos_sin_at(pos, d, cfg.theta, torch.float64)  # [B, T, d]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    kv_of = torch.arange(nh) // (nh // nkv)  # GQA: contiguous blocks of query heads
    half = d // 2

    def rope(t):
        return t * cos + torch.cat([-t[..., half:], t[..., :half]], dim=-1) * sin

    for layer in range(cfg.L):
        p = f"model.layers.{layer}."
        h = ref.rms_norm(x, W[p + "input_layernorm.weight"], cfg.eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T + W[p + "self_attn.q_proj.bias"]).view(B, T, nh, d)
        k = (h @ W[p + "self_attn.k_proj.weight"].T + W[p + "self_attn.k_proj.bias"]).view(B, T, nkv, d)
        v = (h @ W[p + "self_attn.v_proj.weight"].T + W[p + "self_attn.v_proj.bias"]).view(B, T, nkv, d)
        q, k = rope(q), rope(k)
        kj, vj = k[:, :, kv_of, :], v[:, :, kv_of, :]
        s = torch.einsum("bthd,buhd->bhtu", q, kj) * d ** -0.5
        if allowed is not None:
            s = s.masked_fill(~allowed[:, None], float("-inf"))
        prob = torch.softmax(s, dim=-1)
        if allowed is not None:
            prob = prob.masked_fill(~allowed.any(-1)[:, None, :, None], 0.0)  # fully masked rows -> 0
        z = torch.einsum("bhtu,buhd->bthd", prob, vj)
        x = x + z.reshape(B, T, nh * d) @ W[p + "self_attn.o_proj.weight"].T
        h2 = ref.rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.eps)
        g = h2 @ W[p + "mlp.gate_proj.weight"].T
        x = x + (g * torch.sigmoid(g) * (h2 @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        if EDIT is not None:
            x = EDIT(layer, x, pos)
    xf = ref.rms_norm(x, W["model.norm.weight"], cfg.eps)
    head = E if cfg.tied else W["lm_head.weight"]
    return xf @ head.T


def check_forward(m, ids):
    """forward_batch on one unpadded row equals qwen2_reference.forward."""
    T = len(ids)
    t = torch.tensor([ids])
    pos = torch.arange(T)[None]
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))[None] if m.cfg.causal else None
    a = forward_batch(m, t, pos, allowed)[0].numpy()
    b = ref.forward(m.weights, m.cfg, ids)["logits"]
    err = np.abs(a - b).max() / np.abs(b).max()
    assert err < 1e-12, f"forward_batch disagrees with qwen2_reference.forward: {err}"


def left_pad(prompts, pad_id):
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, T - len(p):] = torch.tensor(p)
        mask[r, T - len(p):] = 1
    return ids, mask


def positions(mask):
    pos = mask.cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)


# ----------------------------------------------------------------------------- AR greedy (§4)
def ar_greedy(m, prompts, n_new):
    """HF greedy generate without cache (the cache equals full recompute, §1.3). Rows that emit
    an eos id are finished: they then feed pad, and their tokens stop at the eos."""
    gen = m.gen
    eos = gen.get("eos_token_id", m.cfg.raw.get("eos_token_id"))
    eos = set(eos if isinstance(eos, list) else [eos])
    pad = gen.get("pad_token_id", min(eos))
    ids, mask = left_pad(prompts, pad)
    B = len(prompts)
    tokens = [[] for _ in range(B)]
    top1 = [[] for _ in range(B)]
    gap = [[] for _ in range(B)]
    finish = ["length"] * B
    pos0 = positions(mask)
    for step in range(n_new):
        T = ids.shape[1]
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))[None] & (mask[:, None, :] == 1)
        logits = forward_batch(m, ids, positions(mask), allowed)[:, -1]
        new = []
        for r in range(B):
            if finish[r] != "length":
                new.append(pad)
                continue
            tok = int(torch.argmax(logits[r]))  # first maximal index
            two = torch.topk(logits[r], 2).values
            tokens[r].append(tok)
            top1[r].append(float(two[0]))
            gap[r].append(float(two[0] - two[1]))
            if tok in eos:
                finish[r] = "eos"
            new.append(tok)
        if all(f != "length" for f in finish):
            break
        ids = torch.cat([ids, torch.tensor(new)[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], dim=1)
    min_gap = min(min(g) for g in gap)
    return dict(input_ids=ids[:, : len(pos0[0])], attention_mask=mask[:, : len(pos0[0])], position_ids=pos0,
                tokens=tokens, top1=top1, gap=gap, finish=finish, margins={"min_logit_gap": min_gap})


# ----------------------------------------------------------------------------- Dream (§3)
def sample_tokens(logits, temperature, top_p, top_k, margin_confidence, neg_entropy):
    """Dream sample_tokens at temperature 0 (argmax). Also returns, per row, the top1-top2 gap
    of the filtered logits (= log(p1/p2), the argmax decision) and the smallest |cum - top_p| of
    the top_p filter (inf without top_p)."""
    assert not temperature, "only deterministic decoding is recorded"
    logits = logits.clone()
    topp_margin = torch.full((logits.shape[0],), float("inf"), dtype=torch.float64)
    if top_p is not None and top_p < 1:
        sorted_logits, sorted_idx = torch.sort(logits, descending=True)
        cum = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        topp_margin = (cum - top_p).abs().min(dim=-1).values
        remove = cum > top_p
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = False
        mask = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, sorted_idx, remove)
        logits = logits.masked_fill(mask, torch.finfo(logits.dtype).min)
    if top_k is not None:
        kth = torch.topk(logits, top_k).values[..., -1, None]
        logits = logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)
    conf, x0 = probs.max(dim=-1)
    sp = torch.sort(probs, dim=-1, descending=True).values
    top2 = torch.topk(logits, 2).values
    logit_gap = top2[:, 0] - top2[:, 1]  # the argmax decision: log(p1 / p2)
    if margin_confidence:
        conf = sp[:, 0] - sp[:, 1]
    if neg_entropy:
        conf = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
    return conf, x0, logit_gap, topp_margin


def diffusion(m, prompts, max_new, steps, alg, top_p=None, top_k=None, eps=EPS):
    cfg = m.cfg.raw
    mask_id = cfg["mask_token_id"]
    pad = cfg.get("pad_token_id", 0)
    pids, pmask = left_pad(prompts, pad)
    B, T = pids.shape
    N = T + max_new
    x = torch.cat([pids, torch.full((B, max_new), mask_id, dtype=torch.long)], dim=1)
    am = torch.cat([pmask, torch.ones(B, max_new, dtype=torch.long)], dim=1)
    if (pmask == 0).any():
        tok_idx = positions(am)
        allowed = (am[:, None, :] == 1) & (am[:, :, None] == 1)  # [B, q, k]: m[q] & m[k]
    else:
        tok_idx = torch.arange(N)[None].expand(B, N)
        allowed = None  # "full": no mask at all
    timesteps = torch.linspace(1, eps, steps + 1)  # float32
    hist, ks, n_before, sel_pos, sel_conf, sel_margin = [], [], [], [], [], []
    min_logit_gap, min_topp, min_rel = float("inf"), float("inf"), float("inf")
    global STEP
    for i in range(steps):
        STEP = i
        mask_index = x == mask_id
        logits = forward_batch(m, x, tok_idx, allowed)
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # the shift
        conf, x0, logit_gap, topp_margin = sample_tokens(
            logits[mask_index], 0.0, top_p, top_k, alg == "topk_margin", alg == "entropy")
        min_topp = min(min_topp, float(topp_margin.min()))  # every masked slot's confidence matters
        t, s = timesteps[i], timesteps[i + 1]
        n = mask_index.sum() / B  # float32 tensor: the batch average
        k = int(n * (1 - s / t)) if i < steps - 1 else int(n)
        full_conf = torch.full(x.shape, float("-inf"), dtype=torch.float64)
        full_conf[mask_index] = conf
        full_gap = torch.full(x.shape, float("inf"), dtype=torch.float64)
        full_gap[mask_index] = logit_gap
        x_ = torch.full_like(x, mask_id)
        x_[mask_index] = x0
        ks.append(k)
        n_before.append([int(v) for v in mask_index.sum(-1)])
        step_pos, step_conf, step_margin = [], [], []
        for r in range(B):
            # top-k with the tie rule of model-spec §0.14: higher confidence, then lower slot.
            order = torch.sort(full_conf[r], descending=True, stable=True).indices
            idx = order[:k]
            if k > 0:
                x[r, idx] = x_[r, idx]
                nxt = float(full_conf[r, order[k]]) if k < N else float("-inf")
                margin = float(full_conf[r, idx[-1]]) - nxt if np.isfinite(nxt) else float("inf")
                step_margin.append(margin)
                # relative to the row's confidence scale: probabilities here can be ~1e-2
                scale = float(full_conf[r][mask_index[r]].abs().max())
                min_rel = min(min_rel, margin / scale)
                min_logit_gap = min(min_logit_gap, float(full_gap[r, idx].min()))
            else:
                step_margin.append(float("inf"))
            step_pos.append([int(j) for j in idx])
            step_conf.append([float(full_conf[r, j]) for j in idx])
        sel_pos.append(step_pos)
        sel_conf.append(step_conf)
        sel_margin.append(step_margin)
        hist.append(x.clone())
    pads = [T - len(p) for p in prompts]
    rows = []
    for r in range(B):
        maxk = max(1, max(ks))
        sp = np.full((steps, maxk), -1, dtype=np.int64)
        sc = np.full((steps, maxk), np.nan)
        for i in range(steps):
            # absolute slots of the unpadded row (the canvas the engine reports)
            sp[i, : len(sel_pos[i][r])] = [j - pads[r] for j in sel_pos[i][r]]
            sc[i, : len(sel_conf[i][r])] = sel_conf[i][r]
        rows.append(dict(
            prompt=prompts[r],
            sequence=x[r, pads[r]:].numpy(),
            history=np.stack([h[r, pads[r]:].numpy() for h in hist]),
            n_masked_before=np.array([nb[r] for nb in n_before]),
            selected_positions=sp, selected_confidence=sc,
            selection_margin=np.array([sm[r] for sm in sel_margin])))
    margins = {
        "min_selection_margin": float(min(min(sm) for sm in sel_margin)),
        "min_selection_margin_rel": min_rel,
        "min_logit_gap": min_logit_gap,
        "min_top_p_margin": min_topp,
    }
    return dict(rows=rows, k=np.array(ks), t=timesteps[:-1].numpy(), s=timesteps[1:].numpy(),
                input_ids=x[:, :T].numpy() if B else None, attention_mask=pmask.numpy(),
                position_ids=tok_idx.numpy(), margins=margins)


# ----------------------------------------------------------------------------- driver
def draw_prompts(m, lengths, seed, attempt):
    upper = m.cfg.V - 8  # clear of the special ids make-model puts at the top
    return [lcg_ids(seed * 1000 + attempt * 10 + r, n, upper) for r, n in enumerate(lengths)]


def safe(margins, alg=None):
    keys = ["min_logit_gap"]
    if alg is not None:
        keys += ["min_top_p_margin", "min_selection_margin" if alg == "entropy" else "min_selection_margin_rel"]
    return all(margins[k] >= THRESHOLDS[k] for k in keys)


def run_case(m, case, seed):
    kind, name, lengths = case[:3]
    for attempt in range(MAX_ATTEMPTS):
        prompts = draw_prompts(m, lengths, seed, attempt)
        if kind == "ar":
            res = ar_greedy(m, prompts, MAX_NEW)
            if len(prompts) > 1:  # a batch gives every row its single-run tokens
                for r, p in enumerate(prompts):
                    assert ar_greedy(m, [p], MAX_NEW)["tokens"][0] == res["tokens"][r], (name, r)
        else:
            st = case[3]
            res = diffusion(m, prompts, MAX_NEW, st["steps"], st["alg"], st.get("top_p"), st.get("top_k"))
            if len(prompts) > 1:
                for r, p in enumerate(prompts):
                    one = diffusion(m, [p], MAX_NEW, st["steps"], st["alg"], st.get("top_p"), st.get("top_k"))
                    assert (one["rows"][0]["sequence"] == res["rows"][r]["sequence"]).all(), (name, r)
        if safe(res["margins"], None if kind == "ar" else case[3]["alg"]):
            return prompts, attempt, res
    raise SystemExit(f"{name}: no prompts with safe margins {THRESHOLDS} in {MAX_ATTEMPTS} attempts")


def write_case(f, case, prompts, attempt, res, seed):
    kind, name = case[0], case[1]
    batch = len(prompts) > 1
    # JSON has no Infinity: a margin without any decision of its kind (e.g. no top_p) is null.
    margins = {k: (v if np.isfinite(v) else None) for k, v in res["margins"].items()}
    entry = {"kind": kind, "name": name, "max_new_tokens": MAX_NEW, "margins": margins,
             "prompt_lcg_seeds": [seed * 1000 + attempt * 10 + r for r in range(len(prompts))]}
    if kind == "ar":
        g = make_group(f, f"ar_greedy/{name}")
        entry.update(temperature=0.0)
        rows = []
        for r in range(len(prompts)):
            rg = make_group(f, f"ar_greedy/{name}/row{r}")
            write_ds(rg, "prompt", prompts[r], np.int64)
            write_ds(rg, "tokens", res["tokens"][r], np.int64)
            write_ds(rg, "top1_logit", res["top1"][r], np.float64)
            write_ds(rg, "top12_logit_gap", res["gap"][r], np.float64)
            rg.attrs["finish_reason"] = res["finish"][r]
            rows.append({"group": f"ar_greedy/{name}/row{r}", "finish_reason": res["finish"][r]})
        write_ds(g, "input_ids", res["input_ids"], np.int64)
        write_ds(g, "attention_mask", res["attention_mask"], np.int64)
        write_ds(g, "position_ids", res["position_ids"], np.int64)
    else:
        st = case[3]
        top = "diffusion_batch" if batch else "diffusion"
        g = make_group(f, f"{top}/{name}")
        entry.update(alg=st["alg"], steps=st["steps"], temperature=0.0, eps=EPS)
        if st.get("top_p") is not None:
            entry["top_p"] = st["top_p"]
        if st.get("top_k") is not None:
            entry["top_k"] = st["top_k"]
        rows = []
        for r, row in enumerate(res["rows"]):
            path = f"{top}/{name}/row{r}" if batch else f"{top}/{name}"
            rg = make_group(f, path)
            for key in ["prompt", "sequence", "history", "n_masked_before", "selected_positions"]:
                write_ds(rg, key, row[key], np.int64)
            write_ds(rg, "selected_confidence", row["selected_confidence"], np.float64)
            write_ds(rg, "selection_margin", row["selection_margin"], np.float64)
            rows.append({"group": path})
        write_ds(g, "k", res["k"], np.int64)
        write_ds(g, "t", res["t"], np.float32)
        write_ds(g, "s", res["s"], np.float32)
        if batch:
            write_ds(g, "input_ids", res["input_ids"], np.int64)
            write_ds(g, "attention_mask", res["attention_mask"], np.int64)
            write_ds(g, "position_ids", res["position_ids"], np.int64)
    entry["rows"] = rows
    for key, v in entry.items():
        if key not in ("rows", "margins", "kind", "name"):
            g.attrs[key] = json.dumps(v) if isinstance(v, list) else v
    for key, v in res["margins"].items():
        g.attrs[key] = v
    return entry


def make_file(sonde, name, out_dir, shared):
    mm_args, cases = FILES[name]
    shared_model = None
    if isinstance(mm_args, dict):
        shared_model = mm_args["shared_model"]
        if not shared:
            print(f"{name}: skipped (needs --shared DIR)")
            return
    with tempfile.TemporaryDirectory(prefix="sonde-gen-golden-") as tmp:
        model_dir = os.path.join(tmp, "model")
        if shared_model:
            model_dir = os.path.join(shared, shared_model)
            mm_args = ["--seed", "40"]  # only seeds the prompts
        else:
            subprocess.run([sonde, "make-model", *mm_args, "--out", model_dir], check=True, stdout=subprocess.DEVNULL)
        m = Model(model_dir)
        check_forward(m, lcg_ids(5, 9, m.cfg.V - 8))
        model_sha = sha256(os.path.join(model_dir, "model.safetensors"))
        with open(os.path.join(model_dir, "model.safetensors"), "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        dtypes = sorted({v["dtype"] for k, v in header.items() if k != "__metadata__"})
        weight_dtype = {"F32": "float32", "BF16": "bfloat16"}[dtypes[0]]
        path = os.path.join(out_dir, name + ".h5")
        if os.path.exists(path):
            os.remove(path)
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        fid = h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)
        entries = []
        with h5py.File(fid) as f:
            for ci, case in enumerate(cases):
                seed = int(mm_args[mm_args.index("--seed") + 1]) * 100 + ci
                prompts, attempt, res = run_case(m, case, seed)
                entries.append(write_case(f, case, prompts, attempt, res, seed))
                print(f"  {name} {case[1]}: prompts {[len(p) for p in prompts]} (attempt {attempt}) "
                      + ", ".join(f"{k} {v:.3g}" for k, v in res["margins"].items()))
            if shared_model:  # no make_model_args: test_own_goldens.cpp then ignores the file
                f.attrs["shared_model"] = shared_model
            else:
                f.attrs["make_model_args"] = json.dumps(mm_args)
                f.attrs["preset"] = mm_args[mm_args.index("--preset") + 1]
            f.attrs["model_sha256"] = model_sha
            f.attrs["arch"] = "qwen2" if m.cfg.causal else "dream"
            f.attrs["weight_dtype"] = weight_dtype
            f.attrs["torch_version"] = str(torch.__version__)
            f.attrs["reference_precision"] = "float64"
            f.attrs["config_json"] = json.dumps(m.cfg.raw, sort_keys=True)
            f.attrs["generation_config_json"] = json.dumps(m.gen, sort_keys=True)
            # No forward/ groups here: an empty list keeps test_own_goldens.cpp (which reads every
            # tests/data/*.h5 with make_model_args) from looking for any.
            f.attrs["prompts"] = "[]"
            f.attrs["margin_thresholds"] = json.dumps(THRESHOLDS)
            f.attrs["generation_cases"] = json.dumps(entries)
        print(f"{name}: sha256 {model_sha[:12]} -> {path} ({os.path.getsize(path)} B)")


def validate_shared(shared):
    """The decode reference on ../shared/golden: greedy tokens and diffusion sequences/histories."""
    gdir = os.path.join(shared, "golden")
    q = Model(os.path.join(gdir, "models", "tiny-qwen2-float32-v2048"))
    d = Model(os.path.join(gdir, "models", "tiny-dream-float32-v2048"))
    with h5py.File(os.path.join(gdir, "tiny-qwen2-float32-v2048.h5"), "r") as f:
        prompts = [[int(i) for i in f[f"ar_greedy/{p}/prompt"][()]] for p in f["ar_greedy"]]
        tokens = [[int(i) for i in f[f"ar_greedy/{p}/tokens"][()]] for p in f["ar_greedy"]]
        for p, t in zip(prompts, tokens):
            assert ar_greedy(q, [p], 16)["tokens"][0] == t
        assert ar_greedy(q, prompts, 16)["tokens"] == tokens  # left-padded batch too
        assert ar_greedy(q, prompts[::-1], 16)["tokens"] == tokens[::-1]
    print("shared ar_greedy: single and left-padded batch runs reproduce the tokens")
    with h5py.File(os.path.join(gdir, "tiny-dream-float32-v2048.h5"), "r") as f:
        for p in f["diffusion"]:
            for c in f[f"diffusion/{p}"]:
                g = f[f"diffusion/{p}/{c}"]
                alg, steps = c.rsplit("_steps", 1)
                res = diffusion(d, [[int(i) for i in g["prompt"][()]]], 16, int(steps), alg)
                row = res["rows"][0]
                assert (row["sequence"] == g["sequence"][()]).all(), (p, c)
                assert (row["history"] == g["history"][()]).all(), (p, c)
                assert (res["k"] == g["k"][()]).all(), (p, c)
                print(f"shared diffusion/{p}/{c}: sequence, history and k reproduced")
        pa = [int(i) for i in f["diffusion/prompt19/maskgit_plus_steps4/prompt"][()]]
        pb = [int(i) for i in f["diffusion/prompt5/maskgit_plus_steps4/prompt"][()]]
        res = diffusion(d, [pa, pb], 16, 4, "maskgit_plus")
        assert (res["rows"][0]["sequence"] == f["diffusion/prompt19/maskgit_plus_steps4/sequence"][()]).all()
        assert (res["rows"][1]["sequence"] == f["diffusion/prompt5/maskgit_plus_steps4/sequence"][()]).all()
        print("shared diffusion: left-padded batch (pairwise mask) reproduces both prompts")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sonde", required=True, help="path to the sonde program (for make-model)")
    ap.add_argument("--out", required=True, help="output directory (tests/data)")
    ap.add_argument("--files", nargs="*", default=list(FILES), help="subset of files")
    ap.add_argument("--validate-shared", metavar="DIR", help="first check the reference on DIR/golden")
    ap.add_argument("--shared", metavar="DIR", help="../shared, for the files built on its checkpoints")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.validate_shared:
        validate_shared(a.validate_shared)
    os.makedirs(a.out, exist_ok=True)
    for name in a.files:
        make_file(os.path.abspath(a.sonde), name, a.out, a.shared)


if __name__ == "__main__":
    main()
