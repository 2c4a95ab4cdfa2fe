"""compare_features.py WHOLE JOINED JOINED_ACTS: a data-parallel run's feature dashboard file
(JOINED, the features sink's run.h5) equals one process's (WHOLE): every statistic, histogram and
top context exactly, the sums (and the means made of them) to rounding (1e-12 relative: the ranks'
partial sums are added, not the rows one by one), the prompts and the commit mark. top_row numbers
rows as the joined activation file does (its parts concatenated), so each entry is checked there:
the row has the entry's prompt, position and step, and its sparse feature value is the entry's.
With --exact-sums the sums and means too must be equal bit for bit: they are when every partial
sum is exact in double (f32 values of a few binades over some thousand rows need fewer than 53
bits), as in dp_batch_test.sh's features_kill case."""
import sys
import h5py
import numpy as np

exact_sums = "--exact-sums" in sys.argv[4:]
whole, joined, acts = (h5py.File(p, "r") for p in sys.argv[1:4])
for a in ("schema", "complete", "top_n", "window"):
    assert whole.attrs[a] == joined.attrs[a], a
assert joined.attrs["complete"] == 1 and joined.attrs["world_size"] > 1
for d in ("progress/mark", "prompts/prompt_idx", "prompts/id_bytes", "prompts/id_offsets"):
    assert np.array_equal(whole[d][:], joined[d][:]), d
assert sorted(whole["features"]) == sorted(joined["features"])
entries = 0
for hook in whole["features"]:
    w, j = whole["features"][hook], joined["features"][hook]
    assert sorted(w) == sorted(j), hook
    for d in w:
        x, y = w[d][:], j[d][:]
        if d in ("sum", "mean_active") and not exact_sums:
            np.testing.assert_allclose(y, x, rtol=1e-12, err_msg=f"{hook}/{d}")
        elif d != "top_row":
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f"{hook}/{d}"
    csr = acts["sparse"][hook]
    indptr, indices, values = csr["indptr"][:], csr["indices"][:], csr["values"][:]
    rows = {c: acts["rows"][c][:] for c in ("prompt_idx", "pos", "step")}
    top_row = j["top_row"][:]
    for f, k in zip(*np.nonzero(top_row >= 0)):
        r = top_row[f, k]
        assert (rows["prompt_idx"][r], rows["pos"][r], rows["step"][r]) == \
            (j["top_prompt_idx"][f, k], j["top_pos"][f, k], j["top_step"][f, k]), f"{hook} feature {f} entry {k}"
        a, b = indptr[r], indptr[r + 1]
        hit = np.flatnonzero(indices[a:b] == f)
        assert len(hit) == 1 and values[a + hit[0]] == j["top_value"][f, k], f"{hook} feature {f} entry {k} value"
        entries += 1
    assert np.array_equal(top_row >= 0, w["top_row"][:] >= 0), hook
assert entries > 0
print(f"feature files equal ({entries} top entries found in the joined activations)")
