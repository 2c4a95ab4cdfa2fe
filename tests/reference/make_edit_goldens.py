#!/usr/bin/python3
"""Goldens for sonde's edits (interventions) from an independent float64 PyTorch reference.

    /usr/bin/python3 tests/reference/make_edit_goldens.py --sonde build/bin/sonde --out tests/data

For each checkpoint (tiny Qwen2 and Dream, f32 and bf16 weights, made by `sonde make-model`, the
only thing taken from sonde) and each edit case, the forward pass of qwen2_reference.py's math is
run with the edit applied at its hook point, written from the semantics in docs/interventions.md
(not from sonde's sources):

  add          x + scale * v                    scale        x * factor
  zero         0 (the selected heads only)      mean         m (a vector read from the file)
  project_out  x - (x . u) u, u = d / |d|       clamp        x - ((x . u) - c) u
  patch        the hook's rows of a run on another prompt (a "clean" run), at some positions

only at the selected positions (all, or a list). The vectors live in the golden file itself
(`/inputs/*`), so the test passes `golden.h5:/inputs/v` to sonde as the vector source. Stored per
case: the logits and every layer's hook_resid_post (the downstream hooks), both f32.

A greedy autoregressive generation of a Qwen2 checkpoint with a steering vector added at every
position is stored too (`/generate`), with the smallest top1 - top2 logit gap over its steps; the
prompt and scale are re-drawn until that gap clears 1e-3, so an f32 engine must agree token for
token.
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
import qwen2_reference as ref  # noqa: E402
from make_goldens import lcg_ids, sha256  # noqa: E402

FILES = {
    "edits-tiny-qwen2-f32": ["--arch", "qwen2", "--preset", "tiny", "--seed", "41"],
    "edits-tiny-qwen2-bf16": ["--arch", "qwen2", "--preset", "tiny", "--dtype", "bf16", "--seed", "42"],
    "edits-tiny-dream-f32": ["--arch", "dream", "--preset", "tiny", "--seed", "43"],
    "edits-tiny-dream-bf16": ["--arch", "dream", "--preset", "tiny", "--dtype", "bf16", "--seed", "44"],
}
T = 6
GEN_NEW = 8


def cases(cfg):
    """Each case: the edit as sonde's --edits JSON takes it (vector sources name /inputs/*) and
    the reference's view of it."""
    L = cfg.L
    return [
        {"name": "add_resid_post0", "edit": {"hook": "blocks.0.hook_resid_post", "op": "add", "vector": "@/inputs/v", "scale": 3.0}},
        {"name": "scale_mlp_post1_positions", "edit": {"hook": f"blocks.{L - 1}.mlp.hook_post", "op": "scale", "factor": 0.5, "positions": [1, 3]}},
        {"name": "zero_head1_z0", "edit": {"hook": "blocks.0.attn.hook_z", "op": "zero", "heads": [1]}},
        {"name": "mean_attn_out0", "edit": {"hook": "blocks.0.hook_attn_out", "op": "mean", "stats": "@/inputs/m"}},
        {"name": "project_out_resid_pre1", "edit": {"hook": "blocks.1.hook_resid_pre", "op": "project_out", "direction": "@/inputs/d"}},
        {"name": "clamp_resid_mid0", "edit": {"hook": "blocks.0.hook_resid_mid", "op": "clamp", "direction": "@/inputs/d", "value": 2.5}},
        {"name": "patch_resid_post0_pos2", "edit": {"hook": "blocks.0.hook_resid_post", "op": "patch", "source": "@clean", "positions": [2, 4]}},
    ]


def apply(edit, x, inputs, clean):
    """x [T, *row] float64 at the edit's hook: the edited value."""
    op = edit["op"]
    rows = edit.get("positions", list(range(x.shape[0])))
    y = x.clone()
    for t in rows:
        r = x[t]
        if op == "add":
            y[t] = r + edit.get("scale", 1.0) * inputs["v"]
        elif op == "scale":
            y[t] = r * edit["factor"]
        elif op == "zero":
            for h in edit["heads"]:
                y[t, h] = 0
        elif op == "mean":
            y[t] = inputs["m"]
        elif op in ("project_out", "clamp"):
            u = inputs["d"] / torch.linalg.norm(inputs["d"])
            c = edit.get("value", 0.0) if op == "clamp" else 0.0
            y[t] = r - ((r * u).sum() - c) * u
        elif op == "patch":
            y[t] = clean[edit["hook"]][t]
    return y


