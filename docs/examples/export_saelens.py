#!/usr/bin/env python3
"""Export one hook of a sonde activation file to the flat layout SAE trainers read.

usage: export_saelens.py FILE.h5 HOOK OUT.npz [--kinds 0,1]
Writes OUT.npz with `activations` [N, d] float32 (rows of every prompt, in file order, row
shape flattened), `token_ids` [N] int32, `prompt_idx` [N] int64 and `pos` [N] int32. SAELens
and similar trainers take `activations` as the [N, d] training matrix; `token_ids` lets you
filter or label rows. --kinds keeps only rows of those /rows/kind values (0 prompt,
1 generated, 2 special, 3 masked, 4 committed). A file that `sonde batch` is still writing, or
that was killed, is opened as an SWMR reader and only rows up to /progress/mark (its last
checkpoint) are used.
"""
import argparse

import h5py
import numpy as np


def open_h5(path):
    """SWMR read for a file being written or killed (it also skips the writer's open-for-write
    flag); a one-shot file written without SWMR opens normally."""
    try:
        return h5py.File(path, "r", swmr=True)
    except (OSError, ValueError):
        return h5py.File(path, "r")


def committed_rows(f):
    if "progress" in f and "mark" in f["progress"]:
        return int(f["progress"]["mark"]["rows"])
    return f["rows"]["pos"].shape[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("hook")
    ap.add_argument("out")
    ap.add_argument("--kinds", default="")
    a = ap.parse_args()
    with open_h5(a.file) as f:
        n = committed_rows(f)
        acts = np.asarray(f["acts"][a.hook][:n], dtype=np.float32)
        acts = acts.reshape(n, -1)
        keep = np.ones(n, dtype=bool)
        if a.kinds:
            keep = np.isin(f["rows"]["kind"][:n], [int(k) for k in a.kinds.split(",")])
        np.savez(a.out, activations=acts[keep], token_ids=f["rows"]["token_id"][:n][keep].astype(np.int32),
                 prompt_idx=f["rows"]["prompt_idx"][:n][keep], pos=f["rows"]["pos"][:n][keep])
    print(f"wrote {a.out}: {int(keep.sum())} rows x {acts.shape[1]}")


if __name__ == "__main__":
    main()
