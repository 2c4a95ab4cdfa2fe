"""Model.attach_sae (docs/sae.md): the SAE's hook points in run_with_cache equal the CLI's
`forward --sae`, splicing is chosen per SAE, and bad folders raise sonde.BadInput."""

import json
import os

import h5py
import numpy as np
import pytest

import sonde
from conftest import sonde_cli

SAE_DIR = os.path.join(os.environ.get("SONDE_SOURCE_DIR", ""), "tests", "data", "sae")
HOOK = "blocks.0.hook_resid_post"  # tests/data/sae/standard_flat's


def max_rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)


@pytest.mark.parametrize("splice", [False, True])
def test_attach_sae_equals_cli_forward(models, tmp_path, splice):
    sae = os.path.join(SAE_DIR, "standard_flat")
    ids = [5, 17, 300, 42, 9]
    out = tmp_path / "fwd.h5"
    hooks = HOOK + ".hook_sae_*"
    sonde_cli("forward", "--model", models["qwen2"], "--ids", ",".join(map(str, ids)), "--sae", sae,
              *(["--sae-splice"] if splice else []), "--hooks", hooks, "--out", out)
    model = sonde.Model(models["qwen2"])
    info = model.attach_sae(sae, splice=splice)
    assert info["hook"] == HOOK and info["d_sae"] == 96 and info["splice"] == splice
    names = [h.name for h in model.hook_points()]
    assert names[names.index(HOOK) + 3] == HOOK + ".hook_sae_acts_post"
    logits, cache = model.run_with_cache(ids, hooks=hooks)
    with h5py.File(out, "r") as f:
        assert sorted(cache) == sorted(f["acts"])
        for hook in f["acts"]:
            assert max_rel(cache[hook], f["acts"][hook][:]) < 1e-5, hook
        assert max_rel(logits, f["logits"][:]) < 1e-5


def test_attach_sae_bad_folder(models, tmp_path):
    model = sonde.Model(models["qwen2"])
    with pytest.raises(sonde.BadInput, match="no cfg.json"):
        model.attach_sae(tmp_path)
    with pytest.raises(ValueError, match="error_term needs splice"):
        model.attach_sae(os.path.join(SAE_DIR, "standard_flat"), error_term=True)


def test_open_dump_reads_sparse_rows(models, tmp_path):
    sae = os.path.join(SAE_DIR, "topk_flat")
    hook = "blocks.1.hook_resid_post.hook_sae_acts_post"
    base = ["forward", "--model", models["dream"], "--ids", "4,8,15,16,23,42", "--sae", sae, "--hooks", hook]
    sonde_cli(*base, "--out", tmp_path / "dense.h5")
    sonde_cli(*base, "--sae-sparse", "nonzero", "--out", tmp_path / "sparse.h5")
    with sonde.open_dump(tmp_path / "dense.h5") as d, sonde.open_dump(tmp_path / "sparse.h5") as s:
        assert hook in d.hooks and hook not in s.hooks and s.sparse_hooks == {hook: 96}
        rows = s.sparse(hook)
        assert rows.shape == (6, 96) and rows.indptr[0] == 0 and len(rows.data) == rows.indptr[-1]
        np.testing.assert_array_equal(rows.toarray(), d.acts(hook))
        one = s.sparse(hook, prompt=0)
        np.testing.assert_array_equal(one.toarray(), d.acts(hook, prompt=0))


def brute_force_features(dense_path, hook, top_n, window):
    """Every statistic of the feature file recomputed from a dense capture of the same run."""
    with h5py.File(dense_path, "r") as f:
        acts = f["acts/" + hook][:].astype(np.float64)
        rows = {c: f["rows/" + c][:] for c in ("prompt_idx", "pos", "step")}
        P = f["prompts"]
        tokens = {int(P["prompt_idx"][i]): P["token_ids"][P["token_offsets"][i]:P["token_offsets"][i + 1]]
                  for i in range(len(P["prompt_idx"]))}
    fire = acts > 0
    out = {"rows": len(acts), "n_fire": fire.sum(0), "sum": np.where(fire, acts, 0).sum(0),
           "max": np.where(fire, acts, 0).max(0), "top": []}
    for j in range(acts.shape[1]):
        r = np.flatnonzero(fire[:, j])
        # largest first; ties to the lower (prompt_idx, pos, step)
        order = r[np.lexsort((rows["step"][r], rows["pos"][r], rows["prompt_idx"][r], -acts[r, j]))][:top_n]
        ctx = []
        for i in order:
            seq, p = tokens[int(rows["prompt_idx"][i])], int(rows["pos"][i])
            ctx.append([int(seq[k]) if 0 <= k < len(seq) else -1 for k in range(p - window, p + window + 1)])
        out["top"].append((acts[order, j], order, rows["pos"][order], rows["step"][order], ctx))
    return out