def forward(weights, cfg, ids, at):
    """qwen2_reference.forward's math in float64 with at(hook, x) -> x at each hook point.
    Returns the logits and the per-layer hook_resid_post (as recorded after any edit there)."""
    W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64) for k, v in weights.items()}
    n = len(ids)
    nh, nkv, d = cfg.nh, cfg.nkv, cfg.d
    x = W["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
    cos, sin = ref.rope_cos_sin(n, d, cfg.theta, torch.float64)
    allowed = torch.tril(torch.ones(n, n, dtype=torch.bool)) if cfg.causal else None
    resid = []
    for i in range(cfg.L):
        p = f"model.layers.{i}."
        x = at(f"blocks.{i}.hook_resid_pre", x)
        if i > 0:
            resid.append(x)  # the same tensor as the previous layer's hook_resid_post
        h = ref.rms_norm(x, W[p + "input_layernorm.weight"], cfg.eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T + W[p + "self_attn.q_proj.bias"]).view(n, nh, d)
        k = (h @ W[p + "self_attn.k_proj.weight"].T + W[p + "self_attn.k_proj.bias"]).view(n, nkv, d)
        v = (h @ W[p + "self_attn.v_proj.weight"].T + W[p + "self_attn.v_proj.bias"]).view(n, nkv, d)
        q, k = ref.apply_rope(q, cos, sin), ref.apply_rope(k, cos, sin)
        kv_of = torch.arange(nh) // (nh // nkv)
        s = torch.einsum("thd,uhd->htu", q, k[:, kv_of, :]) * d ** -0.5
        if allowed is not None:
            s = s.masked_fill(~allowed[None], float("-inf"))
        z = torch.einsum("htu,uhd->thd", torch.softmax(s, dim=-1), v[:, kv_of, :])
        z = at(f"blocks.{i}.attn.hook_z", z)
        attn_out = at(f"blocks.{i}.hook_attn_out", z.reshape(n, nh * d) @ W[p + "self_attn.o_proj.weight"].T)
        x = at(f"blocks.{i}.hook_resid_mid", x + attn_out)
        h2 = ref.rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.eps)
        gate, up = h2 @ W[p + "mlp.gate_proj.weight"].T, h2 @ W[p + "mlp.up_proj.weight"].T
        post = at(f"blocks.{i}.mlp.hook_post", gate * torch.sigmoid(gate) * up)
        mlp_out = at(f"blocks.{i}.hook_mlp_out", post @ W[p + "mlp.down_proj.weight"].T)
        x = at(f"blocks.{i}.hook_resid_post", x + mlp_out)
    resid.append(x)
    xf = ref.rms_norm(x, W["model.norm.weight"], cfg.eps)
    head = W["model.embed_tokens.weight"] if cfg.tied else W["lm_head.weight"]
    return xf @ head.T, torch.stack(resid)


def edited_forward(weights, cfg, ids, edit, inputs, clean):
    def at(name, x):
        return apply(edit, x, inputs, clean) if name == edit["hook"] else x
    return forward(weights, cfg, ids, at)


def record_all(weights, cfg, ids):
    """Every hook's value on an unedited run (the patch source)."""
    seen = {}

    def at(name, x):
        seen[name] = x.clone()
        return x
    forward(weights, cfg, ids, at)
    return seen


def greedy_steered(weights, cfg, prompt, hook, v, scale, n_new):
    """Greedy decoding by full recomputation, v * scale added at `hook` on every position."""
    ids = list(prompt)
    gaps = []
    for _ in range(n_new):
        def at(name, x):
            return x + scale * v if name == hook else x
        logits, _ = forward(weights, cfg, ids, at)
        last = logits[-1]
        top = torch.topk(last, 2).values
        gaps.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(last)))
    return ids[len(prompt):], min(gaps)


def lens(weights, cfg, ids, k):
    """The logit lens: final norm and head on every layer's hook_resid_post; top k, next token."""
    W = {n: torch.from_numpy(np.ascontiguousarray(weights[n])).to(torch.float64)
         for n in ("model.norm.weight", "model.embed_tokens.weight", "lm_head.weight") if n in weights}
    _, resid = forward(weights, cfg, ids, lambda name, x: x)
    head = W["model.embed_tokens.weight"] if cfg.tied else W["lm_head.weight"]
    logits = ref.rms_norm(resid, W["model.norm.weight"], cfg.eps) @ head.T  # [L, T, V]
    prob = torch.softmax(logits, dim=-1)
    top = torch.topk(logits, k + 1, dim=-1)
    gap = float((top.values[..., :-1] - top.values[..., 1:]).min())  # ranks are unambiguous above this
    L, n, _ = logits.shape
    next_rank = np.full((L, n), -1, np.int64)
    next_prob = np.zeros((L, n), np.float32)
    for t in range(n - 1):
        nxt = ids[t + 1]
        next_rank[:, t] = (logits[:, t, :] > logits[:, t, nxt : nxt + 1]).sum(-1).numpy()
        next_prob[:, t] = prob[:, t, nxt].numpy()
    return {"top_ids": top.indices[..., :k].numpy().astype(np.int32),
            "top_probs": torch.gather(prob, -1, top.indices[..., :k]).numpy().astype(np.float32),
            "next_rank": next_rank, "next_prob": next_prob}, gap


