"""sonde.Model: a loaded checkpoint on a backend, over the engine's run layer."""

import json
from collections import namedtuple
from contextlib import contextmanager

import numpy as np

from . import _drive, _sonde, _submit
from ._dump import SparseRows
from ._sae import SAE, load_sae

HookPoint = namedtuple("HookPoint", "name shape")
Token = namedtuple("Token", "request token")
Step = namedtuple("Step", "request step canvas")
Finished = namedtuple("Finished", "result")

# Row kinds of the `kind` column (docs/hooks.md#row-kinds).
ROW_KINDS = {0: "prompt", 1: "generated", 2: "special", 3: "masked", 4: "committed"}

# The diffusion modes' settings (a dataset line's keys; submit() takes them as **settings).
_MORE_SETTINGS = ("diffusion_mode", "block_size", "tokens_per_step", "refresh_every", "threshold", "eos_penalty",
                  "small_block_size")
# Every generation setting: generate()'s keywords, generate_stream's and batch()'s defaults.
_SETTINGS = ("max_new_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "stop", "steps",
             "alg", "eps", "alg_temp") + _MORE_SETTINGS


class Tokenizer:
    """The model's tokenizer (byte-level BPE, id for id with Hugging Face's)."""

    def __init__(self, engine):
        self._engine = engine

    def encode(self, text):
        """Token ids of `text` (no special tokens added)."""
        return self._engine.encode(text)

    def decode(self, ids, skip_special=False):
        """The text of `ids`; bytes that are not valid UTF-8 are replaced."""
        return self._engine.decode([int(i) for i in ids], skip_special).decode("utf-8", "replace")


class Cache:
    """Captured activations: `cache[hook]` is an array [rows, *row_shape]; row i is described by
    `cache.rows[col][i]` (prompt_idx, pos, token_id, step, kind, fresh, computed_step), as in the file's /rows."""

    def __init__(self, arrays, rows, steps, hooks):
        # sparse storage: (data, indices, indptr, n_cols) from the engine (module.cpp hook_arrays)
        self._arrays = {h: SparseRows(a[0], a[1], a[2], (len(a[2]) - 1, a[3])) if isinstance(a, tuple) else a
                        for h, a in arrays.items()}
        self.rows = rows
        self.steps = steps
        self.hooks = [HookPoint(n, tuple(s)) for n, s in hooks]

    def __getitem__(self, hook):
        try:
            return self._arrays[hook]
        except KeyError:
            raise KeyError(f"{hook!r} was not captured; captured: {', '.join(self._arrays) or 'none'}") from None

    def __contains__(self, hook):
        return hook in self._arrays

    def __iter__(self):
        return iter(self._arrays)

    def __len__(self):
        return len(self._arrays)

    def keys(self):
        return self._arrays.keys()

    def items(self):
        return self._arrays.items()

    def of_prompt(self, prompt, hook):
        """The rows of one prompt for one hook (a view when they are contiguous, as they are)."""
        idx = np.flatnonzero(self.rows["prompt_idx"] == prompt)
        if len(idx) and idx[-1] - idx[0] + 1 == len(idx):
            return self[hook][idx[0]:idx[-1] + 1]
        return self[hook][idx]

    def __repr__(self):
        n = len(self.rows["pos"])
        return f"Cache({len(self._arrays)} hooks, {n} rows)"


class Generation:
    """What model.generate returns: per prompt `completions` (text, or None without a tokenizer),
    `tokens` (completion ids), `prompt_ids`, `finish_reasons`, `seeds`, `history` (diffusion, with
    history=True: the canvas after each step), and `cache` (the captured rows and /steps)."""

    def __init__(self, res):
        rs = res["results"]
        self.results = rs
        self.completions = [r["completion_text"] for r in rs]
        self.tokens = [r["completion"] for r in rs]
        self.prompt_ids = [r["prompt_ids"] for r in rs]
        self.finish_reasons = [r["finish_reason"] for r in rs]
        self.seeds = [r["seed"] for r in rs]
        self.history = [r["history"] for r in rs]
        self.cache = Cache(res.get("cache", {}), res.get("rows", _no_rows()), res.get("steps", []), res["hooks"])

    def __repr__(self):
        return f"Generation({len(self.results)} prompts, {len(self.cache)} hooks captured)"