def check_features(features_path, dense_path, hook):
    """The feature file at features_path equals a brute-force pass over the dense capture."""
    with h5py.File(features_path, "r") as f:
        assert f.attrs["schema"] == "sonde.features/1" and f.attrs["complete"] == 1
        top_n, window = int(f.attrs["top_n"]), int(f.attrs["window"])
        want = brute_force_features(dense_path, hook, top_n, window)
        g = f["features/" + hook]
        assert int(g["rows"][0]) == want["rows"]
        np.testing.assert_array_equal(g["n_fire"][:], want["n_fire"])
        assert np.sum(want["n_fire"]) > 0
        np.testing.assert_allclose(g["sum"][:], want["sum"], rtol=1e-12)
        np.testing.assert_array_equal(g["max"][:], want["max"])
        np.testing.assert_allclose(g["frequency"][:], want["n_fire"] / want["rows"], rtol=1e-15)
        edges = g["hist_edges"][:]
        dense = h5py.File(dense_path, "r")["acts/" + hook][:].astype(np.float64)
        for j in range(dense.shape[1]):
            v = dense[dense[:, j] > 0, j]
            b = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, len(edges) - 2)
            np.testing.assert_array_equal(g["hist"][j], np.bincount(b, minlength=len(edges) - 1), err_msg=f"feature {j}")
            vals, order, pos, step, ctx = want["top"][j]
            n = len(order)
            np.testing.assert_array_equal(g["top_value"][j, :n], vals)
            assert np.all(np.isnan(g["top_value"][j, n:]))
            np.testing.assert_array_equal(g["top_row"][j, :n], order)
            np.testing.assert_array_equal(g["top_pos"][j, :n], pos)
            np.testing.assert_array_equal(g["top_step"][j, :n], step)
            if n:
                np.testing.assert_array_equal(g["top_context"][j, :n], np.array(ctx))
        return [bytes(f["prompts/id_bytes"][a:b]).decode()
                for a, b in zip(f["prompts/id_offsets"][:-1], f["prompts/id_offsets"][1:])]


@pytest.mark.parametrize("arch", ["qwen2", "dream"])
def test_feature_stats_equal_a_brute_force_pass(models, tmp_path, arch):
    sae = os.path.join(SAE_DIR, "topk_flat")
    hook = "blocks.1.hook_resid_post.hook_sae_acts_post"
    lines = [{"id": f"p{i}", "ids": [(7 * i + k * 13) % 400 + 1 for k in range(3 + i % 4)]} for i in range(6)]
    with open(tmp_path / "in.jsonl", "w") as f:
        f.write("\n".join(json.dumps(x) for x in lines) + "\n")
    sonde_cli("batch", "--model", models[arch], "--input", tmp_path / "in.jsonl", "--output", tmp_path / "out.jsonl",
              "--max-new-tokens", "3", "--sae", sae, "--hooks", hook, "--acts", tmp_path / "dense.h5",
              "--feature-stats", tmp_path / "features.h5", "--batch-size", "2", "--checkpoint-every", "2")
    ids = check_features(tmp_path / "features.h5", tmp_path / "dense.h5", hook)
    assert sorted(ids) == sorted(x["id"] for x in lines)


# The same sink through the run layer from forward (one sequence) and generate (Dream: every
# denoising step, where one position's rows at several steps tie-break by step).
@pytest.mark.parametrize("command", ["forward", "generate"])
def test_feature_stats_of_forward_and_generate(models, tmp_path, command):
    sae = os.path.join(SAE_DIR, "topk_flat")
    hook = "blocks.1.hook_resid_post.hook_sae_acts_post"
    if command == "forward":
        args = ["forward", "--model", models["qwen2"], "--ids", "5,17,300,42,9,5,17,300"]
    else:
        args = ["generate", "--model", models["dream"], "--ids", "5,17,300", "--ids", "42,9", "--max-new-tokens", "4",
                "--steps", "4", "--diffusion-capture", "all", "--json"]
    sonde_cli(*args, "--sae", sae, "--hooks", hook, "--out", tmp_path / "dense.h5", "--feature-stats", tmp_path / "f.h5")
    check_features(tmp_path / "f.h5", tmp_path / "dense.h5", hook)
    with h5py.File(tmp_path / "f.h5", "r") as f:
        assert f.attrs["run_config_json"] == h5py.File(tmp_path / "dense.h5", "r").attrs["run_config_json"]


