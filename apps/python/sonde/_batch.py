"""sonde.batch: a JSONL dataset through the model, as `sonde batch` runs it (committed, resumable)."""

import json
import os
import sys

from . import _drive, _sonde
from ._model import Model, _SETTINGS


class _Progress:
    """tqdm when it is installed, else one plain line per update on stderr."""

    def __init__(self, enabled):
        self.enabled, self.bar, self.total = enabled, None, 0

    def update(self, total, committed, prompts, completion_tokens):
        if not self.enabled:
            return
        done = committed + prompts
        try:
            import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            if self.bar is None:
                self.bar = tqdm.tqdm(total=total, initial=committed, unit="prompt", desc="sonde batch")
            self.bar.update(done - self.bar.n)
            self.bar.set_postfix(tokens=completion_tokens)
        else:
            print(f"sonde batch: {done}/{total} prompts, {completion_tokens} tokens", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def batch(model, input, output, acts=None, hooks=None, positions="all", capture="commit", storage="f32",
          compress=False, batch_size=8, checkpoint_every=64, checkpoint_seconds=60.0, resume=False, overwrite=False,
          durable=False, skip_bad_lines=False, seed=0, progress=True, **defaults):
    """Runs every line of the JSONL file `input` ({"id", "prompt" | "messages" | "ids", settings})
    like `sonde batch`: results to `output` (JSONL), the activations selected by `hooks` to `acts`
    (HDF5, streamed, crash-safe), committed every checkpoint_every prompts. Ctrl-C stops at the
    next micro-batch after a checkpoint (KeyboardInterrupt); resume=True continues. Generation
    defaults for lines that do not set them: max_new_tokens, temperature, ... as in generate.
    model: a Model or a path. Returns the totals: prompts, prompt_tokens, completion_tokens, rows,
    and skipped (skip_bad_lines) and committed_before (resume)."""
    unknown = set(defaults) - set(_SETTINGS)
    if unknown:
        raise TypeError(f"batch: unknown argument {sorted(unknown)[0]!r}")
    if not isinstance(model, Model):
        model = Model(model)
    if bool(hooks) != bool(acts):
        raise _sonde.BadInput("hooks and acts go together: give both or neither")
    if not os.path.exists(input):
        raise _sonde.BadInput(f"input: {input} does not exist")
    options = {"kind": "generate", "command": "batch", "seed": int(seed), "batch_size": int(batch_size),
               "defaults": {k: v for k, v in defaults.items() if v is not None},
               "capture": {"hooks": hooks or "", "positions": positions, "diffusion_capture": capture,
                           "storage": storage, "compress": bool(compress)},
               "sinks": [{"name": "hdf5", "path": str(acts), "overwrite": bool(overwrite)}] if acts else [],
               "results_path": str(output), "dataset": str(input), "resume": bool(resume), "overwrite": bool(overwrite),
               "durable": bool(durable),
               "checkpoint_every": int(checkpoint_every), "checkpoint_seconds": float(checkpoint_seconds),
               "keep_results": False, "skip_bad": bool(skip_bad_lines), "progress": True, "stop_mid_batch": False}
    model._engine.check_outputs(json.dumps(options))  # the CLI's policy, from core, before anything runs
    bar = _Progress(progress)
    job = model._start([], options)
    try:
        res = _drive.finish(job, lambda e: e[0] == "progress" and bar.update(*e[1:]))
    except KeyboardInterrupt:
        # The run stopped at its next micro-batch and committed; say where, as the CLI does.
        res = job.result()
        done = res["committed_before"] + res["totals"]["prompts"]
        print(f"sonde batch: interrupted: {done} prompts committed; continue with resume=True", file=sys.stderr)
        raise
    finally:
        bar.close()
    out = dict(res["totals"])
    out.update(skipped=res["skipped"], committed_before=res["committed_before"])
    return out
