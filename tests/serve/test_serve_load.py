"""sonde serve under load: 16 concurrent clients send 200 mixed requests (SONDE_SERVE_LOAD=C,R for others) (greedy and seeded, some
steered, some with hooks, some streamed, some cancelled midway) to a Qwen2 and a Dream server.
Every completed response equals the same request run alone on the idle server beforehand (the
engine's batch invariance, seen from outside), in three rounds; the servers keep answering, no job
or request thread outlives its request, and resident memory stays bounded."""
import http.client
import json
import os
import queue
import random
import socket
import threading
import unittest

from serve_util import Server, ServeCase

HOOK = "blocks.1.hook_resid_post"
# The full load (32 clients, 1,000 requests) by hand: SONDE_SERVE_LOAD=32,1000.
CLIENTS, REQUESTS = map(int, os.environ.get("SONDE_SERVE_LOAD", "16,200").split(","))
ASAN = "ASAN_OPTIONS" in os.environ  # CI's sanitizer stage sets it


def make_requests(seed):
    rng = random.Random(seed)
    vec = [rng.uniform(-1, 1) for _ in range(64)]
    out = []
    for i in range(REQUESTS):
        dream = i % 4 == 3  # a quarter to the Dream server
        body = {"prompt": [rng.randrange(0, 2000) for _ in range(rng.randint(1, 12))],
                "max_tokens": rng.randint(2, 10)}
        kind = rng.choice(["greedy", "sampled", "steered", "hooks", "stream", "cancel", "text"])
        if kind == "text":  # the tokenizer on many handler threads at once
            words = ["alpha", "beta", "sonde", "probe", " the", "quick", "étoile", "42", "\n"]
            body["prompt"] = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        if dream:
            body["steps"] = rng.randint(1, body["max_tokens"])
            if kind == "sampled":
                body.update(temperature=0.8, seed=rng.randrange(1000))
        elif kind == "sampled":
            body.update(temperature=0.9, top_p=0.95, seed=rng.randrange(1000))
        else:
            body["temperature"] = 0
        if kind == "steered":
            body["steer"] = [{"hook": "blocks.0.hook_resid_post", "vector": vec, "scale": rng.choice([2, 6])}]
        if kind == "hooks":
            body["hooks"] = HOOK
        if kind == "cancel":
            body["max_tokens"] = 400 if not dream else 60
            body["steps"] = 60 if dream else body.get("steps")
            if body["steps"] is None:
                del body["steps"]
        out.append({"server": "dream" if dream else "qwen", "kind": kind, "body": body})
    return out


