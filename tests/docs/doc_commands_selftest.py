#!/usr/bin/env python3
"""doc_commands.py's own rules, on a made-up checkout: an unmarked command block fails the run
naming its file and line, a marked block that fails fails it, a skip mark needs a reason and its
block does not run, --list prints each block's state, and a console block runs only its `$ `
lines. usage: doc_commands_selftest.py BUILD_DIR (exit 0 when every rule holds)."""
import pathlib
import subprocess
import sys
import tempfile

RUNNER = pathlib.Path(__file__).with_name("doc_commands.py")


def run(build, source, *extra):
    p = subprocess.run([sys.executable, str(RUNNER), build, str(source), *extra], capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


def checkout(root, readme, doc=""):
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text(readme)
    if doc:
        (root / "docs" / "a.md").write_text(doc)
    return root


def main():
    build = sys.argv[1]
    failures = []

    def expect(cond, what, out):
        if not cond:
            failures.append(f"{what}\n{out}")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        good = checkout(tmp / "good", "# t\n\n<!-- doc-test -->\n```console\n$ echo made > made.txt\nshown output\n"
                        "$ test -f made.txt\n```\n\n<!-- doc-test: skip needs a 7B checkpoint -->\n```sh\nexit 3\n```\n\n"
                        "```json\n{\"not\": \"a command\"}\n```\n")
        code, out = run(build, good)
        expect(code == 0 and "1 passed, 0 failed, 1 skipped (marked skip), 0 unmarked" in out,
               "a console block and a skipped block: exit 0", out)
        code, out = run(build, good, "--list")
        expect("README.md:4 (console) run" in out and "README.md:11 (sh) skip: needs a 7B checkpoint" in out,
               "--list names each block's state", out)

        unmarked = checkout(tmp / "unmarked", "# t\n\n<!-- doc-test -->\n```sh\ntrue\n```\n",
                            "# a\n\ntext\n\n```python\nprint(1)\n```\n")
        code, out = run(build, unmarked)
        expect(code == 1 and "UNMARKED docs/a.md:5 (python)" in out, "an unmarked block fails the run, naming file:line", out)

        failing = checkout(tmp / "failing", "# t\n\n<!-- doc-test -->\n```sh\ntrue\nfalse\n```\n")
        code, out = run(build, failing)
        expect(code == 1 and "FAIL README.md:4 (sh) exited 1" in out, "a failing block fails the run", out)

        no_reason = checkout(tmp / "no_reason", "# t\n\n<!-- doc-test: skip -->\n```sh\ntrue\n```\n")
        code, out = run(build, no_reason)
        expect(code != 0 and "README.md:3: a doc-test mark reads" in out, "a skip mark without a reason is refused", out)
    for f in failures:
        print("FAIL", f)
    print(f"doc_commands_selftest: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
