"""One contract for every front end (issue 29): the command line, Python and the server refuse the
same misspelt option with the same closest valid name (one rule, did_you_mean.h), and Python and
the server an inapplicable one through the same table (run_schema.h) with the same run kinds.
Python names the option in its nested place (capture.positions), the server by its flat field
(positions), the command line by its flag (--positions); the names suggested are the same."""
import re
import subprocess
import unittest

import sonde

from serve_util import SONDE, Server, ServeCase

HOOK = "blocks.0.hook_resid_post"


def suggestion(message):
    """The closest valid name a refusal offers ("...; did you mean: a, b" -> "a")."""
    m = re.search(r"; did you mean: (?:--)?([^,\s]+)", message)
    return m.group(1) if m else None


class SameRefusals(ServeCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server = Server(cls.qwen)
        cls.model = sonde.Model(cls.qwen)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        super().tearDownClass()

    def python_refusal(self, options):
        with self.assertRaises(sonde.BadInput) as ctx:
            self.model._run([{"ids": [1, 2]}], options)
        return str(ctx.exception)

    def server_refusal(self, path, body):
        status, out = self.server.post(path, body)
        self.assertEqual(status, 400, out)
        return out["error"]["param"], out["error"]["message"]

    def cli_refusal(self, flag, value):
        p = subprocess.run([SONDE, "generate", "--model", self.qwen, "--ids", "1,2", "--max-new-tokens", "1",
                            f"--{flag}", str(value)], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        return p.stderr.strip()

    def test_a_misspelt_option_gets_the_same_closest_name(self):
        gen = {"kind": "generate", "defaults": {"max_new_tokens": 1}}
        for key, python_options, body, expected in [
            ("positons", {**gen, "capture": {"hooks": HOOK, "positons": "last"}},
             {"prompt": [1, 2], "max_tokens": 1, "hooks": HOOK, "positons": "last"}, "positions"),
            ("temprature", {"kind": "generate", "defaults": {"max_new_tokens": 1, "temprature": 0}},
             {"prompt": [1, 2], "max_tokens": 1, "temprature": 0}, "temperature"),
            ("hoks", {**gen, "capture": {"hoks": HOOK}}, {"prompt": [1, 2], "max_tokens": 1, "hoks": HOOK}, "hooks"),
            ("sead", {**gen, "sead": 1}, {"prompt": [1, 2], "max_tokens": 1, "sead": 1}, "seed"),
            ("stepz", {"kind": "generate", "defaults": {"max_new_tokens": 1, "stepz": 2}},
             {"prompt": [1, 2], "max_tokens": 1, "stepz": 2}, "steps"),
        ]:
            py = self.python_refusal(python_options)
            field, http = self.server_refusal("/v1/completions", body)
            cli = self.cli_refusal(key, body[key])
            self.assertIn(f'"{key}"', py)
            self.assertEqual(field, key, http)
            self.assertIn(f"'--{key}'", cli)
            self.assertEqual((suggestion(py), suggestion(http), suggestion(cli)), (expected,) * 3, (py, http, cli))

    def test_an_option_of_another_run_kind_is_refused_with_the_same_kinds(self):
        # /v1/activations is a forward run: a seed and generation settings do not apply to it.
        for field, python_options, body in [
            ("seed", {"kind": "forward", "seed": 3}, {"prompt": [1, 2], "hooks": HOOK, "seed": 3}),
            ("temperature", {"kind": "forward", "defaults": {"temperature": 0}},
             {"prompt": [1, 2], "hooks": HOOK, "temperature": 0}),
        ]:
            py = self.python_refusal(python_options)
            param, http = self.server_refusal("/v1/activations", body)
            self.assertEqual(param, field, http)
            tail = re.search(r"does not apply to a forward run \(it applies to [a-z, ]+\)$", http)
            self.assertIsNotNone(tail, http)
            self.assertTrue(py.endswith(tail.group(0)), (py, http))


if __name__ == "__main__":
    unittest.main()
