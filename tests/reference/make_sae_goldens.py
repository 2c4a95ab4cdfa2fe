#!/usr/bin/python3
"""Goldens for SAEs and transcoders at hook points, from independent float64 references.

    /usr/bin/python3 tests/reference/make_sae_goldens.py --sonde build/bin/sonde --out tests/data

Makes random SAEs in SAELens's layout with docs/examples/make_sae.py (tests/data/sae/<case>/),
one per architecture and layout, and for tiny Qwen2 and Dream checkpoints (made by `sonde
make-model`, the only thing taken from sonde) runs the float64 forward of qwen2_reference.py's
math with sae_reference.py's SAE at the SAE's hook:

  /<case>/{sae_input, acts_pre, acts_post, recons, error, output}   the plain forward's SAE values
  /<case>/logits_splice          the output hook's value replaced by the SAE's output
  (with the error term too the forward is the plain one: the test compares with /logits)
  /logits, /ids                  the plain forward

An SAE is redrawn (next seed) until every discontinuous decision (TopK's k-th feature, JumpReLU's
threshold, the gate's sign) clears 1e-4 of the pre-activations' scale on both models, so an f32
engine must decide every feature as the reference does.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "docs", "examples"))
import make_sae  # noqa: E402
import qwen2_reference as ref  # noqa: E402
import sae_reference  # noqa: E402
from make_goldens import lcg_ids, sha256  # noqa: E402

MODELS = {
    "sae-tiny-qwen2-f32": ["--arch", "qwen2", "--preset", "tiny", "--vocab", "512", "--seed", "61"],
    "sae-tiny-dream-f32": ["--arch", "dream", "--preset", "tiny", "--vocab", "512", "--seed", "62"],
}
T = 6
D_SAE = 96
# (case, make_sae args, the hook the reference reads, the hook it writes)
CASES = [
    ("standard_flat", ["--arch", "standard", "--layout", "flat", "--hook", "blocks.0.hook_resid_post"]),
    ("jumprelu_v6", ["--arch", "jumprelu", "--layout", "v6", "--hook", "blocks.1.hook_resid_mid"]),
    ("topk_flat", ["--arch", "topk", "--k", "6", "--layout", "flat", "--hook", "blocks.1.hook_resid_post"]),
    ("gated_v6", ["--arch", "gated", "--layout", "v6", "--hook", "blocks.0.hook_mlp_out"]),
    ("norm_bf16", ["--arch", "standard", "--layout", "v6", "--dtype", "bf16", "--norm", "constant_norm_rescale",
                   "--no-apply-b-dec", "--hook", "blocks.1.hook_attn_out"]),
    ("transcoder_v6", ["--arch", "transcoder", "--layout", "v6", "--hook", "blocks.0.ln2.hook_normalized",
                       "--hook-out", "blocks.0.hook_mlp_out"]),
]
# TransformerLens names the reference's hook points answer to.
TL = {"blocks.0.ln2.hook_normalized": "blocks.0.ln2.hook_out"}


def forward(W, cfg, ids, at):
    """qwen2_reference.forward's math in float64, at(hook, x) -> x at each hook point."""
    n = len(ids)
    nh, nkv, d = cfg.nh, cfg.nkv, cfg.d
    x = at("hook_embed", W["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)])
    cos, sin = ref.rope_cos_sin(n, d, cfg.theta, torch.float64)
    allowed = torch.tril(torch.ones(n, n, dtype=torch.bool)) if cfg.causal else None
    for i in range(cfg.L):
        p = f"model.layers.{i}."
        h = at(f"blocks.{i}.ln1.hook_out", ref.rms_norm(x, W[p + "input_layernorm.weight"], cfg.eps))
        q = (h @ W[p + "self_attn.q_proj.weight"].T + W[p + "self_attn.q_proj.bias"]).view(n, nh, d)
        k = (h @ W[p + "self_attn.k_proj.weight"].T + W[p + "self_attn.k_proj.bias"]).view(n, nkv, d)
        v = (h @ W[p + "self_attn.v_proj.weight"].T + W[p + "self_attn.v_proj.bias"]).view(n, nkv, d)
        q, k = ref.apply_rope(q, cos, sin), ref.apply_rope(k, cos, sin)
        kv_of = torch.arange(nh) // (nh // nkv)
        s = torch.einsum("thd,uhd->htu", q, k[:, kv_of, :]) * d ** -0.5
        if allowed is not None:
            s = s.masked_fill(~allowed[None], float("-inf"))
        z = torch.einsum("htu,uhd->thd", torch.softmax(s, dim=-1), v[:, kv_of, :])
        attn_out = at(f"blocks.{i}.hook_attn_out", z.reshape(n, nh * d) @ W[p + "self_attn.o_proj.weight"].T)
        x = at(f"blocks.{i}.hook_resid_mid", x + attn_out)
        h2 = at(f"blocks.{i}.ln2.hook_out", ref.rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.eps))
        gate, up = h2 @ W[p + "mlp.gate_proj.weight"].T, h2 @ W[p + "mlp.up_proj.weight"].T
        mlp_out = at(f"blocks.{i}.hook_mlp_out", (gate * torch.sigmoid(gate) * up) @ W[p + "mlp.down_proj.weight"].T)
        x = at(f"blocks.{i}.hook_resid_post", x + mlp_out)
    xf = ref.rms_norm(x, W["model.norm.weight"], cfg.eps)
    head = W["model.embed_tokens.weight"] if cfg.tied else W["lm_head.weight"]
    return xf @ head.T


def record(W, cfg, ids):
    seen = {}

    def at(name, x):
        seen[name] = x.clone()
        return x
    logits = forward(W, cfg, ids, at)
    return logits, seen


def spliced(W, cfg, ids, sae, error_term):
    """The forward with the output hook's value replaced by the SAE's output (+ its error)."""
    hin, hout = TL.get(sae.hook, sae.hook), TL.get(sae.hook_out, sae.hook_out)
    held = {}

    def at(name, x):
        if name == hin:
            held["in"] = x
        if name == hout:
            r = sae.run(held["in"], x)
            return r["output"] + (r["error"] if error_term else 0)
        return x
    return forward(W, cfg, ids, at)


def feature_edit_cases(feature):
    """sae_feature edits of the standard SAE (blocks.0.hook_resid_post): the run's extra flags,
    the edit as --edits takes it, and the reference's view of it."""
    return {
        "clamp_splice_error": (["--sae-splice", "--sae-error-term"],
                               {"op": "sae_feature", "feature": feature, "value": 3.0}),
        "scale_splice_positions": (["--sae-splice"],
                                   {"op": "sae_feature", "feature": feature, "scale": 2.5, "positions": [1, 3]}),
        "steer_unspliced": ([], {"op": "sae_feature", "feature": feature, "add": 4.0}),
    }


def feature_edited(W, cfg, ids, sae, flags, edit):
    """The reference forward with the edit: clamp / scale act on acts_post (then the spliced
    output is decode(edited) + the clean error when the error term is on); add without a splice
    adds add * W_dec[F] to the hook's value."""
    splice, error_term = "--sae-splice" in flags, "--sae-error-term" in flags
    F = edit["feature"]
    rows = edit.get("positions", list(range(len(ids))))

    def at(name, x):
        if name != sae.hook:
            return x
        if not splice:
            y = x.clone()
            for t in rows:
                y[t] = x[t] + edit["add"] * sae.w["W_dec"][F]
            return y
        pre, post, c, _ = sae.encode(x)
        edited = post.clone()
        for t in rows:
            edited[t, F] = edit["value"] if "value" in edit else post[t, F] * edit["scale"]
        _, out = sae.decode(edited, c)
        if error_term:
            _, clean = sae.decode(post, c)
            out = out + (x - clean)
        return out
    return forward(W, cfg, ids, at)


def greedy_spliced(W, cfg, sae, n_new):
    """Qwen2: greedy decoding by full recomputation with the SAE spliced in (no error term); the
    prompt is redrawn until every step's top-1 / top-2 gap clears 1e-3."""
    for attempt in range(100):
        ids = lcg_ids(900 + attempt, 4, cfg.V)
        gaps = []
        for _ in range(n_new):
            last = spliced(W, cfg, ids, sae, False)[-1]
            top = torch.topk(last, 2).values
            gaps.append(float(top[0] - top[1]))
            ids.append(int(torch.argmax(last)))
        if min(gaps) > 1e-3:
            return ids[:4], ids[4:], min(gaps)
    raise SystemExit("no spliced greedy generation clear of ties")


def diffusion_spliced(model_dir, sae, n_new, n_steps):
    """Dream: diffusion_generate (make_generation_goldens.diffusion, topk_margin, temperature 0)
    with the SAE (at blocks.0.hook_resid_post) spliced in at every denoising step. Prompts are
    redrawn until every decision clears the margins and the splice changes the result."""
    import make_generation_goldens as gen
    assert sae.hook == "blocks.0.hook_resid_post"
    m = gen.Model(model_dir)
    for attempt in range(200):
        prompt = lcg_ids(1300 + attempt, 4, m.cfg.V - 8)

        def edit(layer, x, pos):
            return sae.run(x, x)["output"] if layer == 0 else x
        gen.EDIT = None
        plain = gen.diffusion(m, [prompt], n_new, n_steps, "topk_margin")
        gen.EDIT = edit
        res = gen.diffusion(m, [prompt], n_new, n_steps, "topk_margin")
        gen.EDIT = None
        if gen.safe(res["margins"], "topk_margin") and gen.safe(plain["margins"], "topk_margin") and \
                (res["rows"][0]["sequence"] != plain["rows"][0]["sequence"]).any():
            return prompt, res["rows"][0]["sequence"][len(prompt):], plain["rows"][0]["sequence"][len(prompt):]
    raise SystemExit("no spliced diffusion clear of ties")


def models(sonde, tmp):
    out = {}
    for name, args in MODELS.items():
        d = os.path.join(tmp, name)
        subprocess.run([sonde, "make-model", *args, "--out", d], check=True, capture_output=True)
        cfg, w = ref.load_model(d)
        W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64) for k, v in w.items()}
        ids = lcg_ids(700 + len(out), T, cfg.V)
        out[name] = (d, cfg, W, ids, record(W, cfg, ids))
    return out