GOLDENS = os.path.join(os.environ.get("SONDE_SOURCE_DIR", ""), "tests", "data", "sae-tiny-qwen2-f32.h5")


# sae.encode / sae.decode on NumPy arrays equal the float64 PyTorch reference's hook_sae_acts_post
# and hook_sae_recons (tests/reference/make_sae_goldens.py) of every SAE architecture.
@pytest.mark.parametrize("case", ["standard_flat", "topk_flat", "jumprelu_v6", "gated_v6", "norm_bf16"])
def test_encode_decode_equal_the_reference(case):
    sae = sonde.load_sae(os.path.join(SAE_DIR, case))
    with h5py.File(GOLDENS, "r") as g:
        x, post, recons = (g[case][n][:] for n in ("sae_input", "acts_post", "recons"))
    got = sae.encode(x)
    assert got.dtype == np.float32 and got.shape == post.shape
    assert max_rel(got, post) < 1e-5
    assert max_rel(sae.decode(post), recons) < 1e-5
    # [..., d_in] keeps its leading dimensions; a float64 input is read as float32
    np.testing.assert_array_equal(sae.encode(x.reshape(2, 3, -1).astype(np.float64)), got.reshape(2, 3, -1))
    with pytest.raises(sonde.BadInput, match="last dimension must be 96"):
        sae.decode(x)


def make_sae():
    """docs/examples/make_sae.py as a module."""
    import sys
    sys.path.insert(0, os.path.join(os.environ.get("SONDE_SOURCE_DIR", ""), "docs", "examples"))
    import make_sae as m
    return m


def make_sae_folder(path, sparsity):
    make_sae().main(["--arch", "topk", "--k", "6", "--d-in", "64", "--d-sae", "96", "--hook", "blocks.1.hook_resid_post",
                   "--seed", "4", "--out", str(path)] + (["--sparsity"] if sparsity else []))
    return path


# sparsity.safetensors: read (its shape checked), sae.sparsity, and the features sink's
# sae_sparsity beside its frequencies; a folder without it is fine.
def test_sparsity_read_exposed_and_written(models, tmp_path):
    folder = make_sae_folder(tmp_path / "sae", sparsity=True)
    want = np.random.RandomState(5).uniform(-5, -1, 96).astype(np.float32)  # make_sae.py: seed + 1
    sae = sonde.load_sae(folder)
    np.testing.assert_array_equal(sae.sparsity, want)
    assert sonde.load_sae(os.path.join(SAE_DIR, "topk_flat")).sparsity is None
    hook = "blocks.1.hook_resid_post.hook_sae_acts_post"
    for name, f in (("with", folder), ("without", os.path.join(SAE_DIR, "topk_flat"))):
        sonde_cli("forward", "--model", models["qwen2"], "--ids", "5,6,7,8", "--sae", f, "--hooks", hook,
                  "--out", tmp_path / f"{name}.h5", "--feature-stats", tmp_path / f"{name}_f.h5")
    with h5py.File(tmp_path / "with_f.h5", "r") as f:
        np.testing.assert_array_equal(f["features"][hook]["sae_sparsity"][:], want.astype(np.float64))
    with h5py.File(tmp_path / "without_f.h5", "r") as f:
        assert "sae_sparsity" not in f["features"][hook]
    make_sae().write_safetensors(os.path.join(folder, "sparsity.safetensors"), {"sparsity": np.zeros(95)}, "F32")
    with pytest.raises(sonde.BadInput, match=r"sparsity.safetensors: tensor 'sparsity' has shape \[95\], expected \[96\]"):
        sonde.load_sae(folder)


