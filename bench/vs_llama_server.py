#!/usr/bin/python3
"""`sonde serve` against llama-server (issue 30): the same checkpoint, the same closed-loop clients.

Both servers serve the qwen2.5-0.5b preset (sonde make-model, bf16, seed 1): sonde from the
safetensors, llama-server from its GGUF BF16 made by bench/llamacpp/gguf_convert.py with the
llama.cpp tree's own gguf-py (the converter of bench/vs_llamacpp.sh, verified byte for byte). They
run one after the other, never both at once, 2 threads each, nothing pinned:

  sonde serve --model DIR --threads 2 --slots N --port 0 --max-context C --compute X
  llama-server -m GGUF -t 2 --parallel N -c N*C --port P --host 127.0.0.1

and each is driven by the same clients: N closed-loop client threads (stdlib http.client, one
connection per request), each thinking an exponential time (mean --think) before each request,
over one seeded request list: prompts as token-id lists (lengths from --prompt-range, ids below
the model's special ids), max_tokens from --gen-range, temperature 0, streamed. Every request
generates exactly max_tokens: llama-server takes "ignore_eos": true (EOS's logit at -inf);
sonde serve has no such field, so it serves a copy of the directory (symlinks) whose config.json
and generation_config.json have "eos_token_id": [] (no end token: generation runs to max_tokens,
as `sonde bench` ignores EOS). llama-server gets "cache_prompt": false, so no prompt is reused from
a slot's cache (sonde has no prefix cache). Endpoints: sonde's /v1/completions (each SSE chunk
carries the token's `token_ids`), llama-server's /completion (it takes token-id prompts and each
SSE event carries `tokens`; its /v1/completions streams text only).

Per request: time to first token (send .. the first SSE event carrying a token), the token count
(sonde: the ids streamed; llama-server: its final event's tokens_predicted, since it holds back a
token whose text ends inside a UTF-8 character and never streams that id), the end time (the last
token's event). Per server and client count: total tokens/s = generated tokens over the first
send .. the last token, TTFT p50/p90/p99 (over the requests whose first token's event was seen:
llama-server streams no event for a held-back token), ITL p50 (a gap between events spanning k
tokens counts k times as gap / k),
completed (no error and exactly max_tokens), and sonde / llama-server. With --rounds > 1, rounds
alternate which server runs first at each client count; the summary gives the median over rounds.

Before timing, the first instance of each server answers --check-prompts greedy completions
(not streamed, token ids back) and the ids are compared: a sanity check that both run the same
checkpoint (their arithmetic differs: llama.cpp BF16 against sonde --compute X, so a long greedy
path may part where two logits are close).

usage: bench/vs_llama_server.py [--llama-src /work/llama] [--sonde build/bin/sonde]
         [--clients 1,4,16] [--requests 32] [--prompt-range 16:512] [--gen-range 16:256]
         [--think 0.5] [--seed 1] [--compute bf16] [--rounds 1] [--json FILE]
"""
from __future__ import annotations

import argparse
import datetime
import http.client
import json
import math
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "llamacpp"))
# The host and the llama.cpp tree described as the llama.cpp comparison describes them.
from vs_llamacpp import busy_seconds, cpu_info, llama_commit, loadavg  # noqa: E402

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
HOST = "127.0.0.1"


