"""sonde.report: one self-contained HTML page from any file sonde writes (docs/report.md)."""

import os

from . import _sonde


def report(dump, out, *, stats=(), lens=(), prompts=(), model=None, overwrite=False, max_prompts=4,
           max_positions=256, max_steps=64):
    """Writes the page `out` for `dump` (an activation, lens or statistics file), with the
    statistics files `stats` and lens files `lens` beside it, and returns
    {"panels": [...], "notes": [...], "bytes": n}. `prompts` picks dataset ids (default: the first
    `max_prompts`). Raises sonde.BadInput as `sonde report` exits 2 (not a sonde file, truncated,
    an unknown prompt id, the plotting library not installed: it names the npm ci to run)."""
    one = lambda v: [os.fspath(v)] if isinstance(v, (str, os.PathLike)) else [os.fspath(x) for x in v]
    return _sonde.write_report(os.fspath(dump), os.fspath(out), one(stats), one(lens),
                               [str(p) for p in ([prompts] if isinstance(prompts, str) else prompts)],
                               os.fspath(model) if model else "", overwrite, max_prompts, max_positions, max_steps)
