"""Helpers for the sonde serve tests: tiny checkpoints, the real server on a loopback port, and
requests through Python's standard library only (urllib, http.client, socket).

Every call has a timeout and every loop a bound: a test ends by itself even when the server hangs.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

SONDE = os.environ.get("SONDE_BIN", "sonde")
CALL_TIMEOUT = float(os.environ.get("SONDE_SERVE_TIMEOUT", "120"))


def run_sonde(*args, check=True):
    """Runs `sonde ARGS...`; returns its stdout (a failure raises with its stderr)."""
    p = subprocess.run([SONDE, *map(str, args)], capture_output=True, text=True, timeout=CALL_TIMEOUT)
    if check and p.returncode != 0:
        raise AssertionError(f"sonde {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return p


def make_model(root, arch):
    out = os.path.join(root, arch)
    run_sonde("make-model", "--arch", arch, "--preset", "tiny", "--out", out)
    return out


class Server:
    """`sonde serve --port 0 ...` started, its port read from its first line; stop() sends SIGTERM
    and returns the exit code."""

    def __init__(self, model, *extra, launcher=()):
        """`launcher`: words before sonde's (mpiexec and its options, for a tensor-parallel server)."""
        self.proc = subprocess.Popen([*launcher, SONDE, "serve", "--model", model, "--port", "0", *map(str, extra)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # the server prints its address once the model is loaded
        self.banner = line
        m = re.search(r"http://([0-9.]+):([0-9]+)", line)
        if not m:
            self.proc.kill()
            raise AssertionError(f"sonde serve printed {line!r}; stderr: {self.proc.stderr.read()}")
        self.host, self.port = m.group(1), int(m.group(2))
        self.base = f"http://{self.host}:{self.port}"
        self.key = None
        for i, a in enumerate(extra):
            if a == "--api-key":
                self.key = extra[i + 1]

    def headers(self, key=None):
        h = {"Content-Type": "application/json"}
        k = key if key is not None else self.key
        if k:
            h["Authorization"] = f"Bearer {k}"
        return h

    def request(self, method, path, body=None, raw=None, key=None, timeout=CALL_TIMEOUT):
        """(status, parsed JSON body or text)."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=self.headers(key))
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def stream(self, path, body, timeout=CALL_TIMEOUT):
        """The server-sent events of a streamed request: (status, [parsed data objects], saw [DONE])."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("POST", path, json.dumps(body), self.headers())
            r = conn.getresponse()
            if r.status != 200:
                return r.status, [json.loads(r.read().decode())], False
            events, done = [], False
            for _ in range(100000):  # bounded: a stream ends with [DONE]
                line = r.readline()
                if not line:
                    break
                line = line.decode().rstrip("\n")
                if line.startswith("data: "):
                    if line == "data: [DONE]":
                        done = True
                        break
                    events.append(json.loads(line[6:]))
            return r.status, events, done
        finally:
            conn.close()

    def metric(self, name):
        """The value of an unlabelled metric of GET /metrics."""
        status, text = self.get("/metrics")
        assert status == 200, text
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("sonde serve did not stop within 60 s of SIGTERM")
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code


class ServeCase(unittest.TestCase):
    """A test class with tiny qwen2 and dream checkpoints in a temporary directory."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="sonde-serve-")
        cls.root = cls.tmp.name
        cls.qwen = make_model(cls.root, "qwen2")
        cls.dream = make_model(cls.root, "dream")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


def generate_json(model, ids_list, *flags):
    """`sonde generate --json` over token-id prompts: one object per prompt."""
    args = ["generate", "--model", model, "--json", *flags]
    for ids in ids_list:
        args += ["--ids", ",".join(map(str, ids))]
    out = run_sonde(*args).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def write_npy(path, values):
    """A float32 vector as numpy's .npy v1.0 (written by hand: the stdlib only)."""
    import struct
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))
