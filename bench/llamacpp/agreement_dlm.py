#!/usr/bin/python3
"""Token agreement between `sonde generate` and llama.cpp's `llama-diffusion-cli` on one Dream or
LLaDA checkpoint and its GGUF (gguf_convert_dlm.py), before anything is timed.

Both engines decode the same prompt greedily with the same steps; llama-diffusion-cli prints text
only, so sonde's completion ids are rendered the way llama.cpp renders them (byte-level BPE,
special tokens dropped: common_detokenize(..., special=false)) and the two byte strings compared.

Two settings are comparable token for token; on others the engines run different algorithms:
- one-step: steps = 1; every masked slot takes its argmax from one forward (llama.cpp: eps schedule,
  the only step is the last, which commits all; sonde: exact mode). This checks the forward
  (weights, RoPE layout, logit shift, tokenizer, prompt).
- left-to-right: block length 1 and one step per block, so every step commits the next slot's
  argmax (llama.cpp: --diffusion-block-length 1 --diffusion-steps P+G, its block count being the
  whole canvas's; sonde: Dream --diffusion-mode block --block-size 1, LLaDA --block-length 1).
  This checks a G-step trajectory over a changing canvas.
llama-diffusion-cli's greedy needs --temp 0 --top-k 1 --top-p 1: at --temp 0 its sampler chain
still ends in a random draw (llama_sampler_init_dist) over what top-k/top-p keep. With top-k 1
every candidate's "confidence" is then 1 (a one-token distribution), so with more than one slot per
step it commits the lowest masked slots first, whatever the model's confidence: Dream's and LLaDA's
confidence ranking (entropy, low_confidence) is not reproducible there, and is not compared.

usage: agreement_dlm.py --llama BIN_DIR --sonde SONDE --model DIR --gguf FILE
                        [--prompt TEXT] [--new-tokens 16] [--threads 2] [--json OUT]
exit 1 when a setting's text differs.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path


def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: printable bytes stand for themselves, the others are
    shifted to code points from 256 up, in byte order (Radford et al. 2019, the encoder's
    bytes_to_unicode table)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def render(ids: list[int], tokenizer: Path) -> bytes:
    """llama.cpp's common_detokenize(vocab, ids, special=false) for a gpt2 vocabulary."""
    tok = json.loads(tokenizer.read_text(encoding="utf-8"))
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    dec = byte_decoder()
    out = bytearray()
    for i in ids:
        if i in added:
            if not added[i].get("special"):
                out += added[i]["content"].encode("utf-8")
        elif i in by_id:
            out += bytes(dec[c] for c in by_id[i])
    return bytes(out)


def llama_text(res: subprocess.CompletedProcess) -> tuple[bytes, float]:
    """The generated text llama-diffusion-cli prints after its timing line, and its ms per step."""
    both = res.stdout + res.stderr
    # Newer trees (2555826) prefix every log line with its time and level ("0.08.923.707 I ").
    m = re.search(rb"total time: [0-9.]+ms, time per step: ([0-9.]+)ms[^\n]*\n(?:[0-9.]+ I )?\n(.*)\n", both, re.S)
    if not m:
        raise SystemExit(f"agreement_dlm: no output in llama-diffusion-cli's log:\n{both[-2000:].decode(errors='replace')}")
    return m.group(2), float(m.group(1))


def run(cmd: list, what: str) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, timeout=3600)
    if res.returncode != 0:
        raise SystemExit(f"agreement_dlm: {what} failed (exit {res.returncode}):\n"
                         f"{(res.stdout + res.stderr)[-2000:].decode(errors='replace')}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", type=Path, required=True, help="directory holding llama-diffusion-cli")
    ap.add_argument("--sonde", type=Path, required=True)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    cfg = json.loads((a.model / "config.json").read_text())
    llada = cfg.get("model_type") == "llada"
    g = a.new_tokens

    prompt_ids = json.loads(run([a.sonde, "tokenize", "--model", a.model, "--text", a.prompt], "sonde tokenize").stdout)["ids"]
    p = len(prompt_ids)
    canvas = p + g
    greedy = ["--temp", 0, "--top-k", 1, "--top-p", 1, "--seed", 0]
    base_llama = [a.llama / "llama-diffusion-cli", "-m", a.gguf, "-p", a.prompt, "-ub", canvas, "-b", canvas,
                  "-c", canvas, "-t", a.threads, *greedy]
    base_sonde = [a.sonde, "generate", "--model", a.model, "--prompt", a.prompt, "--max-new-tokens", g, "--json",
                  "--temperature", 0, "--threads", a.threads]
    settings = {
        "one-step": ([*base_llama, "--diffusion-steps", 1, "--diffusion-eps", 0.001],
                     [*base_sonde, "--steps", 1]),
        "left-to-right": ([*base_llama, "--diffusion-steps", canvas, "--diffusion-block-length", 1],
                          [*base_sonde, "--steps", g,
                           *(["--block-length", 1] if llada else ["--diffusion-mode", "block", "--block-size", 1])]),
    }
    report, ok = {"model": str(a.model), "gguf": str(a.gguf), "prompt": a.prompt, "prompt_tokens": p,
                  "new_tokens": g}, True
    for name, (lcmd, scmd) in settings.items():
        ltext, _ = llama_text(run(lcmd, "llama-diffusion-cli"))
        sj = json.loads(run(scmd, "sonde generate").stdout)
        # llama-diffusion-cli prints the text with printf's %s, which stops at a NUL byte (a random
        # model emits the token for byte 0 now and then): compare up to the first one.
        stext = render(sj["completion_ids"], a.model / "tokenizer.json").split(b"\0")[0]
        same = ltext == stext
        ok &= same
        report[name] = {"same": same, "sonde_ids": sj["completion_ids"], "sonde_text": stext.decode(errors="replace"),
                        "llama_text": ltext.decode(errors="replace")}
        print(f"{name}: {'same text' if same else 'DIFFERENT'} ({g} new tokens after {p} prompt tokens; "
              f"sonde ids {sj['completion_ids']})")
        if not same:
            print(f"  sonde: {stext!r}\n  llama: {ltext!r}")
    if a.json:
        a.json.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