def _no_rows():
    return {k: np.zeros(0, dt) for k, dt in
            (("prompt_idx", np.int64), ("pos", np.int32), ("token_id", np.int32), ("step", np.int32), ("kind", np.uint8),
             ("fresh", np.uint8), ("computed_step", np.int32))}


def _is_ids(x):
    if isinstance(x, np.ndarray):
        return x.ndim == 1 and np.issubdtype(x.dtype, np.integer)
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(i, (int, np.integer)) for i in x)


def _request(prompt):
    if isinstance(prompt, str):
        return {"text": prompt}
    if _is_ids(prompt):
        return {"ids": [int(i) for i in prompt]}
    if isinstance(prompt, dict):  # a dataset line's fields: prompt / messages / ids, settings
        r = dict(prompt)
        if "prompt" in r:
            r["text"] = r.pop("prompt")
        return r
    raise TypeError(f"a prompt is a str, a list of token ids or a dict, not {type(prompt).__name__}")


def _requests(prompts):
    """One prompt (str, ids) or a list of them, as request dicts; and whether a list was given."""
    if isinstance(prompts, (str, dict)) or _is_ids(prompts):
        return [_request(prompts)], False
    return [_request(p) for p in prompts], True


class Model:
    """A checkpoint loaded on a backend.

    Model(path, backend="threaded", threads=0, weights="native", compute="f32"): path is a model
    directory or an org/name in the local Hugging Face cache (never downloaded); backend: threaded,
    cpu-blas or reference ("" picks the fastest); threads: 0 uses every core; weights: native or q8
    (threaded); compute: the Linear precision, f32 (exact), bf16, or int8 (with weights="q8"), as
    the CLI's --compute (docs/backends.md).
    """

    def __init__(self, path, backend="threaded", threads=0, weights="native", plugin_dir=None, compute="f32"):
        self._engine = _sonde.Engine(str(path), backend or "", int(threads), weights, plugin_dir or "", compute)
        self.config = json.loads(self._engine.config_json)
        self.arch = self._engine.arch
        self.backend = self._engine.backend
        self.compute = self._engine.compute
        self.is_diffusion = self._engine.diffusion
        self.path = self._engine.model_dir
        self.tokenizer = Tokenizer(self._engine) if self._engine.has_tokenizer else None
        self._hooks = []   # (selection, fn, positions, steps) of the `with model.hooks(...)` blocks
        self._edits = []   # declarative edits (docs/interventions.md) of the `with model.edits(...)` blocks

    def __repr__(self):
        return f"Model({self.path!r}, arch={self.arch!r}, backend={self.backend!r})"

    def hook_points(self):
        """Every hook point, in the model's order: a list of HookPoint(name, row_shape)."""
        return [HookPoint(n, tuple(s)) for n, s in self._engine.hook_points()]

    def attach_sae(self, path, splice=False, error_term=False):
        """Attaches a SAELens SAE or transcoder folder (or a sonde.load_sae result; docs/sae.md) to
        every later call: adds `<hook>.hook_sae_input`, `_acts_pre`, `_acts_post`, `_recons`,
        `_error` and `_output` hook points (for run_with_cache, generate, hooks and edits).
        splice: the output hook's value is replaced by the SAE's output in every forward (plus its
        error with error_term), as the CLI's --sae-splice / --sae-error-term, chosen per SAE.
        Returns a sonde.SAE: a dict (folder, path, architecture, hook_name, hook (canonical),
        d_in, d_sae, weights_sha256, splice, error_term) with encode/decode and sparsity. Raises
        sonde.BadInput for a bad folder, a hook the model lacks or a width that does not fit."""
        if error_term and not splice:
            raise ValueError("attach_sae: error_term needs splice=True")
        sae = path if isinstance(path, SAE) else load_sae(path)
        info = json.loads(self._engine.attach_sae(sae._handle, bool(splice), bool(error_term)))
        return SAE(sae._handle, dict(sae, **info))

    def apply_chat_template(self, messages, add_generation_prompt=True):
        """The chat rendered with the model's template; messages: [{"role", "content"}, ...]."""
        return self._engine.chat([(m["role"], m["content"]) for m in messages], add_generation_prompt)

    @contextmanager
    def hooks(self, fns, positions="all", steps="all"):
        """Python functions at hook points for the calls inside the block:
        `with model.hooks({"blocks.3.hook_resid_post": fn}): ...`.

        fn(x, ctx) runs in the engine at that node of every forward (prefill, each decode step,
        each denoising step): x is a writable float32 view [batch, tokens, *row_shape] of the
        value every later node reads; edit it in place or return an array of its shape to
        replace it. ctx.hook (the name), ctx.positions ([batch, tokens] int32: each slot's
        position), ctx.selected ([batch, tokens, groups] uint8: the slots `positions` and `steps`
        select), ctx.step (decode or denoising step). x and ctx's arrays are valid only during
        the call: copy what you keep. A key may be a selection (glob, range). An exception
        raised by fn stops the call with sonde.HookError naming the hook (its cause: fn's).
        """
        added = [(sel, fn, json.dumps(positions), str(steps)) for sel, fn in dict(fns).items()]
        self._hooks.extend(added)
        try:
            yield self
        finally:
            del self._hooks[len(self._hooks) - len(added):]

    @contextmanager
    def edits(self, edits):
        """Declarative edits for the calls inside the block (docs/interventions.md), e.g.
        [{"hook": "blocks.1.hook_resid_post", "op": "add", "vector": "v.npy", "scale": 4}]:
        no Python runs per forward."""
        added = list(edits)
        self._edits.extend(added)
        try:
            yield self
        finally:
            del self._edits[len(self._edits) - len(added):]

    def _start(self, requests, options):
        if self._edits:
            options = dict(options, edits=self._edits)
        return self._engine.start(json.dumps(requests), json.dumps(options), list(self._hooks))

    def _run(self, requests, options, on_event=None):
        return _drive.finish(self._start(requests, options), on_event)

    def run_with_cache(self, inputs, hooks="blocks.*.hook_resid_post", positions="all", storage="f32", sae_sparse=None):
        """One forward pass per prompt; returns (logits, cache).

        inputs: text, a list of token ids, or a list of those. hooks: a selection as on the command
        line (names, aliases, globs, ranges, comma-separated; "" or None captures nothing).
        positions: "all", "last", or a list of positions (of each prompt). storage: "f32", "f16"
        (float16 arrays) or "bf16" (the bits as uint16; widen with sonde.bf16_to_f32).

        For one prompt, logits is [T, vocab] float32; for a list, a list of them. cache[hook] is
        [rows, *row_shape] with every prompt's rows one after the other, described by cache.rows.
        The arrays own their memory: they outlive the model. sae_sparse ("nonzero" or "top:K", as
        --sae-sparse): each captured *.hook_sae_acts_post is a sonde.SparseRows (CSR: data,
        indices, indptr; toarray(), to_scipy()) instead of a dense array.
        """
        reqs, many = _requests(inputs)
        if not reqs:
            raise _sonde.BadInput("run_with_cache: inputs is an empty list: give a prompt, token ids or a list of them")
        options = {"kind": "forward", "command": "forward", "memory": True,
                   "capture": {"hooks": hooks or "", "storage": storage, "sae_sparse": sae_sparse or ""}}
        logits, parts = [], []
        for i, r in enumerate(reqs):
            res = self._run([r], options)
            logits.append(res["logits"])
            parts.append(res)
        cache = _join_forward(parts)
        if positions != "all":
            logits, cache = _select_positions(logits, cache, positions)
        return (logits if many else logits[0]), cache

    def _generate_call(self, prompts, seed, hooks, positions, capture, storage, batch_size, history, settings,
                       sae_sparse=None):
        reqs, _ = _requests(prompts)
        defaults = {k: v for k, v in settings.items() if v is not None}
        if "stop" in defaults and isinstance(defaults["stop"], str):
            defaults["stop"] = [defaults["stop"]]
        options = {"kind": "generate", "command": "generate", "defaults": defaults, "seed": int(seed),
                   "batch_size": int(batch_size), "record_history": bool(history), "memory": bool(hooks),
                   "capture": {"hooks": hooks or "", "positions": positions, "diffusion_capture": capture,
                               "storage": storage, "sae_sparse": sae_sparse or ""}}
        return reqs, options

    def generate(self, prompts, max_new_tokens=None, temperature=None, top_p=None, top_k=None,
                 repetition_penalty=None, stop=None, steps=None, alg=None, eps=None, alg_temp=None, seed=0,
                 hooks=None, positions="all", capture="commit", storage="f32", batch_size=0, history=False,
                 diffusion_mode=None, block_size=None, threshold=None, tokens_per_step=None, refresh_every=None,
                 sae_sparse=None, eos_penalty=None, small_block_size=None):
        """Generates from each prompt with the model's decoding (autoregressive for Qwen2, masked
        diffusion for Dream), as `sonde generate` does; returns a Generation.

        Settings left None take generation_config.json's value, then the family's default
        (docs/generation.md). Diffusion: steps, alg (origin, maskgit_plus, topk_margin, entropy,
        confidence_threshold), eps, alg_temp, diffusion_mode (exact, block, block-cache,
        dual-cache), block_size, threshold, tokens_per_step, refresh_every: the command line's
        --diffusion-mode, --block-size, --threshold, --tokens-per-step, --refresh-every; eos_penalty:
        Dream-Coder's padding penalty (--eos-penalty, docs/models.md).
        Fast-dLLM v2 (block diffusion): block_size, small_block_size, threshold as batch_sample
        names them (--block-size, --small-block-size, --threshold; docs/models.md).
        seed: prompt i uses seed + i. hooks/positions/capture/storage choose what is captured
        (docs/capture.md); batch_size: prompts per micro-batch (0: all at once). sae_sparse
        ("nonzero" or "top:K"): captured *.hook_sae_acts_post as sonde.SparseRows (CSR).
        """
        settings = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                        repetition_penalty=repetition_penalty, stop=stop, steps=steps, alg=alg, eps=eps,
                        alg_temp=alg_temp, diffusion_mode=diffusion_mode, block_size=block_size,
                        threshold=threshold, tokens_per_step=tokens_per_step, refresh_every=refresh_every,
                        eos_penalty=eos_penalty, small_block_size=small_block_size)
        reqs, options = self._generate_call(prompts, seed, hooks, positions, capture, storage, batch_size,
                                            history, settings, sae_sparse)
        return Generation(self._run(reqs, options))

    def score(self, pairs=None, *, input=None, output=None, hooks=None, out=None, samples=32, coupled=False, seed=0,
              record_masks=False, overwrite=False):
        """Scores completions given prompts, as `sonde score` does (the same run kind of core's run
        layer); returns one dict per pair, the lines `sonde score --output` writes: id,
        prompt_tokens, completion_tokens and, autoregressive, token_logprobs, logprob,
        mean_logprob, perplexity; diffusion, the Monte Carlo logprob with its stderr (samples,
        coupled, seed: pair i uses seed + i; record_masks adds each sample's masks).

        pairs: dicts {"id"?, "prompt" | "messages" | "ids", "completion" | "completion_ids"}, or
        input: a JSONL file of them (the CLI's --input). output: also write the lines there (JSONL).
        hooks with out: the activations over prompt + completion into the HDF5 file `out`
        (autoregressive), as the CLI's --hooks/--out. overwrite replaces output and out.
        """
        if (pairs is None) == (input is None):
            raise _sonde.BadInput("score: give exactly one of pairs and input")
        if bool(hooks) != bool(out):
            raise _sonde.BadInput("score: hooks and out go together: give both or neither")
        reqs = []
        if pairs is not None:
            if isinstance(pairs, dict):
                pairs = [pairs]
            for i, p in enumerate(pairs):
                r = _request(p)
                r.setdefault("id", str(i))
                reqs.append(r)
            if not reqs:
                raise _sonde.BadInput("score: pairs is an empty list")
        options = {"kind": "score", "command": "score", "seed": int(seed), "overwrite": bool(overwrite),
                   "score": {"samples": int(samples), "coupled": bool(coupled), "record_masks": bool(record_masks)},
                   "capture": {"hooks": hooks or ""},
                   "sinks": [{"name": "hdf5", "path": str(out), "overwrite": bool(overwrite)}] if out else []}
        if output is not None:
            options["results_path"] = str(output)
        if input is not None:
            options["dataset"] = str(input)
        self._engine.check_outputs(json.dumps(options))
        return [json.loads(line) for line in self._run(reqs, options)["scores"]]

    def lens(self, prompt, top_k=5, out=None, overwrite=False, diffusion=False, max_new_tokens=None, steps=None,
             alg=None):
        """The logit lens of one prompt, as `sonde lens` computes it; returns a dict of arrays:
        top_ids, top_probs [layers, T, top_k], next_rank, next_prob [layers, T] (rank -1 at the last
        position), logits and last_layer_logits [T, vocab]. out: also the HDF5 file `sonde lens
        --out` writes. diffusion (a diffusion model): a generation from the prompt with the lens at
        every denoising step: {"steps", "sequence", "per_step": [the dict above, without logits]}.
        """
        reqs, many = _requests(prompt)
        if many:
            raise _sonde.BadInput("lens: give one prompt (text or token ids), not a list")
        settings = {k: v for k, v in dict(max_new_tokens=max_new_tokens, steps=steps, alg=alg).items() if v is not None}
        if settings and not diffusion:
            raise _sonde.BadInput("lens: max_new_tokens, steps and alg need diffusion=True")
        reqs[0].update(settings)
        options = {"kind": "lens", "command": "lens", "overwrite": bool(overwrite),
                   "lens": {"top_k": int(top_k), "diffusion": bool(diffusion)},
                   "sinks": [{"name": "hdf5", "path": str(out), "overwrite": bool(overwrite)}] if out else []}
        self._engine.check_outputs(json.dumps(options))
        return self._run(reqs, options)["lens"]

    def engine(self, slots=8, max_waiting=256, max_context=2048, prefill_chunk=256):
        """Configures the step-level engine that runs submitted requests (docs/python.md): `slots`
        sequences at once, at most `max_waiting` queued behind them (submit refuses more), each of
        at most `max_context` tokens (prompt + new), prompts prefilled `prefill_chunk` tokens a
        step. Makes it now (its KV cache: slots x max_context); without this call the first submit
        makes one with these defaults. BadInput while requests run or wait."""
        self._engine.configure_engine(int(slots), int(max_waiting), int(max_context), int(prefill_chunk))

    def engine_stats(self):
        """The engine's counters: waiting, running, steps, forwards, submitted, finished, kv_rows,
        kv_filled, kv_capacity, threads; and where its step loop's wall time went (seconds):
        prefill_s, decode_s, other_forward_s, copy_s, wait_s, idle_s, with prefill_forwards,
        prefill_tokens, decode_forwards, decode_rows (all 0 before the first submit)."""
        return self._engine.engine_stats()

    def submit(self, prompt=None, *, ids=None, messages=None, id=None, max_new_tokens=None, temperature=None,
               top_p=None, top_k=None, repetition_penalty=None, stop=None, steps=None, alg=None, eps=None,
               alg_temp=None, seed=0, edits=None, hooks=None, **settings):
        """Queues one request on the model's step-level engine and returns at once with a Handle:
        it runs beside the other submitted requests, joining the running batch at the next step.

        The prompt: `prompt` (text, token ids or a dataset line's dict), or `ids=`, or
        `messages=` (a chat, rendered with the model's template). Settings as generate()'s, plus
        diffusion_mode, block_size, tokens_per_step, refresh_every, threshold; `seed` is this
        request's (generate's prompt i uses seed + i). The tokens equal generate()'s for the same
        prompt, settings and seed, bit for bit, whatever else runs.

        edits: this request's own edits (the entries of `model.edits`, docs/interventions.md),
        touching its rows only, added to those of enclosing `with model.edits(...)` blocks.
        hooks: a hook selection whose values are captured at every forward of the request, into
        Completion.acts. Python hook functions (`with model.hooks(...)`) are not run for it.
        """
        if self._hooks:
            raise _sonde.BadInput("submit: Python hook functions (model.hooks) run in generate() and "
                                  "run_with_cache() only; give submit declarative edits=")
        given = [k for k, v in (("prompt", prompt), ("ids", ids), ("messages", messages)) if v is not None]
        if len(given) != 1:
            raise TypeError(f"submit: give one of prompt, ids or messages, not {' and '.join(given) or 'none'}")
        if ids is not None:
            if len(ids) == 0:
                raise _sonde.BadInput("submit: ids is empty")
            request = {"ids": [int(i) for i in ids]}
        elif messages is not None:
            request = {"messages": [{"role": m["role"], "content": m["content"]} for m in messages]}
        else:
            request = _request(prompt)
        if id is not None:
            request["id"] = str(id)
        unknown = set(settings) - set(_MORE_SETTINGS)
        if unknown:
            raise TypeError(f"submit: unknown argument {sorted(unknown)[0]!r}")
        named = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                     repetition_penalty=repetition_penalty, stop=stop, steps=steps, alg=alg, eps=eps,
                     alg_temp=alg_temp, **settings)
        defaults = {k: v for k, v in named.items() if v is not None}
        if isinstance(defaults.get("stop"), str):
            defaults["stop"] = [defaults["stop"]]
        return _submit.submit(self._engine, request, defaults, seed, list(self._edits) + list(edits or []), hooks)

    def generate_stream(self, prompts, **kwargs):
        """model.generate as a generator: yields Token(request, token) for each token an
        autoregressive model chooses, Step(request, step, canvas) after each denoising step of a
        diffusion model, and last Finished(generation). Closing it early stops the run."""
        generate_args = ("seed", "hooks", "positions", "capture", "storage", "batch_size", "history")
        unknown = set(kwargs) - set(generate_args) - set(_SETTINGS)
        if unknown:
            raise TypeError(f"generate_stream: unknown argument {sorted(unknown)[0]!r}")
        args = {"seed": 0, "hooks": None, "positions": "all", "capture": "commit", "storage": "f32",
                "batch_size": 0, "history": False}
        args.update({k: kwargs[k] for k in generate_args if k in kwargs})
        settings = {k: kwargs.get(k) for k in _SETTINGS}
        reqs, options = self._generate_call(prompts, settings=settings, **args)
        options["stream"] = True
        job = self._start(reqs, options)
        gen = _drive.events(job)
        try:
            while True:
                e = next(gen)
                if e[0] == "token":
                    yield Token(e[1], e[2])
                elif e[0] == "step":
                    yield Step(e[1], e[2], e[3])
        except StopIteration as stop:
            yield Finished(Generation(stop.value))
        finally:
            gen.close()


