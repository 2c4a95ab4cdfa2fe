"""run_with_cache against the CLI's `forward` file and ../shared/golden; arrays and errors."""

import gc
import os

import h5py
import numpy as np
import pytest

import sonde
from conftest import sonde_cli, sonde_cli_error

HOOKS = "blocks.*.hook_resid_post,blocks.0.attn.hook_z,blocks.1.mlp.hook_post,hook_embed"


def max_rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)


@pytest.mark.parametrize("arch", ["qwen2", "dream"])
def test_run_with_cache_equals_cli_forward(models, tmp_path, arch):
    text = "def add(a, b):\n    return a + b"
    out = tmp_path / "fwd.h5"
    sonde_cli("forward", "--model", models[arch], "--text", text, "--hooks", HOOKS, "--out", out)
    model = sonde.Model(models[arch])
    logits, cache = model.run_with_cache(text, hooks=HOOKS)
    with h5py.File(out, "r") as f:
        assert logits.shape == f["logits"].shape and logits.dtype == np.float32
        assert max_rel(logits, f["logits"][:]) < 1e-5
        assert sorted(cache) == sorted(f["acts"])
        for hook in f["acts"]:
            assert cache[hook].shape == f["acts"][hook].shape, hook
            assert max_rel(cache[hook], f["acts"][hook][:]) < 1e-5, hook
        for col in ("prompt_idx", "pos", "token_id", "step", "kind"):
            np.testing.assert_array_equal(cache.rows[col], f["rows"][col][:], err_msg=col)
        np.testing.assert_array_equal(cache.rows["token_id"], f["input_ids"][:])


def test_storage_dtypes_equal_the_file(models, tmp_path):
    model = sonde.Model(models["qwen2"])
    for storage, widen in (("bf16", sonde.bf16_to_f32), ("f16", lambda a: a.astype(np.float32))):
        out = tmp_path / f"{storage}.h5"
        sonde_cli("forward", "--model", models["qwen2"], "--ids", "5,6,7,8", "--hooks", "blocks.1.hook_resid_post",
                  "--storage-dtype", storage, "--out", out)
        _, cache = model.run_with_cache([5, 6, 7, 8], hooks="blocks.1.hook_resid_post", storage=storage)
        a = cache["blocks.1.hook_resid_post"]
        assert a.dtype == (np.uint16 if storage == "bf16" else np.float16)
        with h5py.File(out, "r") as f:  # h5py widens bf16 to float32 exactly
            np.testing.assert_array_equal(widen(a), f["acts/blocks.1.hook_resid_post"][:].astype(np.float32))


def test_a_list_of_prompts_is_each_prompt_alone(models):
    model = sonde.Model(models["qwen2"])
    prompts = ["Hello world", [3, 4, 5, 6, 7, 8, 9], "x"]
    logits, cache = model.run_with_cache(prompts, hooks="blocks.0.hook_resid_post")
    assert isinstance(logits, list) and len(logits) == 3
    for i, p in enumerate(prompts):
        alone_logits, alone = model.run_with_cache(p, hooks="blocks.0.hook_resid_post")
        np.testing.assert_array_equal(logits[i], alone_logits)
        np.testing.assert_array_equal(cache.of_prompt(i, "blocks.0.hook_resid_post"), alone["blocks.0.hook_resid_post"])
        assert np.all(cache.rows["pos"][cache.rows["prompt_idx"] == i] == np.arange(len(alone_logits)))


def test_positions_last_and_list(models):
    model = sonde.Model(models["qwen2"])
    full_logits, full = model.run_with_cache([9, 8, 7, 6], hooks="blocks.1.hook_resid_post")
    logits, last = model.run_with_cache([9, 8, 7, 6], hooks="blocks.1.hook_resid_post", positions="last")
    np.testing.assert_array_equal(logits, full_logits[[3]])
    np.testing.assert_array_equal(last["blocks.1.hook_resid_post"], full["blocks.1.hook_resid_post"][[3]])
    _, some = model.run_with_cache([9, 8, 7, 6], hooks="blocks.1.hook_resid_post", positions=[0, -1])
    np.testing.assert_array_equal(some.rows["pos"], [0, 3])
    with pytest.raises(sonde.BadInput, match="positions: 4 is outside"):
        model.run_with_cache([9, 8, 7, 6], positions=[4])


@pytest.mark.parametrize("arch", ["qwen2", "dream"])
def test_golden_hidden_states_and_logits(golden, arch):
    name = f"tiny-{arch}-float32-v2048"
    model = sonde.Model(f"{golden}/models/{name}", backend="reference")
    L = model.config["num_hidden_layers"]
    # Hugging Face's hidden_states (golden README): the embedding, each layer's output but the
    # last, then the final norm of the last; selected by their aliases, delivered canonically.
    hidden = ["hook_embed"] + [f"blocks.{i}.hook_resid_post" for i in range(L - 1)] + ["ln_final.hook_out"]
    hooks = ",".join(f"hidden_states.{k}" for k in range(L + 1)) + ",blocks.*.hook_resid_post"
    with h5py.File(f"{golden}/{name}.h5", "r") as f:
        for prompt in ("prompt5", "prompt19"):
            g = f["forward"][prompt]
            logits, cache = model.run_with_cache(g["input_ids"][:], hooks=hooks)
            assert max_rel(logits, g["logits"][:]) < 1e-5
            for k in range(L + 1):
                assert max_rel(cache[hidden[k]], g["hidden_states"][k]) < 1e-5, k
            for i in range(L):
                assert max_rel(cache[f"blocks.{i}.hook_resid_post"], g["resid_post"][i]) < 1e-5, i


