"""sonde serve under bad clients: the API key, 200 malformed requests (bad JSON, wrong types, huge
numbers, unknown hooks, paths outside --files-dir, oversized bodies, slow clients) each refused
with an OpenAI error object and the server still answering, the bounded queue (429), a client
that disconnects cancelling its request, /metrics, and SIGTERM ending the process with 0."""
import http.client
import json
import os
import re
import socket
import subprocess
import threading
import time
import unittest

from serve_util import SONDE, Server, ServeCase

HOOK = "blocks.0.hook_resid_post"


def malformed_requests():
    """(path, raw body bytes) pairs, each one a client error."""
    bodies = [b"", b"[1", b"{", b"nul", b"\xff\xfe", b"[]", b"3", b'"x"', b"[" * 100 + b"]" * 100]
    fields = [
        {"prompt": 5}, {"prompt": []}, {"prompt": [[]]}, {"prompt": [1, "a"]}, {"prompt": [1.5]},
        {"prompt": [-1]}, {"prompt": [2 ** 40]}, {"prompt": [2 ** 70]}, {"prompt": [[1], 7]}, {"prompt": ""},
        {"prompt": [1], "max_tokens": -1}, {"prompt": [1], "max_tokens": 1e9}, {"prompt": [1], "max_tokens": "3"},
        {"prompt": [1], "max_tokens": 10 ** 30}, {"prompt": [1], "temperature": -1}, {"prompt": [1], "temperature": "hot"},
        {"prompt": [1], "top_p": 0}, {"prompt": [1], "top_p": 7}, {"prompt": [1], "seed": -3}, {"prompt": [1], "seed": 1.5},
        {"prompt": [1], "stop": 3}, {"prompt": [1], "stop": [""]}, {"prompt": [1], "stream": "yes"},
        {"prompt": [1], "n": 2}, {"prompt": [1], "logprobs": 99}, {"prompt": [1], "logprobs": True},
        {"prompt": [1], "echo": 1}, {"prompt": [1], "frequency_penalty": 1}, {"prompt": [1], "logit_bias": {"1": 5}},
        {"prompt": [1], "steps": 4}, {"prompt": [1], "alg": "entropy"}, {"prompt": [1], "unknown_field": 1},
        {"prompt": [1], "hooks": "no.such.hook"}, {"prompt": [1], "hooks": ""}, {"prompt": [1], "hooks": 3},
        {"prompt": [1], "positions": "all"}, {"prompt": [1], "hooks": HOOK, "positions": "sideways"},
        {"prompt": [1], "hooks": HOOK, "storage": "f64"}, {"prompt": [1], "hooks": "blocks.0.attn.hook_pattern"},
        {"prompt": [1], "steer": ["%s=/etc/passwd*2" % HOOK]}, {"prompt": [1], "steer": ["%s=../x.npy" % HOOK]},
        {"prompt": [1], "steer": [{"hook": HOOK, "vector": [1.0, 2.0]}]},
        {"prompt": [1], "steer": [{"hook": HOOK, "vector": ["a"]}]}, {"prompt": [1], "steer": [{"hook": HOOK}]},
        {"prompt": [1], "steer": [{"hook": "nope", "vector": [0.0] * 64}]}, {"prompt": [1], "steer": "x"},
        {"prompt": [1], "edits": [{"hook": HOOK, "op": "explode"}]}, {"prompt": [1], "edits": 5},
        {"prompt": [1], "edits": [{"hook": HOOK, "op": "add", "vector": "/etc/hosts"}]},
        {"prompt": [1], "edits": [{"hook": HOOK, "op": "host"}]}, {"prompt": [1], "activations_file": "x.h5"},
        {"prompt": [1], "hooks": HOOK, "activations_file": "/tmp/x.h5"}, {"prompt": [1] * 5000, "max_tokens": 1},
        {"prompt": [1], "max_tokens": 0, "stream": True}, {"prompt": [[1], [2]], "stream": True},
        {"prompt": [1], "stream_options": {"include_usage": True}}, {"prompt": [1], "model": 3},
        {"prompt": [1], "stream": True, "echo": True},
    ]
    out = [("/v1/completions", b) for b in bodies]
    out += [("/v1/completions", json.dumps(f).encode()) for f in fields]
    chat = [{"messages": []}, {"messages": "hi"}, {"messages": [{"role": "robot", "content": "x"}]},
            {"messages": [{"role": "user"}]}, {"messages": [{"role": "user", "content": 5}]},
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
            {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 50}]
    out += [("/v1/chat/completions", json.dumps(c).encode()) for c in chat]
    acts = [{"prompt": [1]}, {"prompt": [1], "hooks": "zzz"}, {"prompt": [1], "messages": [], "hooks": HOOK},
            {"prompt": [[1], [2]], "hooks": HOOK}, {"prompt": [1], "hooks": HOOK, "positions": "last"},
            {"prompt": [1], "hooks": HOOK, "max_tokens": 3}]
    out += [("/v1/activations", json.dumps(a).encode()) for a in acts]
    return out


