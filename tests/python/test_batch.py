"""sonde.batch against `sonde batch`, and sonde.open_dump over the files sonde writes."""

import json

import h5py
import numpy as np
import pytest

import sonde
from conftest import sonde_cli, sonde_cli_error

LINES = [
    {"id": "a", "prompt": "def add(a, b):"},
    {"id": "b", "messages": [{"role": "user", "content": "Say hi"}], "max_new_tokens": 4},
    {"id": "c", "ids": [1, 2, 3], "temperature": 0.8, "seed": 7, "stop": ["\n"]},
    {"id": "d", "ids": [9, 8, 7, 6, 5]},
]
HOOKS = "blocks.0-1.hook_resid_post"


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    return path


def test_batch_equals_cli(models, dataset, tmp_path, capsys):
    cli_out, cli_acts = tmp_path / "cli.jsonl", tmp_path / "cli.h5"
    sonde_cli("batch", "--model", models["qwen2"], "--input", dataset, "--output", cli_out, "--max-new-tokens", "6",
              "--hooks", HOOKS, "--acts", cli_acts, "--batch-size", "2")
    out, acts = tmp_path / "py.jsonl", tmp_path / "py.h5"
    totals = sonde.batch(models["qwen2"], dataset, out, acts=acts, hooks=HOOKS, max_new_tokens=6, batch_size=2,
                         progress=True)
    assert out.read_text() == cli_out.read_text()
    assert totals["prompts"] == len(LINES) and totals["skipped"] == []
    with h5py.File(cli_acts, "r") as a, h5py.File(acts, "r") as b:
        for group in ("rows", "prompts", "acts"):
            for name in a[group]:
                np.testing.assert_array_equal(a[group][name][:], b[group][name][:], err_msg=f"{group}/{name}")
        assert b.attrs["complete"] == 1
    err = capsys.readouterr().err
    try:
        import tqdm  # noqa: F401
    except ImportError:
        assert f"sonde batch: {len(LINES)}/{len(LINES)} prompts" in err
    with pytest.raises(sonde.BadInput, match="exists"):
        sonde.batch(models["qwen2"], dataset, out, max_new_tokens=6, progress=False)


def test_overwrite_policy_is_the_clis(models, dataset, tmp_path):
    """One policy, core's: the same refusals from sonde.batch and `sonde batch`, each naming the
    output its own way, and the refused run leaves the files as they were."""
    out, acts = tmp_path / "r.jsonl", tmp_path / "a.h5"
    out.write_text("keep\n")
    acts.write_text("keep")
    cases = [  # (python keywords, CLI flags, what python names, what the CLI names)
        (dict(), [], "output: ", "--output: "),
        (dict(acts=acts, hooks=HOOKS, output=tmp_path / "new.jsonl"), ["--acts", acts, "--hooks", HOOKS], "acts: ", "--acts: "),
        (dict(resume=True, overwrite=True), ["--resume", "--overwrite"], "resume: ", "--resume: "),
    ]
    for kw, flags, py_name, cli_name in cases:
        target = kw.pop("output", out)
        with pytest.raises(sonde.BadInput) as e:
            sonde.batch(models["qwen2"], dataset, target, max_new_tokens=2, progress=False, **kw)
        code, cli = sonde_cli_error("batch", "--model", models["qwen2"], "--input", dataset, "--output", target,
                                    "--max-new-tokens", "2", *flags)
        assert code == 2
        assert str(e.value).startswith(py_name), str(e.value)
        assert cli.startswith(cli_name), cli
        assert str(e.value)[len(py_name):] == cli[len(cli_name):]  # the same words after the name
        assert out.read_text() == "keep\n" and acts.read_text() == "keep"
    sonde.batch(models["qwen2"], dataset, out, max_new_tokens=2, progress=False, overwrite=True)
    assert len(out.read_text().splitlines()) == len(LINES)


def test_open_dump_reads_a_batch_file(models, dataset, tmp_path):
    out, acts = tmp_path / "r.jsonl", tmp_path / "a.h5"
    sonde.batch(models["qwen2"], dataset, out, acts=acts, hooks=HOOKS, max_new_tokens=5, progress=False)
    results = [json.loads(line) for line in out.read_text().splitlines()]
    model = sonde.Model(models["qwen2"])
    with sonde.open_dump(acts) as d:
        assert len(d) == len(LINES) and set(d.hooks) == {"blocks.0.hook_resid_post", "blocks.1.hook_resid_post"}
        total = 0
        for i, r in enumerate(results):
            p = d.prompt(i)
            assert p["id"] == r["id"] and p["completion"] == r["completion"]
            assert p["token_ids"][-len(r["completion_ids"]):].tolist() == r["completion_ids"]
            rows = d.rows(i)
            assert (rows["prompt_idx"] == i).all() and len(rows["pos"]) == d.acts("blocks.1.hook_resid_post", i).shape[0]
            total += len(rows["pos"])
            # The prompt rows equal a forward pass over the prompt's tokens.
            n_prompt = r["prompt_tokens"]
            _, cache = model.run_with_cache(p["token_ids"][:n_prompt], hooks="blocks.1.hook_resid_post")
            np.testing.assert_allclose(d.acts("blocks.1.hook_resid_post", i)[:n_prompt],
                                       cache["blocks.1.hook_resid_post"], rtol=1e-4, atol=1e-5)
        assert d.acts("blocks.0.hook_resid_post").shape == (total, 64)


def test_open_dump_reads_a_forward_and_a_diffusion_file(models, tmp_path):
    fwd = tmp_path / "f.h5"
    sonde_cli("forward", "--model", models["qwen2"], "--ids", "4,5,6", "--hooks", "hook_embed", "--out", fwd)
    logits, cache = sonde.Model(models["qwen2"]).run_with_cache([4, 5, 6], hooks="hook_embed")
    with sonde.open_dump(fwd) as d:
        np.testing.assert_allclose(d.logits, logits, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(d.input_ids, [4, 5, 6])
        np.testing.assert_allclose(d.acts("hook_embed", 0), cache["hook_embed"], rtol=1e-6)
        with pytest.raises(KeyError, match="nope"):
            d.acts("nope")
    gen = tmp_path / "g.h5"
    sonde_cli("generate", "--model", models["dream"], "--ids", "4,5,6", "--max-new-tokens", "4", "--steps", "2",
              "--hooks", "blocks.0.hook_resid_post", "--out", gen)
    g = sonde.Model(models["dream"]).generate([[4, 5, 6]], max_new_tokens=4, steps=2, history=True)
    with sonde.open_dump(gen) as d:
        steps = d.steps(0)
        assert [s["step"] for s in steps] == [0, 1]
        assert steps[-1]["canvas"][-4:].tolist() == g.tokens[0].tolist()


def test_not_a_sonde_file(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["x"] = [1]
    with pytest.raises(ValueError, match="is not 'sonde.acts/1'"):
        sonde.open_dump(path)