def test_arrays_outlive_the_model(models):
    model = sonde.Model(models["qwen2"])
    logits, cache = model.run_with_cache("survive", hooks="blocks.0.hook_resid_post")
    kept_logits, kept = logits.copy(), cache["blocks.0.hook_resid_post"].copy()
    del model
    gc.collect()
    other = sonde.Model(models["dream"])  # reuses the freed memory if the arrays did not own theirs
    for _ in range(3):
        other.run_with_cache("scribble over the heap " * 4, hooks="blocks.*.hook_resid_post")
    np.testing.assert_array_equal(logits, kept_logits)
    np.testing.assert_array_equal(cache["blocks.0.hook_resid_post"], kept)
    assert not logits.flags.owndata and logits.base is not None  # the engine's buffer, not a copy


def test_errors_carry_the_cli_messages(models):
    model = sonde.Model(models["qwen2"])
    code, message = sonde_cli_error("forward", "--model", models["qwen2"], "--text", "hi", "--hooks", "nope",
                                    "--out", "/nonexistent/x.h5")
    with pytest.raises(sonde.BadInput) as e:
        model.run_with_cache("hi", hooks="nope")
    assert code == 2 and message.endswith(str(e.value)) and str(e.value).startswith("hooks: 'nope'")
    assert isinstance(e.value, ValueError) and isinstance(e.value, sonde.Error)

    code, message = sonde_cli_error("forward", "--model", models["qwen2"], "--ids", "1,2,99999", "--out", "/tmp/x.h5")
    with pytest.raises(sonde.BadInput) as e:
        model.run_with_cache([1, 2, 99999])
    tail = "token id 99999 at position 2 is outside the vocabulary [0, 2048)"
    assert code == 2 and message.endswith(tail) and str(e.value).endswith(tail)

    code, message = sonde_cli_error("forward", "--model", "/nonexistent/model", "--ids", "1", "--out", "/tmp/x.h5")
    with pytest.raises(sonde.Error) as e:
        sonde.Model("/nonexistent/model")
    assert message == str(e.value)
    assert isinstance(e.value, sonde.BadInput if code == 2 else sonde.RuntimeFailure)


def test_model_surface(models):
    model = sonde.Model(models["qwen2"])
    assert model.config["model_type"] == "qwen2" and model.arch == "qwen2" and not model.is_diffusion
    assert sonde.Model(models["dream"]).is_diffusion
    points = model.hook_points()
    listed = sonde_cli("hooks", "--model", models["qwen2"])
    for p in points:
        assert p.name in listed
    assert ("blocks.1.hook_resid_post", (model.config["hidden_size"],)) in points
    for text in ("Hello world", "def f(x):\n\treturn x  # ünïcode"):
        cli = sonde_cli("tokenize", "--model", models["qwen2"], "--text", text)
        import json
        ids = json.loads(cli)["ids"]
        assert model.tokenizer.encode(text) == ids
        assert model.tokenizer.decode(ids) == text
    chat = model.apply_chat_template([{"role": "user", "content": "Say hi"}])
    assert chat.endswith("<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n")


def test_compute_modes(models):
    """compute= as the CLI's --compute: bf16 is near the exact logits, not equal; int8 needs q8."""
    ids = [3, 1, 4, 1, 5]
    exact = sonde.Model(models["qwen2"])
    fast = sonde.Model(models["qwen2"], compute="bf16")
    assert exact.compute == "f32" and fast.compute == "bf16"
    a, _ = exact.run_with_cache(ids, hooks="hook_embed")
    b, _ = fast.run_with_cache(ids, hooks="hook_embed")
    assert 1e-4 < max_rel(b, a) < 2e-2
    with pytest.raises(sonde.BadInput, match="q8"):
        sonde.Model(models["qwen2"], compute="int8")
    assert sonde.Model(models["qwen2"], weights="q8", compute="int8").compute == "int8"


def test_front_end_errors_are_bad_input(models, tmp_path):
    """The rough edges issue 29 lists: each is sonde.BadInput naming the setting and the value."""
    with pytest.raises(sonde.BadInput, match="inputs is an empty list"):
        sonde.Model(models["qwen2"]).run_with_cache([])
    with pytest.raises(sonde.BadInput, match=r"weights: 'q4' is not native or q8"):
        sonde.Model(models["qwen2"], weights="q4")
    with pytest.raises(sonde.BadInput, match="is a file, not a model directory"):
        sonde.Model(os.path.join(models["qwen2"], "config.json"))


def test_misspelt_settings_and_options_are_refused_with_the_closest_name(models):
    """A misspelt key is refused, never dropped: in a prompt's settings and in the call's options."""
    model = sonde.Model(models["qwen2"])
    with pytest.raises(sonde.BadInput, match='unknown field "temprature"; did you mean: temperature'):
        model.generate([{"ids": [1, 2], "temprature": 0.5}], max_new_tokens=2)
    with pytest.raises(sonde.BadInput, match='unknown option "capure"; did you mean: capture'):
        model._run([{"ids": [1, 2]}], {"kind": "forward", "capure": {}})
    with pytest.raises(sonde.BadInput, match='unknown option "hook"; did you mean: hooks'):
        model._run([{"ids": [1, 2]}], {"kind": "forward", "capture": {"hook": "blocks.0.hook_resid_post"}})