class Safety(ServeCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.files = os.path.join(cls.root, "files")
        os.mkdir(cls.files)
        cls.server = Server(cls.qwen, "--files-dir", cls.files, "--max-body", "65536", "--max-tokens-cap", "512")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        super().tearDownClass()

    def test_malformed_requests_then_a_good_one(self):
        reqs = malformed_requests()
        sent = 0
        while sent < 200:  # the list, repeated to 200
            for path, raw in reqs:
                if sent == 200:
                    break
                status, out = self.server.request("POST", path, raw=raw)
                self.assertEqual(status, 400, (path, raw[:80], out))
                err = out["error"]
                self.assertEqual(err["type"], "invalid_request_error")
                self.assertTrue(err["message"], raw)
                sent += 1
        status, out = self.server.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0})
        self.assertEqual(status, 200, out)
        self.assertEqual(len(out["choices"][0]["token_ids"]), 3)

    def test_every_bad_field_is_named(self):
        for body, field in [({"prompt": [1], "top_p": 7}, "top_p"), ({"prompt": [1], "max_tokens": "3"}, "max_tokens"),
                            ({"prompt": [1, -1]}, "prompt"), ({"prompt": [1], "hooks": "zzz"}, "hooks"),
                            ({"prompt": [1], "bogus": 1}, "bogus"), ({"prompt": [1], "seed": -3}, "seed"),
                            ({"prompt": [1], "max_tokens": 600}, "max_tokens")]:
            status, out = self.server.post("/v1/completions", body)
            self.assertEqual((status, out["error"]["param"]), (400, field), out)
            self.assertIn(field, out["error"]["message"])

    def test_misspelt_and_inapplicable_fields_name_the_closest(self):
        """Fields are checked against the run options' table (run_schema.h), as Python's options are:
        a misspelt one is refused with the closest valid name, one that does not apply to the
        endpoint's run kind (a forward pass for /v1/activations) with the kinds it applies to."""
        cases = [
            ("/v1/completions", {"prompt": [1], "hooks": HOOK, "positons": "last"}, "positons",
             "positons: unknown field; did you mean: positions"),
            ("/v1/completions", {"prompt": [1], "temprature": 0}, "temprature",
             "temprature: unknown field; did you mean: temperature"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_token": 2}, "max_token",
             "max_token: unknown field; did you mean: max_tokens"),
            ("/v1/activations", {"prompt": [1], "hoks": HOOK}, "hoks", "hoks: unknown field; did you mean: hooks"),
            ("/v1/activations", {"prompt": [1], "hooks": HOOK, "seed": 3}, "seed",
             "seed: does not apply to a forward run (it applies to generate, score)"),
            ("/v1/activations", {"prompt": [1], "hooks": HOOK, "temperature": 0}, "temperature",
             "temperature: does not apply to a forward run (it applies to generate, lens)"),
            ("/v1/activations", {"prompt": [1], "hooks": HOOK, "stream": True}, "stream", "stream: unknown field"),
        ]
        for path, body, field, message in cases:
            status, out = self.server.post(path, body)
            self.assertEqual(status, 400, (path, body, out))
            self.assertEqual(out["error"], {"message": message, "type": "invalid_request_error", "param": field,
                                            "code": None}, (path, body))

    def test_oversized_body_is_413(self):
        status, out = self.server.post("/v1/completions", {"prompt": [1] * 30000})
        self.assertEqual(status, 413, out)
        self.assertIn("limit", out["error"]["message"])
        self.assertEqual(self.server.get("/health")[0], 200)

    def test_slow_clients_do_not_block_others(self):
        socks = []
        for _ in range(4):  # each holds a connection with half a request line
            s = socket.create_connection((self.server.host, self.server.port), timeout=5)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
            socks.append(s)
        try:
            status, out = self.server.post("/v1/completions", {"prompt": [4, 5], "max_tokens": 2}, timeout=30)
            self.assertEqual(status, 200, out)
        finally:
            for s in socks:
                s.close()

    def test_disconnect_cancels_the_request(self):
        before = self.server.metric("sonde_requests_cancelled_total") or 0
        conn = http.client.HTTPConnection(self.server.host, self.server.port, timeout=30)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": [1, 2], "max_tokens": 500, "stream": True}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        self.assertTrue(r.readline().startswith(b"data: "))
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        for _ in range(300):  # 30 s at most
            if (self.server.metric("sonde_requests_cancelled_total") or 0) > before and \
                    self.server.metric("sonde_requests_running") == 0:
                break
            time.sleep(0.1)
        self.assertGreater(self.server.metric("sonde_requests_cancelled_total"), before)
        self.assertEqual(self.server.metric("sonde_requests_running"), 0)
        self.assertEqual(self.server.post("/v1/completions", {"prompt": [1], "max_tokens": 1})[0], 200)

    def test_metrics(self):
        self.server.post("/v1/completions", {"prompt": [9, 9], "max_tokens": 3})
        status, text = self.server.get("/metrics")
        self.assertEqual(status, 200)
        for name in ["sonde_requests_total{endpoint=\"completions\",status=\"200\"}", "sonde_prompt_tokens_total",
                     "sonde_generation_tokens_total", "sonde_requests_waiting", "sonde_requests_running",
                     "sonde_time_to_first_token_seconds_bucket", "sonde_time_per_output_token_seconds_count"]:
            self.assertIn(name, text)
        self.assertGreaterEqual(self.server.metric("sonde_generation_tokens_total"), 3)
        # The engine's time counters: the 2-token prompt went through a prefill forward, the tokens
        # after the first through decode forwards, and those phases took time.
        self.assertGreaterEqual(self.server.metric("sonde_engine_prefill_tokens_total"), 2)
        self.assertGreaterEqual(self.server.metric("sonde_engine_decode_rows_total"), 2)
        phases = dict(re.findall(r'^sonde_engine_seconds_total\{phase="(\w+)"\} (\S+)$', text, re.M))
        self.assertEqual(sorted(phases), ["copy", "decode", "idle", "other_forward", "prefill", "wait"])
        self.assertGreater(float(phases["prefill"]), 0)
        self.assertGreater(float(phases["decode"]), 0)


