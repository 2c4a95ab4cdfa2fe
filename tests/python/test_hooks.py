"""Python hooks (`with model.hooks(...)`) at the executor's hook points, and declarative edits."""

import numpy as np
import pytest

import sonde

HOOK = "blocks.0.hook_resid_post"
IDS = [5, 6, 7, 8, 9, 10]


def test_a_hook_that_adds_a_vector(models, tmp_path):
    model = sonde.Model(models["qwen2"])
    H = model.config["hidden_size"]
    v = np.linspace(-1, 1, H, dtype=np.float32)
    plain_logits, plain = model.run_with_cache(IDS, hooks=f"{HOOK},blocks.1.hook_resid_pre")

    def add(x, ctx):
        assert ctx.hook == HOOK and x.shape == (1, len(IDS), H) and x.dtype == np.float32
        np.testing.assert_array_equal(ctx.positions, [list(range(len(IDS)))])
        x += v

    with model.hooks({HOOK: add}):
        logits, cache = model.run_with_cache(IDS, hooks=f"{HOOK},blocks.1.hook_resid_pre")
    # The captured hook and the next layer's input are the NumPy edit of the plain run's value.
    np.testing.assert_allclose(cache[HOOK], plain[HOOK] + v, rtol=0, atol=1e-6)
    np.testing.assert_allclose(cache["blocks.1.hook_resid_pre"], plain[HOOK] + v, rtol=0, atol=1e-6)
    assert np.abs(logits - plain_logits).max() > 1e-3  # the edit reached the output
    # The same as the engine's own add edit (tested against a float64 reference).
    np.save(tmp_path / "v.npy", v)
    with model.edits([{"hook": HOOK, "op": "add", "vector": str(tmp_path / "v.npy")}]):
        edit_logits, _ = model.run_with_cache(IDS, hooks=HOOK)
    np.testing.assert_allclose(logits, edit_logits, rtol=0, atol=1e-5 * np.abs(edit_logits).max())
    # Outside the block nothing is edited.
    again, _ = model.run_with_cache(IDS, hooks=HOOK)
    np.testing.assert_array_equal(again, plain_logits)


def test_a_returned_array_replaces_the_value(models):
    model = sonde.Model(models["qwen2"])
    with model.hooks({HOOK: lambda x, ctx: np.zeros_like(x)}):
        _, cache = model.run_with_cache(IDS, hooks=f"{HOOK},blocks.1.hook_resid_pre")
    assert not cache[HOOK].any() and not cache["blocks.1.hook_resid_pre"].any()


def test_a_hook_that_does_nothing_changes_nothing(models):
    model = sonde.Model(models["qwen2"])
    plain = model.generate([IDS], max_new_tokens=6, temperature=0.8, seed=3)
    with model.hooks({"blocks.*.hook_resid_post": lambda x, ctx: None}):
        hooked = model.generate([IDS], max_new_tokens=6, temperature=0.8, seed=3)
    assert hooked.tokens[0].tolist() == plain.tokens[0].tolist()


def test_hooks_run_at_prefill_decode_and_denoising_steps(models):
    calls = []
    ar = sonde.Model(models["qwen2"])
    with ar.hooks({HOOK: lambda x, ctx: calls.append((ctx.step, x.shape[1]))}):
        ar.generate([IDS], max_new_tokens=4)
    # A prefill over the prompt, then one token per decode step (the last token needs no forward).
    assert [t for _, t in calls] == [len(IDS), 1, 1, 1]
    calls.clear()
    dream = sonde.Model(models["dream"])
    with dream.hooks({HOOK: lambda x, ctx: calls.append(ctx.step)}):
        dream.generate([IDS], max_new_tokens=4, steps=3)
    assert calls == [0, 1, 2]


def test_a_hook_that_raises_names_the_hook(models):
    model = sonde.Model(models["qwen2"])

    def broken(x, ctx):
        raise ValueError("boom")

    with model.hooks({"blocks.1.hook_resid_post": broken}):
        with pytest.raises(sonde.HookError, match="hook 'blocks.1.hook_resid_post' raised") as e:
            model.run_with_cache(IDS)
    assert isinstance(e.value.__cause__, ValueError) and "boom" in str(e.value.__cause__)
    # generate() runs each prompt on the engine's threads: the same error, not an abort.
    with model.hooks({"blocks.1.hook_resid_post": broken}):
        with pytest.raises(sonde.HookError, match="hook 'blocks.1.hook_resid_post' raised") as e:
            model.generate([IDS, IDS[:3]], max_new_tokens=4)
    assert isinstance(e.value.__cause__, ValueError) and "boom" in str(e.value.__cause__)
    with model.hooks({HOOK: lambda x, ctx: np.zeros(3)}):
        with pytest.raises(sonde.HookError, match=r"returned shape \[3\]"):
            model.run_with_cache(IDS)
    model.run_with_cache(IDS)  # still usable


def test_a_steering_hook_against_the_float64_reference(tmp_path):
    """tests/data/edits-tiny-qwen2-f32.h5 (tests/reference/make_edit_goldens.py, PyTorch float64):
    add 3 v at blocks.0.hook_resid_post, and greedy generation steered by 2 v, done here by a
    Python hook."""
    import json
    import os

    import h5py
    from conftest import sonde_cli

    golden = os.path.join(os.environ["SONDE_SOURCE_DIR"], "tests/data/edits-tiny-qwen2-f32.h5")
    with h5py.File(golden, "r") as f:
        attrs = {k: f.attrs[k] for k in f.attrs}
        v = f["inputs/v"][:].astype(np.float32)
        want_logits = f["cases/add_resid_post0/logits"][:]
        want_resid = f["cases/add_resid_post0/resid_post"][:]
        want_tokens = f["generate/tokens"][:].tolist()
    model_dir = tmp_path / "m"
    sonde_cli("make-model", *json.loads(attrs["edits_make_model_args"]), "--out", model_dir)
    model = sonde.Model(str(model_dir))
    prompt = json.loads(attrs["prompt"])

    def add(scale):
        def fn(x, ctx):
            x += scale * v
        return fn

    with model.hooks({"blocks.0.hook_resid_post": add(3.0)}):
        logits, cache = model.run_with_cache(prompt, hooks="blocks.*.hook_resid_post")
    scale = np.abs(want_logits).max()
    assert np.abs(logits - want_logits).max() <= 1e-4 * scale
    for i in range(want_resid.shape[0]):
        got = cache[f"blocks.{i}.hook_resid_post"]
        assert np.abs(got - want_resid[i]).max() <= 1e-4 * np.abs(want_resid[i]).max(), i
    with model.hooks({attrs["gen_hook"]: add(float(attrs["gen_scale"]))}):
        out = model.generate([json.loads(attrs["gen_prompt"])], max_new_tokens=len(want_tokens))
    assert out.tokens[0].tolist() == want_tokens
