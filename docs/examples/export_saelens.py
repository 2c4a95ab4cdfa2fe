#!/usr/bin/env python3
"""Export one hook of a sonde activation file to the flat layout SAE trainers read.

usage: export_saelens.py FILE.h5 HOOK OUT.npz [--kinds 0,1]
Writes OUT.npz with `activations` [N, d] float32 (rows of every prompt, in file order, row
shape flattened), `token_ids` [N] int32, `prompt_idx` [N] int64 and `pos` [N] int32. SAELens
and similar trainers take `activations` as the [N, d] training matrix; `token_ids` lets you
filter or label rows. --kinds keeps only rows of those /rows/kind values (0 prompt,
1 generated, 2 special, 3 masked, 4 committed). Only rows up to /progress/mark are used when a
streaming file is read mid-run.
"""
import argparse

import h5py
import numpy as np


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
    with h5py.File(a.file, "r") as f:
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
