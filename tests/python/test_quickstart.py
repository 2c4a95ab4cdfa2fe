"""docs/examples/python_quickstart.py runs from start to end (the plot only with matplotlib)."""

import os
import subprocess
import sys


def test_quickstart_runs(tmp_path):
    src = os.environ["SONDE_SOURCE_DIR"]
    p = subprocess.run([sys.executable, os.path.join(src, "docs/examples/python_quickstart.py"),
                        "--sonde", os.environ["SONDE_BIN"], "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    for line in ("mean residual norm per layer:", "steering layer 0:", "plain:", "steered:", "token "):
        assert line in p.stdout, (line, p.stdout)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed: plot skipped" in p.stdout
    else:
        assert (tmp_path / "norms.png").stat().st_size > 0
