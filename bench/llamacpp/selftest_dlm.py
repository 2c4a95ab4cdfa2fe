#!/usr/bin/python3
"""A cheap check of bench/diffusion_vs_llamacpp.sh's parts that need neither llama.cpp nor a model
(seconds; ctest runs it as bench_diffusion_vs_llamacpp_selftest; exit 0 when all hold):
- gguf_convert_dlm.py's LLaDA q/k row order: rotate-half RoPE (Hugging Face, LLaDA's modeling) on
  the checkpoint's rows and adjacent-pair RoPE (llama.cpp's NORM, written out here from its
  definition) on the reordered rows give the same attention scores; without the reordering they
  do not;
- agreement_dlm.py's byte-level decoder: a bijection of the 256 bytes, with the space as 'Ġ';
- diffusion_bench.py's report: tokens/s and ratios on made-up measurements, computed here by hand."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from agreement_dlm import byte_decoder  # noqa: E402
from gguf_convert_dlm import Arch  # noqa: E402


def rope_rotate_half(q: np.ndarray, pos: int, base: float) -> np.ndarray:
    d = q.shape[-1]
    ang = pos * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(np.concatenate([ang, ang])), np.sin(np.concatenate([ang, ang]))
    rot = np.concatenate([-q[..., d // 2:], q[..., :d // 2]], -1)
    return q * cos + rot * sin


def rope_adjacent(q: np.ndarray, pos: int, base: float) -> np.ndarray:
    d = q.shape[-1]
    ang = pos * base ** (-np.arange(0, d, 2) / d)
    x0, x1 = q[..., 0::2], q[..., 1::2]
    out = np.empty_like(q)
    out[..., 0::2] = x0 * np.cos(ang) - x1 * np.sin(ang)
    out[..., 1::2] = x0 * np.sin(ang) + x1 * np.cos(ang)
    return out


def check_llada_order(fail: list[str]) -> None:
    heads, kv, d, model = 4, 2, 16, 64
    cfg = {"model_type": "llada", "d_model": model, "n_layers": 1, "n_heads": heads, "n_kv_heads": kv,
           "mlp_hidden_size": 128, "max_sequence_length": 64, "mask_token_id": 3}
    arch = Arch(cfg, Path("."))
    rng = np.random.default_rng(0)
    wq, wk = rng.standard_normal((heads * d, model)), rng.standard_normal((kv * d, model))
    x = rng.standard_normal((2, model))  # a query at position 5, a key at position 9
    ref = [rope_rotate_half((wq @ x[0]).reshape(heads, d), 5, 1e4),
           rope_rotate_half((wk @ x[1]).reshape(kv, d), 9, 1e4)]
    sq, sk = arch.stored("blocks.0.q_proj.weight", wq), arch.stored("blocks.0.k_proj.weight", wk)
    got = [rope_adjacent((sq @ x[0]).reshape(heads, d), 5, 1e4), rope_adjacent((sk @ x[1]).reshape(kv, d), 9, 1e4)]
    plain = [rope_adjacent((wq @ x[0]).reshape(heads, d), 5, 1e4), rope_adjacent((wk @ x[1]).reshape(kv, d), 9, 1e4)]
    score = lambda qk: np.array([qk[0][h] @ qk[1][h // (heads // kv)] for h in range(heads)])  # noqa: E731
    if not np.allclose(score(got), score(ref), rtol=1e-12, atol=1e-12):
        fail.append(f"LLaDA q/k order: scores {score(got)} != {score(ref)}")
    if np.allclose(score(plain), score(ref), rtol=1e-6):
        fail.append("LLaDA q/k order: the unreordered rows agree too (the check proves nothing)")
    if arch.stored("blocks.0.v_proj.weight", wk) is not wk:
        fail.append("LLaDA: v_proj must not be reordered")


def check_bytes(fail: list[str]) -> None:
    dec = byte_decoder()
    if sorted(dec.values()) != list(range(256)) or len(dec) != 256:
        fail.append("byte decoder is not a bijection of the 256 bytes")
    if dec.get("Ġ") != 0x20 or dec.get("A") != 0x41 or dec.get("Ċ") != 0x0A:
        fail.append(f"byte decoder: 'Ġ' -> {dec.get('Ġ')}, 'Ċ' -> {dec.get('Ċ')}, 'A' -> {dec.get('A')}")


def check_report(fail: list[str]) -> None:
    rows = [
        {"kind": "llama", "label": "llama.cpp BF16", "tokens": 64, "step_seconds": 5.0, "canvas": 80, "load_before": "1.0 1 1"},
        {"kind": "sonde-step", "label": "sonde exact", "tokens": 64, "step_seconds": 4.0, "canvas": 80, "load_before": "1.2 1 1"},
        {"kind": "sonde-gen", "label": "sonde dual", "tokens": 64, "step_seconds": 2.0, "gen_seconds": 32.0,
         "forwards": 16, "canvas": 80, "load_before": "1.1 1 1"},
    ]
    with tempfile.TemporaryDirectory() as t:
        f = Path(t) / "r.jsonl"
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = subprocess.run([sys.executable, HERE / "diffusion_bench.py", "report", f], capture_output=True,
                             text=True, check=True).stdout
    # llama: 64 steps x 5 s = 320 s, 0.2 tokens/s; sonde exact 256 s, 0.25 (1.25x); dual 32 s, 2.0 (10x)
    want = ["| llama.cpp BF16 | 1 | 5.000 | 64 | 1.00 | 320.0 | 0.200 | 1.00x |",
            "| sonde exact | 1 | 4.000 | 64 | 1.00 | 256.0 | 0.250 | 1.25x |",
            "| sonde dual | 1 | 2.000 | 16 | 4.00 | 32.0 | 2.000 | 10.00x |"]
    for w in want:
        if w not in out:
            fail.append(f"report: missing row {w!r} in:\n{out}")


def main() -> None:
    fail: list[str] = []
    check_llada_order(fail)
    check_bytes(fail)
    check_report(fail)
    print("selftest_dlm: " + ("all hold" if not fail else "\n".join(fail)))
    sys.exit(1 if fail else 0)


if __name__ == "__main__":
    main()
