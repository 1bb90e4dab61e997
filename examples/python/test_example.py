"""The example against a real redis-server with the module ($RATELIMIT_MODULE)."""

import http.client
import os
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import app


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis():
    module = os.environ["RATELIMIT_MODULE"]
    port = free_port()
    workdir = tempfile.mkdtemp()
    proc = subprocess.Popen(
        [os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(port), "--save", "",
         "--dir", workdir, "--loadmodule", module],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def calls(redis_port):
    import redis
    stats = redis.Redis(port=redis_port).info("commandstats")
    return stats.get("cmdstat_rl.gcra", {}).get("calls", 0)


class ExampleTest(unittest.TestCase):
    def setUp(self):
        self.redis, self.redis_port = start_redis()
        self.servers = []

    def tearDown(self):
        for server in self.servers:
            server.shutdown()
            server.server_close()
        self.redis.kill()
        self.redis.wait()

    def serve(self, fail_open=True):
        server = app.make_server(self.redis_port, 0, fail_open=fail_open)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers.append(server)
        return server

    def get(self, server, user, path="/"):
        con = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        con.request("GET", path, headers={"X-User": user})
        response = con.getresponse()
        response.read()
        con.close()
        return response.status, {k: v for k, v in response.getheaders()}

    def test_allows_a_burst_then_answers_429_with_the_headers(self):
        server = self.serve()
        for i in range(5):
            status, headers = self.get(server, "alice")
            self.assertEqual(status, 200)
            self.assertEqual(headers["RateLimit-Policy"], '"api";q=5;w=5')
            self.assertEqual(headers["RateLimit"], f'"api";r={4 - i};t={i + 1}')
            self.assertEqual(headers["X-RateLimit-Limit"], "5")
            self.assertEqual(headers["X-RateLimit-Remaining"], str(4 - i))
            self.assertEqual(headers["X-RateLimit-Reset"], str(i + 1))
            self.assertNotIn("Retry-After", headers)
        status, headers = self.get(server, "alice")
        self.assertEqual(status, 429)
        self.assertEqual(headers["Retry-After"], "1")
        # On a refusal `t` is when more quota comes, as Retry-After.
        self.assertEqual(headers["RateLimit"], '"api";r=0;t=1')
        # Another user is not affected.
        self.assertEqual(self.get(server, "bob")[0], 200)

    def test_refused_keys_are_answered_from_the_local_cache(self):
        server = self.serve()
        for _ in range(5):
            self.get(server, "carol")
        self.assertEqual(self.get(server, "carol")[0], 429)
        before = calls(self.redis_port)
        for _ in range(20):
            status, headers = self.get(server, "carol")
            self.assertEqual(status, 429)
            self.assertIn("Retry-After", headers)
        self.assertEqual(calls(self.redis_port), before, "refused requests reached Redis")
        # After retry_after the key is asked again, and allowed.
        time.sleep(1.05)
        self.assertEqual(self.get(server, "carol")[0], 200)
        self.assertEqual(calls(self.redis_port), before + 1)

    def test_a_cost_above_the_limit_gets_429_without_retry_after(self):
        server = self.serve()
        status, headers = self.get(server, "dave", "/?cost=6")
        self.assertEqual(status, 429)
        self.assertNotIn("Retry-After", headers)
        self.assertEqual(headers["X-RateLimit-Limit"], "5")
        self.assertEqual(self.get(server, "dave")[0], 200)

    def test_fails_open_or_closed_when_redis_is_down(self):
        open_server = self.serve(fail_open=True)
        closed_server = self.serve(fail_open=False)
        self.assertEqual(self.get(open_server, "erin")[0], 200)
        self.redis.kill()
        self.redis.wait()
        status, headers = self.get(open_server, "erin")
        self.assertEqual(status, 200)
        self.assertNotIn("RateLimit", headers)
        status, _ = self.get(closed_server, "erin")
        self.assertEqual(status, 503)


if __name__ == "__main__":
    unittest.main()
