"""Model.submit: a request on the model's step-level engine, beside the others it runs."""

import asyncio
import json
from collections import deque, namedtuple

from . import _sonde

# How long one blocking wait lasts: Ctrl-C is noticed within this time.
_SLICE = 0.05

Completion = namedtuple("Completion", "id prompt_ids tokens text finish_reason seed history acts forwards "
                                      "first_seconds end_seconds")
Completion.__doc__ = """A submitted request's result: `tokens` (completion ids, int32), `text` (cut at EOS / stop;
None without a tokenizer), `finish_reason` (eos, stop, length, cancelled), `prompt_ids`, `seed`,
`history` (diffusion: the canvas after each step), `acts` ({hook: [one float32 array [tokens,
*row_shape] per forward]}), `forwards` (forwards the request took part in), and the seconds from
submit to its first token or step (`first_seconds`) and to its end (`end_seconds`)."""


class Handle:
    """A request submitted with Model.submit. Iterate it (`for tok in h`, `async for tok in h`)
    for its tokens (autoregressive: int ids) or canvases (diffusion: the int32 canvas after each
    step, prompt included) as they come; `h.result()` or `await h` for its Completion;
    `h.cancel()`, `h.done()`. One reader per handle: each item is yielded once."""

    def __init__(self, submitted):
        self._s = submitted
        self._items = deque()
        self._ended = False
        self._completion = None

    def __repr__(self):
        state = "done" if self.done() else "running"
        return f"Handle(id={self.id!r}, {state})"

    @property
    def id(self):
        """The request's id (given with id=, else "0" as a lone generate() prompt's)."""
        return self._s.id

    def done(self):
        """Whether the request has ended (finished, cancelled or failed)."""
        return self._s.done()

    def cancel(self):
        """Ends the request at its next step (a waiting one at once); its result's finish_reason
        is "cancelled" with the tokens made so far. False when it had already ended."""
        return self._s.cancel()

    def _take(self, seconds):
        items, ended = self._s.poll(seconds)
        self._items.extend(items)
        self._ended = ended

    def _wait(self, until_item):
        """Blocks in short slices until an item is there (until_item) or the request has ended;
        Ctrl-C cancels the request and is raised."""
        try:
            while not self._ended and not (until_item and self._items):
                self._take(_SLICE)
        except KeyboardInterrupt:
            self.cancel()
            raise

    def _pop(self):
        step, value = self._items.popleft()
        return value

    def __iter__(self):
        return self

    def __next__(self):
        if not self._items:
            self._wait(until_item=True)
            if not self._items:
                raise StopIteration
        return self._pop()

    def result(self):
        """Waits for the end; returns the Completion. A request that failed raises sonde.BadInput
        or sonde.RuntimeFailure with its message. Ctrl-C while waiting cancels the request."""
        if self._completion is None:
            self._wait(until_item=False)
            self._completion = Completion(**_completion(self._s.result()))
        return self._completion

    # ---- asyncio: the stream's pipe wakes the event loop; no thread waits --------------------------

    async def _readable(self):
        loop = asyncio.get_running_loop()
        fd = self._s.fileno()
        fut = loop.create_future()

        def ready():
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(fd, ready)
        try:
            await fut
        finally:
            loop.remove_reader(fd)

    async def _await_item(self, until_item):
        try:
            while True:
                self._s.drain()
                self._take(0)
                if self._ended:
                    self._s.close_pipe()  # two file descriptors fewer per awaited request
                    return
                if until_item and self._items:
                    return
                await self._readable()
        except asyncio.CancelledError:
            self.cancel()
            raise

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self._items:
            await self._await_item(until_item=True)
            if not self._items:
                raise StopAsyncIteration
        return self._pop()

    async def _result(self):
        await self._await_item(until_item=False)
        return self.result()

    def __await__(self):
        """`await h`: the Completion, without blocking the event loop. Cancelling the awaiting
        task cancels the request."""
        return self._result().__await__()


def _completion(r):
    return dict(id=r["id"], prompt_ids=r["prompt_ids"], tokens=r["completion"], text=r["completion_text"],
                finish_reason=r["finish_reason"], seed=r["seed"], history=r["history"], acts=r["acts"],
                forwards=r["forwards"], first_seconds=r["first_seconds"], end_seconds=r["end_seconds"])


def submit(engine, request, defaults, seed, edits, hooks):
    """Queues one request dict (a generate() prompt's) on the engine; returns its Handle."""
    options = {"defaults": defaults, "seed": int(seed), "capture": {"hooks": hooks or ""}}
    if edits:
        options["edits"] = list(edits)
    return Handle(engine.submit(json.dumps(request), json.dumps(options)))
