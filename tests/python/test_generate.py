"""model.generate against the CLI's `generate --json`, token for token, both families; the
generator form; captured rows against the CLI's --out file."""

import h5py
import numpy as np
import pytest

import sonde
from conftest import json_lines, sonde_cli

PROMPTS = [[5, 6, 7, 8], [100, 200], [31, 32, 33, 34, 35, 36]]


def cli_generate(model_dir, prompts, *flags):
    args = ["generate", "--model", model_dir, "--json"]
    for p in prompts:
        args += ["--ids", ",".join(map(str, p))]
    return json_lines(sonde_cli(*args, *flags))


def assert_same(gen, lines, history=False):
    assert len(gen.tokens) == len(lines)
    for i, line in enumerate(lines):
        assert gen.tokens[i].tolist() == line["completion_ids"], i
        assert gen.prompt_ids[i].tolist() == line["prompt_ids"], i
        assert gen.finish_reasons[i] == line["finish_reason"], i
        assert gen.completions[i] == line["completion"], i
        if history:
            assert [h.tolist() for h in gen.history[i]] == line["history"], i


@pytest.mark.parametrize("settings", [
    dict(max_new_tokens=12),
    dict(max_new_tokens=10, temperature=0.9, top_p=0.8, seed=11),
    dict(max_new_tokens=10, temperature=0.7, top_k=5, repetition_penalty=1.3, seed=3),
])
def test_autoregressive_equals_cli(models, settings):
    model = sonde.Model(models["qwen2"])
    flags = []
    for k, v in settings.items():
        flags += [f"--{k.replace('_', '-')}", str(v)]
    assert_same(model.generate(PROMPTS, **settings), cli_generate(models["qwen2"], PROMPTS, *flags))


def test_autoregressive_text_prompt_and_stop(models):
    model = sonde.Model(models["qwen2"])
    lines = json_lines(sonde_cli("generate", "--model", models["qwen2"], "--prompt", "Hello", "--json",
                                 "--max-new-tokens", "16", "--temperature", "1.0", "--seed", "4", "--stop", "e"))
    assert_same(model.generate("Hello", max_new_tokens=16, temperature=1.0, seed=4, stop=["e"]), lines)


@pytest.mark.parametrize("alg", ["origin", "maskgit_plus", "topk_margin", "entropy"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_diffusion_equals_cli_every_alg(models, alg, temperature):
    model = sonde.Model(models["dream"])
    settings = dict(max_new_tokens=8, steps=5, alg=alg, temperature=temperature, seed=9)
    extra = {"alg_temp": 0.5} if alg != "origin" and temperature > 0 else {}
    settings.update(extra)
    flags = ["--history"]
    for k, v in settings.items():
        flags += [f"--{k.replace('_', '-')}", str(v)]
    gen = model.generate(PROMPTS, history=True, **settings)
    assert_same(gen, cli_generate(models["dream"], PROMPTS, *flags), history=True)


@pytest.mark.parametrize("settings", [
    dict(diffusion_mode="block", block_size=4, steps=8),
    dict(diffusion_mode="dual-cache", block_size=4, alg="confidence_threshold", threshold=0.5),
    dict(diffusion_mode="block-cache", block_size=4, tokens_per_step=2, refresh_every=2),
])
def test_diffusion_modes_as_keywords_equal_cli(models, settings):
    """Every diffusion setting is a keyword of generate(), as the CLI's flag of the same name."""
    model = sonde.Model(models["dream"])
    flags = ["--history", "--max-new-tokens", "8"]
    for k, v in settings.items():
        flags += [f"--{k.replace('_', '-')}", str(v)]
    gen = model.generate(PROMPTS, max_new_tokens=8, history=True, **settings)
    assert_same(gen, cli_generate(models["dream"], PROMPTS, *flags), history=True)
    # The keyword is not ignored: the same call in the exact mode commits in another order.
    exact = model.generate(PROMPTS, max_new_tokens=8, history=True,
                           **{k: v for k, v in settings.items() if k == "steps"})
    assert [[h.tolist() for h in r] for r in gen.history] != [[h.tolist() for h in r] for r in exact.history]


def test_stream_yields_the_tokens_and_steps(models):
    ar = sonde.Model(models["qwen2"])
    events = list(ar.generate_stream(PROMPTS, max_new_tokens=6, temperature=0.8, seed=2))
    final = events[-1]
    assert isinstance(final, sonde.Finished)
    for i in range(len(PROMPTS)):
        streamed = [e.token for e in events[:-1] if isinstance(e, sonde.Token) and e.request == i]
        assert streamed == final.result.tokens[i].tolist()

    dream = sonde.Model(models["dream"])
    events = list(dream.generate_stream(PROMPTS, max_new_tokens=6, steps=3, history=True))
    gen = events[-1].result
    for i in range(len(PROMPTS)):
        steps = [e for e in events[:-1] if isinstance(e, sonde.Step) and e.request == i]
        assert [s.step for s in steps] == [0, 1, 2]
        assert [s.canvas.tolist() for s in steps] == [h.tolist() for h in gen.history[i]]


def test_closing_the_stream_stops_the_run(models):
    model = sonde.Model(models["qwen2"])
    stream = model.generate_stream([[5, 6]], max_new_tokens=500)
    first = next(stream)
    assert isinstance(first, sonde.Token)
    stream.close()
    assert model.generate([[5, 6]], max_new_tokens=3).tokens[0].size == 3  # the engine is free again


@pytest.mark.parametrize("arch,capture", [("qwen2", {}), ("dream", {"capture": "all"}), ("dream", {"capture": "every:2"})])
def test_captured_rows_equal_cli_file(models, tmp_path, arch, capture):
    hooks = "blocks.*.hook_resid_post"
    out = tmp_path / "gen.h5"
    flags = ["--max-new-tokens", "6", "--hooks", hooks, "--out", out, "--positions", "all"]
    if arch == "dream":
        flags += ["--steps", "3"]
    if capture:
        flags += ["--diffusion-capture", capture["capture"]]
    cli_generate(models[arch], PROMPTS, *flags)
    model = sonde.Model(models[arch])
    gen = model.generate(PROMPTS, max_new_tokens=6, hooks=hooks, positions="all",
                         steps=3 if arch == "dream" else None, **capture)
    with h5py.File(out, "r") as f:
        for col in ("prompt_idx", "pos", "token_id", "step", "kind"):
            np.testing.assert_array_equal(gen.cache.rows[col], f["rows"][col][:], err_msg=col)
        for h in f["acts"]:
            np.testing.assert_allclose(gen.cache[h], f["acts"][h][:], rtol=0, atol=1e-5 * np.abs(f["acts"][h][:]).max())
        if arch == "dream":
            assert [s["step"] for s in gen.cache.steps] == f["steps"]["step"][:].tolist()