def log_softmax_at(logits_row, tok):
    return float(torch.log_softmax(logits_row, dim=-1)[tok])


def score_ar(weights, cfg, prompt, completion):
    """Exact log-probabilities: token j of the completion from the logits at the slot before it."""
    logits, _ = forward(weights, cfg, prompt + completion, lambda n, x: x)
    P = len(prompt)
    return [log_softmax_at(logits[P + j - 1], c) for j, c in enumerate(completion)]


def score_diffusion_losses(weights, cfg, prompt, completion, masks):
    """Each sample's weighted loss for the masks sonde drew (t, weight, masked indices): the
    masked tokens replaced by the mask id, one forward, -log p of each masked token from the
    logits one slot before it (Dream's logits at p predict p + 1)."""
    mask_id = cfg.raw["mask_token_id"]
    P = len(prompt)
    out = []
    for m in masks:
        ids = prompt + completion
        for j in m["masked"]:
            ids[P + j] = mask_id
        logits, _ = forward(weights, cfg, ids, lambda n, x: x)
        nll = -sum(log_softmax_at(logits[P + j - 1], completion[j]) for j in m["masked"])
        out.append(m["weight"] * nll if m["masked"] else 0.0)
    return out


def steered_diffusion(model_dir, cfg, v, scale, steps_on, n_new, n_steps):
    """Dream's diffusion_generate (make_generation_goldens.diffusion, topk_margin, temperature 0)
    with v * scale added to blocks.0.hook_resid_post at the generated positions during the steps
    in steps_on only. Prompts are re-drawn until every decision clears the margins and the edit
    changes the result."""
    import make_generation_goldens as gen
    m = gen.Model(model_dir)
    for attempt in range(200):
        prompt = lcg_ids(300 + attempt, 4, cfg.V - 8)

        def edit(layer, x, pos):
            if layer != 0 or gen.STEP not in steps_on:
                return x
            return x + scale * v * (pos >= len(prompt)).to(x.dtype)[..., None]
        gen.EDIT = None
        plain = gen.diffusion(m, [prompt], n_new, n_steps, "topk_margin")
        gen.EDIT = edit
        res = gen.diffusion(m, [prompt], n_new, n_steps, "topk_margin")
        gen.EDIT = None
        if gen.safe(res["margins"], "topk_margin") and gen.safe(plain["margins"], "topk_margin") and \
                (res["rows"][0]["sequence"] != plain["rows"][0]["sequence"]).any():
            return prompt, res["rows"][0]["sequence"][len(prompt):], plain["rows"][0]["sequence"][len(prompt):], res["margins"]
    raise SystemExit("no steered diffusion clear of ties")


def write(g, name, a):
    g.create_dataset(name, data=np.asarray(a), compression="gzip", shuffle=True)


