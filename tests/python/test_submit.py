"""Model.submit: requests on the step-level engine (engine.h) beside each other, each equal to
model.generate for the same prompt, settings and seed; iteration, cancel, asyncio, per-request
edits and hooks, refusals, several submitting threads."""

import asyncio
import os
import threading
import time

import numpy as np
import pytest

import sonde

PROMPT = [5, 6, 7, 8]
LONG = 1500  # new tokens of a request that is still running when a short one has long finished

SETTINGS = {
    "greedy": dict(max_new_tokens=12),
    "sampled": dict(max_new_tokens=12, temperature=0.9, top_p=0.8, seed=11),
}
DREAM_SETTINGS = {
    "greedy": dict(max_new_tokens=8, steps=5),
    "sampled": dict(max_new_tokens=8, steps=5, temperature=0.8, alg="maskgit_plus", alg_temp=0.5, seed=9),
}


@pytest.fixture(scope="module")
def qwen(models):
    return sonde.Model(models["qwen2"])


@pytest.fixture(scope="module")
def dream(models):
    return sonde.Model(models["dream"])


def solo(model, prompt, **settings):
    """What generate() makes of one prompt: (tokens, text, finish_reason, history)."""
    g = model.generate([prompt], history=model.is_diffusion, **settings)
    return g.tokens[0].tolist(), g.completions[0], g.finish_reasons[0], [h.tolist() for h in g.history[0]]


def assert_equals_solo(model, res, prompt, **settings):
    tokens, text, reason, history = solo(model, prompt, **settings)
    assert res.tokens.tolist() == tokens
    assert res.text == text
    assert res.finish_reason == reason
    assert res.prompt_ids.tolist() == list(prompt)
    if model.is_diffusion:
        assert [h.tolist() for h in res.history] == history


@pytest.mark.parametrize("kind", ["greedy", "sampled"])
def test_autoregressive_equals_generate(qwen, kind):
    res = qwen.submit(PROMPT, **SETTINGS[kind]).result()
    assert_equals_solo(qwen, res, PROMPT, **SETTINGS[kind])
    assert res.seed == SETTINGS[kind].get("seed", 0)


@pytest.mark.parametrize("kind", ["greedy", "sampled"])
def test_diffusion_equals_generate(dream, kind):
    res = dream.submit(ids=PROMPT, **DREAM_SETTINGS[kind]).result()
    assert_equals_solo(dream, res, PROMPT, **DREAM_SETTINGS[kind])
    assert res.finish_reason == "length" and len(res.history) == 5


def test_text_prompt_messages_and_stop_equal_generate(qwen):
    res = qwen.submit("Hello", max_new_tokens=16, temperature=1.0, seed=4, stop="e").result()
    assert_equals_solo(qwen, res, qwen.tokenizer.encode("Hello"), max_new_tokens=16, temperature=1.0, seed=4, stop=["e"])
    chat = [{"role": "user", "content": "Hi"}]
    res = qwen.submit(messages=chat, max_new_tokens=5).result()
    g = qwen.generate([{"messages": chat}], max_new_tokens=5)
    assert res.tokens.tolist() == g.tokens[0].tolist() and res.prompt_ids.tolist() == g.prompt_ids[0].tolist()


def test_short_finishes_first_while_long_runs(models):
    model = sonde.Model(models["qwen2"])
    model.engine(max_context=5000)
    n = 4000  # a second or more of steps after the short one has ended
    long = model.submit(PROMPT, max_new_tokens=n, temperature=0.7, seed=5)
    first = next(long)  # the long one is running
    short = model.submit([9, 10, 11], max_new_tokens=6)
    res = short.result()
    assert not long.done(), "the long request ended before the short one that came after it"
    assert model.engine_stats()["running"] >= 1
    assert_equals_solo(model, res, [9, 10, 11], max_new_tokens=6)
    full = long.result()
    assert full.tokens[0] == first and full.finish_reason == "length"
    assert_equals_solo(model, full, PROMPT, max_new_tokens=n, temperature=0.7, seed=5)
    assert full.first_seconds >= 0 and full.end_seconds > res.end_seconds


