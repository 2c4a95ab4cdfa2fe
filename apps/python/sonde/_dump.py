"""sonde.open_dump: a small reader over the `sonde.acts/1` HDF5 layout (docs/hdf5-layout.md)."""

import numpy as np

ROW_COLUMNS = ("prompt_idx", "pos", "token_id", "step", "kind", "fresh", "computed_step")


class SparseRows:
    """SAE feature activations of some rows in SciPy's CSR layout (docs/sae.md): row r's features
    are indices[indptr[r]:indptr[r+1]] with values data[...], shape (rows, n_cols). data is as
    stored: float32, float16, or with storage="bf16" the bits as uint16 (as dense arrays are).
    to_scipy() gives a scipy.sparse.csr_matrix (SciPy needed), toarray() a dense numpy array,
    both float32 (bf16 bits widened exactly)."""

    def __init__(self, data, indices, indptr, shape):
        self.data, self.indices, self.indptr, self.shape = data, indices, indptr, shape

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, rows):
        """The rows `rows` (a slice or integer indices) as another SparseRows."""
        rows = np.arange(self.shape[0])[rows]
        if np.ndim(rows) == 0:
            rows = np.asarray([rows])
        lengths = np.diff(self.indptr)[rows]
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        take = np.concatenate([np.arange(self.indptr[r], self.indptr[r + 1]) for r in rows]) if len(rows) else []
        take = np.asarray(take, dtype=np.int64)
        return SparseRows(self.data[take], self.indices[take], indptr, (len(rows), self.shape[1]))

    @staticmethod
    def concat(parts):
        """The rows of each part, one part after the other."""
        indptr, base = [np.zeros(1, np.int64)], 0
        for p in parts:
            indptr.append(np.asarray(p.indptr[1:], np.int64) + base)
            base += int(p.indptr[-1])
        return SparseRows(np.concatenate([p.data for p in parts]), np.concatenate([p.indices for p in parts]),
                          np.concatenate(indptr), (sum(p.shape[0] for p in parts), parts[0].shape[1]))

    def values(self):
        """data as float32: uint16 is bf16's bits (numpy has no bfloat16), widened exactly."""
        d = np.asarray(self.data)
        if d.dtype == np.uint16:
            return (d.astype(np.uint32) << 16).view(np.float32)
        return d.astype(np.float32, copy=False)

    def toarray(self):
        out = np.zeros(self.shape, np.float32)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        out[rows, self.indices] = self.values()
        return out

    def to_scipy(self):
        import scipy.sparse
        return scipy.sparse.csr_matrix((self.values(), self.indices, self.indptr), shape=self.shape)

    def __repr__(self):
        return f"SparseRows(shape={self.shape}, nnz={len(self.data)})"


def _string(f, group, name, i):
    off = f[group][f"{name}_offsets"]
    a, b = int(off[i]), int(off[i + 1])
    return bytes(f[group][f"{name}_bytes"][a:b]).decode("utf-8")