def say(msg: str) -> None:
    print(f"[vs_llama_server {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd: list, **kw) -> None:
    say("$ " + " ".join(map(str, cmd)))
    subprocess.run([str(c) for c in cmd], check=True, **kw)


# ------------------------------------------------------------------------------------ checkpoints
def prepare_models(a) -> dict:
    """The safetensors directory, its GGUF BF16 (gguf_convert.py, verified) and sonde's no-EOS copy."""
    a.work.mkdir(parents=True, exist_ok=True)
    src = (a.model or a.work / "q05").resolve()
    if a.model is None and not (src / "model.safetensors").exists():
        run([a.sonde, "make-model", "--arch", "qwen2", "--preset", "qwen2.5-0.5b", "--dtype", "bf16", "--seed",
             a.model_seed, "--out", src, "--force"])
    st = src / "model.safetensors"
    gguf = (a.gguf or a.work / f"{src.name}-BF16.gguf").resolve()
    made_from = f"{st.resolve()} {st.stat().st_size} {st.stat().st_mtime}\n"
    stamp = gguf.with_name(gguf.name + ".from")  # written once the GGUF matched the safetensors byte for byte
    if a.gguf is None and not (gguf.exists() and stamp.exists() and stamp.read_text() == made_from):
        env = dict(os.environ, PYTHONPATH=str(a.llama_src / "gguf-py"))
        run([PY, HERE / "llamacpp" / "gguf_convert.py", src, gguf], env=env)  # converts, then verifies
        stamp.write_text(made_from)
    noeos = a.work / f"{src.name}-noeos"
    noeos.mkdir(exist_ok=True)
    for f in src.iterdir():
        link = noeos / f.name
        if f.name in ("config.json", "generation_config.json"):
            cfg = json.loads(f.read_text())
            cfg["eos_token_id"] = []
            link.write_text(json.dumps(cfg, indent=1) + "\n")
        elif not link.is_symlink() or link.resolve() != f.resolve():
            link.unlink(missing_ok=True)
            link.symlink_to(f.resolve())
    return {"src": src, "gguf": gguf, "noeos": noeos, "config": json.loads((src / "config.json").read_text())}


def id_ceiling(cfg: dict) -> int:
    """Prompt ids are drawn below the model's special ids (bos/eos/pad), as ordinary text tokens."""
    top = int(cfg["vocab_size"])
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        v = cfg.get(k)
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, int) and 0 < x < top:
                top = x
    return top


# ------------------------------------------------------------------------------------ requests
def parse_range(s: str, name: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+):(\d+)", s)
    if not m or int(m[1]) < 1 or int(m[1]) > int(m[2]):
        raise SystemExit(f"vs_llama_server: {name} {s!r}: expected LO:HI with 1 <= LO <= HI")
    return int(m[1]), int(m[2])


def make_requests(a, ceiling: int) -> list[dict]:
    rng = random.Random(a.seed)
    out = []
    for _ in range(a.requests):
        n = rng.randint(*a.prompt_range)
        out.append({"prompt": [rng.randrange(ceiling) for _ in range(n)], "max_tokens": rng.randint(*a.gen_range)})
    return out


def request_body(kind: str, prompt: list[int], max_tokens: int, stream: bool) -> tuple[str, dict]:
    if kind == "sonde":
        return "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    return "/completion", {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "stream": stream,
                           "ignore_eos": True, "cache_prompt": False, "return_tokens": True}


def stream_request(kind: str, port: int, prompt: list[int], max_tokens: int, timeout: float) -> dict:
    """One streamed completion; times in time.perf_counter()."""
    path, body = request_body(kind, prompt, max_tokens, True)
    rec = {"prompt_tokens": len(prompt), "max_tokens": max_tokens, "events": [], "tokens": 0, "error": None}
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        data = json.dumps(body).encode()
        rec["send"] = time.perf_counter()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            rec["error"] = f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}"
            return rec
        streamed, reported = 0, None
        for raw in resp:
            now = time.perf_counter()
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            ev = json.loads(payload)
            if "error" in ev:
                rec["error"] = json.dumps(ev["error"])[:300]
                break
            rec["end"] = now  # the last event before [DONE]: the final token's or the finish chunk just after it
            ids = (ev["choices"][0].get("token_ids") if ev.get("choices") else None) if kind == "sonde" \
                else ev.get("tokens")
            if kind == "llama" and ev.get("stop"):
                reported = ev.get("tokens_predicted")
                break
            if ids:
                streamed += len(ids)
                # (time, tokens generated so far): llama-server's events count its held-back tokens too
                rec["events"].append((now, ev.get("tokens_predicted", streamed) if kind == "llama" else streamed))
        rec["tokens"] = reported if reported is not None else streamed
        rec["streamed"] = streamed
    except (OSError, http.client.HTTPException, ValueError) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return rec


def greedy_ids(kind: str, port: int, prompt: list[int], max_tokens: int, timeout: float) -> list[int]:
    path, body = request_body(kind, prompt, max_tokens, False)
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read()
        if resp.status != 200:
            raise SystemExit(f"vs_llama_server: {kind} answered {resp.status}: {text[:300]!r}")
        r = json.loads(text)
        return r["choices"][0]["token_ids"] if kind == "sonde" else r["tokens"]
    finally:
        conn.close()


