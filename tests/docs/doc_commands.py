#!/usr/bin/env python3
"""Runs the commands the documentation shows, as a reader would type them.

Every command block of README.md and docs/*.md (a fenced block in sh, bash, shell, console or
python) carries a mark on the line before it: `<!-- doc-test -->` runs it, `<!-- doc-test: skip
REASON -->` says why it cannot run here (a 7B checkpoint, two hosts, the README's apt line). A
command block with neither mark fails the run (file:line), so a new block is either tested or
says why not. ```sh, bash and shell blocks run with bash (`set -euo pipefail`, so a failing
command fails the block); ```console blocks run their `$ ` lines the same way (the other lines
are the output shown); ```python blocks run with Debian's interpreter, PYTHONPATH pointing at
the build's Python package. The blocks of one Markdown file run in order in one fresh directory,
where `build` is a link to the build tree and `docs` to the checkout's docs/, and `sonde` is the
build's program (build/bin on PATH, as an installed sonde would be), so the relative paths the
docs use (`build/bin/sonde`, `models/small`, `docs/examples/...`) resolve as they do in a
checkout. Nothing else is set up: a block that needs a file must make it, or an earlier block
must.

usage: doc_commands.py BUILD_DIR SOURCE_DIR [--list] [--only FILE] [--skip-python]
Exit 0 when every marked block passed, 1 when one failed (its text and output are printed) or a
command block is unmarked, 2 for bad use.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r"^<!--\s*doc-test(?::\s*skip\s+(?P<reason>\S.*?))?\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
COMMANDS = ("sh", "bash", "shell", "console", "python")


def blocks_of(path):
    """(first line number, language, text, state) of each command block, in order; state is "run",
    "skip: REASON" or "unmarked". A mark before a block that is not a command block is an error."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        mark = MARK.match(lines[i])
        if not mark and lines[i].lstrip().startswith("<!-- doc-test"):
            raise SystemExit(f"{path}:{i + 1}: a doc-test mark reads <!-- doc-test --> or <!-- doc-test: skip REASON -->, "
                             f"got {lines[i]!r}")
        if mark and not (i + 1 < len(lines) and FENCE.match(lines[i + 1]) and FENCE.match(lines[i + 1]).group(1) in COMMANDS):
            raise SystemExit(f"{path}:{i + 2}: a doc-test mark must be followed by a command block "
                             f"({', '.join(COMMANDS)}), got {lines[i + 1] if i + 1 < len(lines) else 'the end'!r}")
        m = FENCE.match(lines[i])
        if m:
            body, j = [], i + 1
            while j < len(lines) and lines[j].rstrip() != "```":
                body.append(lines[j])
                j += 1
            if j == len(lines):
                raise SystemExit(f"{path}:{i + 1}: the fenced block is not closed")
            if m.group(1) in COMMANDS:
                before = MARK.match(lines[i - 1]) if i > 0 else None
                state = "unmarked" if not before else f"skip: {before.group('reason')}" if before.group("reason") else "run"
                out.append((i + 1, m.group(1), "\n".join(body) + "\n", state))
            i = j
        i += 1
    return out


def console_commands(text):
    """The `$ ` lines of a console transcript (with their backslash continuations): the rest is output."""
    cmds, going = [], False
    for line in text.splitlines():
        if line.startswith("$ ") or going:
            cmds.append(line[2:] if line.startswith("$ ") and not going else line)
            going = line.endswith("\\")
    return "\n".join(cmds) + "\n"


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
    failed = ran = skipped = 0
    unmarked = []
    for md in files:
        blocks = blocks_of(md)
        rel = md.relative_to(source)
        unmarked += [f"{rel}:{line} ({lang})" for line, lang, _, state in blocks if state == "unmarked"]
        if a.list:
            for line, lang, text, state in blocks:
                print(f"{rel}:{line} ({lang}) {state}\n{text}")
            continue
        runnable = [b for b in blocks if b[3] == "run"]
        skipped += sum(1 for b in blocks if b[3].startswith("skip"))
        if not runnable:
            continue
        work = pathlib.Path(tempfile.mkdtemp(prefix="sonde-doc-"))
        (work / "build").symlink_to(build)
        (work / "docs").symlink_to(source / "docs")
        env = dict(os.environ, PYTHONPATH=str(build / "python"), PYTHONDONTWRITEBYTECODE="1",
                   PATH=f"{build / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
        ok = True
        for line, lang, text, _ in runnable:
            if lang == "python" and a.skip_python:
                skipped += 1
                continue
            if lang in ("sh", "bash", "shell", "console"):
                cmd = ["bash", "-c", "set -euo pipefail\n" + (console_commands(text) if lang == "console" else text)]
            else:
                cmd = ["/usr/bin/python3", "-c", text]
            ran += 1
            start = time.monotonic()
            r = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=600)
            if r.returncode != 0:
                failed += 1
                ok = False
                print(f"FAIL {rel}:{line} ({lang}) exited {r.returncode}\n--- block ---\n{text}--- output ---\n{r.stdout[-4000:]}")
                break  # later blocks of this file build on this one
            print(f"ok   {rel}:{line} ({lang}, {len(text.splitlines())} lines, {time.monotonic() - start:.1f} s)")
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"files kept in {work}")
    for u in unmarked:
        print(f"UNMARKED {u}: a command block needs <!-- doc-test --> or <!-- doc-test: skip REASON --> before it")
    if not a.list:
        print(f"{ran - failed} passed, {failed} failed, {skipped} skipped (marked skip), {len(unmarked)} unmarked")
    return 1 if failed or unmarked else 0


if __name__ == "__main__":
    sys.exit(main())
