"""compare_h5.py ONE TP TOL: every dataset of ONE (a one-process file) is in TP (a tensor-parallel
run's) with the same shape and dtype; integer and byte datasets are equal, float ones within TOL
of their largest magnitude (max |a - b| / max |a|). Prints the worst float difference. Exit 1 on
the first difference."""
import sys
import h5py
import numpy as np

one, tp = (h5py.File(p, "r") for p in sys.argv[1:3])
tol = float(sys.argv[3])
worst, count = (0.0, ""), 0


def visit(name, a):
    global worst, count
    if not isinstance(a, h5py.Dataset):
        return
    assert name in tp, f"{name} missing"
    b = tp[name]
    assert a.shape == b.shape and a.dtype == b.dtype, f"{name}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    x, y = a[()], b[()]
    count += 1
    if a.dtype.kind == "f":
        x, y = x.astype(np.float64), y.astype(np.float64)
        d = float(np.max(np.abs(x - y))) / max(float(np.max(np.abs(x))), 1e-30) if x.size else 0.0
        if d > worst[0]:
            worst = (d, name)
        assert d <= tol, f"{name}: differs by {d:.3g} of its largest magnitude (tolerance {tol})"
    else:
        assert np.array_equal(x, y), f"{name} differs"


one.visititems(visit)
assert count > 0, "no datasets"
print(f"{count} datasets equal within {tol}; worst {worst[0]:.3g} ({worst[1]})")