def make_file(sonde, name, mm_args, out_dir):
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m")
        subprocess.run([sonde, "make-model", *mm_args, "--out", model], check=True, capture_output=True)
        cfg, weights = ref.load_model(model)
        model_sha = sha256(os.path.join(model, "model.safetensors"))
        if not cfg.causal:
            v32 = torch.from_numpy(np.random.RandomState(7).randn(cfg.H).astype(np.float32).astype(np.float64))
            diff = steered_diffusion(model, cfg, v32, 20.0, {1, 2}, 8, 4)
    rng = np.random.RandomState(7)
    H = cfg.H
    inputs64 = {"v": rng.randn(H), "m": rng.randn(H) * 0.5, "d": rng.randn(H)}
    inputs = {k: v.astype(np.float32) for k, v in inputs64.items()}  # sonde reads f32; so does the reference
    tin = {k: torch.from_numpy(v.astype(np.float64)) for k, v in inputs.items()}
    prompt = lcg_ids(5, T, cfg.V - 8)
    clean_prompt = lcg_ids(6, T, cfg.V - 8)
    clean = record_all(weights, cfg, clean_prompt)
    path = os.path.join(out_dir, name + ".h5")
    with h5py.File(path, "w", track_order=True) as f:
        f.attrs["edits_make_model_args"] = json.dumps(mm_args)
        f.attrs["model_sha256"] = model_sha
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["reference_precision"] = "float64"
        f.attrs["prompt"] = json.dumps(prompt)
        f.attrs["clean_prompt"] = json.dumps(clean_prompt)
        for k, v in inputs.items():
            f.create_dataset(f"inputs/{k}", data=v)
        listed, edits = [], {}
        for c in cases(cfg):
            logits, resid = edited_forward(weights, cfg, prompt, c["edit"], tin, clean)
            g = f.create_group(f"cases/{c['name']}")
            edits[c["name"]] = c["edit"]
            write(g, "logits", logits.numpy().astype(np.float32))
            write(g, "resid_post", resid.numpy().astype(np.float32))
            listed.append(c["name"])
        res, gap = lens(weights, cfg, prompt, 5)
        if gap < 1e-4:
            raise SystemExit(f"{name}: lens top-6 logits within {gap} of a tie")
        g = f.create_group("lens")
        g.attrs["min_rank_gap"] = gap
        for k, v in res.items():
            write(g, k, v)
        sp, sc = lcg_ids(21, 5, cfg.V - 8), lcg_ids(22, 4, cfg.V - 8)
        f.attrs["score_prompt"] = json.dumps(sp)
        f.attrs["score_completion"] = json.dumps(sc)
        g = f.create_group("score")
        if cfg.causal:
            write(g, "token_logprobs", np.array(score_ar(weights, cfg, sp, sc)))
        else:
            # The masks come from sonde's seed contract (score.h); the losses are the reference's.
            for coupled in (False, True):
                with tempfile.TemporaryDirectory() as tmp:
                    model = os.path.join(tmp, "m")
                    subprocess.run([sonde, "make-model", *mm_args, "--out", model], check=True, capture_output=True)
                    with open(os.path.join(tmp, "in.jsonl"), "w") as inp:
                        inp.write(json.dumps({"id": "s", "ids": sp, "completion_ids": sc}) + "\n")
                    args = [sonde, "score", "--model", model, "--input", os.path.join(tmp, "in.jsonl"), "--output",
                            os.path.join(tmp, "out.jsonl"), "--samples", "8", "--seed", "9", "--record-masks"]
                    subprocess.run(args + (["--coupled"] if coupled else []), check=True, capture_output=True)
                    masks = json.loads(open(os.path.join(tmp, "out.jsonl")).readline())["masks"]
                losses = score_diffusion_losses(weights, cfg, sp, sc, masks)
                tag = "coupled" if coupled else "plain"
                f.attrs[f"score_{tag}_masks"] = json.dumps([{"masked": m["masked"], "t": m["t"], "weight": m["weight"]} for m in masks])
                write(g, f"{tag}_losses", np.array(losses))
                per = [-(losses[k] + losses[k + 1]) / 2 for k in range(0, len(losses), 2)] if coupled else [-l for l in losses]
                write(g, f"{tag}_estimate", np.array([np.mean(per), np.std(per, ddof=1) / np.sqrt(len(per))]))
        if not cfg.causal:
            prompt_d, toks, plain_toks, margins = diff
            g = f.create_group("diffusion_steered")
            f.attrs["diff_prompt"] = json.dumps(prompt_d)
            f.attrs["diff_edit"] = json.dumps({"hook": "blocks.0.hook_resid_post", "op": "add", "vector": "@/inputs/v",
                                               "scale": 20.0, "positions": "generated", "steps": "1-2"})
            f.attrs["diff_settings"] = json.dumps(["--max-new-tokens", "8", "--steps", "4", "--alg", "topk_margin"])
            g.attrs["margins"] = json.dumps({k: (x if np.isfinite(x) else None) for k, x in margins.items()})
            write(g, "tokens", np.array(toks, dtype=np.int64))
            write(g, "unsteered_tokens", np.array(plain_toks, dtype=np.int64))
        f.attrs["cases"] = json.dumps(listed)
        f.attrs["case_edits"] = json.dumps(edits)
        if cfg.causal:
            hook = "blocks.0.hook_resid_post"
            for attempt in range(200):
                p = lcg_ids(100 + attempt, 4, cfg.V - 8)
                scale = 2.0 + 0.25 * (attempt % 8)
                base, _ = greedy_steered(weights, cfg, p, hook, tin["v"], 0.0, GEN_NEW)
                toks, gap = greedy_steered(weights, cfg, p, hook, tin["v"], scale, GEN_NEW)
                _, gap0 = greedy_steered(weights, cfg, p, hook, tin["v"], 0.0, GEN_NEW)
                if min(gap, gap0) > 1e-3 and toks != base:
                    break
            else:
                raise SystemExit(f"{name}: no steered generation clear of ties")
            g = f.create_group("generate")
            f.attrs["gen_prompt"] = json.dumps(p)
            f.attrs["gen_hook"] = hook
            f.attrs["gen_scale"] = repr(scale)
            f.attrs["gen_min_logit_gap"] = repr(min(gap, gap0))
            write(g, "tokens", np.array(toks, dtype=np.int64))
            write(g, "unsteered_tokens", np.array(base, dtype=np.int64))
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name, mm in FILES.items():
        make_file(a.sonde, name, mm, a.out)


if __name__ == "__main__":
    main()