# ------------------------------------------------------------------------------------ servers
def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def process_cpu(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    rest = s[s.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, kind: str, a, models: dict, slots: int, log: Path):
        self.kind, self.a, self.log_path = kind, a, log
        if kind == "sonde":
            self.cmd = [a.sonde, "serve", "--model", models["noeos"], "--backend", a.sonde_backend, "--threads",
                        a.threads, "--slots", slots, "--port", 0, "--max-context", a.ctx, "--compute", a.compute,
                        "--max-waiting", max(64, slots)]
            self.port = None
        else:
            self.port = free_port()
            self.cmd = [a.llama_server, "-m", models["gguf"], "-t", a.threads, "--parallel", slots, "-c",
                        slots * a.ctx, "--port", self.port, "--host", HOST]
        self.cmd = [str(c) for c in self.cmd]

    def start(self) -> None:
        say(f"start {self.kind}: {' '.join(self.cmd)}")
        self.log = open(self.log_path, "w")
        t0 = time.time()
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"vs_llama_server: {self.kind} exited with {self.proc.returncode} while starting; "
                                 f"see {self.log_path}:\n{self.log_path.read_text()[-2000:]}")
            if time.time() - t0 > self.a.start_timeout:
                self.stop()
                raise SystemExit(f"vs_llama_server: {self.kind} not healthy after {self.a.start_timeout} s")
            if self.port is None:
                m = re.search(r"listening on http://[\d.]+:(\d+)", self.log_path.read_text())
                self.port = int(m[1]) if m else None
            if self.port is not None and self.healthy():
                break
            time.sleep(0.5)
        self.started_in = time.time() - t0
        say(f"{self.kind} healthy on port {self.port} after {self.started_in:.1f} s")

    def healthy(self) -> bool:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=5)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def cpu(self) -> float:
        return process_cpu(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ------------------------------------------------------------------------------------ the load
def drive(server: Server, clients: int, reqs: list[dict], a) -> tuple[list[dict], dict]:
    """Closed-loop clients over the request list; each thinks before each request."""
    records: list[dict | None] = [None] * len(reqs)
    lock = threading.Lock()
    todo = iter(range(len(reqs)))

    def client(c: int) -> None:
        rng = random.Random(f"{a.seed}-think-{c}")
        while True:
            if a.think > 0:
                time.sleep(rng.expovariate(1.0 / a.think))
            with lock:
                i = next(todo, None)
            if i is None:
                return
            rec = stream_request(server.kind, server.port, reqs[i]["prompt"], reqs[i]["max_tokens"], a.timeout)
            rec.update(index=i, client=c)
            records[i] = rec

    l0, b0, s0, o0 = loadavg(), busy_seconds(), server.cpu(), os.times()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    o1 = os.times()
    server_cpu = server.cpu() - s0
    own = (o1.user + o1.system) - (o0.user + o0.system)
    host = {"load_before": l0, "load_after": loadavg(), "server_cpu": round(server_cpu, 2),
            "foreign_cpu": round(max(0.0, busy_seconds() - b0 - server_cpu - own), 2)}
    return [r for r in records if r is not None], host


def pct(xs: list[float], p: float) -> float | None:
    """Nearest-rank percentile."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def summarize(recs: list[dict]) -> dict:
    sends = [r["send"] for r in recs if "send" in r]
    lasts = [r["end"] for r in recs if "end" in r and not r["error"]]
    gen = sum(r["tokens"] for r in recs if not r["error"])
    span = (max(lasts) - min(sends)) if lasts and sends else 0.0
    ok = [r for r in recs if not r["error"] and r["tokens"] == r["max_tokens"]]
    # TTFT where the first token's own event was seen (llama-server sends none for a token whose text
    # ends inside a UTF-8 character; its next event then counts 2 or more tokens)
    seen = [r for r in recs if not r["error"] and r["events"] and r["events"][0][1] == 1]
    ttft = [r["events"][0][0] - r["send"] for r in seen]
    # ITL per token: a gap spanning k tokens counts k times as gap / k
    itl = [(b[0] - e[0]) / (b[1] - e[1]) for r in recs if not r["error"]
           for e, b in zip(r["events"], r["events"][1:]) if b[1] > e[1] for _ in range(b[1] - e[1])]
    return {"requests": len(recs), "completed": len(ok), "errors": sum(bool(r["error"]) for r in recs),
            "short": sum(not r["error"] and r["tokens"] != r["max_tokens"] for r in recs),
            "generated_tokens": gen, "seconds": round(span, 3), "tokens_per_s": gen / span if span > 0 else None,
            "ttft_seen": len(ttft), "ttft_p50": pct(ttft, 50), "ttft_p90": pct(ttft, 90), "ttft_p99": pct(ttft, 99),
            "itl_p50": pct(itl, 50),
            "held_back_tokens": sum(r["tokens"] - r.get("streamed", r["tokens"]) for r in recs if not r["error"])}


def request_rows(recs: list[dict]) -> list[dict]:
    t0 = min((r["send"] for r in recs if "send" in r), default=0.0)
    rows = []
    for r in sorted(recs, key=lambda r: r["index"]):
        ev = r["events"]
        rows.append({"index": r["index"], "client": r["client"], "prompt_tokens": r["prompt_tokens"],
                     "max_tokens": r["max_tokens"], "tokens": r["tokens"], "token_events": len(ev),
                     "send": round(r.get("send", t0) - t0, 4),
                     "ttft": round(ev[0][0] - r["send"], 4) if ev and ev[0][1] == 1 else None,
                     "end": round(r["end"] - t0, 4) if "end" in r else None, "error": r["error"]})
    return rows


def check_agreement(kind: str, server: Server, reqs: list[dict], a, found: dict) -> None:
    for k, req in enumerate(reqs[:a.check_prompts]):
        found.setdefault(k, {})[kind] = greedy_ids(kind, server.port, req["prompt"], a.check_tokens, a.timeout)


def warm_up(server: Server, reqs: list[dict], a) -> None:
    """One untimed request first: weights paged in (llama-server maps the GGUF), threads started."""
    r = stream_request(server.kind, server.port, reqs[0]["prompt"][:8], 2, a.timeout)
    if r["error"]:
        raise SystemExit(f"vs_llama_server: {server.kind}'s warm-up request failed: {r['error']}")


# ------------------------------------------------------------------------------------ report
def fmt(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def report(a, meta: dict, runs: list[dict], agreement: list[dict]) -> dict:
    cpu = meta["cpu"]
    print()
    print(f"sonde serve vs llama-server, {meta['date_utc']}")
    print(f"CPU: {cpu['model_name']} (family {cpu['family']} model {cpu['model']}, {cpu['cores']} logical CPUs); "
          f"flags: {' '.join(cpu['flags']) or '-'}; absent: {' '.join(cpu['absent']) or '-'}")
    print(f"sonde: {meta['sonde']} ({meta['sonde_version']}, built {meta['sonde_built']}), --compute {a.compute}, "
          f"--backend {a.sonde_backend}")
    print(f"llama-server: {meta['llama_server']} ({meta['llama_server_version']}); llama.cpp {meta['llama_commit']}")
    print(f"model: {meta['model']} ; GGUF {meta['gguf']}")
    print(f"threads {a.threads}; requests {a.requests}, prompts {a.prompt_range[0]}-{a.prompt_range[1]}, "
          f"max_tokens {a.gen_range[0]}-{a.gen_range[1]}, think {a.think} s, seed {a.seed}, context per slot {a.ctx}, "
          f"rounds {a.rounds}; load average {meta['load_at_start']} at the start, {meta.get('load_at_end')} at the end")
    if agreement:
        same = sum(x["equal"] for x in agreement)
        print(f"greedy agreement ({a.check_tokens} tokens, token-id prompts): {same} of {len(agreement)} equal; "
              "common prefix " + ", ".join(f"{x['common_prefix']}/{a.check_tokens}" for x in agreement))
        if any(x["common_prefix"] == 0 for x in agreement):
            print("WARNING: a first greedy token differs: are both servers running the same checkpoint?")
    print()
    print("| clients | round | server | tokens/s | TTFT p50 / p90 / p99 (s) | TTFT seen | ITL p50 (ms) | completed | "
          "load before -> after | others' CPU (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        s, h = r["summary"], r["host"]
        print(f"| {r['clients']} | {r['round']} | {r['server']} | {fmt(s['tokens_per_s'])} | "
              f"{fmt(s['ttft_p50'], '.3f')} / {fmt(s['ttft_p90'], '.3f')} / {fmt(s['ttft_p99'], '.3f')} | "
              f"{s['ttft_seen']}/{s['requests']} | {fmt(s['itl_p50'] and s['itl_p50'] * 1e3, '.1f')} | {s['completed']}/{s['requests']} | "
              f"{h['load_before']} -> {h['load_after']} | {h['foreign_cpu']}{' !' if h['foreign_cpu'] > 1 else ''} |")
    summary = []
    print()
    print("| clients | sonde tokens/s | llama-server tokens/s | sonde / llama-server (rounds' min-max) | "
          "TTFT p50 sonde / llama (s) | TTFT p50 ratio | ITL p50 sonde / llama (ms) |")
    print("|---|---|---|---|---|---|---|")
    for c in a.clients:
        by = {k: [r["summary"] for r in runs if r["clients"] == c and r["server"] == k] for k in ("sonde", "llama")}
        if not by["sonde"] or not by["llama"]:
            continue
        med = {k: {f: statistics.median([x[f] for x in v if x[f] is not None] or [math.nan])
                   for f in ("tokens_per_s", "ttft_p50", "ttft_p90", "ttft_p99", "itl_p50")} for k, v in by.items()}
        ratios = [s["tokens_per_s"] / l["tokens_per_s"] for s, l in zip(by["sonde"], by["llama"])
                  if s["tokens_per_s"] and l["tokens_per_s"]]
        ratio = statistics.median(ratios) if ratios else None
        spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
        ttft_ratio = med["sonde"]["ttft_p50"] / med["llama"]["ttft_p50"] if med["llama"]["ttft_p50"] else None
        print(f"| {c} | {fmt(med['sonde']['tokens_per_s'])} | {fmt(med['llama']['tokens_per_s'])} | "
              f"**{fmt(ratio)}x**{spread} | {fmt(med['sonde']['ttft_p50'], '.3f')} / {fmt(med['llama']['ttft_p50'], '.3f')} | "
              f"{fmt(ttft_ratio)}x | {fmt(med['sonde']['itl_p50'] * 1e3, '.1f')} / {fmt(med['llama']['itl_p50'] * 1e3, '.1f')} |")
        summary.append({"clients": c, "median": med, "tokens_per_s_ratio": ratio, "ratios": ratios,
                        "ttft_p50_ratio": ttft_ratio, "target_met": (ratio >= 1.0) if ratio and c >= 4 else None})
    for s in summary:
        if s["clients"] in (4, 16) and s["tokens_per_s_ratio"] is not None:
            print(f"target at {s['clients']} clients (sonde >= llama-server total tokens/s): "
                  f"{'met' if s['target_met'] else 'NOT met'} ({s['tokens_per_s_ratio']:.2f}x)")
    disturbed = [f"{r['server']} c{r['clients']} r{r['round']}" for r in runs if r["host"]["foreign_cpu"] > 1]
    if disturbed:
        print(f"disturbed (other processes used > 1 s CPU meanwhile, marked !): {', '.join(disturbed)}")
    return {"per_clients": summary}


# ------------------------------------------------------------------------------------ main
def version(cmd: list[str]) -> str:
    """What --version prints (llama-server prints it on stderr)."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    return (r.stdout.strip() or r.stderr.strip() or "?").splitlines()[0]


def main() -> None:
    ap = argparse.ArgumentParser(prog="bench/vs_llama_server.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-src", type=Path, default=Path(os.environ.get("LLAMA_SRC", "/work/llama")),
                    help="the llama.cpp tree (its gguf-py converts; its commit is reported); default %(default)s")
    ap.add_argument("--llama-server", type=Path, help="default LLAMA_SRC/build/bin/llama-server")
    ap.add_argument("--sonde", type=Path, default=Path(os.environ.get("SONDE", REPO / "build" / "bin" / "sonde")))
    ap.add_argument("--sonde-backend", default="threaded")
    ap.add_argument("--compute", default="bf16", choices=["f32", "bf16"],
                    help="sonde's Linear compute (bf16: as llama.cpp's BF16 dot products; default %(default)s)")
    ap.add_argument("--model", type=Path, help="a Qwen2 checkpoint directory (default: WORK/q05, made with "
                    "make-model --preset qwen2.5-0.5b --dtype bf16 --seed 1)")
    ap.add_argument("--model-seed", type=int, default=1)
    ap.add_argument("--gguf", type=Path, help="its GGUF (default: converted into WORK by gguf_convert.py)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/sonde-vs-llama-server"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--requests", type=int, default=32, help="requests per client count and server")
    ap.add_argument("--prompt-range", default="16:512", help="prompt tokens LO:HI (default %(default)s)")
    ap.add_argument("--gen-range", default="16:256", help="max_tokens LO:HI (default %(default)s)")
    ap.add_argument("--think", type=float, default=0.5, help="mean exponential think time, s (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--ctx", type=int, help="context per slot (default: the largest prompt + max_tokens, "
                    "rounded up to 64); sonde --max-context, llama-server -c slots * this")
    ap.add_argument("--check-prompts", type=int, default=3, help="greedy agreement prompts (0: no check)")
    ap.add_argument("--check-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=3600, help="per request, s")
    ap.add_argument("--start-timeout", type=float, default=600)
    ap.add_argument("--json", type=Path, help="write meta, every run's requests and the summary here")
    a = ap.parse_args()
    a.clients = [int(x) for x in a.clients.split(",")]
    a.prompt_range = parse_range(a.prompt_range, "--prompt-range")
    a.gen_range = parse_range(a.gen_range, "--gen-range")
    a.ctx = a.ctx or -(-(a.prompt_range[1] + a.gen_range[1]) // 64) * 64
    a.llama_src = a.llama_src.resolve()
    a.llama_server = (a.llama_server or a.llama_src / "build" / "bin" / "llama-server").resolve()
    a.sonde = a.sonde.resolve()
    a.work = a.work.resolve()
    for exe, what in ((a.sonde, "--sonde or $SONDE"), (a.llama_server, "--llama-server; build it with "
                      "-DLLAMA_BUILD_SERVER=ON --target llama-server")):
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"vs_llama_server: no program at {exe} ({what})")
    if a.requests < 1 or min(a.clients) < 1 or a.rounds < 1:
        raise SystemExit("vs_llama_server: --requests, --clients and --rounds must be >= 1")

    models = prepare_models(a)
    reqs = make_requests(a, id_ceiling(models["config"]))
    meta = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu_info(), "load_at_start": loadavg(), "sonde": str(a.sonde),
            "sonde_version": version([str(a.sonde), "--version"]),
            "sonde_built": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(a.sonde.stat().st_mtime)),
            "llama_server": str(a.llama_server),
            "llama_server_version": version([str(a.llama_server), "--version"]),
            "llama_commit": llama_commit(a.llama_src), "model": str(models["src"]), "gguf": str(models["gguf"]),
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}}
    say(f"CPU {meta['cpu']['model_name']} (family {meta['cpu']['family']} model {meta['cpu']['model']}), "
        f"flags {' '.join(meta['cpu']['flags'])}; llama.cpp {meta['llama_commit']}")
    logs = a.work / "logs"
    logs.mkdir(exist_ok=True)

    runs, found = [], {}
    for rnd in range(1, a.rounds + 1):
        for c in a.clients:
            order = ("llama", "sonde") if rnd % 2 == 1 else ("sonde", "llama")
            for kind in order:
                srv = Server(kind, a, models, c, logs / f"{kind}-c{c}-r{rnd}.log")
                srv.start()
                try:
                    warm_up(srv, reqs, a)
                    if a.check_prompts and not any(kind in v for v in found.values()):
                        check_agreement(kind, srv, reqs, a, found)
                    say(f"round {rnd}, {c} client(s), {kind}: {len(reqs)} requests")
                    recs, host = drive(srv, c, reqs, a)
                finally:
                    srv.stop()
                s = summarize(recs)
                say(f"{kind} {c} client(s): {fmt(s['tokens_per_s'])} tokens/s, TTFT p50 {fmt(s['ttft_p50'], '.3f')} s, "
                    f"completed {s['completed']}/{s['requests']}, load {host['load_before']} -> {host['load_after']}, "
                    f"others' CPU {host['foreign_cpu']} s")
                runs.append({"server": kind, "clients": c, "round": rnd, "started_in": round(srv.started_in, 1),
                             "cmd": srv.cmd, "summary": s, "host": host, "requests": request_rows(recs)})
    meta["load_at_end"] = loadavg()
    agreement = []
    for k, v in sorted(found.items()):
        if "sonde" in v and "llama" in v:
            s, l = v["sonde"], v["llama"]
            common = next((i for i, (x, y) in enumerate(zip(s, l)) if x != y), min(len(s), len(l)))
            agreement.append({"prompt": k, "equal": s == l, "common_prefix": common, "sonde": s, "llama": l})
    summary = report(a, meta, runs, agreement)
    if a.json:
        a.json.write_text(json.dumps({"meta": meta, "agreement": agreement, "runs": runs, **summary}, indent=1))
        say(f"wrote {a.json}")
    bad = [r for r in runs if r["summary"]["completed"] != r["summary"]["requests"]]
    if bad:
        say("some requests did not complete with exactly max_tokens: " +
            ", ".join(f"{r['server']} c{r['clients']} r{r['round']}" for r in bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
