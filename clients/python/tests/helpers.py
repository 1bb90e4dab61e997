"""Test helpers: a redis-server on a free loopback port, with the module from $RATELIMIT_MODULE
(or without); ``calls`` reads INFO commandstats."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Optional

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """``with RedisServer() as server: server.port``. ``module=False`` starts a plain server;
    ``port`` (0: a free one) fixes the port."""

    def __init__(self, module: bool = True, cluster: bool = False, port: int = 0) -> None:
        self.cluster = cluster
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
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(16).startswith(b"+PONG"):
                            if self.cluster:
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


def calls(client: redis.Redis, command: str) -> int:
    """How many times ``command`` ran (INFO commandstats)."""
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command.lower()}", {}).get("calls", 0))


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