def make_saes(sae_dir, ms):
    """Each case's SAE, redrawn until its decisions clear the margin on every model."""
    for case, args in CASES:
        folder = os.path.join(sae_dir, case)
        for seed in range(100):
            shutil.rmtree(folder, ignore_errors=True)
            make_sae.main([*args, "--d-in", "64", "--d-sae", str(D_SAE), "--seed", str(seed), "--out", folder,
                           "--model-name", "sonde-tiny"])
            sae = sae_reference.Sae(folder)
            hin = TL.get(sae.hook, sae.hook)
            if all(sae.margin(m[4][1][hin]) > 1e-4 for m in ms.values()):
                break
        else:
            raise SystemExit(f"{case}: no SAE clear of its decision boundaries")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sonde", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    sae_dir = os.path.join(a.out, "sae")
    with tempfile.TemporaryDirectory() as tmp:
        ms = models(a.sonde, tmp)
        make_saes(sae_dir, ms)
        for name, (d, cfg, W, ids, (logits, seen)) in ms.items():
            path = os.path.join(a.out, name + ".h5")
            with h5py.File(path, "w", track_order=True) as f:
                f.attrs["sae_make_model_args"] = json.dumps(MODELS[name])
                f.attrs["model_sha256"] = sha256(os.path.join(d, "model.safetensors"))
                f.attrs["cases"] = json.dumps([c for c, _ in CASES])
                f.attrs["case_hooks"] = json.dumps({c: TL.get(sae_reference.Sae(os.path.join(sae_dir, c)).hook,
                                                                sae_reference.Sae(os.path.join(sae_dir, c)).hook)
                                                    for c, _ in CASES})
                f.attrs["torch_version"] = str(torch.__version__)
                f.attrs["reference_precision"] = "float64"
                f["ids"] = np.asarray(ids, np.int32)
                f["logits"] = logits.numpy().astype(np.float32)
                for case, _ in CASES:
                    sae = sae_reference.Sae(os.path.join(sae_dir, case))
                    g = f.create_group(case)
                    g.attrs["hook"] = sae.hook
                    g.attrs["hook_out"] = sae.hook_out
                    r = sae.run(seen[TL.get(sae.hook, sae.hook)], seen[TL.get(sae.hook_out, sae.hook_out)])
                    for k in ("sae_input", "acts_pre", "acts_post", "recons", "error", "output"):
                        g.create_dataset(k, data=r[k].numpy().astype(np.float32), compression="gzip", shuffle=True)
                    lg = spliced(W, cfg, ids, sae, False).numpy().astype(np.float32)
                    g.create_dataset("logits_splice", data=lg, compression="gzip", shuffle=True)
                    # With the error term the hook's value is x exactly: the plain logits.
                    err = spliced(W, cfg, ids, sae, True).numpy()
                    assert np.abs(err - logits.numpy()).max() <= 1e-9 * np.abs(logits.numpy()).max()
                # sae_feature edits of the standard SAE, on its most active feature.
                sae = sae_reference.Sae(os.path.join(sae_dir, "standard_flat"))
                feature = int(sae.encode(seen[sae.hook])[1].sum(0).argmax())
                cases = feature_edit_cases(feature)
                f.attrs["feature_edits"] = json.dumps({k: {"flags": fl, "edit": e} for k, (fl, e) in cases.items()})
                for k, (fl, e) in cases.items():
                    lg = feature_edited(W, cfg, ids, sae, fl, e).numpy().astype(np.float32)
                    assert np.abs(lg - logits.numpy()).max() > 1e-3, f"{k} changes nothing"
                    f.create_dataset(f"feature_edits/{k}/logits", data=lg, compression="gzip", shuffle=True)
                # Generation with the standard SAE spliced in at every step.
                sae = sae_reference.Sae(os.path.join(sae_dir, "standard_flat"))
                g = f.create_group("generate_splice")
                if cfg.causal:
                    prompt, tokens, gap = greedy_spliced(W, cfg, sae, 6)
                    f.attrs["generate_splice_settings"] = json.dumps(["--max-new-tokens", "6"])
                    g.attrs["min_logit_gap"] = gap
                    g["unspliced_tokens"] = np.zeros(0, np.int64)
                else:
                    prompt, tokens, plain = diffusion_spliced(d, sae, 8, 4)
                    f.attrs["generate_splice_settings"] = json.dumps(["--max-new-tokens", "8", "--steps", "4", "--alg", "topk_margin"])
                    g["unspliced_tokens"] = np.asarray(plain, np.int64)
                g["prompt"] = np.asarray(prompt, np.int64)
                g["tokens"] = np.asarray(tokens, np.int64)
            print(path, os.path.getsize(path))


if __name__ == "__main__":
    main()
