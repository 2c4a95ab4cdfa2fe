"""sonde serve over a tensor-parallel job (issue 30): `mpiexec -n 2 sonde serve --backend sharded`
on loopback TCP answers as the one-process server does (tokens exactly, log-probabilities and
activations within the tensor-parallel tolerance of tests/mpi/tp_test.sh), with requests that
share the engine's steps, a steered one, a streamed one cancelled midway, Dream's denoising; it
stops cleanly on SIGTERM, and a rank that dies ends the whole job promptly instead of hanging."""
import base64
import concurrent.futures
import os
import shutil
import signal
import struct
import subprocess
import time
import unittest

from serve_util import Server, ServeCase

MPIEXEC = shutil.which("mpiexec")
# Open MPI as root, over TCP on loopback only (it stands in for two machines), as tests/mpi does.
ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
LAUNCH = [MPIEXEC or "mpiexec", "-n", "2", "--oversubscribe", "--bind-to", "none",
          "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
SHARDED = ["--backend", "sharded", "--tensor-parallel", "2", "--threads", "1"]
PROMPTS = [[1, 2, 3], [17, 400, 9, 33, 250], [1000, 5], [7] * 9, [3, 17, 250, 9, 42, 1000, 7, 64]]
HOOK = "blocks.1.hook_resid_post"
TOL = 1e-5


def floats(b64):
    raw = base64.b64decode(b64)
    return struct.unpack("<%df" % (len(raw) // 4), raw)


def close(a, b, tol=TOL):
    scale = max([1.0] + [abs(x) for x in a])
    return len(a) == len(b) and all(abs(x - y) <= tol * scale for x, y in zip(a, b))


@unittest.skipUnless(MPIEXEC, "mpiexec is not installed")
class Sharded(ServeCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        os.environ.update(ENV)
        cls.one = {m: Server(getattr(cls, m), "--threads", "1") for m in ("qwen", "dream")}
        cls.tp = {m: Server(getattr(cls, m), *SHARDED, launcher=LAUNCH) for m in ("qwen", "dream")}

    @classmethod
    def tearDownClass(cls):
        for s in list(cls.one.values()) + list(cls.tp.values()):
            s.stop()
        super().tearDownClass()

    def both(self, model, path, bodies):
        """Every body sent to both servers at once (the requests share the engines' steps)."""
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            got = {name: list(pool.map(lambda b: s[model].post(path, b), bodies)) for name, s in
                   (("one", self.one), ("tp", self.tp))}
        for name in got:
            for status, out in got[name]:
                self.assertEqual(status, 200, (name, out))
        return [o for _, o in got["one"]], [o for _, o in got["tp"]]

    def test_prints_its_ranks(self):
        self.assertIn("(2 ranks, tensor parallel)", self.tp["qwen"].banner)
        self.assertNotIn("ranks", self.one["qwen"].banner)
        status, out = self.tp["qwen"].get("/v1/models")
        self.assertEqual(status, 200, out)
        self.assertEqual(out["data"][0]["sonde"]["arch"], "qwen2")

    def test_concurrent_greedy_seeded_and_steered_completions_equal_one_process(self):
        bodies = [{"prompt": p, "max_tokens": 8, "temperature": 0} for p in PROMPTS]
        bodies.append({"prompt": PROMPTS[1], "max_tokens": 8, "temperature": 1.3, "seed": 5})
        bodies.append({"prompt": PROMPTS[0], "max_tokens": 6, "temperature": 0,
                       "steer": [{"hook": "blocks.0.hook_resid_post", "vector": [0.5] * 64, "scale": 4.0}]})
        one, tp = self.both("qwen", "/v1/completions", bodies)
        for a, b in zip(one, tp):
            self.assertEqual(a["choices"][0]["token_ids"], b["choices"][0]["token_ids"])
            self.assertTrue(a["choices"][0]["token_ids"])
        # The steer changed the answer (else the check above would not see it).
        plain = [o for o, body in zip(one, bodies) if body["prompt"] == PROMPTS[0] and "steer" not in body][0]
        self.assertNotEqual(plain["choices"][0]["token_ids"], one[-1]["choices"][0]["token_ids"])

    def test_echo_logprobs_equal_one_process(self):
        body = {"prompt": PROMPTS[4], "max_tokens": 0, "echo": True, "logprobs": 3}
        one, tp = self.both("qwen", "/v1/completions", [body])
        a, b = one[0]["choices"][0]["logprobs"], tp[0]["choices"][0]["logprobs"]
        self.assertEqual(a["tokens"], b["tokens"])
        la = [x for x in a["token_logprobs"] if x is not None]
        lb = [x for x in b["token_logprobs"] if x is not None]
        self.assertEqual(len(la), len(PROMPTS[4]) - 1)
        self.assertTrue(close(la, lb, 1e-4), (la, lb))

    def test_activations_equal_one_process(self):
        body = {"prompt": PROMPTS[4], "hooks": HOOK, "logits": True}
        one, tp = self.both("qwen", "/v1/activations", [body])
        a, b = one[0]["activations"][HOOK], tp[0]["activations"][HOOK]
        self.assertEqual(a["shape"], b["shape"])
        va, vb = floats(a["data"]), floats(b["data"])
        self.assertEqual(len(va), len(PROMPTS[4]) * 64)
        self.assertTrue(close(va, vb), "activations differ beyond 1e-5")

    def test_dream_denoising_equals_one_process(self):
        bodies = [{"prompt": p, "max_tokens": 6, "steps": 6, "temperature": 0, "alg": alg}
                  for p, alg in zip(PROMPTS[:3], ("origin", "entropy", "maskgit_plus"))]
        one, tp = self.both("dream", "/v1/completions", bodies)
        for a, b in zip(one, tp):
            self.assertEqual(a["choices"][0]["token_ids"], b["choices"][0]["token_ids"])

    def test_stream_cancelled_midway_leaves_the_job_serving(self):
        # A long stream read for two events then dropped: its request is cancelled on every rank
        # (else rank 1 would run it while rank 0 does not, and the next forward would hang).
        import http.client, json
        s = self.tp["qwen"]
        conn = http.client.HTTPConnection(s.host, s.port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": PROMPTS[3], "max_tokens": 200,
                                                            "temperature": 0, "stream": True}), s.headers())
        r = conn.getresponse()
        seen = 0
        for _ in range(1000):
            if r.readline().startswith(b"data: "):
                seen += 1
                if seen == 2:
                    break
        conn.close()
        for _ in range(100):
            if s.metric("sonde_requests_cancelled_total"):
                break
            time.sleep(0.1)
        self.assertGreaterEqual(s.metric("sonde_requests_cancelled_total") or 0, 1)
        one, tp = self.both("qwen", "/v1/completions", [{"prompt": PROMPTS[2], "max_tokens": 5, "temperature": 0}])
        self.assertEqual(one[0]["choices"][0]["token_ids"], tp[0]["choices"][0]["token_ids"])


def rank_pids(model):
    """{rank: pid} of the sonde processes serving `model` (Open MPI puts the rank in their environment)."""
    pids = subprocess.run(["pgrep", "-f", f"sonde serve --model {model}"], capture_output=True, text=True).stdout.split()
    ranks = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK" in env:
            ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
    return ranks


@unittest.skipUnless(MPIEXEC, "mpiexec is not installed")
class ShardedLifecycle(ServeCase):
    def setUp(self):
        os.environ.update(ENV)

    def ended(self, s, seconds):
        """mpiexec's exit code once it has ended (fails past `seconds`), its stdout."""
        try:
            code = s.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
            self.fail(f"mpiexec still ran {seconds} s later")
        out = s.proc.stdout.read()
        s.proc.stdout.close()
        s.proc.stderr.close()
        self.assertEqual(rank_pids(self.qwen), {}, "a rank outlived mpiexec")
        return code, out

    def test_sigterm_to_the_server_stops_every_rank_with_exit_0(self):
        s = Server(self.qwen, *SHARDED, launcher=LAUNCH)
        status, out = s.post("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 3, "temperature": 0})
        self.assertEqual(status, 200, out)
        ranks = rank_pids(self.qwen)
        self.assertEqual(sorted(ranks), [0, 1])
        os.kill(ranks[0], signal.SIGTERM)  # as `kill` on the serving process would
        code, out = self.ended(s, 30)
        self.assertIn("sonde serve: stopping", out)
        self.assertEqual(code, 0)

    def test_sigterm_to_mpiexec_ends_the_job(self):
        s = Server(self.qwen, *SHARDED, launcher=LAUNCH)
        s.proc.send_signal(signal.SIGTERM)  # Ctrl-C / kill on mpiexec: Open MPI ends the job (its exit code is its own)
        self.ended(s, 30)

    def test_a_rank_that_dies_ends_the_job(self):
        s = Server(self.qwen, *SHARDED, launcher=LAUNCH)
        ranks = rank_pids(self.qwen)
        self.assertEqual(sorted(ranks), [0, 1])
        os.kill(ranks[1], signal.SIGKILL)
        code, _ = self.ended(s, 60)
        self.assertNotEqual(code, 0)


if __name__ == "__main__":
    unittest.main()