def answer(server, req):
    """What the client keeps of a response: token ids, and activations or streamed canvases."""
    body = req["body"]
    if req["kind"] == "cancel":  # read the first event, then hang up
        conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
        conn.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
        r = conn.getresponse()
        first = r.readline()
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        return {"status": r.status, "first": first.startswith(b"data: ")}
    if req["kind"] == "stream":
        status, events, done = server.stream("/v1/completions", dict(body, stream=True))
        ids = [t for e in events for t in e["choices"][0].get("token_ids", [])]
        canvases = [e["choices"][0]["canvas"] for e in events if "canvas" in e["choices"][0]]
        if canvases:  # diffusion: the last chunk has the completion
            ids = events[-1]["choices"][0]["token_ids"]
        return {"status": status, "done": done, "ids": ids, "canvases": canvases}
    status, out = server.post("/v1/completions", body)
    if status != 200:
        return {"status": status, "error": out}
    c = out["choices"][0]
    return {"status": status, "ids": c["token_ids"], "acts": c.get("activations")}


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Load(ServeCase):
    def test_concurrent_mixed_requests_equal_solo_runs(self):
        servers = {"qwen": Server(self.qwen, "--slots", "8", "--max-waiting", "256"),
                   "dream": Server(self.dream, "--slots", "8", "--max-waiting", "256")}
        try:
            reqs = make_requests(7)
            # Alone: one request at a time on an idle server.
            solo = [answer(servers[r["server"]], r) if r["kind"] != "cancel" else None for r in reqs]
            for r, a in zip(reqs, solo):
                if a is not None:
                    self.assertEqual(a["status"], 200, (r, a))
            cancelled_before = servers["qwen"].metric("sonde_requests_cancelled_total") or 0
            # Resident memory follows the largest batch shapes seen so far (the executor's buffer
            # pool) and the allocator's per-thread arenas: measured on the Dream server, +17 MB in
            # one round after two warm-up rounds in one run of six, +0.3 to +1.3 MB a round of
            # 1,000 once warm. So the bound here is loose (a leak of whole responses would pass it
            # within a few rounds), and what leaks precisely is counted instead: no job or engine
            # thread may outlive its request (sonde_jobs_live, sonde_engine_threads). Under
            # AddressSanitizer, whose quarantine keeps freed memory resident, one round.
            rounds = 1 if ASAN else 3
            for _ in range(rounds - 1):
                self.together(servers, reqs, solo)
            rss_before = {k: rss_kb(s.proc.pid) for k, s in servers.items()}
            self.together(servers, reqs, solo)
            n_cancel = sum(r["kind"] == "cancel" and r["server"] == "qwen" for r in reqs)
            for _ in range(300):  # the hung-up requests end within 30 s
                if all(s.metric("sonde_requests_running") == 0 for s in servers.values()):
                    break
                threading.Event().wait(0.1)
            for _ in range(300):  # the hung-up streams' handlers let go of their jobs within 30 s
                if all(s.metric("sonde_jobs_live") == 0 and s.metric("sonde_engine_threads") == 0 for s in servers.values()):
                    break
                threading.Event().wait(0.1)
            for s in servers.values():  # no request, job or thread left behind
                self.assertEqual(s.metric("sonde_requests_running"), 0)
                self.assertEqual(s.metric("sonde_requests_waiting"), 0)
                self.assertEqual(s.metric("sonde_jobs_live"), 0)
                self.assertEqual(s.metric("sonde_engine_threads"), 0)
            if n_cancel:
                self.assertGreater(servers["qwen"].metric("sonde_requests_cancelled_total"), cancelled_before)
            for k, s in servers.items():
                after = rss_kb(s.proc.pid)
                if not ASAN:
                    self.assertLess(after, rss_before[k] * 1.5 + 16384, f"{k}: RSS {rss_before[k]} kB -> {after} kB")
                self.assertEqual(s.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2})[0], 200)
        finally:
            for s in servers.values():
                self.assertEqual(s.stop(), 0)

    def together(self, servers, reqs, solo):
        """CLIENTS clients take the requests from one queue; each answer must equal its solo run."""
        work = queue.Queue()
        for i in range(len(reqs)):
            work.put(i)
        together = [None] * len(reqs)
        errors = []

        def client():
            while True:
                try:
                    i = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    together[i] = answer(servers[reqs[i]["server"]], reqs[i])
                except Exception as e:  # reported below with the request
                    errors.append((i, repr(e)))

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        self.assertFalse(any(t.is_alive() for t in threads), "clients still running after 600 s")
        self.assertEqual(errors, [])
        for i, (r, a, b) in enumerate(zip(reqs, solo, together)):
            if r["kind"] == "cancel":
                self.assertEqual(b["status"], 200, (i, r))
                continue
            self.assertEqual(b["status"], 200, (i, r, b))
            self.assertEqual(b["ids"], a["ids"], (i, r))
            if r["kind"] == "hooks":
                self.assertEqual(b["acts"][HOOK]["data"], a["acts"][HOOK]["data"], (i, r))
                self.assertEqual(b["acts"][HOOK]["rows"], a["acts"][HOOK]["rows"], (i, r))
            if r["kind"] == "stream":
                self.assertTrue(b["done"], (i, r))
                self.assertEqual(b["canvases"], a["canvases"], (i, r))
        for _ in range(300):  # the hung-up requests end within 30 s
            if all(s.metric("sonde_requests_running") == 0 for s in servers.values()):
                break
            threading.Event().wait(0.1)


if __name__ == "__main__":
    unittest.main()
