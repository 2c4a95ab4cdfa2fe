#!/usr/bin/python3
"""sonde against llama.cpp on the CPU, side by side (issue 28). Run through bench/vs_llamacpp.sh.

Steps, each skipped when its output is already there (WORK is kept between runs):
  1. llama.cpp: build LLAMA_SRC in --build-dir (default LLAMA_SRC/build) unless llama-bench and
     llama-quantize are there already (Release, GGML_NATIVE, OpenMP, static libraries, no curl,
     tests or server); compile harness.cpp against its static libraries.
  2. The checkpoint: sonde make-model qwen2.5-0.5b bf16 seed 0; to GGUF BF16 with llama.cpp's gguf-py
     (gguf_convert.py, verified byte for byte); Q8_0 with llama-quantize; a Dream checkpoint of
     --dream-preset for the sonde-only diffusion step.
  3. Agreement before timing: every position's logits over 24 random ids, sonde --compute f32, bf16
     and --weights q8 --compute int8 against the harness on BF16 and Q8_0 (agreement.py); exit 1
     below --min-argmax.
  4. Timing in alternating rounds (odd rounds llama.cpp first, even rounds sonde first): at each
     prefill length, llama-bench -p N -n 0 (last-position logits) against sonde bench --logits last,
     and the harness (one llama_decode of N tokens, logits at every position) against --logits all;
     decode; one Dream diffusion step (sonde only). Each command's raw output is kept in OUT/raw and
     OUT/log.jsonl has its load average and the CPU other processes used while it ran.
  5. report.py: the ratio table and OUT/summary.json.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

# sonde mode -> (sonde flags, the llama.cpp model it is compared with)
MODES = {"f32": (["--weights", "native", "--compute", "f32"], "BF16"),
         "bf16": (["--weights", "native", "--compute", "bf16"], "BF16"),
         "int8": (["--weights", "q8", "--compute", "int8"], "Q8_0")}
GGUFS = ("BF16", "Q8_0")


def say(msg: str) -> None:
    print(f"[vs_llamacpp {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    say("$ " + " ".join(map(str, cmd)))
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


# ---------------------------------------------------------------------------------------- host
def cpu_info() -> dict:
    text = Path("/proc/cpuinfo").read_text()
    first = text.split("\n\n", 1)[0]
    field = lambda k: (re.search(rf"^{k}\s*:\s*(.*)$", first, re.M) or [None, "?"])[1]  # noqa: E731
    flags = set(field("flags").split())
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni", "avx_vnni", "avx512_fp16"]
    wanted += sorted(f for f in flags if f.startswith("amx"))
    return {"model_name": field("model name"), "family": field("cpu family"), "model": field("model"),
            "stepping": field("stepping"), "cores": os.cpu_count(),
            "flags": [f for f in wanted if f in flags],
            "absent": [f for f in wanted + ["amx_bf16", "amx_int8"] if f not in flags]}


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def busy_seconds() -> float:
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / os.sysconf("SC_CLK_TCK")


def process_ticks() -> dict[int, tuple[str, int]]:
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            s = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        rest = s[s.rindex(")") + 2:].split()
        out[int(d)] = (comm, int(rest[11]) + int(rest[12]))  # utime + stime
    return out


def timed(cmd: list[str], out_dir: Path, tag: str, log) -> int:
    """Run one timed command; keep its stdout/stderr; log load and the other processes' CPU meanwhile."""
    me = os.getpid()
    t0, l0, b0 = time.time(), loadavg(), busy_seconds()
    p0 = process_ticks()
    c0 = os.times()
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=3600)
    c1 = os.times()
    t1, b1 = time.time(), busy_seconds()
    p1 = process_ticks()
    own = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
    hz = os.sysconf("SC_CLK_TCK")
    others = []
    for pid, (comm, ticks) in p1.items():
        if pid == me:
            continue
        d = (ticks - p0.get(pid, (comm, 0))[1]) / hz
        if d >= 0.05:
            others.append((round(d, 2), f"{comm}[{pid}]"))
    others.sort(reverse=True)
    (out_dir / f"{tag}.out").write_text(res.stdout)
    if res.stderr.strip():
        (out_dir / f"{tag}.err").write_text(res.stderr)
    entry = {"tag": tag, "rc": res.returncode, "seconds": round(t1 - t0, 2),
             "start": time.strftime("%H:%M:%S", time.localtime(t0)), "load_before": l0, "load_after": loadavg(),
             "foreign_cpu": round(max(0.0, (b1 - b0) - own), 2), "foreign_top": others[:4],
             "cmd": " ".join(map(str, cmd))}
    log.write(json.dumps(entry) + "\n")
    log.flush()
    flag = "" if entry["foreign_cpu"] <= 1.0 else f"  (others used {entry['foreign_cpu']} s CPU: disturbed)"
    say(f"{tag}: rc {res.returncode}, {entry['seconds']} s, load {l0} -> {entry['load_after']}{flag}")
    return res.returncode


