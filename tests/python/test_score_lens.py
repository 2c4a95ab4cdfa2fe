"""Model.score and Model.lens against `sonde score` and `sonde lens`: the same run kinds of core's run
layer, so the same lines, arrays and files; plus values checked from first principles (a lens's
last layer is the model's own softmax; a score's token log-probabilities are log_softmax of the
forward's logits)."""

import json

import h5py
import numpy as np
import pytest

import sonde
from conftest import sonde_cli, sonde_cli_error

PAIRS = [
    {"id": "a", "ids": [5, 17, 301], "completion_ids": [44, 9]},
    {"id": "b", "prompt": "def add(a, b):", "completion": " return a + b"},
]
HOOK = "blocks.1.hook_resid_post"


def write_pairs(path):
    path.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    return path


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def test_score_equals_cli_lines_and_files(models, tmp_path):
    pairs = write_pairs(tmp_path / "pairs.jsonl")
    cli_out, cli_acts = tmp_path / "cli.jsonl", tmp_path / "cli.h5"
    sonde_cli("score", "--model", models["qwen2"], "--input", pairs, "--output", cli_out, "--hooks", HOOK, "--out", cli_acts)
    m = sonde.Model(models["qwen2"])
    out, acts = tmp_path / "py.jsonl", tmp_path / "py.h5"
    got = m.score(input=pairs, output=out, hooks=HOOK, out=acts)
    assert out.read_text() == cli_out.read_text()
    assert got == [json.loads(line) for line in cli_out.read_text().splitlines()]
    assert m.score(PAIRS) == got  # pairs given directly: the same lines
    with h5py.File(cli_acts, "r") as a, h5py.File(acts, "r") as b:
        for group in ("rows", "acts"):
            for name in a[group]:
                np.testing.assert_array_equal(a[group][name][:], b[group][name][:], err_msg=f"{group}/{name}")
        np.testing.assert_array_equal(b["rows/kind"][:5], [0, 0, 0, 1, 1])  # prompt, then completion
        for key in ("model_arch", "backend", "config_json", "run_config_json", "sonde_version"):
            assert key in b.attrs, key
        assert json.loads(b.attrs["run_config_json"])["kind"] == "score"


def test_score_values_are_the_forward_log_softmax(models):
    m = sonde.Model(models["qwen2"])
    pair = PAIRS[0]
    [got] = m.score([pair])
    logits, _ = m.run_with_cache(pair["ids"] + pair["completion_ids"], hooks="")
    lp = log_softmax(logits)
    P = len(pair["ids"])
    want = [lp[P - 1 + j, t] for j, t in enumerate(pair["completion_ids"])]
    np.testing.assert_allclose(got["token_logprobs"], want, rtol=1e-4, atol=1e-5)
    assert got["logprob"] == pytest.approx(sum(want), rel=1e-4)


def test_score_diffusion_matches_cli(models, tmp_path):
    pairs = write_pairs(tmp_path / "pairs.jsonl")
    cli_out = tmp_path / "cli.jsonl"
    sonde_cli("score", "--model", models["dream"], "--input", pairs, "--output", cli_out, "--samples", "4", "--coupled",
              "--seed", "3", "--record-masks")
    got = sonde.Model(models["dream"]).score(input=pairs, samples=4, coupled=True, seed=3, record_masks=True)
    assert got == [json.loads(line) for line in cli_out.read_text().splitlines()]
    assert got[1]["seed"] == 4  # line i uses seed + i


def test_score_refusals(models, tmp_path):
    m = sonde.Model(models["qwen2"])
    out = tmp_path / "o.jsonl"
    out.write_text("x\n")
    with pytest.raises(sonde.BadInput, match="output: .*exists"):
        m.score(PAIRS, output=out)
    code, msg = sonde_cli_error("score", "--model", models["qwen2"], "--input", write_pairs(tmp_path / "p.jsonl"),
                                "--output", out)
    assert code == 2 and msg.startswith("--output: ") and "exists" in msg
    assert m.score(PAIRS, output=out, overwrite=True)[0]["id"] == "a"
    with pytest.raises(sonde.BadInput, match="hooks: capturing while scoring is for autoregressive models"):
        sonde.Model(models["dream"]).score(PAIRS, hooks=HOOK, out=tmp_path / "d.h5")
    assert not (tmp_path / "d.h5").exists()
    with pytest.raises(sonde.BadInput, match="samples: 3"):
        sonde.Model(models["dream"]).score(PAIRS, samples=3, coupled=True)


def test_lens_equals_cli(models, tmp_path):
    ids = [5, 17, 301, 44, 9]
    cli = tmp_path / "cli.h5"
    sonde_cli("lens", "--model", models["qwen2"], "--ids", ",".join(map(str, ids)), "--top-k", "3", "--out", cli)
    m = sonde.Model(models["qwen2"])
    py = tmp_path / "py.h5"
    got = m.lens(ids, top_k=3, out=py)
    with h5py.File(cli, "r") as a, h5py.File(py, "r") as b:
        for name in ("lens/top_ids", "lens/top_probs", "lens/next_rank", "lens/next_prob", "logits",
                     "lens/last_layer_logits", "input_ids"):
            np.testing.assert_array_equal(a[name][:], b[name][:], err_msg=name)
        for name in ("top_ids", "top_probs", "next_rank", "next_prob"):
            np.testing.assert_array_equal(got[name], b["lens/" + name][:], err_msg=name)
        assert b.attrs["kind"] == "logit_lens" and json.loads(b.attrs["run_config_json"])["kind"] == "lens"
    # The last layer's lens is the model's own next-token distribution.
    logits, _ = m.run_with_cache(ids, hooks="")
    probs = np.exp(log_softmax(logits))
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :3]
    np.testing.assert_array_equal(got["top_ids"][-1], top)
    np.testing.assert_allclose(got["top_probs"][-1], np.take_along_axis(probs, top, -1), rtol=1e-4, atol=1e-6)
    assert got["next_rank"].shape == (m.config["num_hidden_layers"], len(ids)) and (got["next_rank"][:, -1] == -1).all()


def test_lens_diffusion_and_refusals(models, tmp_path):
    d = sonde.Model(models["dream"])
    got = d.lens([5, 17, 301], top_k=2, diffusion=True, max_new_tokens=4, steps=2)
    assert got["steps"] == [0, 1] and len(got["per_step"]) == 2 and len(got["sequence"]) == 7
    cli = sonde_cli("lens", "--model", models["dream"], "--ids", "5,17,301", "--top-k", "2", "--diffusion",
                    "--max-new-tokens", "4", "--steps", "2", "--json")
    first = [json.loads(line) for line in cli.splitlines() if line.startswith("{")][0]
    assert first["step"] == 0 and first["top_ids"] == got["per_step"][0]["top_ids"][first["layer"], first["pos"]].tolist()
    with pytest.raises(sonde.BadInput, match="diffusion: model .* is not a diffusion model"):
        sonde.Model(models["qwen2"]).lens([1, 2], diffusion=True)
    with pytest.raises(sonde.BadInput, match="top_k: must be at least 1"):
        d.lens([1, 2], top_k=0)
    code, msg = sonde_cli_error("lens", "--model", models["dream"], "--ids", "1,2", "--top-k", "0")
    assert code == 2 and msg.startswith("--top-k: must be at least 1")
