"""Options from Python are checked against core's one table of run options (run_schema.h), the one
the CLI's run kinds are built from: an unknown key, a key of another run kind and a key of the
wrong type are refused in one line naming it, with the closest valid name when one is close."""

import pytest

import sonde


@pytest.fixture(scope="module")
def model(models):
    return sonde.Model(models["qwen2"])


def test_unknown_options_are_refused_with_the_closest_name(model):
    with pytest.raises(sonde.BadInput, match=r'^options: unknown option "sead"; did you mean: seed$'):
        model._run([{"ids": [1, 2]}], {"kind": "generate", "sead": 3, "defaults": {"max_new_tokens": 2}})
    with pytest.raises(sonde.BadInput, match=r'^options: unknown option "batchsize"; did you mean: batch_size$'):
        model._run([{"ids": [1, 2]}], {"kind": "generate", "batchsize": 2})
    # Nothing close: no guess.
    with pytest.raises(sonde.BadInput, match=r'^options: unknown option "zzzzzz"$'):
        model._run([{"ids": [1, 2]}], {"kind": "forward", "zzzzzz": 1})
    with pytest.raises(sonde.BadInput, match=r"^kind: 'scroe' is not one of forward, generate, score, lens; did you mean: score$"):
        model._run([{"ids": [1, 2]}], {"kind": "scroe"})
    with pytest.raises(sonde.BadInput, match=r'^score: unknown option "sample"; did you mean: samples$'):
        model._run([{"ids": [1], "completion_ids": [2]}], {"kind": "score", "score": {"sample": 4}})


def test_options_of_another_run_kind_are_refused(model):
    with pytest.raises(sonde.BadInput,
                       match=r'^options: option "batch_size" does not apply to a forward run \(it applies to generate\)$'):
        model._run([{"ids": [1, 2]}], {"kind": "forward", "batch_size": 2})
    with pytest.raises(sonde.BadInput, match=r'^options: option "lens" does not apply to a score run \(it applies to lens\)$'):
        model._run([{"ids": [1], "completion_ids": [2]}], {"kind": "score", "lens": {"top_k": 2}})
    with pytest.raises(sonde.BadInput, match=r'^options: option "capture" does not apply to a lens run'):
        model._run([{"ids": [1, 2]}], {"kind": "lens", "capture": {"hooks": "blocks.0.hook_resid_post"}})


def test_options_of_the_wrong_type_are_refused(model):
    with pytest.raises(sonde.BadInput, match=r'^options: option "seed" must be an integer, got "3"$'):
        model._run([{"ids": [1, 2]}], {"kind": "generate", "seed": "3"})
    with pytest.raises(sonde.BadInput, match=r'^options: option "resume" must be true or false, got 1$'):
        model._run([{"ids": [1, 2]}], {"kind": "generate", "resume": 1})


def test_valid_options_of_each_kind_run(model):
    assert model._run([{"ids": [1, 2]}], {"kind": "generate", "seed": 1, "batch_size": 1,
                                          "defaults": {"max_new_tokens": 2}})["results"][0]["completion"].size == 2
    assert len(model._run([{"ids": [1], "completion_ids": [2]}], {"kind": "score", "seed": 1})["scores"]) == 1
    assert model._run([{"ids": [1, 2]}], {"kind": "lens", "lens": {"top_k": 2}})["lens"]["top_ids"].shape[2] == 2
