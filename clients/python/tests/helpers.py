"""Test helpers: a redis-server on a free loopback port, with the module from $RATELIMIT_MODULE
(or without); ``calls`` reads INFO commandstats.

``RATELIMIT_TEST_ENGINE=functions`` runs the suite on the other engine: servers start without the
module unless a test asks for it, the clients then decide through the Functions library, and
``calls(r, "rl.gcra")`` counts the library's calls (``FCALL``). Tests of module-only features
(server-side policies) carry ``@pytest.mark.module_only`` and are skipped there.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import List, Optional, Sequence

import redis

#: The engine the suite runs on: "module" (default) or "functions" (servers without the module).
TEST_ENGINE = os.environ.get("RATELIMIT_TEST_ENGINE", "module")
if TEST_ENGINE not in ("module", "functions"):
    raise RuntimeError(f"RATELIMIT_TEST_ENGINE must be 'module' or 'functions', not {TEST_ENGINE!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """``with RedisServer() as server: server.port``. ``module=False`` starts a plain server,
    ``module=True`` one with the module; the default follows ``RATELIMIT_TEST_ENGINE``. ``port``
    (0: a free one) fixes the port; ``cluster_slots=False`` leaves a cluster node without slots
    (to build a cluster of several); ``args``: more of redis-server's options."""

    def __init__(self, module: Optional[bool] = None, cluster: bool = False, port: int = 0,
                 cluster_slots: bool = True, args: Sequence[str] = ()) -> None:
        if module is None:
            module = TEST_ENGINE == "module"
        self.cluster = cluster
        self.cluster_slots = cluster_slots
        self.extra_args = list(args)
        self.module: Optional[str] = None
        if module:
            self.module = os.environ.get("RATELIMIT_MODULE")
            if not self.module or not os.path.exists(self.module):
                raise RuntimeError("set RATELIMIT_MODULE to the built libredis_ratelimit.so")
        self.fixed_port = port
        self.port = port
        self.proc: Optional[subprocess.Popen] = None
        self.dir = ""

    def start(self) -> "RedisServer":
        self.dir = tempfile.mkdtemp(prefix="rl-py-")
        for _ in range(1 if self.fixed_port else 20):
            self.port = self.fixed_port or free_port()
            if self.cluster and self.port > 55535:  # the cluster bus needs port + 10000
                continue
            args = [os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(self.port),
                    "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", self.dir]
            if self.module:
                args += ["--loadmodule", self.module]
            if self.cluster:
                args += ["--cluster-enabled", "yes", "--cluster-config-file",
                         os.path.join(self.dir, "nodes.conf")]
            args += self.extra_args
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(16).startswith(b"+PONG"):
                            if self.cluster and self.cluster_slots:
                                self._own_all_slots()
                            return self
                except OSError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"redis-server did not start (last port tried: {self.port})")

    def _own_all_slots(self) -> None:
        """A one-node cluster: this node serves every slot."""
        import redis

        client = redis.Redis("127.0.0.1", self.port)
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 10
        while b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
            if time.monotonic() > deadline:
                raise RuntimeError("the one-node cluster did not come up")
            time.sleep(0.05)
        client.close()

    def pause(self) -> None:
        """SIGSTOP: the server hangs (connections accepted by the kernel, no replies)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def away_from_window_end(client: redis.Redis, window_s: int = 60, margin_s: float = 1.5) -> None:
    """Waits out the end of the server's clock-aligned window of ``window_s`` seconds when less
    than ``margin_s`` of it is left, so that a test counting over several calls in such fixed
    (or sliding-counter) windows runs inside one. Without it such a test failed when a window
    ended between its calls: about once in (window / the test's run time) runs."""
    secs, micros = client.time()
    left_s = window_s - secs % window_s - micros / 1e6
    if left_s < margin_s:
        time.sleep(left_s + 0.01)


def calls(client: redis.Redis, command: str) -> int:
    """How many times ``command`` ran (INFO commandstats). Under ``RATELIMIT_TEST_ENGINE=
    functions``, a module command (``rl.gcra``, …) counts the library's calls (``FCALL``)."""
    stats = client.info("commandstats")
    if TEST_ENGINE == "functions" and command.lower().startswith(("rl.", "cl.")):
        command = "fcall"
    return int(stats.get(f"cmdstat_{command.lower()}", {}).get("calls", 0))


class Cluster:
    """``with Cluster(3) as c: c.ports``: a Redis Cluster of ``n`` primaries (no replicas) on
    loopback ports, the slots split evenly; ``module`` as :class:`RedisServer`'s."""

    def __init__(self, n: int = 3, module: Optional[bool] = None) -> None:
        self.nodes = [RedisServer(module=module, cluster=True, cluster_slots=False)
                      for _ in range(n)]

    @property
    def ports(self) -> List[int]:
        return [node.port for node in self.nodes]

    def start(self) -> "Cluster":
        try:
            for node in self.nodes:
                node.start()
            clients = [redis.Redis("127.0.0.1", p) for p in self.ports]
            per = 16384 // len(clients)
            for i, c in enumerate(clients):
                last = 16383 if i == len(clients) - 1 else (i + 1) * per - 1
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
            for c in clients[1:]:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", self.ports[0])
            deadline = time.monotonic() + 20
            while not all(b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO")
                          and c.execute_command("CLUSTER", "INFO").count(b"\n") > 0
                          and _known_nodes(c) == len(clients) for c in clients):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not come up")
                time.sleep(0.05)
            for c in clients:
                c.close()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _known_nodes(client: redis.Redis) -> int:
    for line in client.execute_command("CLUSTER", "INFO").decode().splitlines():
        if line.startswith("cluster_known_nodes:"):
            return int(line.split(":")[1])
    return 0


class HungServer:
    """A loopback port that accepts connections and never answers (a hung Redis): ``commands``
    counts the chunks received, so that a test sees whether a client still sends to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.commands = 0
        self._conns: list = []
        self._closed = False
        import threading

        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import select

        while not self._closed:
            readable, _, _ = select.select([self.sock, *self._conns], [], [], 0.02)
            for s in readable:
                if s is self.sock:
                    try:
                        conn, _ = self.sock.accept()
                    except OSError:
                        return
                    self._conns.append(conn)
                    continue
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if data:
                    self.commands += 1
                else:
                    self._conns.remove(s)
                    s.close()

    def close(self) -> None:
        self._closed = True
        self._thread.join(1)
        for c in self._conns:
            c.close()
        self.sock.close()

    def __enter__(self) -> "HungServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