class Deferred(ServeCase):
    """A non-streamed request still running after a second: a chunked body of newlines (JSON's
    leading whitespace) until the answer, so that a client that hangs up is noticed."""

    def test_long_request_and_its_disconnect(self):
        server = Server(self.qwen, "--max-context", "8192", "--max-tokens-cap", "8000")
        try:
            status, out = server.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 4000, "temperature": 0})
            self.assertEqual(status, 200, str(out)[:200])
            self.assertEqual(len(out["choices"][0]["token_ids"]), 4000)  # json.loads took the leading newlines
            before = server.metric("sonde_requests_cancelled_total") or 0
            s = socket.create_connection((server.host, server.port), timeout=30)
            body = json.dumps({"prompt": [1, 2], "max_tokens": 7900, "temperature": 0}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            s.recv(64)  # the status line: the request runs (the handler waited its second)
            s.close()
            for _ in range(300):  # noticed at the next newline, within 30 s
                if (server.metric("sonde_requests_cancelled_total") or 0) > before and server.metric("sonde_requests_running") == 0:
                    break
                time.sleep(0.1)
            self.assertGreater(server.metric("sonde_requests_cancelled_total"), before)
            self.assertEqual(server.metric("sonde_requests_running"), 0)
        finally:
            self.assertEqual(server.stop(), 0)


class Keyed(ServeCase):
    def test_api_key(self):
        server = Server(self.qwen, "--api-key", "s3cret")
        try:
            self.assertEqual(server.get("/health", key="")[0], 200)  # health needs no key
            for path in ["/v1/models", "/metrics"]:
                status, out = server.get(path, key="wrong")
                self.assertEqual(status, 401, out)
                self.assertEqual(server.get(path)[0], 200)
            status, out = server.post("/v1/completions", {"prompt": [1], "max_tokens": 1}, key="")
            self.assertEqual((status, out["error"]["type"]), (401, "authentication_error"))
            self.assertEqual(server.post("/v1/completions", {"prompt": [1], "max_tokens": 1})[0], 200)
        finally:
            self.assertEqual(server.stop(), 0)


class Busy(ServeCase):
    def test_full_queue_is_429_and_sigterm_exits_0(self):
        server = Server(self.qwen, "--slots", "1", "--max-waiting", "1")
        results = []

        def client():
            results.append(server.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 1000}))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        codes = sorted(s for s, _ in results)
        self.assertIn(200, codes)
        self.assertIn(429, codes)
        for status, out in results:
            if status == 429:
                self.assertEqual(out["error"]["type"], "rate_limit_error")
        # SIGTERM while a request streams: the stream ends, the process exits 0.
        conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": [3], "max_tokens": 2000, "stream": True}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        self.assertTrue(r.readline().startswith(b"data: "))
        self.assertEqual(server.stop(), 0)
        conn.close()

    def test_bad_flags_exit_2(self):
        for flags in [["--port", "70000"], ["--slots", "0"], ["--files-dir", "/no/such/dir"], ["--max-body", "10"]]:
            p = subprocess.run([SONDE, "serve", "--model", self.qwen, *flags], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, (flags, p.stderr))
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn(flags[0], p.stderr)
        server = Server(self.qwen)  # a port in use is refused, not shared
        try:
            p = subprocess.run([SONDE, "serve", "--model", self.qwen, "--port", str(server.port)], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--host/--port", p.stderr)
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
