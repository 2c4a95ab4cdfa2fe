#!/usr/bin/env python3
"""Rows of one prompt and one hook from a sonde activation file (docs/capture.md).

usage: read_dump.py FILE.h5 HOOK PROMPT_IDX
Prints the rows' shape, positions, token ids, steps and kinds, one line per row. Only stock
h5py and numpy are needed (bf16/f16 files read as float32/float16).
"""
import sys

import h5py
import numpy as np


def prompt_rows(f, hook, prompt_idx):
    """(activations [n, *shape], rows table slice) of one prompt for one hook."""
    P = f["prompts"]
    where = np.nonzero(P["prompt_idx"][:] == prompt_idx)[0]
    if len(where) == 0:
        raise SystemExit(f"prompt_idx {prompt_idx} is not in the file")
    p = int(where[0])
    start, count = int(P["row_start"][p]), int(P["row_count"][p])
    acts = f["acts"][hook][start:start + count]
    rows = {k: f["rows"][k][start:start + count] for k in ("pos", "token_id", "step", "kind")}
    return acts, rows


def main():
    path, hook, prompt_idx = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with h5py.File(path, "r") as f:
        acts, rows = prompt_rows(f, hook, prompt_idx)
        print(f"{hook} prompt {prompt_idx}: {acts.shape} {acts.dtype}")
        for i in range(len(acts)):
            print(f"pos {rows['pos'][i]} token {rows['token_id'][i]} step {rows['step'][i]} "
                  f"kind {rows['kind'][i]} norm {float(np.linalg.norm(acts[i])):.6g}")


if __name__ == "__main__":
    main()
