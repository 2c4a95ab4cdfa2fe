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
        order = r[np.lexsort((r, -acts[r, j]))][:top_n]  # largest first, earlier rows on ties
        ctx = []
        for i in order:
            seq, p = tokens[int(rows["prompt_idx"][i])], int(rows["pos"][i])
            ctx.append([int(seq[k]) if 0 <= k < len(seq) else -1 for k in range(p - window, p + window + 1)])
        out["top"].append((acts[order, j], order, rows["pos"][order], rows["step"][order], ctx))
    return out


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
    with h5py.File(tmp_path / "features.h5", "r") as f:
        assert f.attrs["schema"] == "sonde.features/1" and f.attrs["complete"] == 1
        top_n, window = int(f.attrs["top_n"]), int(f.attrs["window"])
        want = brute_force_features(tmp_path / "dense.h5", hook, top_n, window)
        g = f["features/" + hook]
        assert int(g["rows"][0]) == want["rows"]
        np.testing.assert_array_equal(g["n_fire"][:], want["n_fire"])
        np.testing.assert_allclose(g["sum"][:], want["sum"], rtol=1e-12)
        np.testing.assert_array_equal(g["max"][:], want["max"])
        np.testing.assert_allclose(g["frequency"][:], want["n_fire"] / want["rows"], rtol=1e-15)
        edges = g["hist_edges"][:]
        dense = h5py.File(tmp_path / "dense.h5", "r")["acts/" + hook][:].astype(np.float64)
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
        ids = [bytes(f["prompts/id_bytes"][a:b]).decode() for a, b in zip(f["prompts/id_offsets"][:-1], f["prompts/id_offsets"][1:])]
        assert sorted(ids) == sorted(x["id"] for x in lines)
