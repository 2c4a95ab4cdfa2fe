#!/usr/bin/python3
"""sonde against PyTorch on the same checkpoint: prefill and decode tokens/s, side by side.

Run with Debian's /usr/bin/python3 (python3-torch). By default it makes the qwen2.5-0.5b preset
with bf16 weights (`sonde make-model`, about 1 GB) in a temporary directory, then:

  * sonde: `sonde bench --json` for prefill (512 tokens) and decode (N tokens after a 128-token
    prompt, KV cache, greedy, no EOS stop);
  * PyTorch: the same workloads with torch.set_num_threads(threads) and f32 compute, the
    checkpoint's bf16 weights widened exactly to f32 (tests/reference/qwen2_reference.py's
    loader), a forward written with F.linear and a KV cache (below), best of --repeat runs after
    a warm-up, as sonde does;
  * the decode bound from `sonde bench` itself: it streams the weights one decode step reads
    before and after every timed run, in the same process, and reports tokens/s against the
    faster of the two reads (the host's bandwidth moves with its other tenants, so a bandwidth
    taken minutes apart from the decode proves nothing);
  * optionally bench/gemm_bench (if built): the backend's Linear against OpenBLAS sgemm.

It prints a table with the ratios and pass/fail against issue 6's targets: prefill >= 1.5x
PyTorch, decode >= 4x PyTorch, GEMM >= 70% of sgemm, decode >= 80% of the bandwidth bound.

usage: /usr/bin/python3 bench/vs_pytorch.py [--model DIR] [--sonde PATH] [--backend NAME]
         [--threads 2] [--prefill-tokens 512] [--decode-tokens 64] [--prompt-tokens 128]
         [--repeat 3] [--no-gemm] [--lengths 16,64,128,...] [--json]

--lengths: instead, prefill only, sonde and PyTorch at each length (tokens/s and the ratio);
with --json the last line is {"<length>": PyTorch tokens/s, ...} (bench/shapes.sh --torch reads it).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import qwen2_reference as ref  # noqa: E402  (the independent PyTorch reference: loader, rope)

TARGETS = {"prefill": 1.5, "decode": 4.0, "gemm": 0.70, "bandwidth": 0.80}


# ----------------------------------------------------------------------------- PyTorch model
class TorchQwen2:
    """Qwen2 decoder in f32 with a KV cache; the math of qwen2_reference.forward, batched.

    Weights are converted once (the reference converts per call, fine for goldens, not for
    timing). Attention is causal for Qwen2 (the only architecture timed here).
    """

    def __init__(self, model_dir):
        self.cfg, weights = load_weights(model_dir)
        self.W = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}
        c = self.cfg
        self.head = self.W["model.embed_tokens.weight"] if c.tied else self.W["lm_head.weight"]
        self.cos, self.sin = ref.rope_cos_sin(c.raw.get("max_position_embeddings", 4096), c.d, c.theta, torch.float32)

    def forward(self, ids, cache=None):
        """ids [B, T] long; cache: None (prefill) or a list of (k, v) [B, nkv, S, d] per layer,
        extended in place. Returns logits [B, T, V]."""
        c = self.cfg
        B, T = ids.shape
        past = cache[0][0].shape[2] if cache else 0
        cos, sin = self.cos[past : past + T], self.sin[past : past + T]
        x = self.W["model.embed_tokens.weight"][ids]
        for layer in range(c.L):
            x = self.block(layer, x, cos, sin, cache, past)
        x = ref.rms_norm(x, self.W["model.norm.weight"], c.eps)
        return F.linear(x, self.head)

    def block(self, layer, x, cos, sin, cache, past):
        c, W, p = self.cfg, self.W, f"model.layers.{layer}."
        B, T, _ = x.shape
        h = ref.rms_norm(x, W[p + "input_layernorm.weight"], c.eps)
        q = F.linear(h, W[p + "self_attn.q_proj.weight"], W[p + "self_attn.q_proj.bias"]).view(B, T, c.nh, c.d)
        k = F.linear(h, W[p + "self_attn.k_proj.weight"], W[p + "self_attn.k_proj.bias"]).view(B, T, c.nkv, c.d)
        v = F.linear(h, W[p + "self_attn.v_proj.weight"], W[p + "self_attn.v_proj.bias"]).view(B, T, c.nkv, c.d)
        q = ref.apply_rope(q, cos, sin).transpose(1, 2)  # [B, nh, T, d]
        k = ref.apply_rope(k, cos, sin).transpose(1, 2)  # [B, nkv, T, d]
        v = v.transpose(1, 2)
        if cache is not None:
            if len(cache) <= layer:
                cache.append((k, v))
            else:
                k = torch.cat([cache[layer][0], k], dim=2)
                v = torch.cat([cache[layer][1], v], dim=2)
                cache[layer] = (k, v)
        group = c.nh // c.nkv
        k = k.repeat_interleave(group, dim=1)  # query head j reads kv head j // group
        v = v.repeat_interleave(group, dim=1)
        s = torch.matmul(q, k.transpose(2, 3)) * (c.d ** -0.5)  # [B, nh, T, S]
        if T > 1:  # key u visible from query t iff u <= t + past
            S = k.shape[2]
            allowed = torch.ones(T, S, dtype=torch.bool).tril(diagonal=past)
            s = s.masked_fill(~allowed, float("-inf"))
        z = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2).reshape(B, T, c.nh * c.d)
        x = x + F.linear(z, W[p + "self_attn.o_proj.weight"])
        h2 = ref.rms_norm(x, W[p + "post_attention_layernorm.weight"], c.eps)
        gate = F.linear(h2, W[p + "mlp.gate_proj.weight"])
        up = F.linear(h2, W[p + "mlp.up_proj.weight"])
        return x + F.linear(F.silu(gate) * up, W[p + "mlp.down_proj.weight"])


def load_weights(model_dir):
    """Config and f32 numpy weights; one model.safetensors or an index of shards."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = ref.Config(json.load(f))
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return cfg, ref.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    weights = {}
    for name in files:
        weights.update(ref.read_safetensors(os.path.join(model_dir, name)))
    return cfg, weights


