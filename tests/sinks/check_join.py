"""check_join.py WHOLE JOINED [TOL]: every prompt of WHOLE (one process's file) reads the same from
JOINED (a data-parallel run's run.h5) through the reading recipe of docs/hdf5-layout.md and
through /index: activations (dense, and sparse under /sparse), rows, every per-prompt field and the
diffusion steps. Exit 1 on the
first difference. Activations must be bit-equal, or with TOL within TOL of the largest magnitude
of the hook's rows (a backend that is not batch-invariant); the largest difference is printed."""
import sys
import h5py
import numpy as np

whole, joined = (h5py.File(p, "r") for p in sys.argv[1:3])
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
worst = 0.0
assert joined.attrs["schema"] == "sonde.acts/1" and joined.attrs["complete"] == 1


def entry(f, p):
    return int(np.flatnonzero(f["prompts/prompt_idx"][:] == p)[0])


def ragged(f, group, values, offsets, e):
    off = f[f"{group}/{offsets}"]
    return f[f"{group}/{values}"][off[e]:off[e + 1]]


def steps_of(f, p):
    if "steps" not in f:
        return None
    sel = np.flatnonzero(f["steps/prompt_idx"][:] == p)
    canv = [ragged(f, "steps", "canvas", "canvas_offsets", s).tolist() for s in sel]
    return f["steps/step"][:][sel].tolist(), f["steps/t"][:][sel].tolist(), canv


def read_whole(name, obj):  # every dataset reads whole (a virtual one from every part)
    if isinstance(obj, h5py.Dataset):
        v = obj[()]
        assert v.shape == obj.shape, name


joined.visititems(read_whole)
n = len(whole["prompts/prompt_idx"])
assert len(joined["prompts/prompt_idx"]) == n, "prompt count"
assert sorted(whole["sparse"] if "sparse" in whole else []) == sorted(joined["sparse"] if "sparse" in joined else [])
assert sorted(joined["index/prompt_idx"][:].tolist()) == joined["index/prompt_idx"][:].tolist()
for p in whole["prompts/prompt_idx"][:]:
    a, b = entry(whole, p), entry(joined, p)
    sa, ca = whole["prompts/row_start"][a], whole["prompts/row_count"][a]
    sb, cb = joined["prompts/row_start"][b], joined["prompts/row_count"][b]
    k = int(np.flatnonzero(joined["index/prompt_idx"][:] == p)[0])
    assert (joined["index/row_start"][k], joined["index/row_count"][k], joined["index/entry"][k]) == (sb, cb, b), p
    assert ca == cb, f"prompt {p}: {ca} vs {cb} rows"
    for hook in whole["acts"]:
        x, y = whole["acts"][hook][sa:sa + ca], joined["acts"][hook][sb:sb + cb]
        assert x.dtype == y.dtype and x.shape == y.shape, f"prompt {p} {hook}"
        if not np.array_equal(x, y):
            d = float(np.max(np.abs(x - y))) / max(float(np.max(np.abs(x))), 1e-30)
            worst = max(worst, d)
            assert d <= tol, f"prompt {p} {hook}: differs by {d:.3g} of its largest magnitude"
        assert joined["acts"][hook].attrs["dtype"] == whole["acts"][hook].attrs["dtype"]
    for col in whole["rows"]:
        assert np.array_equal(whole["rows"][col][sa:sa + ca], joined["rows"][col][sb:sb + cb]), f"prompt {p} rows/{col}"
    for col in ("seed",):
        assert whole["prompts"][col][a] == joined["prompts"][col][b]
    for values, offsets in (("id_bytes", "id_offsets"), ("text_bytes", "text_offsets"),
                            ("completion_bytes", "completion_offsets"),
                            ("finish_reason_bytes", "finish_reason_offsets"), ("token_ids", "token_offsets")):
        assert np.array_equal(ragged(whole, "prompts", values, offsets, a), ragged(joined, "prompts", values, offsets, b)), \
            f"prompt {p} {values}"
    assert steps_of(whole, p) == steps_of(joined, p), f"prompt {p} steps"
    for hook in (whole["sparse"] if "sparse" in whole else []):
        x, y = whole["sparse"][hook], joined["sparse"][hook]
        assert dict(x.attrs) == dict(y.attrs), f"sparse/{hook} attributes"
        px, py = x["indptr"][sa:sa + ca + 1], y["indptr"][sb:sb + cb + 1]
        assert np.array_equal(np.diff(px), np.diff(py)), f"prompt {p} sparse/{hook} row lengths"
        for c in ("indices", "values"):
            assert np.array_equal(x[c][px[0]:px[-1]], y[c][py[0]:py[-1]]), f"prompt {p} sparse/{hook}/{c}"
print(f"{n} prompts equal" + (f" (activations within {worst:.3g})" if worst else " (activations bit-equal)"))