# sae_sparse on run_with_cache and generate: hook_sae_acts_post as SparseRows (CSR) equal to the
# dense capture of the same call, all its non-zero values or each row's K largest.
def test_run_with_cache_and_generate_give_csr(models):
    hook = "blocks.1.hook_resid_post.hook_sae_acts_post"
    model = sonde.Model(models["qwen2"])
    sae = model.attach_sae(os.path.join(SAE_DIR, "topk_flat"))
    assert isinstance(sae, sonde.SAE) and sae["hook"] == "blocks.1.hook_resid_post" and sae["d_sae"] == 96
    prompts = [[5, 17, 300, 42], [9, 8, 7]]
    _, dense = model.run_with_cache(prompts, hooks=hook)
    _, nz = model.run_with_cache(prompts, hooks=hook, sae_sparse="nonzero")
    rows = nz[hook]
    assert isinstance(rows, sonde.SparseRows) and rows.shape == (7, 96) and rows.indptr[0] == 0
    np.testing.assert_array_equal(rows.toarray(), dense[hook])
    assert np.count_nonzero(dense[hook]) == len(rows.data) > 0
    _, top = model.run_with_cache(prompts, hooks=hook, sae_sparse="top:3")
    for r, d in enumerate(dense[hook]):
        got = top[hook].indices[top[hook].indptr[r]:top[hook].indptr[r + 1]]
        want = np.sort(np.lexsort((np.arange(96), -d))[:min(3, np.count_nonzero(d))])
        np.testing.assert_array_equal(got, want)
    _, last = model.run_with_cache(prompts, hooks=hook, sae_sparse="nonzero", positions="last")
    np.testing.assert_array_equal(last[hook].toarray(), dense[hook][[3, 6]])
    try:
        import scipy.sparse  # noqa: F401
        np.testing.assert_array_equal(rows.to_scipy().toarray(), dense[hook])
    except ImportError:
        pass
    dream = sonde.Model(models["dream"])
    dream.attach_sae(os.path.join(SAE_DIR, "topk_flat"))
    kw = dict(max_new_tokens=4, steps=4, hooks=hook, capture="all", seed=3)
    d, s = dream.generate([[5, 17, 300]], **kw), dream.generate([[5, 17, 300]], sae_sparse="nonzero", **kw)
    np.testing.assert_array_equal(s.cache[hook].toarray(), d.cache[hook])


# bf16 storage: SparseRows.data holds the bits (uint16, as dense bf16 arrays do); toarray() and
# to_scipy() widen them, equal to the dense bf16 capture widened.
def test_sparse_rows_of_bf16_storage_widen_their_bits(models):
    hook = "blocks.1.hook_resid_post.hook_sae_acts_post"
    model = sonde.Model(models["qwen2"])
    model.attach_sae(os.path.join(SAE_DIR, "topk_flat"))
    prompts = [[5, 17, 300, 42], [9, 8, 7]]
    _, dense = model.run_with_cache(prompts, hooks=hook, storage="bf16")
    _, nz = model.run_with_cache(prompts, hooks=hook, sae_sparse="nonzero", storage="bf16")
    assert dense[hook].dtype == np.uint16 and nz[hook].data.dtype == np.uint16
    want = sonde.bf16_to_f32(dense[hook])
    assert np.count_nonzero(want) == len(nz[hook].data) > 0
    np.testing.assert_array_equal(nz[hook].toarray(), want)
    np.testing.assert_array_equal(nz[hook][1:3].toarray(), want[1:3])
    try:
        import scipy.sparse  # noqa: F401
        np.testing.assert_array_equal(nz[hook].to_scipy().toarray(), want)
    except ImportError:
        pass


# The SAEs a run attached are in every output's root attributes (saes_json): path, hook_name,
# architecture, widths, the sha256 of sae_weights.safetensors, splice and error term.
def test_saes_recorded_in_root_attributes(models, tmp_path):
    import hashlib
    folder = os.path.join(SAE_DIR, "standard_flat")
    sonde_cli("forward", "--model", models["qwen2"], "--ids", "5,6,7", "--sae", folder, "--sae-splice", "--sae-error-term",
              "--hooks", HOOK + ".hook_sae_acts_post", "--out", tmp_path / "a.h5", "--feature-stats", tmp_path / "f.h5")
    sha = hashlib.sha256(open(os.path.join(folder, "sae_weights.safetensors"), "rb").read()).hexdigest()
    for path in ("a.h5", "f.h5"):
        with h5py.File(tmp_path / path, "r") as f:
            (entry,) = json.loads(f.attrs["saes_json"])
            assert json.loads(f.attrs["run_config_json"])["saes"] == [entry]
        assert entry["path"] == os.path.abspath(folder) and entry["hook_name"] == HOOK
        assert entry["architecture"] == "standard" and (entry["d_in"], entry["d_sae"]) == (64, 96)
        assert entry["weights_sha256"] == sha and entry["splice"] is True and entry["error_term"] is True
