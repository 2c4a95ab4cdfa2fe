"""Waiting on the engine: short waits with the GIL released, so that Ctrl-C is noticed."""

from . import _sonde

# How long one wait lasts: Ctrl-C is seen within this time (a run stops at its next token,
# diffusion step or micro-batch).
_SLICE = 0.05


def start(engine, requests, options):
    import json
    return engine.start(json.dumps(requests), json.dumps(options))


def events(job):
    """Yields the job's events as they come, then returns its result (StopIteration.value).

    Closing the generator early or an exception (KeyboardInterrupt) raised while it waits
    cancels the run and waits for the engine to stop before propagating."""
    finished = False
    try:
        while True:
            done = job.done()
            for e in job.wait(0 if done else _SLICE):
                yield e
            if done:
                finished = True
                return job.result()
    finally:
        if not finished:
            job.cancel()
            try:
                job.result()
            except (KeyboardInterrupt, _sonde.Error):
                pass


def finish(job, on_event=None):
    """Waits for the job, handing each event to on_event; returns the result dict."""
    gen = events(job)
    try:
        while True:
            e = next(gen)
            if on_event is not None:
                on_event(e)
    except StopIteration as stop:
        return stop.value
