#!/usr/bin/env python3
"""Rows of one prompt and one hook from a sonde activation file (docs/capture.md).

usage: read_dump.py FILE.h5 HOOK PROMPT_IDX
Prints the rows' shape, positions, token ids, steps and kinds, one line per row. Only stock
h5py and numpy are needed (bf16/f16 files read as float32/float16). Works on a file that
`sonde batch` is still writing or that was killed: it is opened as an SWMR reader, and only the
prompts up to /progress/mark (the last checkpoint) are read.
"""
import sys

import h5py
import numpy as np


def open_h5(path):
    """A file being written (or killed while writing) opens only as an SWMR reader, which also
    skips the "file is already open for write" flag a killed writer leaves; a one-shot file
    written without SWMR opens normally."""
    try:
        return h5py.File(path, "r", swmr=True)
    except (OSError, ValueError):
        return h5py.File(path, "r")


def committed_prompts(f):
    if "progress" in f and "mark" in f["progress"]:
        return int(f["progress"]["mark"]["prompts"])
    return f["prompts"]["prompt_idx"].shape[0]


def prompt_rows(f, hook, prompt_idx):
    """(activations [n, *shape], rows table slice) of one prompt for one hook."""
    P = f["prompts"]
    n = committed_prompts(f)
    where = np.nonzero(P["prompt_idx"][:n] == prompt_idx)[0]
    if len(where) == 0:
        raise SystemExit(f"prompt_idx {prompt_idx} is not in the file (or not yet committed)")
    p = int(where[0])
    start, count = int(P["row_start"][p]), int(P["row_count"][p])
    acts = f["acts"][hook][start:start + count]
    rows = {k: f["rows"][k][start:start + count] for k in ("pos", "token_id", "step", "kind")}
    return acts, rows


def main():
    path, hook, prompt_idx = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open_h5(path) as f:
        acts, rows = prompt_rows(f, hook, prompt_idx)
        print(f"{hook} prompt {prompt_idx}: {acts.shape} {acts.dtype}")
        for i in range(len(acts)):
            print(f"pos {rows['pos'][i]} token {rows['token_id'][i]} step {rows['step'][i]} "
                  f"kind {rows['kind'][i]} norm {float(np.linalg.norm(acts[i])):.6g}")


if __name__ == "__main__":
    main()
