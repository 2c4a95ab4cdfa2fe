#!/usr/bin/python3
"""A cheap check of bench/vs_llamacpp.sh's parts that need neither llama.cpp nor a model (run by ctest):
report.py on a made-up two-round run (llama-bench, harness and sonde bench outputs as they print them)
must give the ratios computed here by hand, mark the disturbed command, and write summary.json;
gguf_convert.py's tensor names and exact bf16 widening; agreement.py's metrics."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from agreement import metrics  # noqa: E402
from gguf_convert import gguf_name, widen  # noqa: E402


def llama_bench(ts: list[float], n_prompt: int, n_gen: int) -> str:
    return json.dumps([{"build_commit": "c392e509", "n_prompt": n_prompt, "n_gen": n_gen, "samples_ts": ts}])


def sonde(tps: float, **kw) -> str:
    return json.dumps({"median_tokens_per_s": tps, "tokens_per_s": tps * 1.1, "median_seconds": 1.0 / tps, **kw})


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        raw = out / "raw"
        raw.mkdir()
        meta = {"date_utc": "2026-11-28 04:00 UTC", "cpu": {"model_name": "Test CPU", "flags": ["avx2"], "absent": []},
                "llama_commit": "c392e509", "threads": 2, "rounds": 2, "repeat": 3, "ubatch": "n",
                "decode_tokens": 64, "decode_depth": 128, "llama_bench_depth": False, "dream_preset": "tiny",
                "dream_tokens": 32}
        (out / "meta.json").write_text(json.dumps(meta))
        for r, (llama_ts, sonde_ts) in enumerate([(100.0, 80.0), (110.0, 121.0)], start=1):
            (raw / f"r{r}_llama_pp_last_BF16_16.out").write_text(llama_bench([llama_ts - 5, llama_ts, llama_ts + 50], 16, 0))
            (raw / f"r{r}_llama_pp_all_BF16_16.out").write_text(json.dumps({"median_ts": llama_ts / 2}))
            (raw / f"r{r}_llama_tg_harness_Q8_0.out").write_text(json.dumps({"median_ts": 20.0}))
            (raw / f"r{r}_llama_tg_bench_Q8_0.out").write_text(llama_bench([25.0], 0, 64))
            (raw / f"r{r}_sonde_pp_last_bf16_16.out").write_text(sonde(sonde_ts, mode="prefill"))
            (raw / f"r{r}_sonde_pp_all_bf16_16.out").write_text(sonde(sonde_ts / 2, mode="prefill"))
            (raw / f"r{r}_sonde_tg_int8.out").write_text(sonde(30.0, mode="decode"))
            (raw / f"r{r}_sonde_dream_f32.out").write_text(sonde(64.0, mode="diffusion-step"))
        log = [{"tag": "r2_llama_pp_all_BF16_16", "rc": 0, "seconds": 3.0, "foreign_cpu": 2.5,
                "foreign_top": [[2.4, "cc1plus[42]"]], "load_before": "3.0", "load_after": "3.5"},
               {"tag": "r1_sonde_tg_int8", "rc": 0, "seconds": 3.0, "foreign_cpu": 0.1, "foreign_top": [],
                "load_before": "1.0", "load_after": "1.0"}]
        (out / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))
        res = subprocess.run([sys.executable, str(HERE / "report.py"), str(out)], capture_output=True, text=True)
        if "-v" in sys.argv:
            print(res.stdout)
        assert res.returncode == 0, res.stderr
        s = json.loads((out / "summary.json").read_text())
        r = s["ratios"]
        last = r["prefill 16, last logit | bf16 / BF16"]
        # sonde medians 80, 121 -> 100.5; llama-bench medians 100, 110 -> 105; per round 0.8 and 1.1
        assert abs(last["median"] - 100.5 / 105) < 1e-9 and abs(last["min"] - 0.8) < 1e-9 and abs(last["max"] - 1.1) < 1e-9, last
        assert not last["disturbed"]
        assert r["prefill 16, all logits | bf16 / BF16"]["disturbed"]
        assert abs(r["decode 64 after 128 | int8 / Q8_0"]["median"] - 1.5) < 1e-9  # against the harness: no -d
        assert "prefill 16, last logit | f32 / BF16" not in r  # nothing measured, no ratio
        assert s["disturbed"] == ["r2_llama_pp_all_BF16_16"]
        assert abs(s["tokens_per_s"]["dream step | sonde f32"]["seconds"]["median"] - 1 / 64) < 1e-12
        assert "Test CPU" in res.stdout and "**0.96** (0.80-1.10)" in res.stdout, res.stdout

    assert gguf_name("model.layers.7.self_attn.k_proj.bias") == "blk.7.attn_k.bias"
    assert gguf_name("model.embed_tokens.weight") == "token_embd.weight"
    bits = np.array([0x3F80, 0xC000, 0x7F80, 0x0001], dtype=np.uint16)  # 1, -2, inf, the smallest subnormal
    w = widen("BF16", bits)
    assert w[0] == 1.0 and w[1] == -2.0 and np.isinf(w[2]) and w[3].view(np.uint32) == 0x00010000
    ref = np.array([[1.0, 3.0, 2.0], [0.0, -1.0, 4.0]])
    m = metrics(ref + np.array([[0.0, 0.0, 2.0], [0.0, 0.0, 0.0]]), ref)
    assert m["argmax_equal"] == 1 and abs(m["norm_max_err"] - 0.5) < 1e-12
    print("bench/llamacpp selftest: ok")


if __name__ == "__main__":
    main()
