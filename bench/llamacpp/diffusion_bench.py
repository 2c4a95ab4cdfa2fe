#!/usr/bin/python3
"""One timed measurement of a diffusion model, sonde or llama.cpp's llama-diffusion-cli, appended to
a JSON-lines file; `report` turns the file into the tables of bench/README.md. The shell driver
bench/diffusion_vs_llamacpp.sh runs each measurement under the bench lock, alternating engines.

Kinds (all at --threads, greedy, the same prompt ids, canvas = prompt + G new tokens):
  llama       llama-diffusion-cli on a GGUF, --steps S full steps (no cache: each step is one forward
              over the whole canvas, logits at every slot). Its progress lines are time-stamped as they
              arrive, so every step's wall time is known; the first step (graph set-up) is dropped and
              the median of the rest is the step's cost. Its own "time per step" is kept too.
  sonde-step  `sonde bench --mode diffusion-step`: one step of the family's exact loop (a forward
              over the whole canvas + the sampler committing slots), median of --repeat after a warm-up.
  sonde-gen   `sonde generate` of all G tokens in a cached mode (dual cache with a threshold, or with a
              forced number of slots per step); wall time from the end of loading (the session's
              debug line "loaded ...") to the process's exit, forwards counted from --history.
Each measurement first reads its weights file once (page cache), outside the timed part, so no
engine pays page faults on mapped weights inside its timing.

usage: diffusion_bench.py measure KIND --out RESULTS.jsonl [options]   (see --help)
       diffusion_bench.py report RESULTS.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def prefetch(path: Path) -> float:
    """Read a file once so that it sits in the page cache; returns the seconds it took."""
    t0 = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass
    return time.monotonic() - t0


def weights_file(p: Path) -> Path:
    return p / "model.safetensors" if p.is_dir() else p


def prompt_ids(a) -> list[int]:
    res = subprocess.run([str(a.sonde), "tokenize", "--model", str(a.model), "--text", a.prompt],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout)["ids"]


def measure_llama(a, ids: list[int]) -> dict:
    canvas = len(ids) + a.tokens
    cmd = [a.llama / "llama-diffusion-cli", "-m", a.gguf, "-p", a.prompt, "-ub", canvas, "-b", canvas, "-c", canvas,
           "-t", a.threads, "--temp", 0, "--top-k", 1, "--top-p", 1, "--seed", 0,
           "--diffusion-steps", a.steps, "--diffusion-eps", 0.001]
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    stamps: dict[int, float] = {}
    buf = b""
    step_re = re.compile(rb"diffusion step: (\d+)/")
    os.set_blocking(proc.stdout.fileno(), True)
    while True:
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        now = time.monotonic()
        buf += chunk
        for m in step_re.finditer(chunk):
            stamps.setdefault(int(m.group(1)), now)
        if b"total time:" in chunk:
            stamps.setdefault(a.steps, now)
    proc.wait()
    m = re.search(rb"total time: ([0-9.]+)ms, time per step: ([0-9.]+)ms", buf)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"diffusion_bench: llama-diffusion-cli failed (exit {proc.returncode}):\n"
                         f"{buf[-2000:].decode(errors='replace')}")
    steps = [stamps[i + 1] - stamps[i] for i in range(a.steps) if i in stamps and i + 1 in stamps]
    per_step = statistics.median(steps[1:]) if len(steps) > 1 else float(m.group(2)) / 1e3
    return {"step_seconds": per_step, "step_seconds_all": steps, "own_ms_per_step": float(m.group(2)),
            "own_total_ms": float(m.group(1)), "forwards": a.steps, "canvas": canvas,
            "cmd": " ".join(str(c) for c in cmd)}


def measure_sonde_step(a, ids: list[int]) -> dict:
    canvas = len(ids) + a.tokens
    cmd = [a.sonde, "bench", "--model", a.model, "--mode", "diffusion-step", "--tokens", canvas,
           "--prompt-tokens", len(ids), "--repeat", a.repeat, "--backend", "threaded", "--threads", a.threads,
           "--weights", a.weights, "--compute", a.compute, "--json"]
    j = json.loads(subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True).stdout)
    return {"step_seconds": j["median_seconds"], "best_seconds": j["seconds"], "forwards": 1, "canvas": canvas,
            "peak_rss_mb": j.get("peak_rss_mb"), "cmd": " ".join(str(c) for c in cmd)}


def cached_flags(a, llada: bool) -> list:
    """The cached mode: dual cache with --threshold, or with a forced number of slots per step."""
    flags = ["--diffusion-mode", "dual-cache"]
    if llada:
        flags += ["--block-length", a.block]
        if a.per_step:  # LLaDA's schedule: steps / blocks steps per block, block / that slots each
            return flags + ["--steps", a.tokens // a.per_step]
        return flags + ["--steps", a.tokens, "--threshold", a.threshold]
    flags += ["--block-size", a.block]
    if a.per_step:
        return flags + ["--tokens-per-step", a.per_step]
    return flags + ["--alg", "confidence_threshold", "--threshold", a.threshold]


def measure_sonde_gen(a, ids: list[int]) -> dict:
    llada = json.loads((a.model / "config.json").read_text()).get("model_type") == "llada"
    cmd = [a.sonde, "generate", "--model", a.model, "--ids", ",".join(map(str, ids)), "--max-new-tokens", a.tokens,
           "--backend", "threaded", "--threads", a.threads, "--weights", a.weights, "--compute", a.compute,
           "--temperature", 0, "--json", "--history", "--log-level", "debug", *cached_flags(a, llada)]
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    end = datetime.now()
    if res.returncode != 0:
        raise SystemExit(f"diffusion_bench: sonde generate failed (exit {res.returncode}): {res.stderr[-2000:]}")
    m = re.search(r"\[(\d\d):(\d\d):(\d\d)\.(\d{3})\] \[debug\] loaded ", res.stderr)
    if not m:
        raise SystemExit(f"diffusion_bench: no 'loaded' debug line from sonde generate: {res.stderr[-500:]}")
    loaded = end.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=int(m.group(3)),
                         microsecond=int(m.group(4)) * 1000)
    seconds = (end - loaded).total_seconds() % 86400  # a run across midnight
    j = json.loads(res.stdout.splitlines()[0])
    forwards = len(j["history"]) if "history" in j else None
    return {"gen_seconds": seconds, "forwards": forwards, "step_seconds": seconds / forwards if forwards else None,
            "tokens_per_step": a.tokens / forwards if forwards else None, "canvas": len(ids) + a.tokens,
            "cmd": " ".join(str(c) for c in cmd)}


def measure(a) -> None:
    ids = prompt_ids(a)
    fetch = prefetch(weights_file(a.gguf if a.kind == "llama" else a.model))
    before = loadavg()
    r = {"llama": measure_llama, "sonde-step": measure_sonde_step, "sonde-gen": measure_sonde_gen}[a.kind](a, ids)
    r.update({"kind": a.kind, "label": a.label, "model": str(a.model), "tokens": a.tokens, "prompt_tokens": len(ids),
              "threads": a.threads, "load_before": before, "load_after": loadavg(), "prefetch_seconds": fetch,
              "when": datetime.utcnow().strftime("%Y-%m-%d %H:%M:%S UTC")})
    with open(a.out, "a") as f:
        f.write(json.dumps(r) + "\n")
    shown = {k: r[k] for k in ("label", "tokens", "step_seconds", "forwards", "load_before", "load_after") if k in r}
    print(json.dumps(shown))


def report(path: Path) -> None:
    rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    by: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        by.setdefault((r["label"], r["tokens"]), []).append(r)
    lengths = sorted({r["tokens"] for r in rows})
    labels = list(dict.fromkeys(r["label"] for r in rows))
    labels.sort(key=lambda l: not l.startswith("llama"))  # the peers first, then sonde's rows as first measured
    peer = {g: [l for l in labels if l.startswith("llama") and (l, g) in by] for g in lengths}
    for g in lengths:
        print(f"\n{g} new tokens (canvas {by[next(k for k in by if k[1] == g)][0]['canvas']}):\n")
        print("| engine / mode | rounds | s / step (median) | forwards for G | tokens / step | s for G | tokens/s |"
              + "".join(f" vs {p} |" for p in peer[g]))
        print("|---|---|---|---|---|---|---|" + "---|" * len(peer[g]))
        tps = {}
        for l in labels:
            if (l, g) not in by:
                continue
            rs = by[(l, g)]
            step = statistics.median(r["step_seconds"] for r in rs)
            if rs[0]["kind"] == "sonde-gen":
                fwd = rs[0]["forwards"]
                total = statistics.median(r["gen_seconds"] for r in rs)
            else:  # one committed slot per full step: G steps
                fwd, total = g, g * step
            tps[l] = g / total
            ratios = "".join(f" {tps[l] / tps[p]:.2f}x |" if p in tps else " |" for p in peer[g])
            print(f"| {l} | {len(rs)} | {step:.3f} | {fwd} | {g / fwd:.2f} | {total:.1f} | {g / total:.3f} |{ratios}")
        loads = [r["load_before"].split()[0] for rs in by.values() for r in rs if r["tokens"] == g]
        print(f"\nload average (1 min) before each measurement: {min(loads, key=float)} to {max(loads, key=float)}")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        return report(Path(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["measure"])
    ap.add_argument("kind", choices=["llama", "sonde-step", "sonde-gen"])
    ap.add_argument("--out", type=Path, required=True, help="JSON-lines file the measurement is appended to")
    ap.add_argument("--label", required=True, help="row name in the report, e.g. 'llama.cpp BF16'")
    ap.add_argument("--model", type=Path, required=True, help="the sonde checkpoint (prompt ids, sonde runs)")
    ap.add_argument("--gguf", type=Path, help="llama: the GGUF")
    ap.add_argument("--llama", type=Path, help="llama: directory of llama-diffusion-cli")
    ap.add_argument("--sonde", type=Path, default=Path(__file__).resolve().parents[2] / "build/bin/sonde")
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--tokens", type=int, default=64, help="G, new tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="llama: steps timed")
    ap.add_argument("--repeat", type=int, default=2, help="sonde-step: timed runs after the warm-up")
    ap.add_argument("--weights", default="native")
    ap.add_argument("--compute", default="f32")
    ap.add_argument("--block", type=int, default=32, help="sonde-gen: block size / length")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--per-step", type=int, default=0, help="sonde-gen: force this many slots per step (0: threshold)")
    a = ap.parse_args()
    if a.kind == "llama" and (not a.gguf or not a.llama):
        raise SystemExit("diffusion_bench: measure llama needs --gguf and --llama")
    measure(a)


if __name__ == "__main__":
    main()
