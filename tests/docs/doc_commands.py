#!/usr/bin/env python3
"""Runs the commands the documentation shows, as a reader would type them.

Every fenced block of README.md and docs/*.md that follows a line `<!-- doc-test -->` is run:
```sh blocks with bash (`set -euo pipefail`, so a failing command fails the block) and ```python
blocks with Debian's interpreter, PYTHONPATH pointing at the build's Python package. The blocks of
one Markdown file run in order in one fresh directory, where `build` is a link to the build tree
and `docs` to the checkout's docs/, so the relative paths the docs use (`build/bin/sonde`,
`models/small`, `docs/examples/...`) resolve as they do in a checkout. Nothing else is set up: a
block that needs a file must make it, or an earlier block must.

usage: doc_commands.py BUILD_DIR SOURCE_DIR [--list] [--only FILE] [--skip-python]
Exit 0 when every block passed, 1 when one failed (its text and output are printed), 2 for bad use.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

MARK = re.compile(r"^<!--\s*doc-test\s*-->\s*$")
FENCE = re.compile(r"^```(\w+)\s*$")


def blocks_of(path):
    """(first line number, language, text) of each marked block, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        if MARK.match(lines[i]) and i + 1 < len(lines):
            m = FENCE.match(lines[i + 1])
            if not m:
                raise SystemExit(f"{path}:{i + 2}: a doc-test mark must be followed by a fenced block, got {lines[i + 1]!r}")
            body, j = [], i + 2
            while j < len(lines) and lines[j].rstrip() != "```":
                body.append(lines[j])
                j += 1
            if j == len(lines):
                raise SystemExit(f"{path}:{i + 2}: the fenced block is not closed")
            out.append((i + 3, m.group(1), "\n".join(body) + "\n"))
            i = j
        i += 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("source")
    ap.add_argument("--list", action="store_true", help="print the marked blocks and run nothing")
    ap.add_argument("--only", help="one Markdown file (relative to SOURCE_DIR)")
    ap.add_argument("--skip-python", action="store_true", help="sh blocks only (a build without the Python package)")
    a = ap.parse_args()
    build, source = pathlib.Path(a.build).resolve(), pathlib.Path(a.source).resolve()
    if not (build / "bin" / "sonde").exists():
        print(f"doc_commands: {build}/bin/sonde does not exist (build first)")
        return 2
    files = [source / "README.md"] + sorted((source / "docs").glob("*.md"))
    if a.only:
        files = [source / a.only]
    failed = ran = 0
    for md in files:
        blocks = blocks_of(md)
        if not blocks:
            continue
        rel = md.relative_to(source)
        work = pathlib.Path(tempfile.mkdtemp(prefix="sonde-doc-"))
        (work / "build").symlink_to(build)
        (work / "docs").symlink_to(source / "docs")
        env = dict(os.environ, PYTHONPATH=str(build / "python"), PYTHONDONTWRITEBYTECODE="1")
        ok = True
        for line, lang, text in blocks:
            if a.list:
                print(f"{rel}:{line} ({lang})\n{text}")
                continue
            if lang == "python" and a.skip_python:
                continue
            if lang in ("sh", "bash"):
                cmd = ["bash", "-c", "set -euo pipefail\n" + text]
            elif lang == "python":
                cmd = ["/usr/bin/python3", "-c", text]
            else:
                print(f"{rel}:{line}: a doc-test block in '{lang}', which this runner does not know (sh, python)")
                return 2
            ran += 1
            r = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=600)
            if r.returncode != 0:
                failed += 1
                ok = False
                print(f"FAIL {rel}:{line} ({lang}) exited {r.returncode}\n--- block ---\n{text}--- output ---\n{r.stdout[-4000:]}")
                break  # later blocks of this file build on this one
            print(f"ok   {rel}:{line} ({lang}, {len(text.splitlines())} lines)")
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"files kept in {work}")
    if not a.list:
        print(f"{ran - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
