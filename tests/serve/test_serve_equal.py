"""sonde serve answers as the command line does: greedy and seeded completions over token-id
prompts equal `sonde generate` token for token (Qwen2 and Dream), echo + logprobs equal
`sonde score`, /v1/activations equals `sonde forward`'s rows bit for bit, a steered request
equals `generate --steer`, and a streamed request equals the same request unstreamed."""
import base64
import json
import os
import random
import subprocess
import unittest

import h5py

from serve_util import Server, ServeCase, generate_json, run_sonde, write_npy

PROMPTS = [[1, 2, 3], [17, 400, 9, 33, 250], [1000, 5], [7] * 9]
HOOK = "blocks.0.hook_resid_post"


class Qwen2(ServeCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.files = os.path.join(cls.root, "files")
        os.mkdir(cls.files)
        cls.server = Server(cls.qwen, "--files-dir", cls.files)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        super().tearDownClass()

    def complete(self, body):
        status, out = self.server.post("/v1/completions", body)
        self.assertEqual(status, 200, out)
        return out

    def test_greedy_completions_equal_generate(self):
        want = generate_json(self.qwen, PROMPTS, "--max-new-tokens", "6", "--temperature", "0")
        for ids, w in zip(PROMPTS, want):
            out = self.complete({"prompt": ids, "max_tokens": 6, "temperature": 0})
            self.assertEqual(out["choices"][0]["token_ids"], w["completion_ids"])
            self.assertEqual(out["choices"][0]["text"], w["completion"])
            self.assertEqual(out["usage"]["completion_tokens"], len(w["completion_ids"]))
        # The list-of-lists form: one choice per prompt, in order.
        out = self.complete({"prompt": PROMPTS, "max_tokens": 6, "temperature": 0})
        self.assertEqual([c["index"] for c in out["choices"]], list(range(len(PROMPTS))))
        self.assertEqual([c["token_ids"] for c in out["choices"]], [w["completion_ids"] for w in want])

    def test_seeded_sampling_equals_generate(self):
        want = generate_json(self.qwen, [PROMPTS[1]], "--max-new-tokens", "8", "--temperature", "1.5", "--seed", "11")
        out = self.complete({"prompt": PROMPTS[1], "max_tokens": 8, "temperature": 1.5, "seed": 11})
        self.assertEqual(out["choices"][0]["token_ids"], want[0]["completion_ids"])

    def test_echo_logprobs_equal_score(self):
        prompt, completion = [5, 80, 300, 12], [44, 901, 3]
        path = os.path.join(self.root, "score.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps({"ids": prompt, "completion_ids": completion}) + "\n")
        run_sonde("score", "--model", self.qwen, "--input", path, "--output", path + ".out", "--overwrite")
        with open(path + ".out") as f:
            want = json.loads(f.readline())["token_logprobs"]
        out = self.complete({"prompt": prompt + completion, "max_tokens": 0, "echo": True, "logprobs": 1})
        c = out["choices"][0]
        self.assertEqual(c["prompt_token_ids"], prompt + completion)
        self.assertEqual(c["token_ids"], [])
        lp = c["logprobs"]["token_logprobs"]
        self.assertIsNone(lp[0])
        self.assertEqual(lp[len(prompt):], want)  # the same doubles
        self.assertEqual(len(c["logprobs"]["top_logprobs"][1]), 1)

    def test_lm_eval_loglikelihood_request(self):
        """The request lm-evaluation-harness's local-completions sends for log-likelihoods (a batch of
        id lists, echo, max_tokens 1, logprobs 1), read as it reads it: token_logprobs[ctxlen:-1]."""
        pairs = [([5, 80, 300, 12], [44, 901, 3]), ([7, 7], [1999])]
        path = os.path.join(self.root, "lm-eval.jsonl")
        with open(path, "w") as f:
            for ctx, cont in pairs:
                f.write(json.dumps({"ids": ctx, "completion_ids": cont}) + "\n")
        run_sonde("score", "--model", self.qwen, "--input", path, "--output", path + ".out", "--overwrite")
        with open(path + ".out") as f:
            want = [json.loads(line) for line in f]
        out = self.complete({"model": "qwen2", "prompt": [c + k for c, k in pairs], "max_tokens": 1, "temperature": 0,
                             "logprobs": 1, "echo": True, "seed": 1234})
        for (ctx, cont), choice, w in zip(pairs, sorted(out["choices"], key=lambda c: c["index"]), want):
            lp = choice["logprobs"]
            self.assertEqual(len(lp["token_logprobs"]), len(ctx) + len(cont) + 1)  # prompt, then the one generated
            tokens = lp["token_logprobs"][len(ctx):-1]
            self.assertEqual(tokens, w["token_logprobs"])
            self.assertEqual(sum(tokens), sum(w["token_logprobs"]))
            for top in lp["top_logprobs"][len(ctx):-1]:  # is_greedy reads max(top.values())
                self.assertEqual(len(top), 1)

    def test_activations_equal_forward(self):
        ids = [3, 77, 1500, 42, 9]
        hooks = f"{HOOK},blocks.1.mlp.hook_post"
        out_h5 = os.path.join(self.root, "fwd.h5")
        run_sonde("forward", "--model", self.qwen, "--ids", ",".join(map(str, ids)), "--hooks", hooks,
                  "--out", out_h5, "--overwrite")
        status, out = self.server.post("/v1/activations", {"prompt": ids, "hooks": hooks, "logits": True})
        self.assertEqual(status, 200, out)
        with h5py.File(out_h5, "r") as f:
            for name in (HOOK, "blocks.1.mlp.hook_post"):
                a = out["activations"][name]
                want = f["acts/" + name][()]
                self.assertEqual(a["dtype"], "f32")
                self.assertEqual(a["shape"], list(want.shape))
                self.assertEqual(base64.b64decode(a["data"]), want.astype("<f4").tobytes())  # bit for bit
                self.assertEqual(a["rows"]["position"], list(f["rows/pos"][()]))
                self.assertEqual(a["rows"]["token"], list(f["rows/token_id"][()]))
                self.assertEqual(a["rows"]["step"], list(f["rows/step"][()]))
            self.assertEqual(base64.b64decode(out["logits"]["data"]), f["logits"][()].astype("<f4").tobytes())

    def test_generation_hooks_equal_generate(self):
        ids = [12, 13, 14]
        out_h5 = os.path.join(self.root, "gen.h5")
        run_sonde("generate", "--model", self.qwen, "--ids", ",".join(map(str, ids)), "--max-new-tokens", "4",
                  "--temperature", "0", "--hooks", HOOK, "--out", out_h5, "--overwrite")
        c = self.complete({"prompt": ids, "max_tokens": 4, "temperature": 0, "hooks": HOOK})["choices"][0]
        with h5py.File(out_h5, "r") as f:
            want = f["acts/" + HOOK][()]
            self.assertEqual(base64.b64decode(c["activations"][HOOK]["data"]), want.astype("<f4").tobytes())
            self.assertEqual(c["activations"][HOOK]["rows"]["position"], list(f["rows/pos"][()]))
            self.assertEqual(c["activations"][HOOK]["rows"]["step"], list(f["rows/step"][()]))

    def test_activations_file_equals_generate_out(self):
        ids = [30, 31, 32, 33]
        want_h5 = os.path.join(self.root, "gen-want.h5")
        run_sonde("generate", "--model", self.qwen, "--ids", ",".join(map(str, ids)), "--max-new-tokens", "3",
                  "--temperature", "0", "--hooks", HOOK, "--positions", "generated", "--out", want_h5, "--overwrite")
        body = {"prompt": ids, "max_tokens": 3, "temperature": 0, "hooks": HOOK, "positions": "generated",
                "activations_file": "server-gen.h5"}
        out = self.complete(body)
        self.assertEqual(out["activations_file"], os.path.join(os.path.realpath(self.files), "server-gen.h5"))
        self.assertNotIn("activations", out["choices"][0])
        with h5py.File(want_h5, "r") as w, h5py.File(out["activations_file"], "r") as g:
            self.assertEqual(g["acts/" + HOOK][()].tobytes(), w["acts/" + HOOK][()].tobytes())
            for col in ("pos", "token_id", "step", "kind", "prompt_idx"):
                self.assertEqual(list(g["rows/" + col][()]), list(w["rows/" + col][()]), col)
            self.assertEqual(list(g["prompts/token_ids"][()]), list(w["prompts/token_ids"][()]))
        status, again = self.server.post("/v1/completions", body)  # never over an existing file
        self.assertEqual((status, again["error"]["param"]), (400, "activations_file"), again)

    def test_steered_request_equals_generate_steer(self):
        rng = random.Random(5)
        vec = [rng.uniform(-1, 1) for _ in range(64)]
        npy = os.path.join(self.files, "v.npy")
        write_npy(npy, vec)
        ids = PROMPTS[1]
        plain = generate_json(self.qwen, [ids], "--max-new-tokens", "6", "--temperature", "0")[0]["completion_ids"]
        want = generate_json(self.qwen, [ids], "--max-new-tokens", "6", "--temperature", "0",
                             "--steer", f"{HOOK}={npy}*8")[0]["completion_ids"]
        self.assertNotEqual(want, plain, "the steering vector must change the tokens for this test to mean anything")
        inline = self.complete({"prompt": ids, "max_tokens": 6, "temperature": 0,
                                "steer": [{"hook": HOOK, "vector": vec, "scale": 8}]})
        self.assertEqual(inline["choices"][0]["token_ids"], want)
        named = self.complete({"prompt": ids, "max_tokens": 6, "temperature": 0, "steer": [f"{HOOK}=v.npy*8"]})
        self.assertEqual(named["choices"][0]["token_ids"], want)
        # The same request without steer is unchanged afterwards: edits are the request's own.
        self.assertEqual(self.complete({"prompt": ids, "max_tokens": 6, "temperature": 0})["choices"][0]["token_ids"], plain)

    def test_files_outside_files_dir_are_refused(self):
        for src in ["/etc/passwd", "../v.npy", "sub/../../v.npy"]:
            status, out = self.server.post("/v1/completions", {"prompt": [1, 2], "steer": [f"{HOOK}={src}*2"]})
            self.assertEqual(status, 400, out)
            self.assertIn("outside --files-dir", out["error"]["message"])
            status, out = self.server.post("/v1/completions", {"prompt": [1, 2], "edits": [
                {"hook": HOOK, "op": "add", "vector": src}]})
            self.assertEqual(status, 400, out)

    def test_stream_equals_unstreamed(self):
        body = {"prompt": "hello world", "max_tokens": 7, "temperature": 0}
        whole = self.complete(body)["choices"][0]
        status, events, done = self.server.stream("/v1/completions", dict(body, stream=True))
        self.assertEqual(status, 200)
        self.assertTrue(done, "the stream must end with data: [DONE]")
        ids = [t for e in events for t in e["choices"][0]["token_ids"]]
        self.assertEqual(ids, whole["token_ids"])
        self.assertEqual("".join(e["choices"][0]["text"] for e in events), whole["text"])
        self.assertEqual(events[-1]["choices"][0]["finish_reason"], whole["finish_reason"])

    def test_curl(self):
        """The same requests with curl, as docs/serve.md shows them."""
        base = self.server.base
        run = lambda *a: subprocess.run(["curl", "-sS", "--max-time", "60", *a], capture_output=True, text=True,
                                        timeout=90, check=True).stdout
        self.assertEqual(json.loads(run(base + "/health")), {"status": "ok"})
        body = {"prompt": [4, 5, 6], "max_tokens": 5, "temperature": 0}
        want = generate_json(self.qwen, [[4, 5, 6]], "--max-new-tokens", "5", "--temperature", "0")[0]
        out = json.loads(run("-H", "Content-Type: application/json", "-d", json.dumps(body), base + "/v1/completions"))
        self.assertEqual(out["choices"][0]["token_ids"], want["completion_ids"])
        sse = run("-N", "-d", json.dumps(dict(body, stream=True)), base + "/v1/completions")
        events = [line[6:] for line in sse.splitlines() if line.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual([t for e in events[:-1] for t in json.loads(e)["choices"][0]["token_ids"]], want["completion_ids"])

    def test_chat_uses_the_template(self):
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0}
        status, out = self.server.post("/v1/chat/completions", body)
        self.assertEqual(status, 200, out)
        c = out["choices"][0]
        self.assertEqual(c["message"]["role"], "assistant")
        # The rendered chat as a prompt gives the same tokens: the template is the model's.
        rendered = run_sonde("generate", "--model", self.qwen, "--prompt", "hi", "--chat", "--max-new-tokens", "5",
                             "--temperature", "0", "--json").stdout
        self.assertEqual(c["token_ids"], json.loads(rendered)["completion_ids"])
        self.assertEqual(out["usage"]["prompt_tokens"], len(json.loads(rendered)["prompt_ids"]))


class Dream(ServeCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server = Server(cls.dream)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        super().tearDownClass()

    def test_completions_equal_generate(self):
        for extra, flags in [({}, []), ({"alg": "maskgit_plus"}, ["--alg", "maskgit_plus"]),
                             ({"temperature": 0.7, "seed": 3}, ["--temperature", "0.7", "--seed", "3"])]:
            want = generate_json(self.dream, PROMPTS[:2], "--max-new-tokens", "6", "--steps", "3", *flags)
            for i, (ids, w) in enumerate(zip(PROMPTS[:2], want)):
                body = dict({"prompt": ids, "max_tokens": 6, "steps": 3}, **extra)
                if "seed" in extra:  # generate's prompt r draws with seed + r
                    body["seed"] = extra["seed"] + i
                status, out = self.server.post("/v1/completions", body)
                self.assertEqual(status, 200, out)
                self.assertEqual(out["choices"][0]["token_ids"], w["completion_ids"], extra)

    def test_stream_sends_each_canvas(self):
        body = {"prompt": PROMPTS[0], "max_tokens": 6, "steps": 3}
        want = generate_json(self.dream, [PROMPTS[0]], "--max-new-tokens", "6", "--steps", "3", "--history")[0]
        status, events, done = self.server.stream("/v1/completions", dict(body, stream=True))
        self.assertEqual(status, 200)
        self.assertTrue(done)
        canvases = [e["choices"][0]["canvas"] for e in events if "canvas" in e["choices"][0]]
        self.assertEqual(len(canvases), 3)
        self.assertEqual(canvases, [h[len(PROMPTS[0]):] for h in want["history"]])
        self.assertEqual(events[-1]["choices"][0]["token_ids"], want["completion_ids"])

    def test_activations_file_equals_generate_out(self):
        files = os.path.join(self.root, "dfiles")
        os.makedirs(files, exist_ok=True)
        server = Server(self.dream, "--files-dir", files)
        try:
            want_h5 = os.path.join(self.root, "dream-want.h5")
            run_sonde("generate", "--model", self.dream, "--ids", "5,6,7", "--max-new-tokens", "4", "--steps", "4",
                      "--hooks", "blocks.0.hook_resid_post", "--diffusion-capture", "all", "--out", want_h5, "--overwrite")
            status, out = server.post("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 4, "steps": 4,
                                                           "hooks": "blocks.0.hook_resid_post", "diffusion_capture": "all",
                                                           "activations_file": "d.h5"})
            self.assertEqual(status, 200, out)
            with h5py.File(want_h5, "r") as w, h5py.File(out["activations_file"], "r") as g:
                name = "acts/blocks.0.hook_resid_post"
                self.assertEqual(g[name][()].tobytes(), w[name][()].tobytes())
                for col in ("pos", "token_id", "step", "kind"):
                    self.assertEqual(list(g["rows/" + col][()]), list(w["rows/" + col][()]), col)
                self.assertEqual(g["steps/step"].shape, w["steps/step"].shape)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_activations_equal_forward(self):
        ids = [9, 2047, 100, 5]  # 2047: the tiny Dream's mask id, a row of kind masked
        out_h5 = os.path.join(self.root, "dream-fwd.h5")
        run_sonde("forward", "--model", self.dream, "--ids", ",".join(map(str, ids)), "--hooks", HOOK,
                  "--out", out_h5, "--overwrite")
        status, out = self.server.post("/v1/activations", {"prompt": ids, "hooks": HOOK})
        self.assertEqual(status, 200, out)
        a = out["activations"][HOOK]
        with h5py.File(out_h5, "r") as f:
            self.assertEqual(base64.b64decode(a["data"]), f["acts/" + HOOK][()].astype("<f4").tobytes())
            self.assertEqual(a["rows"]["position"], list(f["rows/pos"][()]))
            names = ["prompt", "generated", "special", "masked", "committed"]  # RowKind's values (sink.h)
            self.assertEqual(a["rows"]["kind"], [names[k] for k in f["rows/kind"][()]])
        self.assertIn("masked", a["rows"]["kind"])

    def test_ar_only_fields_are_refused(self):
        for body, field in [({"prompt": [1], "logprobs": 1}, "logprobs"), ({"prompt": [1], "echo": True}, "echo"),
                            ({"prompt": [1], "stop": ["x"]}, "stop")]:
            status, out = self.server.post("/v1/completions", body)
            self.assertEqual(status, 400, out)
            self.assertEqual(out["error"]["param"], field)


if __name__ == "__main__":
    unittest.main()