# ------------------------------------------------------------------------------------ llama.cpp
def llama_commit(src: Path) -> str:
    try:
        h = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                           check=True).stdout.strip()
        # The worktree's files against HEAD's blob ids (hashing them: works in blobless or partial clones too).
        tree = subprocess.run(["git", "-C", str(src), "ls-tree", "-r", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
        blobs = {line.split("\t", 1)[1]: line.split()[2] for line in tree if line.split()[1] == "blob"
                 and not line.startswith("120000")}
        present = [f for f in blobs if (src / f).is_file()]
        hashes = subprocess.run(["git", "-C", str(src), "hash-object", "--no-filters", "--stdin-paths"],
                                input="\n".join(present) + "\n", capture_output=True, text=True,
                                check=True).stdout.split()
        differ = sum(blobs[f] != h for f, h in zip(present, hashes))
        missing = [f for f in blobs if not (src / f).is_file()]
        state = f", the worktree's {len(present)} files equal HEAD's" if not differ else \
            f", {differ} of {len(present)} tracked files differ from HEAD"
        if missing:
            state += f", {len(missing)} absent ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})"
        date = subprocess.run(["git", "-C", str(src), "log", "-1", "--format=%cs"], capture_output=True,
                              text=True).stdout.strip()
        return f"{h} ({date}{state})"
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown (not a git checkout)"


def builds_running_in(build: Path) -> list[str]:
    """Processes working in the build directory (a ninja or make of someone else's build)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{d}/cwd"))
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if (cwd == build or build in cwd.parents) and re.search(r"\b(ninja|make|cmake)\b", cmd):
            found.append(f"pid {d}: {cmd[:80]}")
    return found


def build_llama(src: Path, build: Path, jobs: int) -> None:
    bins = [build / "bin" / "llama-bench", build / "bin" / "llama-quantize"]
    running = builds_running_in(build)
    if running:
        raise SystemExit(f"vs_llamacpp: a build is running in {build} ({running[0]}); wait until it ends "
                         "or give another --build-dir")
    if all(b.exists() for b in bins):
        say(f"llama.cpp: using the existing build in {build}")
        return
    say(f"llama.cpp: building llama-bench and llama-quantize in {build}")
    run(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DGGML_OPENMP=ON",
         "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF"])
    run(["cmake", "--build", build, "--config", "Release", "-j", str(jobs), "--target", "llama-bench",
         "llama-quantize"])


def build_harness(src: Path, build: Path, out: Path) -> None:
    found = {Path(p).name: Path(p) for p in glob.glob(str(build / "**" / "lib*.a"), recursive=True)}
    need = ["libllama.a", "libggml.a", "libggml-base.a"]
    missing = [n for n in need if n not in found]
    if missing:
        raise SystemExit(f"vs_llamacpp: {', '.join(missing)} not found under {build} (a static build is needed:"
                         " BUILD_SHARED_LIBS=OFF)")
    backends = sorted(p for n, p in found.items() if n.startswith("libggml-") and n != "libggml-base.a")
    libs = [found["libllama.a"], found["libggml.a"], *backends, found["libggml-base.a"]]
    source = HERE / "harness.cpp"
    header = (src / "include" / "llama.h").read_text()
    defs = [d for d, key in (("-DHARNESS_MEMORY_API", "llama_memory_clear"), ("-DHARNESS_KV_SELF", "llama_kv_self_clear"),
                             ("-DHARNESS_FA_TYPE", "flash_attn_type")) if key in header]
    # What the harness was built from (another build directory's libraries mean another harness).
    made_from = json.dumps({"defs": defs, "files": [[str(p), p.stat().st_mtime] for p in [source, *libs]]})
    stamp = out.with_name(out.name + ".from.json")
    if out.exists() and stamp.exists() and stamp.read_text() == made_from:
        return
    run([os.environ.get("CXX", "g++"), "-O2", "-std=c++17", *defs, f"-I{src / 'include'}",
         f"-I{src / 'ggml' / 'include'}", source, "-o", out, "-Wl,--start-group", *libs, "-Wl,--end-group",
         "-fopenmp", "-lpthread", "-ldl", "-lm"])
    stamp.write_text(made_from)


def bench_supports_depth(bench: Path) -> bool:
    h = subprocess.run([str(bench), "--help"], capture_output=True, text=True)
    return bool(re.search(r"-d,\s*--n-depth", h.stdout + h.stderr))


# ------------------------------------------------------------------------------------ checkpoints
def make_models(a, bench_bin: Path) -> dict:
    w = a.work
    env = dict(os.environ, PYTHONPATH=str(a.llama_src / "gguf-py"))
    q05 = w / "q05"
    if not (q05 / "model.safetensors").exists():
        run([a.sonde, "make-model", "--arch", "qwen2", "--preset", "qwen2.5-0.5b", "--dtype", "bf16", "--seed", "0",
             "--out", q05, "--force"])
    bf16, q8 = w / "q05-BF16.gguf", w / "q05-Q8_0.gguf"
    verified = w / "q05-BF16.gguf.verified"  # written once the GGUF matched the safetensors byte for byte
    if not bf16.exists() or bf16.stat().st_mtime < (q05 / "model.safetensors").stat().st_mtime:
        run([PY, HERE / "gguf_convert.py", q05, bf16], env=env)  # converts, then verifies
        verified.write_text(f"{bf16} equals {q05 / 'model.safetensors'}\n")
    elif not verified.exists() or verified.stat().st_mtime < bf16.stat().st_mtime:
        run([PY, HERE / "gguf_convert.py", "--verify", q05, bf16], env=env)
        verified.write_text(f"{bf16} equals {q05 / 'model.safetensors'}\n")
    else:
        say(f"{bf16}: converted and verified byte for byte earlier ({verified})")
    if not q8.exists() or q8.stat().st_mtime < bf16.stat().st_mtime:
        run([bench_bin / "llama-quantize", bf16, q8, "Q8_0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dream = w / f"dream-{a.dream_preset}"
    if not (dream / "model.safetensors").exists():
        run([a.sonde, "make-model", "--arch", "dream", "--preset", a.dream_preset, "--dtype", "bf16", "--seed", "0",
             "--out", dream, "--force"])
    return {"q05": q05, "BF16": bf16, "Q8_0": q8, "dream": dream}


# ------------------------------------------------------------------------------------ agreement
def agreement(a, models: dict, harness: Path, out: Path) -> None:
    import numpy as np
    d = out / "agreement"
    d.mkdir(parents=True, exist_ok=True)
    ids = np.random.default_rng(24).integers(0, 151643, a.agree_tokens)
    ids_s = ",".join(map(str, ids))
    (d / "ids.txt").write_text(ids_s + "\n")
    files = []
    for mode, (flags, _) in MODES.items():
        f = d / f"sonde_{mode}.h5"
        run([a.sonde, "forward", "--model", models["q05"], "--backend", a.sonde_backend, "--threads", a.threads,
             *flags, "--ids", ids_s, "--out", f, "--overwrite"], stdout=subprocess.DEVNULL)
        files.append(f"sonde {mode}={f}")
    for g in GGUFS:
        f = d / f"llama_{g}.f32"
        run([harness, models[g], len(ids), "--threads", a.threads, "--ids", ids_s, "--dump", f],
            stdout=subprocess.DEVNULL)
        files.append(f"llama.cpp {g}={f}")
    pairs = [f"sonde {m}:llama.cpp {g}" for m, (_, g) in MODES.items()]
    res = subprocess.run([PY, HERE / "agreement.py", models["q05"], d / "ids.txt", *files,
                          *[x for p in pairs for x in ("--pair", p)], "--min-argmax", str(a.min_argmax),
                          "--json", d / "agreement.json"])
    if res.returncode != 0:
        raise SystemExit(1)


# ------------------------------------------------------------------------------------ timing
def llama_cmds(a, models, harness, bench, has_depth):
    T, R = str(a.threads), str(a.repeat)
    for n in a.lengths:
        ub = str(n if a.ubatch == "n" else min(n, int(a.ubatch)))
        for g in GGUFS:
            yield f"pp_last_{g}_{n}", [bench, "-m", models[g], "-t", T, "-p", n, "-n", "0", "-b", n, "-ub", ub,
                                       "-r", R, "-o", "json"]
            yield f"pp_all_{g}_{n}", [harness, models[g], n, "--threads", T, "--reps", R, "--ubatch", ub]
    for g in GGUFS:
        depth = ["-d", a.decode_depth] if has_depth else []
        yield f"tg_bench_{g}", [bench, "-m", models[g], "-t", T, "-p", "0", "-n", a.decode_tokens, *depth,
                                "-r", R, "-o", "json"]
        yield f"tg_harness_{g}", [harness, models[g], a.decode_tokens, "--depth", a.decode_depth, "--threads", T,
                                  "--reps", R]


def sonde_cmds(a, models):
    base = [a.sonde, "bench", "--backend", a.sonde_backend, "--threads", a.threads, "--repeat", a.repeat, "--json"]
    for n in a.lengths:
        for logits in ("last", "all"):
            for mode, (flags, _) in MODES.items():
                yield f"pp_{logits}_{mode}_{n}", [*base, "--model", models["q05"], *flags, "--mode", "prefill",
                                                  "--tokens", n, "--logits", logits]
    for mode, (flags, _) in MODES.items():
        yield f"tg_{mode}", [*base, "--model", models["q05"], *flags, "--mode", "decode", "--tokens",
                             a.decode_tokens, "--prompt-tokens", a.decode_depth]
    for mode, (flags, _) in MODES.items():
        yield f"dream_{mode}", [*base, "--model", models["dream"], *flags, "--mode", "diffusion-step", "--tokens",
                                a.dream_tokens]


def main() -> None:
    ap = argparse.ArgumentParser(prog="bench/vs_llamacpp.sh", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_src", type=Path, help="a llama.cpp source tree outside this repository")
    ap.add_argument("--build-dir", type=Path, help="its build directory (default LLAMA_SRC/build); "
                    "used as it is when llama-bench and llama-quantize are there")
    ap.add_argument("--work", type=Path, default=Path("/tmp/sonde-vs-llamacpp"),
                    help="checkpoints, GGUFs and the harness, kept between runs (default %(default)s)")
    ap.add_argument("--out", type=Path, help="this run's results (default WORK/run-<UTC time>)")
    ap.add_argument("--sonde", type=Path, default=Path(os.environ.get("SONDE", REPO / "build" / "bin" / "sonde")))
    ap.add_argument("--sonde-backend", default="threaded")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per command after one warm-up")
    ap.add_argument("--lengths", default="16,32,64,128,256,512,1024,2048")
    ap.add_argument("--ubatch", default="n", help="llama.cpp's n_ubatch: n (= the prompt, one ubatch, as sonde's "
                    "one forward; the default) or a number, e.g. 512 (llama-bench's default)")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--decode-depth", type=int, default=128, help="prompt tokens before the timed decode")
    ap.add_argument("--dream-preset", default="qwen2.5-0.5b", help="make-model --arch dream preset (dream-7b: 15 GB)")
    ap.add_argument("--dream-tokens", type=int, default=128, help="diffusion-step canvas (half prompt)")
    ap.add_argument("--agree-tokens", type=int, default=24)
    ap.add_argument("--min-argmax", type=float, default=0.9,
                    help="agreement bound: fraction of positions whose argmax must match (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="llama.cpp build jobs")
    ap.add_argument("--quick", action="store_true",
                    help="check the whole pipeline: lengths 16,64, 1 round, repeat 1, short decode and Dream step")
    a = ap.parse_args()
    if a.quick:
        a.lengths, a.rounds, a.repeat = "16,64", 1, 1
        a.decode_tokens, a.decode_depth, a.dream_tokens = 16, 32, 32
    a.lengths = [int(x) for x in str(a.lengths).split(",")]
    a.llama_src = a.llama_src.resolve()
    build = (a.build_dir or a.llama_src / "build").resolve()
    a.sonde = a.sonde.resolve()
    if not (a.llama_src / "include" / "llama.h").exists():
        raise SystemExit(f"vs_llamacpp: {a.llama_src} is not a llama.cpp source tree (no include/llama.h)")
    if a.llama_src == REPO or REPO in a.llama_src.parents:
        raise SystemExit("vs_llamacpp: give a llama.cpp tree outside this repository")
    if not os.access(a.sonde, os.X_OK):
        raise SystemExit(f"vs_llamacpp: no sonde program at {a.sonde} (--sonde or $SONDE)")
    a.work.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = (a.out or a.work / f"run-{stamp}").resolve()
    (out / "raw").mkdir(parents=True, exist_ok=True)

    build_llama(a.llama_src, build, a.jobs)
    harness = a.work / "harness"
    build_harness(a.llama_src, build, harness)
    bench = build / "bin" / "llama-bench"
    has_depth = bench_supports_depth(bench)
    commit = llama_commit(a.llama_src)
    say(f"llama.cpp {a.llama_src} at {commit}; llama-bench -d: {'yes' if has_depth else 'no (this version lacks it)'}")
    models = make_models(a, build / "bin")

    sonde_version = subprocess.run([str(a.sonde), "--version"], capture_output=True, text=True).stdout.strip()
    meta = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu_info(), "threads": a.threads, "rounds": a.rounds, "repeat": a.repeat, "lengths": a.lengths,
            "ubatch": a.ubatch, "decode_tokens": a.decode_tokens, "decode_depth": a.decode_depth,
            "llama_bench_depth": has_depth, "dream_preset": a.dream_preset, "dream_tokens": a.dream_tokens,
            "llama_src": str(a.llama_src), "llama_commit": commit, "sonde": str(a.sonde),
            "sonde_version": sonde_version, "sonde_built": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(a.sonde.stat().st_mtime)), "sonde_backend": a.sonde_backend, "quick": a.quick,
            "load_at_start": loadavg(), "min_argmax": a.min_argmax, "modes": {m: " ".join(f) for m, (f, _) in MODES.items()},
            "compared_with": {m: g for m, (_, g) in MODES.items()}}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))

    agreement(a, models, harness, out)
    if shutil.which("top"):
        top = subprocess.run(["top", "-bn1", "-w", "200"], capture_output=True, text=True).stdout.splitlines()[:15]
        (out / "top_at_start.txt").write_text("\n".join(top) + "\n")

    with open(out / "log.jsonl", "a") as log:
        for r in range(1, a.rounds + 1):
            order = ("llama", "sonde") if r % 2 == 1 else ("sonde", "llama")
            say(f"round {r} of {a.rounds}: {order[0]} first")
            for eng in order:
                cmds = llama_cmds(a, models, harness, bench, has_depth) if eng == "llama" else sonde_cmds(a, models)
                for name, cmd in cmds:
                    timed(cmd, out / "raw", f"r{r}_{eng}_{name}", log)
    meta["load_at_end"] = loadavg()
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    res = subprocess.run([PY, HERE / "report.py", out])
    say(f"results in {out}")
    sys.exit(res.returncode)


if __name__ == "__main__":
    main()
