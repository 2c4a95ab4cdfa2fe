"""Fixtures of the Python suites: the built `sonde` program, make-model checkpoints (made once per
session) and ../shared (absent on a fresh clone: those tests skip). ctest sets SONDE_BIN and
SONDE_SHARED_DIR and puts build/python on PYTHONPATH (tests/python/CMakeLists.txt)."""

import json
import os
import subprocess

import pytest

SONDE = os.environ.get("SONDE_BIN", "sonde")
SHARED = os.environ.get("SONDE_SHARED_DIR", "")


def sonde_cli(*args, cwd=None):
    """Runs the CLI; returns its stdout; fails the test with its stderr on a non-zero exit."""
    p = subprocess.run([SONDE, *map(str, args)], capture_output=True, text=True, cwd=cwd)
    if p.returncode != 0:
        raise AssertionError(f"sonde {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return p.stdout


def sonde_cli_error(*args):
    """Runs the CLI expecting it to fail; returns (exit code, the message after 'error: ')."""
    p = subprocess.run([SONDE, *map(str, args)], capture_output=True, text=True)
    assert p.returncode != 0, f"sonde {' '.join(map(str, args))} succeeded"
    return p.returncode, p.stderr.strip().split("error: ", 1)[1]


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Random-weight checkpoints with synthetic tokenizers: qwen2 and dream, tiny preset."""
    root = tmp_path_factory.mktemp("models")
    out = {}
    for arch in ("qwen2", "dream"):
        out[arch] = str(root / arch)
        sonde_cli("make-model", "--arch", arch, "--preset", "tiny", "--out", out[arch])
    return out


@pytest.fixture(scope="session")
def golden():
    path = os.path.join(SHARED, "golden") if SHARED else ""
    if not path or not os.path.isdir(path):
        pytest.skip(f"../shared/golden is absent ({path or 'SONDE_SHARED_DIR unset'}): golden checks skipped")
    return path