class Dump:
    """An activation file: `hooks` (name -> row shape), `attrs` (the run's metadata),
    `len(dump)` prompts; `prompt(i)`, `acts(hook, prompt=None)`, `rows(prompt=None)`, `steps(prompt)`,
    `logits` and `input_ids` (forward files). Reads lazily with h5py; a file still being written
    (SWMR) is read up to its last checkpoint."""

    def __init__(self, path):
        import h5py
        try:  # a streaming file may be open for SWMR writing
            self._f = h5py.File(path, "r", libver="latest", swmr=True)
        except OSError:
            self._f = h5py.File(path, "r")
        f = self._f
        try:
            schema = f.attrs.get("schema")
        except OSError:  # a killed writer's attributes, unreadable until h5clear (docs/hdf5-layout.md)
            schema = "sonde.acts/1" if "progress" in f else None
        if schema != "sonde.acts/1":
            self._f.close()
            raise ValueError(f"{path}: schema {schema!r} is not 'sonde.acts/1'")
        self.path = str(path)
        try:
            self.attrs = dict(f.attrs)
        except OSError:
            self.attrs = {}
        self.complete = bool(self.attrs.get("complete", 0))
        self.hooks = {name: tuple(d.shape[1:]) for name, d in f["acts"].items()} if "acts" in f else {}
        # Hooks stored sparse (--sae-sparse): name -> n_cols
        self.sparse_hooks = {name: int(g.attrs["n_cols"]) for name, g in f["sparse"].items()} if "sparse" in f else {}
        n = f["prompts/prompt_idx"].shape[0] if "prompts" in f else 0
        if "progress/mark" in f and not self.complete:  # never read past the last checkpoint
            mark = f["progress/mark"]
            mark.refresh()
            n = min(n, int(mark[0]["prompts"]))
        self._n = n

    def __len__(self):
        return self._n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._f.close()

    def _range(self, i):
        if not 0 <= i < self._n:
            raise IndexError(f"prompt {i} is outside the file's {self._n} prompts")
        p = self._f["prompts"]
        start, count = int(p["row_start"][i]), int(p["row_count"][i])
        return start, start + count

    def prompt(self, i):
        """Prompt i's entry: prompt_idx, id, text, completion, finish_reason, token_ids, seed, rows."""
        f, p = self._f, self._f["prompts"]
        off = p["token_offsets"]
        return {"prompt_idx": int(p["prompt_idx"][i]), "id": _string(f, "prompts", "id", i),
                "text": _string(f, "prompts", "text", i), "completion": _string(f, "prompts", "completion", i),
                "finish_reason": _string(f, "prompts", "finish_reason", i),
                "token_ids": p["token_ids"][int(off[i]):int(off[i + 1])], "seed": int(p["seed"][i]),
                "rows": self._range(i)}

    def acts(self, hook, prompt=None):
        """The rows of `hook` ([rows, *row_shape]): of one prompt, or every committed row."""
        if hook not in self.hooks:
            raise KeyError(f"{hook!r} is not in {self.path}; it holds: {', '.join(self.hooks) or 'no hooks'}")
        d = self._f["acts"][hook]
        if prompt is None:
            end = self._range(self._n - 1)[1] if self._n else 0
            return d[:end]
        a, b = self._range(prompt)
        return d[a:b]

    def sparse(self, hook, prompt=None):
        """A sparse hook's rows (SparseRows, CSR): of one prompt, or every committed row."""
        if hook not in self.sparse_hooks:
            raise KeyError(f"{hook!r} is not stored sparse in {self.path}; sparse: {', '.join(self.sparse_hooks) or 'none'}")
        g = self._f["sparse"][hook]
        a, b = (0, self._range(self._n - 1)[1] if self._n else 0) if prompt is None else self._range(prompt)
        ptr = g["indptr"][a:b + 1].astype(np.int64)
        lo, hi = int(ptr[0]), int(ptr[-1])
        return SparseRows(g["values"][lo:hi].astype(np.float32), g["indices"][lo:hi], ptr - lo, (b - a, self.sparse_hooks[hook]))

    def rows(self, prompt=None):
        """The /rows columns (prompt_idx, pos, token_id, step, kind, fresh, computed_step), of one prompt or all."""
        a, b = (0, self._range(self._n - 1)[1] if self._n else 0) if prompt is None else self._range(prompt)
        return {c: self._f["rows"][c][a:b] for c in ROW_COLUMNS}

    def steps(self, prompt):
        """A diffusion prompt's /steps entries: step, t, n_transfer and the canvas after the step."""
        if "steps" not in self._f:
            return []
        s = self._f["steps"]
        idx = np.flatnonzero(s["prompt_idx"][:] == self.prompt(prompt)["prompt_idx"])
        off = s["canvas_offsets"]
        return [{"step": int(s["step"][k]), "t": float(s["t"][k]), "n_transfer": int(s["n_transfer"][k]),
                 "canvas": s["canvas"][int(off[k]):int(off[k + 1])]} for k in idx]

    @property
    def logits(self):
        return self._f["logits"][:] if "logits" in self._f else None

    @property
    def input_ids(self):
        return self._f["input_ids"][:] if "input_ids" in self._f else None

    def __repr__(self):
        return f"Dump({self.path!r}, {self._n} prompts, {len(self.hooks)} hooks)"


def open_dump(path):
    """Opens an activation file written by sonde (forward, generate, batch) for reading."""
    return Dump(path)