def bench_ids(vocab, n, row):
    g = torch.Generator().manual_seed(1234 + row)
    return torch.randint(0, vocab, (n,), generator=g)


def best_of(repeat, fn):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), sorted(times)[len(times) // 2]


def torch_prefill(model, tokens, repeat):
    ids = bench_ids(model.cfg.V, tokens, 0)[None]
    with torch.inference_mode():
        return best_of(repeat, lambda: model.forward(ids))


def torch_decode(model, prompt_tokens, tokens, repeat):
    """Seconds for `tokens` greedy cached steps after an (untimed) prefill of the prompt."""
    prompt = bench_ids(model.cfg.V, prompt_tokens, 0)[None]

    def run(n):
        cache = []
        nxt = model.forward(prompt, cache)[:, -1].argmax(-1, keepdim=True)
        t0 = time.perf_counter()
        for _ in range(n):
            nxt = model.forward(nxt, cache)[:, -1].argmax(-1, keepdim=True)
        return time.perf_counter() - t0

    with torch.inference_mode():
        run(min(tokens, 4))  # warm-up
        times = sorted(run(tokens) for _ in range(repeat))
    return times[0], times[len(times) // 2]


# ----------------------------------------------------------------------------- sonde side
def find_sonde(given):
    for cand in [given, os.environ.get("SONDE"), os.path.join(REPO, "build", "bin", "sonde"), shutil.which("sonde")]:
        if cand and os.path.exists(cand):
            return os.path.abspath(cand)
    sys.exit("vs_pytorch: cannot find the sonde program; give --sonde PATH (e.g. build/bin/sonde) or set $SONDE")


def sonde_bench(sonde, model, backend, threads, mode, tokens, prompt_tokens, repeat):
    cmd = [sonde, "bench", "--model", model, "--mode", mode, "--tokens", str(tokens), "--repeat", str(repeat),
           "--threads", str(threads), "--json"]
    if mode == "decode":
        cmd += ["--prompt-tokens", str(prompt_tokens)]
    if backend:
        cmd += ["--backend", backend]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def gemm_bench(sonde, backend, threads):
    exe = os.path.join(os.path.dirname(sonde), "gemm_bench")
    if not os.path.exists(exe):
        return None
    cmd = [exe, "--threads", str(threads), "--json", "--repeat", "3", "--backends", backend]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- main
def verdict(value, target):
    return "PASS" if value >= target else "FAIL"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="checkpoint dir (default: make qwen2.5-0.5b bf16 in a temp dir)")
    ap.add_argument("--sonde", help="the sonde program (default: $SONDE, build/bin/sonde, PATH)")
    ap.add_argument("--backend", default="", help="sonde backend (default: sonde's default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-gemm", action="store_true", help="skip gemm_bench (the GEMM ratio)")
    ap.add_argument("--lengths", help="prefill only, at these lengths (comma-separated)")
    ap.add_argument("--json", action="store_true", help="with --lengths: end with PyTorch's tokens/s as JSON")
    a = ap.parse_args()
    sonde = find_sonde(a.sonde)
    tmp = None
    model = a.model
    if not model:
        tmp = tempfile.mkdtemp(prefix="sonde-vs-pytorch-")
        model = os.path.join(tmp, "qwen2.5-0.5b-bf16")
        print(f"making the qwen2.5-0.5b bf16 preset in {model} ...", flush=True)
        subprocess.run([sonde, "make-model", "--arch", "qwen2", "--preset", "qwen2.5-0.5b", "--dtype", "bf16",
                        "--out", model], check=True, stdout=subprocess.DEVNULL)
    try:
        if a.lengths:
            run_lengths(a, sonde, model)
        else:
            run(a, sonde, model)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def run_lengths(a, sonde, model):
    lengths = [int(x) for x in a.lengths.split(",") if x]
    torch.set_num_threads(a.threads)
    print(f"load average {os.getloadavg()[0]:.2f}; {a.threads} threads; prefill, best of {a.repeat} after a warm-up",
          flush=True)
    tm = TorchQwen2(model)
    print(f"{'tokens':>8} {'sonde tok/s':>12} {'PyTorch tok/s':>14} {'ratio':>8}")
    torch_rates = {}
    for n in lengths:
        s = sonde_bench(sonde, model, a.backend, a.threads, "prefill", n, 0, a.repeat)["tokens_per_s"]
        t = n / torch_prefill(tm, n, a.repeat)[0]
        torch_rates[str(n)] = t
        print(f"{n:>8} {s:>12.1f} {t:>14.1f} {s / t:>7.2f}x", flush=True)
    if a.json:
        print(json.dumps(torch_rates))


def run(a, sonde, model):
    torch.set_num_threads(a.threads)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; "
          f"{a.threads} threads; best of {a.repeat} after a warm-up", flush=True)
    s_pre = sonde_bench(sonde, model, a.backend, a.threads, "prefill", a.prefill_tokens, 0, a.repeat)
    s_dec = sonde_bench(sonde, model, a.backend, a.threads, "decode", a.decode_tokens, a.prompt_tokens, a.repeat)
    backend = s_pre["backend"]
    print(f"sonde ({backend}): prefill {s_pre['tokens_per_s']:.1f} tok/s, decode {s_dec['tokens_per_s']:.2f} tok/s, "
          f"peak RSS {max(s_pre['peak_rss_mb'], s_dec['peak_rss_mb']):.0f} MB", flush=True)

    tm = TorchQwen2(model)
    t_pre, _ = torch_prefill(tm, a.prefill_tokens, a.repeat)
    t_dec, _ = torch_decode(tm, a.prompt_tokens, a.decode_tokens, a.repeat)
    torch_pre, torch_dec = a.prefill_tokens / t_pre, a.decode_tokens / t_dec
    print(f"PyTorch f32: prefill {torch_pre:.1f} tok/s, decode {torch_dec:.2f} tok/s", flush=True)

    rows = [
        (f"prefill {a.prefill_tokens} tok/s", s_pre["tokens_per_s"], torch_pre, "prefill"),
        (f"decode {a.decode_tokens} tok/s (prompt {a.prompt_tokens})", s_dec["tokens_per_s"], torch_dec, "decode"),
    ]
    print(f"\n{'workload':<36} {'sonde':>10} {'PyTorch':>10} {'ratio':>8} {'target':>8}  result")
    for name, s, t, key in rows:
        r = s / t
        print(f"{name:<36} {s:>10.2f} {t:>10.2f} {r:>7.2f}x {TARGETS[key]:>7.2f}x  {verdict(r, TARGETS[key])}")

    if "bound_fraction" in s_dec:
        frac = s_dec["bound_fraction"]
        print(f"{'decode vs bandwidth bound':<36} {s_dec['tokens_per_s']:>10.2f} {s_dec['bound_tokens_per_s']:>10.2f} "
              f"{frac * 100:>7.0f}% {TARGETS['bandwidth'] * 100:>7.0f}%  {verdict(frac, TARGETS['bandwidth'])}")
        print(f"  (bound: {s_dec['weight_bytes_per_token'] / 1e6:.0f} MB of weights per step streamed at "
              f"{s_dec['bandwidth_gb_s']:.1f} GB/s beside the best run; median run at "
              f"{s_dec['median_bound_fraction'] * 100:.0f}% of its bound)")
    else:
        print("(no decode bound in sonde bench's output)")

    if a.no_gemm:
        return
    g = gemm_bench(sonde, backend, a.threads)
    if g is None:
        print("\n(gemm_bench not built beside sonde: no GEMM ratio)")
        return
    for w in ("bf16", "f32"):
        ratios = [r["ratio_to_sgemm"] for r in g["rows"]
                  if r["impl"] == backend and r["weights"] == w and r["supported"] and r["shape"].startswith("512x")]
        if ratios:
            m = min(ratios)
            print(f"{'GEMM ' + w + ' (worst 512-row shape)':<36} {m * 100:>9.0f}% {'sgemm':>10} {'':>8} "
                  f"{TARGETS['gemm'] * 100:>7.0f}%  {verdict(m, TARGETS['gemm'])}")


if __name__ == "__main__":
    main()
