#!/usr/bin/python3
"""A cheap check of bench/vs_llama_server.py without either server or a model (run by ctest): a fake
server on a loopback port streams as sonde serve's /v1/completions and llama-server's /completion do
(llama-server's with one token held back per request, as it holds a token whose text ends inside a
UTF-8 character), and the closed-loop driver must count every token, time the first, and send the
fields that make each server generate exactly max_tokens; the percentiles are nearest-rank."""
from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_llama_server as vs  # noqa: E402

FIRST, GAP = 0.15, 0.01  # the fake's time to the first token and between tokens, s
seen: list[tuple[str, dict]] = []


class Fake(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def event(self, obj) -> None:
        self.wfile.write(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        seen.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(FIRST)
        if self.path == "/v1/completions":  # sonde serve: one chunk per token, then the finish, then [DONE]
            for i in range(body["max_tokens"]):
                self.event({"choices": [{"text": "x", "token_ids": [i], "finish_reason": None}]})
                time.sleep(GAP)
            self.event({"choices": [{"text": "", "token_ids": [], "finish_reason": "length"}]})
            self.event(b"[DONE]")
        else:  # llama-server: the second token is never streamed (nor the first after an odd-length
            # prompt), the next event's tokens_predicted and the final event count them
            for i in range(body["n_predict"]):
                if i != 1 and not (i == 0 and len(body["prompt"]) % 2):
                    self.event({"content": "x", "tokens": [i], "stop": False, "tokens_predicted": i + 1})
                time.sleep(GAP)
            self.event({"content": "", "tokens": [], "stop": True, "tokens_predicted": body["n_predict"]})


def main() -> None:
    srv = ThreadingHTTPServer((vs.HOST, 0), Fake)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    a = SimpleNamespace(seed=3, requests=6, prompt_range=(4, 9), gen_range=(3, 7), think=0.0, timeout=30)
    reqs = vs.make_requests(a, 1000)
    assert reqs == vs.make_requests(a, 1000), "the request list is seeded"
    assert all(4 <= len(r["prompt"]) <= 9 and 3 <= r["max_tokens"] <= 7 and max(r["prompt"]) < 1000 for r in reqs)
    want = sum(r["max_tokens"] for r in reqs)
    odd = sum(len(r["prompt"]) % 2 for r in reqs)
    assert 0 < odd < 6, "the seed gives both kinds of prompt"
    for kind, path in (("sonde", "/v1/completions"), ("llama", "/completion")):
        seen.clear()
        server = SimpleNamespace(kind=kind, port=srv.server_address[1], cpu=lambda: 0.0)
        recs, host = vs.drive(server, 3, reqs, a)
        s = vs.summarize(recs)
        assert s["completed"] == s["requests"] == 6 and s["errors"] == 0 and s["short"] == 0, (kind, s)
        assert s["generated_tokens"] == want, (kind, s["generated_tokens"], want)
        assert s["held_back_tokens"] == (6 + odd if kind == "llama" else 0), (kind, s)
        assert s["ttft_seen"] == (6 - odd if kind == "llama" else 6), (kind, s)
        assert FIRST <= s["ttft_p50"] < FIRST + 1.0, (kind, s)
        assert GAP * 0.5 <= s["itl_p50"] < GAP + 0.5, (kind, s)
        assert s["tokens_per_s"] and s["seconds"] > FIRST, (kind, s)
        assert {p for p, _ in seen} == {path} and len(seen) == 6
        for _, b in seen:
            assert b["temperature"] == 0 and b["stream"] is True and isinstance(b["prompt"], list)
            if kind == "llama":
                assert b["ignore_eos"] is True and b["cache_prompt"] is False and "n_predict" in b
            else:
                assert "max_tokens" in b and "ignore_eos" not in b
        rows = vs.request_rows(recs)
        assert [r["index"] for r in rows] == list(range(6))
        assert all((r["ttft"] is None) == (kind == "llama" and r["prompt_tokens"] % 2 == 1) for r in rows), rows
        assert all(r["ttft"] is None or r["ttft"] >= FIRST for r in rows)
        assert all(r["end"] >= r["send"] + FIRST + GAP * (r["max_tokens"] - 1) for r in rows), rows
    srv.shutdown()
    xs = list(range(1, 101))
    assert (vs.pct(xs, 50), vs.pct(xs, 90), vs.pct(xs, 99), vs.pct([7.0], 99), vs.pct([], 50)) == (50, 90, 99, 7.0, None)
    assert vs.id_ceiling({"vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": [151645, 151643]}) == 151643
    print("vs_llama_server selftest: ok")


if __name__ == "__main__":
    main()
