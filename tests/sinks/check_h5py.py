#!/usr/bin/python3
"""Reads a file written by sink_tests with stock h5py and checks it independently of sonde.

Usage: check_h5py.py FILE DTYPE HOOK... -- TEXT_HEX...
HOOKs are in the order of scenario_hooks() (their index h enters the value formula); TEXT_HEX are
the prompts' texts as hex-encoded UTF-8. Prints "ok" and exits 0, or prints what differs and exits 1.
The value formula and rounding are re-implemented here with numpy: keep act_value() in
tests/sinks/scenario.h and value() below in sync.
"""
import math
import sys

import h5py
import numpy as np


def value(h, p, pos, c):
    if c == 0:
        return 1.0 + math.ldexp(2.0 * pos + 1.0, -8)
    base = ((h * 131 + p * 37 + pos * 11 + c) * 0.37 - 50.0) / (1.0 + c % 5)
    return math.ldexp(base, (c % 7) * 4 - 14)


def stored(x32, dtype):
    """What a reader gets back: f32 as is, f16 as numpy float16, bf16 rounded to nearest even, as float32."""
    if dtype == "f16":
        return x32.astype(np.float16)
    if dtype == "bf16":
        bits = x32.view(np.uint32).astype(np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return bits.astype(np.uint32).view(np.float32)
    return x32


def read_every_dataset(f):
    names = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    for name in names:
        f[name][()]
    return names


def ragged(group, field, p):
    offsets = group[field + "_offsets"][:]
    return bytes(group[field + "_bytes"][offsets[p]:offsets[p + 1]]).decode("utf-8")


def check(path, dtype, hooks, texts):
    errors = []
    with h5py.File(path, "r") as f:
        names = read_every_dataset(f)
        if f.attrs["schema"] != "sonde.acts/1" or int(f.attrs["complete"]) != 1:
            errors.append("root attributes: schema=%r complete=%r" % (f.attrs["schema"], f.attrs["complete"]))
        prompt_idx, pos = f["rows/prompt_idx"][:], f["rows/pos"][:]
        for h, hook in enumerate(hooks):
            ds = f["acts"][hook]
            row_shape = tuple(int(d) for d in ds.attrs["row_shape"])
            width = int(np.prod(row_shape))
            want = np.array([[value(h, int(p), int(q), c) for c in range(width)] for p, q in zip(prompt_idx, pos)],
                            dtype=np.float64).astype(np.float32)
            want = stored(want, dtype).reshape((len(pos),) + row_shape)
            got = ds[:]
            if ds.attrs["dtype"] != dtype or got.dtype != want.dtype or got.shape != want.shape:
                errors.append("%s: dtype attr %r, read %s %s, want %s %s" % (hook, ds.attrs["dtype"], got.dtype,
                                                                            got.shape, want.dtype, want.shape))
            elif not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
                bad = np.argwhere(got != want)[0]
                errors.append("%s: at %s read %r, want %r" % (hook, bad, got[tuple(bad)], want[tuple(bad)]))
            selection = ds[f["prompts/row_start"][1]:f["prompts/row_start"][1] + f["prompts/row_count"][1]]
            if not np.array_equal(selection, want[prompt_idx == f["prompts/prompt_idx"][1]]):
                errors.append("%s: rows of the second prompt differ" % hook)
        for p, text in enumerate(texts):
            if ragged(f["prompts"], "text", p) != text:
                errors.append("prompt %d text %r, want %r" % (p, ragged(f["prompts"], "text", p), text))
    print("\n".join(errors) if errors else "ok (%d datasets read)" % len(names))
    return not errors


def main():
    path, dtype, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    sep = rest.index("--")
    texts = [bytes.fromhex(t).decode("utf-8") for t in rest[sep + 1:]]
    return 0 if check(path, dtype, rest[:sep], texts) else 1


if __name__ == "__main__":
    sys.exit(main())
