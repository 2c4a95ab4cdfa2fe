#!/usr/bin/python3
"""The ratio table of a vs_llamacpp.py run: OUT/raw/r<round>_<engine>_<name>.out -> tables and OUT/summary.json.

Each command's value in a round is the median of its timed runs (llama-bench: of samples_ts; the harness:
median_ts; sonde bench: median_tokens_per_s). Over the rounds: the median of those round medians and their
min-max. A ratio is sonde / llama.cpp: the median over rounds of sonde over the median of llama.cpp, with
the min-max of the per-round ratios (both engines ran in the same round, one right after the other).
A command during which other processes used more than --disturbed seconds of CPU (log.jsonl's
foreign_cpu) is listed, and the cells it feeds are marked with '!'.

usage: report.py OUT [--disturbed 1.0]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

MODE_GGUF = {"f32": "BF16", "bf16": "BF16", "int8": "Q8_0"}


def value(engine: str, name: str, text: str) -> float | None:
    """tokens/s of one raw output (None when it has none)."""
    text = text.strip()
    if not text:
        return None
    try:
        j = json.loads(text.splitlines()[-1]) if not text.startswith("[") else json.loads(text)
    except json.JSONDecodeError:
        return None
    if engine == "llama" and isinstance(j, list):  # llama-bench -o json: one test per entry
        return statistics.median(j[0]["samples_ts"]) if j else None
    if engine == "llama":
        return j.get("median_ts")
    return j.get("median_tokens_per_s")


def load(out: Path):
    per = defaultdict(dict)  # key -> {round: tok/s}
    raw = {}
    for f in sorted((out / "raw").glob("r*_*.out")):
        m = re.match(r"r(\d+)_(llama|sonde)_(.+)\.out$", f.name)
        if not m:
            continue
        r, eng, name = int(m.group(1)), m.group(2), m.group(3)
        text = f.read_text()
        v = value(eng, name, text)
        if v is not None:
            per[(eng, name)][r] = v
            if eng == "sonde":
                raw[(eng, name, r)] = json.loads(text.strip().splitlines()[-1])
    log = out / "log.jsonl"
    entries = [json.loads(l) for l in log.read_text().splitlines() if l.strip()] if log.exists() else []
    return per, raw, entries


def stats(rounds: dict) -> dict:
    v = [rounds[r] for r in sorted(rounds)]
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "rounds": {str(r): rounds[r] for r in sorted(rounds)}}


def ratio(s: dict | None, l: dict | None) -> dict | None:
    if not s or not l:
        return None
    common = sorted(set(s) & set(l))
    if not common:
        return None
    per_round = [s[r] / l[r] for r in common]
    return {"median": statistics.median(s.values()) / statistics.median(l.values()), "min": min(per_round),
            "max": max(per_round), "rounds": len(common)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--disturbed", type=float, default=1.0, help="foreign CPU seconds that mark a command disturbed")
    a = ap.parse_args()
    out = a.out
    meta = json.loads((out / "meta.json").read_text()) if (out / "meta.json").exists() else {}
    per, raw, entries = load(out)
    bad = {e["tag"]: e for e in entries if e.get("foreign_cpu", 0) > a.disturbed or e.get("rc", 0) != 0}
    bad_keys = set()
    for tag in bad:
        m = re.match(r"r\d+_(llama|sonde)_(.+)$", tag)
        if m:
            bad_keys.add((m.group(1), m.group(2)))

    lengths = sorted({int(m.group(1)) for (_, name) in per for m in [re.search(r"_(\d+)$", name)] if m
                      and name.startswith("pp_")})
    depth_ok = meta.get("llama_bench_depth", False)
    tg_llama = "tg_bench" if depth_ok else "tg_harness"

    rows = []  # (workload, {mode: (sonde key, llama key)})
    for n in lengths:
        rows.append((f"prefill {n}, last logit", {m: (("sonde", f"pp_last_{m}_{n}"), ("llama", f"pp_last_{g}_{n}"))
                                                  for m, g in MODE_GGUF.items()}))
    for n in lengths:
        rows.append((f"prefill {n}, all logits", {m: (("sonde", f"pp_all_{m}_{n}"), ("llama", f"pp_all_{g}_{n}"))
                                                  for m, g in MODE_GGUF.items()}))
    dt, dd = meta.get("decode_tokens", "?"), meta.get("decode_depth", "?")
    rows.append((f"decode {dt} after {dd}", {m: (("sonde", f"tg_{m}"), ("llama", f"{tg_llama}_{g}"))
                                             for m, g in MODE_GGUF.items()}))

    cpu = meta.get("cpu", {})
    print()
    print(f"## sonde / llama.cpp, {meta.get('date_utc', '?')}")
    print(f"CPU: {cpu.get('model_name', '?')} (family {cpu.get('family', '?')} model {cpu.get('model', '?')}, "
          f"{cpu.get('cores', '?')} cores); flags: {' '.join(cpu.get('flags', []))}; "
          f"absent: {' '.join(cpu.get('absent', [])) or '-'}")
    print(f"llama.cpp {meta.get('llama_commit', '?')}; {meta.get('sonde_version', 'sonde')} ({meta.get('sonde', '')}, built {meta.get('sonde_built', '?')}, "
          f"backend {meta.get('sonde_backend', '?')}); {meta.get('threads', '?')} threads; "
          f"rounds: {meta.get('rounds', '?')}, timed runs per command: {meta.get('repeat', '?')}; llama.cpp n_ubatch "
          f"{'= the prompt' if meta.get('ubatch', 'n') == 'n' else meta.get('ubatch')}; "
          f"load {meta.get('load_at_start', '?')} at the start, {meta.get('load_at_end', '?')} at the end")
    isas = sorted({str(j.get("isa")) for j in raw.values()})
    commits = sorted({t[0].get("build_commit", "?") for f in (out / "raw").glob("r*_llama_*.out")
                      for t in [json_list(f)] if t})
    print(f"sonde kernels (bench's isa): {', '.join(isas) or '?'}; llama-bench build_commit: {', '.join(commits) or '?'}")
    print(f"decode against llama.cpp: {'llama-bench -p 0 -n %s -d %s' % (dt, dd) if depth_ok else 'the harness (%s single-token decodes after a %s-token prompt; this llama-bench has no -d)' % (dt, dd)}")
    print()
    print("ratio sonde / llama.cpp: median over rounds (min-max of the per-round ratios); > 1 is sonde faster; ! = a disturbed command")
    print()
    heads = [f"{m} / {g}" for m, g in MODE_GGUF.items()]
    print("| workload | " + " | ".join(heads) + " |")
    print("|---|" + "---|" * len(heads))
    summary_ratios = {}
    for label, cells in rows:
        line = []
        for m, (sk, lk) in cells.items():
            r = ratio(per.get(sk), per.get(lk))
            mark = "!" if (sk in bad_keys or lk in bad_keys) else ""
            if r:
                summary_ratios[f"{label} | {m} / {MODE_GGUF[m]}"] = {**r, "disturbed": bool(mark)}
                line.append(f"**{r['median']:.2f}** ({r['min']:.2f}-{r['max']:.2f}){mark}")
            else:
                line.append("-")
        print(f"| {label} | " + " | ".join(line) + " |")

    print()
    print("tokens/s: median over rounds (min-max of the round medians)")
    print()
    cols = [("sonde f32", "sonde", "{w}_f32"), ("sonde bf16", "sonde", "{w}_bf16"),
            ("sonde int8", "sonde", "{w}_int8"), ("llama.cpp BF16", "llama", "{l}_BF16"),
            ("llama.cpp Q8_0", "llama", "{l}_Q8_0")]
    print("| workload | " + " | ".join(c[0] for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    summary_ts = {}
    work = [(f"prefill {n}, last logit", "pp_last", n) for n in lengths] + \
           [(f"prefill {n}, all logits", "pp_all", n) for n in lengths]
    for label, pre, n in work:
        line = []
        for cname, eng, pat in cols:
            key = (eng, pat.format(w=pre, l=pre) + f"_{n}")
            line.append(cell(per, key, bad_keys, summary_ts, f"{label} | {cname}"))
        print(f"| {label} | " + " | ".join(line) + " |")
    line = []
    for cname, eng, pat in cols:
        key = (eng, pat.format(w="tg", l=tg_llama))
        line.append(cell(per, key, bad_keys, summary_ts, f"decode {dt} after {dd} | {cname}"))
    print(f"| decode {dt} after {dd} | " + " | ".join(line) + " |")
    if not depth_ok:
        line = ["", "", ""]
        for cname, eng, pat in cols[3:]:
            line.append(cell(per, ("llama", pat.format(l="tg_bench")), bad_keys, summary_ts,
                             f"decode {dt} after 0 (llama-bench) | {cname}"))
        print(f"| llama-bench -n {dt} (no -d: after 0 tokens, not compared) | " + " | ".join(line) + " |")

    print()
    dream = meta.get("dream_preset", "?")
    print(f"Dream diffusion step, sonde only (llama.cpp has no Dream): {dream} preset, canvas "
          f"{meta.get('dream_tokens', '?')} tokens (half prompt, half masks)")
    print()
    print("| mode | seconds per step, median (min-max) | canvas tokens/s |")
    print("|---|---|---|")
    for m in MODE_GGUF:
        key = ("sonde", f"dream_{m}")
        if key not in per:
            continue
        secs = {r: raw[("sonde", key[1], r)]["median_seconds"] for r in per[key]}
        s = stats(secs)
        mark = "!" if key in bad_keys else ""
        summary_ts[f"dream step | sonde {m}"] = {**stats(per[key]), "seconds": s, "disturbed": bool(mark)}
        print(f"| {m} | {s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f}){mark} | {statistics.median(per[key].values()):.1f} |")

    agree = json.loads((out / "agreement" / "agreement.json").read_text()) \
        if (out / "agreement" / "agreement.json").exists() else None
    if agree:
        print()
        print(f"logits agreement before timing ({len(agree['ids'])} random ids, every position; "
              f"bound: argmax equal at >= {agree['min_argmax']:.0%} of the checked pairs' positions): "
              + ("PASS" if not agree["failed"] else "FAILED: " + "; ".join(agree["failed"])))
        print()
        print("| logits | against | norm. max err | rel. RMS | argmax equal |")
        print("|---|---|---|---|---|")
        for r in agree["rows"]:
            print(f"| {r['logits']} | {r['against']}{' (checked)' if r.get('checked') else ''} | "
                  f"{r['norm_max_err']:.2e} | {r['rel_rms']:.2e} | {r['argmax_equal']}/{r['positions']} |")

    print()
    n_bad = [e for e in entries if e["tag"] in bad]
    print(f"{len(n_bad)} of {len(entries)} timed commands ran beside more than {a.disturbed} s of other processes' "
          "CPU or failed (log.jsonl has each one's load and the top other processes):")
    for e in n_bad:
        top = ", ".join(f"{name} {s} s" for s, name in e.get("foreign_top", [])[:3])
        print(f"  {e['tag']}: rc {e['rc']}, foreign {e['foreign_cpu']} s in {e['seconds']} s, load "
              f"{e['load_before']} -> {e['load_after']}; {top}")
    (out / "summary.json").write_text(json.dumps({"meta": meta, "ratios": summary_ratios, "tokens_per_s": summary_ts,
                                                  "agreement": agree, "disturbed": sorted(bad)}, indent=1))
    print(f"\nwrote {out / 'summary.json'}")


def json_list(f: Path) -> list:
    """llama-bench's -o json output (a list of tests), or [] for anything else."""
    try:
        j = json.loads(f.read_text())
    except (json.JSONDecodeError, OSError):
        return []
    return j if isinstance(j, list) else []


def cell(per, key, bad_keys, summary, label) -> str:
    if key not in per:
        return "-"
    s = stats(per[key])
    mark = "!" if key in bad_keys else ""
    summary[label] = {**s, "disturbed": bool(mark)}
    return f"{s['median']:.1f} ({s['min']:.1f}-{s['max']:.1f}){mark}"


if __name__ == "__main__":
    main()