def test_iterating_yields_tokens_and_canvases(qwen, dream):
    h = qwen.submit(PROMPT, max_new_tokens=10, temperature=0.8, seed=2)
    streamed = list(h)
    assert streamed == h.result().tokens.tolist() and len(streamed) == 10
    assert all(isinstance(t, int) for t in streamed)
    assert list(h) == []  # each item is yielded once

    h = dream.submit(ids=PROMPT, max_new_tokens=6, steps=3)
    canvases = [c.tolist() for c in h]
    assert len(canvases) == 3 and all(len(c) == len(PROMPT) + 6 for c in canvases)
    assert canvases == solo(dream, PROMPT, max_new_tokens=6, steps=3)[3]


def test_cancel_in_the_middle(qwen):
    other = qwen.submit([40, 41, 42], max_new_tokens=300, temperature=0.9, seed=8)
    h = qwen.submit(PROMPT, max_new_tokens=LONG, temperature=0.7, seed=5)
    got = [next(h) for _ in range(3)]
    assert h.cancel()
    res = h.result()
    assert res.finish_reason == "cancelled"
    assert 3 <= len(res.tokens) < LONG and res.tokens[:3].tolist() == got
    full = solo(qwen, PROMPT, max_new_tokens=LONG, temperature=0.7, seed=5)[0]
    assert res.tokens.tolist() == full[:len(res.tokens)]  # what it made before the cancel is right
    assert not h.cancel()  # ended already
    assert_equals_solo(qwen, other.result(), [40, 41, 42], max_new_tokens=300, temperature=0.9, seed=8)
    deadline = time.monotonic() + 10
    while (qwen.engine_stats()["running"] or qwen.engine_stats()["kv_rows"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    stats = qwen.engine_stats()
    assert stats["running"] == 0 and stats["kv_rows"] == 0, stats  # the slots and rows are free


def test_cancel_a_waiting_request(models):
    model = sonde.Model(models["qwen2"])
    model.engine(slots=1)
    running = model.submit(PROMPT, max_new_tokens=LONG)
    next(running)
    waiting = model.submit([9, 10], max_new_tokens=4)
    assert waiting.cancel()
    res = waiting.result()
    assert res.finish_reason == "cancelled" and res.tokens.size == 0 and list(waiting) == []
    running.cancel()
    assert running.result().finish_reason == "cancelled"


def test_asyncio_gather_and_async_for(qwen, dream):
    prompts = [([5, 6, 7], dict(max_new_tokens=20)), ([8, 9], dict(max_new_tokens=7, temperature=0.8, seed=3)),
               ([1, 2, 3, 4], dict(max_new_tokens=12, temperature=1.2, top_k=5, seed=1))]

    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    async def main():
        fds = [open_fds()]
        handles = [qwen.submit(p, **s) for p, s in prompts]
        results = await asyncio.gather(*handles)
        fds.append(open_fds())
        streamed = []
        h = dream.submit(ids=PROMPT, max_new_tokens=6, steps=3)
        async for canvas in h:
            streamed.append(canvas.tolist())
        return results, streamed, await h, fds

    results, streamed, dres, fds = asyncio.run(main())
    assert fds[1] == fds[0], fds  # the handles' pipes are closed at their end, not when they go
    for (p, s), res in zip(prompts, results):
        assert_equals_solo(qwen, res, p, **s)
    assert streamed == [c.tolist() for c in dres.history]
    assert_equals_solo(dream, dres, PROMPT, max_new_tokens=6, steps=3)


def test_cancelling_the_awaiting_task_cancels_the_request(qwen):
    async def main():
        h = qwen.submit(PROMPT, max_new_tokens=LONG)
        task = asyncio.ensure_future(_await(h))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return h

    h = asyncio.run(main())
    assert h.result().finish_reason == "cancelled"


async def _await(h):
    return await h


def steer_edit(model, path, scale=2.0):
    """An edit that changes the tokens at every step (a larger scale locks the tiny model into one
    token from the prompt on, and the generated rows' edits would go unseen)."""
    v = np.linspace(-1, 1, model.config["hidden_size"], dtype=np.float32)
    np.save(path, v)
    return {"hook": "blocks.0.hook_resid_post", "op": "add", "vector": str(path), "scale": scale}


def prompt_only(edit):
    return dict(edit, positions="prompt")


@pytest.mark.parametrize("arch", ["qwen2", "dream"])
def test_steered_and_unsteered_at_once(models, tmp_path, arch):
    model = sonde.Model(models[arch])
    edit = steer_edit(model, tmp_path / "v.npy")
    s = dict(max_new_tokens=64, temperature=0.7, seed=4) if arch == "qwen2" else dict(max_new_tokens=8, steps=8)
    plain = [model.submit(ids=PROMPT, **s), model.submit(ids=[9, 10, 11], **s)]
    steered = model.submit(ids=PROMPT, edits=[edit], **s)
    with model.edits([edit]):
        want_steered = model.generate([PROMPT], **s).tokens[0].tolist()
    assert steered.result().tokens.tolist() == want_steered
    assert plain[0].result().tokens.tolist() == solo(model, PROMPT, **s)[0]
    assert plain[1].result().tokens.tolist() == solo(model, [9, 10, 11], **s)[0]
    assert want_steered != solo(model, PROMPT, **s)[0]  # the edit changes the tokens
    if arch == "qwen2":  # at the generated rows too
        with model.edits([prompt_only(edit)]):
            assert model.generate([PROMPT], **s).tokens[0].tolist() != want_steered


def test_generate_while_submitted_requests_run(models, tmp_path):
    """generate() shares the Session with the engine: the submitted requests pause for it, and
    neither sees the other's edits."""
    model = sonde.Model(models["qwen2"])
    model.engine(max_context=4000)
    edit = steer_edit(model, tmp_path / "v.npy")
    n = 2000
    steered = model.submit(PROMPT, max_new_tokens=n, edits=[edit], temperature=0.7, seed=2)
    plain = model.submit([9, 10], max_new_tokens=n, temperature=0.7, seed=3)
    next(steered), next(plain)
    mid = model.generate([[30, 31]], max_new_tokens=10).tokens[0].tolist()
    with model.edits([edit]):
        mid_steered = model.generate([[30, 31]], max_new_tokens=10).tokens[0].tolist()
    assert not steered.done() and not plain.done()  # the generate() calls came in the middle
    with model.edits([edit]):
        want_steered = model.generate([PROMPT], max_new_tokens=n, temperature=0.7, seed=2).tokens[0].tolist()
    with model.edits([prompt_only(edit)]):  # the edit at the generated rows changes the tokens
        assert model.generate([PROMPT], max_new_tokens=n, temperature=0.7, seed=2).tokens[0].tolist() != want_steered
    assert steered.result().tokens.tolist() == want_steered
    assert plain.result().tokens.tolist() == solo(model, [9, 10], max_new_tokens=n, temperature=0.7, seed=3)[0]
    assert mid == solo(model, [30, 31], max_new_tokens=10)[0] and mid != mid_steered


def test_hooks_are_captured_per_forward(qwen, dream):
    hook = "blocks.1.hook_resid_post"
    res = qwen.submit(PROMPT, max_new_tokens=5, hooks=hook).result()
    parts = res.acts[hook]
    # The prompt's forward, one per generated token (the last one's too: one more forward).
    assert [p.shape[0] for p in parts] == [len(PROMPT)] + [1] * 5
    rows = np.concatenate(parts)
    g = qwen.generate([PROMPT], max_new_tokens=5, hooks=hook, positions="all")
    np.testing.assert_array_equal(rows, g.cache[hook])
    assert res.tokens.tolist() == g.tokens[0].tolist()

    res = dream.submit(ids=PROMPT, max_new_tokens=6, steps=3, hooks=hook).result()
    H = dream.config["hidden_size"]
    assert [p.shape for p in res.acts[hook]] == [(len(PROMPT) + 6, H)] * 3
    g = dream.generate([PROMPT], max_new_tokens=6, steps=3, hooks=hook, positions="all", capture="all")
    np.testing.assert_array_equal(np.concatenate(res.acts[hook]), g.cache[hook])


def test_threads_submit_at_once(qwen):
    jobs = [([5 + i, 6, 7 + i], dict(max_new_tokens=8 + i, temperature=0.5 * (i % 3), seed=i)) for i in range(8)]
    out = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def work(i):
        p, s = jobs[i]
        start.wait()
        out[i] = qwen.submit(p, **s).result()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (p, s), res in zip(jobs, out):
        assert_equals_solo(qwen, res, p, **s)


def test_bad_input(models, qwen):
    with pytest.raises(sonde.BadInput, match="submit: the prompt is empty"):
        qwen.submit("")
    with pytest.raises(sonde.BadInput, match="ids is empty"):
        qwen.submit(ids=[])
    with pytest.raises(sonde.BadInput, match="max_context of 2048"):
        qwen.submit(PROMPT, max_new_tokens=3000)
    with pytest.raises(sonde.BadInput, match="outside the vocabulary"):
        qwen.submit([5, 99999])
    with pytest.raises(sonde.BadInput, match="temperature"):
        qwen.submit(PROMPT, temperature=-1)
    with pytest.raises(sonde.BadInput, match="matches no hook point"):
        qwen.submit(PROMPT, hooks="blocks.9.nothing")
    with pytest.raises(sonde.BadInput, match="hook_pattern"):
        qwen.submit(PROMPT, hooks="blocks.0.attn.hook_pattern")
    with pytest.raises(TypeError, match="one of prompt, ids or messages"):
        qwen.submit("a", ids=[1])
    with pytest.raises(TypeError, match="unknown argument 'temprature'"):
        qwen.submit("a", temprature=1)

    model = sonde.Model(models["qwen2"])
    model.engine(slots=1, max_waiting=1, max_context=20000)
    assert model.engine_stats()["submitted"] == 0
    running = model.submit(PROMPT, max_new_tokens=19000)  # seconds: it runs until cancelled
    next(running)
    waiting = model.submit([9, 10], max_new_tokens=4)
    with pytest.raises(sonde.BadInput, match=r"1 requests are waiting \(max_waiting 1\)"):
        model.submit([11, 12], max_new_tokens=4)
    with pytest.raises(sonde.BadInput, match="requests are running"):
        model.engine(slots=2)
    running.cancel()
    assert waiting.result().finish_reason in ("length", "eos")
    with pytest.raises(sonde.BadInput, match="slots must be at least 1"):
        model.engine(slots=0)
    model.engine(slots=2)  # idle again: replaced
    assert model.submit([9, 10], max_new_tokens=4).result().tokens.size > 0


def test_a_handle_outlives_its_model(models):
    model = sonde.Model(models["qwen2"])
    h = model.submit(PROMPT, max_new_tokens=LONG)
    next(h)
    del model
    h.cancel()
    assert h.result().finish_reason == "cancelled"


CTRL_C = """
import sys, time, sonde
model = sonde.Model(sys.argv[1])
model.engine(max_context=30000)
other = model.submit([9, 10], max_new_tokens=20)
h = model.submit([5, 6, 7], max_new_tokens=29000)
next(h)
print("ready", flush=True)
started = time.monotonic()
try:
    h.result()  # the interrupt comes after 1 s, inside this wait
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted after %.1f s" % (time.monotonic() - started), flush=True)
    print("cancelled" if h.result().finish_reason == "cancelled" else "not cancelled", flush=True)
    print("other", other.result().finish_reason, flush=True)
    print("usable", len(model.submit([5, 6], max_new_tokens=2).result().tokens), flush=True)
"""


def test_ctrl_c_while_waiting_cancels_the_request(models):
    import os
    import signal
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-c", CTRL_C, models["qwen2"]], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=os.environ)
    assert p.stdout.readline().strip() == "ready"
    threading.Timer(1.0, lambda: p.send_signal(signal.SIGINT)).start()
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, (out, err)
    assert "interrupted after" in out and "\ncancelled" in out and ("other length" in out or "other eos" in out) and "usable 2" in out, (out, err)


def test_engine_stats_say_where_the_step_loop_went(models):
    # One request alone: its prompt in prefill forwards, each token after the first in a decode
    # forward of one row, and both kinds of forward took time.
    model = sonde.Model(models["qwen2"])
    res = model.submit([5, 6, 7, 8, 9], max_new_tokens=4, temperature=0).result()
    deadline = time.monotonic() + 10
    while model.engine_stats()["running"] and time.monotonic() < deadline:
        time.sleep(0.01)
    st = model.engine_stats()
    assert st["prefill_tokens"] == 5 and st["prefill_forwards"] >= 1, st
    assert st["decode_rows"] == st["decode_forwards"] == len(res.tokens) - 1 >= 1, st
    assert st["prefill_s"] > 0 and st["decode_s"] > 0, st
    assert all(st[k] >= 0 for k in ("other_forward_s", "copy_s", "wait_s", "idle_s")), st