def _join_forward(parts):
    hooks = parts[0]["hooks"]
    if len(parts) == 1:
        p = parts[0]
        return Cache(p["cache"], p["rows"], [], hooks)
    parts = [dict(p, cache=Cache(p["cache"], p["rows"], [], hooks)) for p in parts]
    arrays = {h: _concat([p["cache"][h] for p in parts]) for h in parts[0]["cache"]}
    rows = {}
    for col in parts[0]["rows"]:
        cols = []
        for i, p in enumerate(parts):
            c = p["rows"][col]
            cols.append(np.full_like(c, i) if col == "prompt_idx" else c)
        rows[col] = np.concatenate(cols)
    return Cache(arrays, rows, [], hooks)


def _concat(arrays):
    if isinstance(arrays[0], SparseRows):
        return SparseRows.concat(arrays)
    return np.concatenate(arrays)


def _select_positions(logits, cache, positions):
    keep = []
    rows = cache.rows
    for i, lg in enumerate(logits):
        T = lg.shape[0]
        if positions == "last":
            want = [T - 1]
        elif isinstance(positions, str):
            raise _sonde.BadInput(f"positions: '{positions}' is not all, last or a list of positions")
        else:
            want = [p if p >= 0 else T + p for p in positions]
            bad = [p for p in want if not 0 <= p < T]
            if bad:
                raise _sonde.BadInput(f"positions: {bad[0]} is outside prompt {i}'s {T} tokens")
        logits[i] = lg[want]
        keep.extend(np.flatnonzero(rows["prompt_idx"] == i)[want])
    keep = np.asarray(keep, dtype=np.int64)
    arrays = {h: a[keep] for h, a in cache.items()}
    return logits, Cache(arrays, {c: v[keep] for c, v in rows.items()}, [], [(h.name, h.shape) for h in cache.hooks])
