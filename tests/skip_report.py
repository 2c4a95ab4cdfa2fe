#!/usr/bin/env python3
"""Lists the tests ctest skipped and why, from <build>/Testing/Temporary/LastTest.log.

Usage: skip_report.py BUILD_DIR [--fail-on-missing]
Prints "N skipped" and one line per skipped test with its reason. With --fail-on-missing (CI), a
skip for a missing package ("skipped: missing package ...", SONDE_REQUIRE_PACKAGE) exits 1.
"""
import re
import sys
from pathlib import Path


def skipped(log_text):
    out = []
    for block in re.split(r"\n(?=\d+/\d+ Testing: )", log_text):
        head = re.match(r"\d+/\d+ Testing: (.*)", block)
        if not head or "[  SKIPPED ]" not in block:
            continue
        lines = block.splitlines()
        reason = ""
        for i, line in enumerate(lines):
            if line.rstrip().endswith("Skipped") and i + 1 < len(lines):
                reason = lines[i + 1].strip()
                break
        out.append((head.group(1).strip(), reason or "(no reason given)"))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    log = Path(sys.argv[1]) / "Testing/Temporary/LastTest.log"
    found = skipped(log.read_text(errors="replace"))
    print(f"{len(found)} skipped")
    for name, reason in found:
        print(f"  {name}: {reason}")
    missing = [n for n, r in found if "missing package" in r]
    if "--fail-on-missing" in sys.argv and missing:
        print(f"error: {len(missing)} tests skipped for a missing package (CI installs .ci/packages)")
        sys.exit(1)


if __name__ == "__main__":
    main()
