#!/usr/bin/python3
"""Reads a streaming sink file with stock h5py and compares it with an uninterrupted run's file.

Usage: check_stream_h5py.py FILE REFERENCE
A complete FILE (attribute complete == 1) must equal REFERENCE dataset by dataset, bit for bit.
An incomplete one (killed, then `h5clear -s --increment`) must hold at least the rows its
/progress/mark commits, and those must equal REFERENCE's. Prints "ok" or what differs (exit 1).
"""
import sys

import h5py
import numpy as np

RAGGED = {"token_ids": "token_offsets", "canvas": "canvas_offsets"}


def datasets(f):
    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return names


def same_bits(a, b):
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def committed_length(name, mark, ref):
    group, leaf = name.split("/", 1)
    if group in ("acts", "rows"):
        return int(mark["rows"])
    count = int(mark["prompts"] if group == "prompts" else mark["steps"])
    if leaf.endswith("_offsets"):
        return count + 1
    offsets = RAGGED.get(leaf) or (leaf[: -len("_bytes")] + "_offsets" if leaf.endswith("_bytes") else None)
    return int(ref[group + "/" + offsets][count]) if offsets else count


def main(path, ref_path):
    errors = []
    with h5py.File(path, "r") as f, h5py.File(ref_path, "r") as ref:
        complete = int(f.attrs["complete"]) == 1
        mark = f["progress/mark"][0]
        for name in datasets(ref):
            got, want = f[name][...], ref[name][...]
            if name.startswith("progress"):
                continue
            if complete:
                if not same_bits(got, want):
                    errors.append(name + " differs")
                continue
            n = committed_length(name, mark, ref)
            if len(got) < n or not same_bits(got[:n], want[:n]):
                errors.append("%s: committed %d rows differ (file has %d)" % (name, n, len(got)))
        if complete and not same_bits(f["progress/mark"][...], ref["progress/mark"][...]):
            errors.append("progress/mark differs")
        if not complete and int(mark["prompts"]) <= 0:
            errors.append("no prompts committed: kill too early for this check")
        if f["acts/blocks.0.hook_resid_post"].dtype != np.float32:
            errors.append("bf16 acts do not read as float32")
    print("\n".join(errors) if errors else "ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
