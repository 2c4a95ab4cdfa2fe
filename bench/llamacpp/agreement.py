#!/usr/bin/python3
"""Logits agreement between sonde and llama.cpp before anything is timed.

Every logits file (sonde forward's HDF5 /logits, or the harness's N x vocab float32 dump) is compared
with a float64 NumPy forward of the same safetensors (no torch) and each named pair with each other,
over all positions and the whole vocabulary:
  norm_max_err = max |x - ref| / max |ref|
  rel_rms      = ||x - ref||_F / ||ref||_F
  argmax       = positions whose argmax equals the reference's
Exits 1 when a pair's argmax agreement is below --min-argmax (a fraction of the positions).

usage: agreement.py MODEL_DIR IDS_FILE --json OUT.json [--min-argmax 0.9]
                    NAME=FILE ... --pair NAME_A:NAME_B ...
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_convert import read_safetensors, widen  # noqa: E402


def forward64(model: Path, ids: np.ndarray) -> np.ndarray:
    """Qwen2 forward in float64 (causal, RoPE rotate-half, GQA, RMSNorm, SwiGLU); every position's logits."""
    cfg = json.loads((model / "config.json").read_text())
    st = read_safetensors(model / "model.safetensors")
    f64 = lambda name: widen(*st[name][::2]).astype(np.float64)  # noqa: E731  (dtype, array)
    hidden, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, n = hidden // nh, cfg["rms_norm_eps"], len(ids)
    emb = f64("model.embed_tokens.weight")
    x = emb[ids]
    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))

    def rope(t):
        return t * cos + np.concatenate([-t[..., hd // 2:], t[..., :hd // 2]], -1) * sin

    def rms(t, w):
        return t / np.sqrt((t * t).mean(-1, keepdims=True) + eps) * w

    causal = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(cfg["num_hidden_layers"]):
        p = lambda s: f64(f"model.layers.{i}.{s}")  # noqa: E731
        h = rms(x, p("input_layernorm.weight"))
        proj = lambda s, heads: (h @ p(f"self_attn.{s}.weight").T + p(f"self_attn.{s}.bias")  # noqa: E731
                                 ).reshape(n, heads, hd).transpose(1, 0, 2)
        q, k, v = rope(proj("q_proj", nh)), rope(proj("k_proj", nkv)), proj("v_proj", nkv)
        k, v = np.repeat(k, nh // nkv, 0), np.repeat(v, nh // nkv, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + causal
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        x = x + (a @ v).transpose(1, 0, 2).reshape(n, hidden) @ p("self_attn.o_proj.weight").T
        h = rms(x, p("post_attention_layernorm.weight"))
        g, u = h @ p("mlp.gate_proj.weight").T, h @ p("mlp.up_proj.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ p("mlp.down_proj.weight").T
    x = rms(x, f64("model.norm.weight"))
    head = emb if cfg.get("tie_word_embeddings") else f64("lm_head.weight")
    return x @ head.T


def load(path: str, n: int) -> np.ndarray:
    if path.endswith(".h5"):
        import h5py
        with h5py.File(path, "r") as f:
            a = np.asarray(f["logits"], dtype=np.float64)
        return a.reshape(n, -1)  # sonde writes [batch, positions, vocab] or [positions, vocab]
    return np.fromfile(path, dtype=np.float32).reshape(n, -1).astype(np.float64)


def metrics(x: np.ndarray, ref: np.ndarray) -> dict:
    return {"norm_max_err": float(np.abs(x - ref).max() / np.abs(ref).max()),
            "rel_rms": float(np.linalg.norm(x - ref) / np.linalg.norm(ref)),
            "argmax_equal": int((x.argmax(-1) == ref.argmax(-1)).sum()), "positions": int(len(x))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("ids_file", type=Path)
    ap.add_argument("files", nargs="+", help="NAME=FILE (.h5 from sonde forward, .f32 from the harness)")
    ap.add_argument("--pair", action="append", default=[], help="NAME_A:NAME_B, A compared with B")
    ap.add_argument("--min-argmax", type=float, default=0.9)
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args()

    ids = np.array([int(t) for t in a.ids_file.read_text().strip().split(",")])
    n = len(ids)
    logits = {}
    for spec in a.files:
        name, path = spec.split("=", 1)
        logits[name] = load(path, n)
    ref = forward64(a.model, ids)
    rows = []
    for name, x in logits.items():
        rows.append({"logits": name, "against": "float64 NumPy", **metrics(x, ref)})
    failed = []
    for spec in a.pair:
        x, y = spec.split(":", 1)
        m = metrics(logits[x], logits[y])
        rows.append({"logits": x, "against": y, "checked": True, **m})
        if m["argmax_equal"] < a.min_argmax * n:
            failed.append(f"{x} against {y}: argmax {m['argmax_equal']}/{n}")

    print(f"logits agreement over {n} random ids (every position, vocabulary {ref.shape[1]}); "
          f"the bound: argmax equal at >= {a.min_argmax:.0%} of positions for each checked pair (*)")
    print(f"| {'logits':<22} | {'against':<22} | norm. max err | rel. RMS | argmax equal |")
    print(f"|{'-' * 24}|{'-' * 24}|---------------|----------|--------------|")
    for r in rows:
        mark = " *" if r.get("checked") else ""
        eq = f"{r['argmax_equal']}/{n}{mark}"
        print(f"| {r['logits']:<22} | {r['against']:<22} | {r['norm_max_err']:13.2e} | {r['rel_rms']:8.2e} | "
              f"{eq:>12} |")
    a.json.write_text(json.dumps({"ids": ids.tolist(), "min_argmax": a.min_argmax, "rows": rows,
                                  "failed": failed}, indent=1))
    if failed:
        print("AGREEMENT FAILED: " + "; ".join(failed))
        sys.exit(1)
    print("agreement: PASS")


if __name__ == "__main__":
    main()
