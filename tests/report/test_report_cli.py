#!/usr/bin/env python3
"""sonde report without a browser (issue 32): bad input is one line naming the file and exit 2
(not a sonde file, a text file, a truncated file, a one-shot file whose writer did not finish,
an unknown --prompt id, an existing --out, the plotting library missing); a batch file still
being written is shown up to its /progress/mark and says so; --prompt and the page's budget pick
prompts; sonde.report in Python writes the same page and raises sonde.BadInput.

The page's data is read back from its <script id="sonde-data"> JSON; the browser test
(test_report_browser.mjs) checks what is drawn.
Environment: SONDE_BIN (the program), PYTHONPATH with the build's python/ (for sonde.report).
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import h5py
import numpy as np

SONDE = os.environ.get("SONDE_BIN", "sonde")


def run(*args, env=None):
    return subprocess.run([SONDE, *args], capture_output=True, text=True, timeout=120, env=env)


def page_data(path):
    with open(path, encoding="utf-8") as f:
        html = f.read()
    m = re.search(r'<script type="application/json" id="sonde-data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


class ReportCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sonde-report-cli-")
        cls.model = cls.at("qwen2")
        subprocess.run([SONDE, "make-model", "--arch", "qwen2", "--preset", "tiny", "--out", cls.model], check=True,
                       capture_output=True)
        with open(cls.at("prompts.jsonl"), "w") as f:
            for i, text in enumerate(["def add(a, b):", "Hello", "x = 1", "import os"]):
                f.write(json.dumps({"id": f"p{i}", "prompt": text}) + "\n")
        r = run("batch", "--model", cls.model, "--input", cls.at("prompts.jsonl"), "--output", cls.at("out.jsonl"),
                "--max-new-tokens", "3", "--hooks", "blocks.*.hook_resid_post", "--acts", cls.at("batch.h5"))
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        if not os.environ.get("SONDE_KEEP_TEST_FILES"):
            shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def at(cls, name):
        return os.path.join(cls.dir, name)

    def bad(self, *args, env=None):
        r = run("report", *args, env=env)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertEqual(r.stdout, "")
        return lines[0]

    def test_not_a_sonde_file(self):
        with h5py.File(self.at("foreign.h5"), "w") as f:
            f["x"] = np.arange(3)
        line = self.bad(self.at("foreign.h5"), "--out", self.at("x.html"))
        self.assertIn("foreign.h5: schema is '(none)', not a file sonde writes", line)
        with open(self.at("text.h5"), "w") as f:
            f.write("not hdf5\n")
        self.assertIn("text.h5: not a readable HDF5 file", self.bad(self.at("text.h5"), "--out", self.at("x.html")))
        self.assertIn("missing.h5: no such file", self.bad(self.at("missing.h5"), "--out", self.at("x.html")))
        self.assertFalse(os.path.exists(self.at("x.html")))

    def test_truncated_file(self):
        with open(self.at("batch.h5"), "rb") as f:
            data = f.read()
        for cut in (len(data) // 2, 4096):
            with open(self.at("cut.h5"), "wb") as f:
                f.write(data[:cut])
            line = self.bad(self.at("cut.h5"), "--out", self.at("x.html"))
            self.assertRegex(line, r"cut\.h5: (not a readable HDF5 file|cannot read)")
        self.assertFalse(os.path.exists(self.at("x.html")))

    def test_one_shot_file_not_finished(self):
        gen = self.at("gen.h5")
        r = run("generate", "--model", self.model, "--ids", "1,2,3", "--max-new-tokens", "2", "--hooks",
                "blocks.0.hook_resid_post", "--out", gen)
        self.assertEqual(r.returncode, 0, r.stderr)
        shutil.copy(gen, self.at("unfinished.h5"))
        with h5py.File(self.at("unfinished.h5"), "r+") as f:
            f.attrs["complete"] = np.int64(0)
        line = self.bad(self.at("unfinished.h5"), "--out", self.at("x.html"))
        self.assertIn("unfinished.h5: complete is 0 and there is no /progress/mark", line)

    def test_file_being_written_is_shown_up_to_its_mark(self):
        # A streaming file as a writer leaves it between checkpoints: complete 0, the mark at 2 of
        # its 4 prompts, and rows past the mark (uncommitted) that must not be shown.
        shutil.copy(self.at("batch.h5"), self.at("live.h5"))
        with h5py.File(self.at("live.h5"), "r+") as f:
            f.attrs["complete"] = np.int64(0)
            mark = f["progress/mark"][0]
            mark["prompts"] = 2
            f["progress/mark"][0] = mark
        r = run("report", self.at("live.h5"), "--out", self.at("live.html"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("live.h5: not complete (being written, or its writer stopped): shown up to its last checkpoint, 2 prompts", r.stdout)
        d = page_data(self.at("live.html"))
        self.assertEqual([p["id"] for p in d["acts"]["prompts"]], ["p0", "p1"])
        self.assertTrue(d["acts"]["partial"])
        self.assertEqual(d["acts"]["total"], 2)
        line = self.bad(self.at("live.h5"), "--prompt", "p3", "--out", self.at("live2.html"))
        self.assertIn("--prompt 'p3': no prompt with this id among its 2 prompts", line)

    def test_prompt_selection_and_budget(self):
        r = run("report", self.at("batch.h5"), "--prompt", "p2", "--prompt", "p0", "--out", self.at("sel.html"))
        self.assertEqual(r.returncode, 0, r.stderr)
        d = page_data(self.at("sel.html"))
        self.assertEqual([p["id"] for p in d["acts"]["prompts"]], ["p2", "p0"])
        with h5py.File(self.at("batch.h5"), "r") as f:
            P = f["prompts"]
            e = 2
            text = bytes(P["text_bytes"][P["text_offsets"][e]:P["text_offsets"][e + 1]]).decode()
            tokens = P["token_ids"][P["token_offsets"][e]:P["token_offsets"][e + 1]].tolist()
        self.assertEqual(d["acts"]["prompts"][0]["text"], text)
        self.assertEqual(d["acts"]["prompts"][0]["tokens"], tokens)
        r = run("report", self.at("batch.h5"), "--max-prompts", "2", "--max-positions", "3", "--out", self.at("budget.html"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("showing the first 2 of 4 prompts (--prompt ID picks others)", r.stdout)
        d = page_data(self.at("budget.html"))
        self.assertEqual(len(d["acts"]["prompts"]), 2)
        g = d["acts"]["prompts"][0]["norms"][0]
        npos = len(d["acts"]["prompts"][0]["tokens"])
        self.assertEqual(g["bin"], -(-npos // 3))
        self.assertLessEqual(len(set(g["cells"]["pos"])), 3)
        # A binned cell is the mean of its positions' norms (layer 0, the first bin).
        with h5py.File(self.at("batch.h5"), "r") as f:
            a, b = int(f["prompts/row_start"][0]), int(f["prompts/row_start"][0]) + g["bin"]
            want = np.linalg.norm(f["acts/blocks.0.hook_resid_post"][a:b].astype(np.float64), axis=1).mean()
        first = [i for i, (l, p) in enumerate(zip(g["cells"]["layer"], g["cells"]["pos"])) if l == "0" and p == 0][0]
        self.assertAlmostEqual(g["cells"]["norm"][first], want, places=9)

    def test_usage_errors(self):
        self.assertIn("batch.h5: --prompt 'nope': no prompt with this id among its 4 prompts",
                      self.bad(self.at("batch.h5"), "--out", self.at("u.html"), "--prompt", "nope"))
        open(self.at("exists.html"), "w").close()
        self.assertIn("--out: ", self.bad(self.at("batch.h5"), "--out", self.at("exists.html")))
        self.assertIn("exists (use --overwrite", self.bad(self.at("batch.h5"), "--out", self.at("exists.html")))
        self.assertIn("--stats:", self.bad(self.at("batch.h5"), "--stats", self.at("batch.h5"), "--out", self.at("s.html")))
        self.assertIn("give the file", self.bad("--out", self.at("s.html")))

    def test_plotting_library_missing(self):
        env = dict(os.environ, SONDE_REPORT_WEB=self.at("empty-web"))
        os.makedirs(self.at("empty-web"), exist_ok=True)
        line = self.bad(self.at("batch.h5"), "--out", self.at("nolib.html"), env=env)
        self.assertIn("the plotting library (vega, vega-lite, vega-embed) is not in", line)
        self.assertIn("run npm ci --prefix", line)
        self.assertFalse(os.path.exists(self.at("nolib.html")))

    def test_python_report(self):
        try:
            import sonde
        except ImportError as e:
            self.skipTest(f"the Python package is not built ({e})")
        out = sonde.report(self.at("batch.h5"), self.at("py.html"), prompts=["p1"])
        self.assertEqual(out["panels"], ["run", "norms"])
        self.assertEqual(out["bytes"], os.path.getsize(self.at("py.html")))
        d = page_data(self.at("py.html"))
        self.assertEqual([p["id"] for p in d["acts"]["prompts"]], ["p1"])
        with self.assertRaises(sonde.BadInput) as e:
            sonde.report(self.at("out.jsonl"), self.at("py2.html"))
        self.assertIn("out.jsonl: not a readable HDF5 file", str(e.exception))


if __name__ == "__main__":
    unittest.main()
