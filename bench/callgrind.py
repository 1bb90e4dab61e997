#!/usr/bin/env python3
"""Instructions per call of one command, counted by callgrind on a real server.

`bench/bench.py` measures time, which moves from run to run on a shared
machine; instruction counts do not (the same binary, inputs and environment
give the same count whatever else the machine does). This script starts
redis-server under `valgrind --tool=callgrind` with the module loaded, writes
every key the command will touch (a first pass of the same calls), then
counts only the measured calls and prints, per call:

* the command itself: `RedisModuleCommandDispatcher` for a module command,
  the command's own function (`setCommand`, …) for a built-in one; this is
  the part `INFO commandstats` times;
* for a module command, its instructions split into the module's own code
  and each server API it calls (`RM_OpenKey`, `RM_Replicate`, …), which is
  the floor no change inside the module can remove.

Usage:
  bench/callgrind.py [--calls N] [--keys K] [--backlog] [--server BIN] [--module PATH]
                     [--no-module] [--library LUA] [--script LUA ...] [--total]
                     [--prepare 'ARGV'] -- ARGV...

`__rand_int__` in ARGV is replaced, at each occurrence, by a random key
number below K (as redis-benchmark does), `__key_int__` by one such number
drawn once per call (for scripts that take two keys of one limiter); `__sha0__`, `__sha1__`, … by the
SHA1 of the `--script` files (loaded with `SCRIPT LOAD`); `__now_s__` and
`__now_ms__` by the client's clock when the call is built (seconds with µs
decimals, integer ms: what `limits` and Upstash's clients send), `__now_us__`
by it in integer µs (the library's `NOW`);
`__win:MS__` and `__prevwin:MS__` by the number of the current and the
previous window of MS ms at that clock (Upstash's key names). `--library`
loads a Functions library (`FUNCTION LOAD REPLACE`) first; `--no-module`
starts the server without the module (the library's and the peers' scripts
run there). `--total` also prints the whole request: every instruction the
server ran over the measured calls (reading, parsing, the command,
propagation, the reply, the event loop), per call. `--backlog` syncs a replica once
and stops it, so the master keeps a replication backlog and every write
propagates its effects (the second run of `make bench`). `--prepare 'ARGV'`
(words split on spaces) runs that command before the measured calls, with
the same random numbers, uncounted: `--prepare 'RL.CONCURRENCY c:__rand_int__
100 60 ACQUIRE id__rand_int__' -- RL.CONCURRENCY c:__rand_int__ 100 60 RELEASE
id__rand_int__` measures releases of leases that are held.

The server needs symbols: by default the Redis 7.0 that `scripts/servers.sh
memcheck` builds (build/servers/redis-7.0-libc/, libc malloc); Debian's
binary is stripped. `make callgrind ARGS='RL.GCRA k:__rand_int__ 99 1 6'`
prepares both and runs this. Only the standard library; needs valgrind and
callgrind_control.
"""

import argparse
import collections
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
DEFAULT_SERVER = os.path.join(ROOT, "build", "servers", "redis-7.0-libc", "redis-server")
DEFAULT_MODULE = os.path.join(TARGET, "release", "libredis_ratelimit.so")
MODULE_OBJECT = "libredis_ratelimit"

sys.path.insert(0, HERE)
from bench import free_port  # noqa: E402  (bench.py, beside this file)


def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Connection:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise SystemExit("the server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read_reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"*":
            return [self.read_reply() for _ in range(int(rest))]
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(65536)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"-":
            return RuntimeError(rest.decode())
        return rest

    def call(self, *args):
        self.sock.sendall(resp(args))
        return self.read_reply()

    def pipeline(self, commands, batch=500):
        """Sends every command, reads every reply; returns the error replies."""
        errors = []
        for i in range(0, len(commands), batch):
            part = commands[i:i + batch]
            self.sock.sendall(b"".join(resp(c) for c in part))
            for _ in part:
                r = self.read_reply()
                if isinstance(r, RuntimeError):
                    errors.append(str(r))
        return errors


def expand(arg, rng, keys, shas):
    arg = re.sub("__rand_int__", lambda _: str(rng.randrange(keys)), arg)
    if "__" not in arg:
        return arg
    now = time.time()
    now_ms = int(now * 1000)
    arg = arg.replace("__now_s__", f"{now:.6f}").replace("__now_ms__", str(now_ms))
    arg = arg.replace("__now_us__", str(int(now * 1_000_000)))
    arg = re.sub(r"__sha(\d+)__", lambda m: shas[int(m.group(1))], arg)
    arg = re.sub(r"__win:(\d+)__", lambda m: str(now_ms // int(m.group(1))), arg)
    return re.sub(r"__prevwin:(\d+)__", lambda m: str(now_ms // int(m.group(1)) - 1), arg)


def calls(argv, n, keys, seed, shas=()):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        same = str(rng.randrange(keys))
        out.append([expand(a.replace("__key_int__", same), rng, keys, shas) for a in argv])
    return out


def wait_for(port, proc, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("redis-server exited (see its log)")
        try:
            c = Connection(port)
            if c.call("PING") == b"PONG":
                return c
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("redis-server did not answer under valgrind")


def keep_backlog(port):
    """A raw SYNC makes the master create its backlog and a replica; closing
    the connection drops the replica and keeps the backlog."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(resp(["SYNC"]))
    s.settimeout(20)
    got = b""
    try:
        while len(got) < 64:  # the bulk length line and the RDB's start
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    finally:
        s.close()


def parse_profile(path):
    """Reads a callgrind output file: (inclusive cost by function, the
    module's own cost, the cost of calls from the module's functions into
    other objects by callee). Inclusive costs add a function's self cost and
    the costs of the calls it makes, so a recursive function counts twice;
    none of those this script prints recurses."""
    names = {"ob": {}, "fn": {}}

    def name(kind, text):
        m = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not m:
            return text
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1), "?")

    total = 0
    self_cost = collections.Counter()
    inclusive_calls = collections.Counter()  # cost of calls made by a function
    fn_object = {}
    module_api = collections.Counter()
    ob = fn = cob = cfn = None
    pending = False
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if line.startswith(("totals:", "summary:")):
            total = max(total, int(line.split()[1]))
            continue
        if line.startswith("ob="):
            ob = name("ob", line[3:])
        elif line.startswith("fn="):
            fn = name("fn", line[3:])
            fn_object.setdefault(fn, ob)
            cob = None
        elif line.startswith("cob="):
            cob = name("ob", line[4:])
        elif line.startswith("cfn="):
            cfn = name("fn", line[4:])
        elif line.startswith("calls="):
            pending = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) < 2:
                continue
            cost = int(parts[1])
            if pending:
                inclusive_calls[fn] += cost
                target = cob or ob
                if MODULE_OBJECT in (ob or "") and MODULE_OBJECT not in (target or ""):
                    module_api[cfn] += cost
                pending, cob = False, None
            else:
                self_cost[fn] += cost
    inclusive = {f: self_cost[f] + inclusive_calls[f] for f in set(self_cost) | set(inclusive_calls)}
    module_self = sum(c for f, c in self_cost.items() if MODULE_OBJECT in (fn_object.get(f) or ""))
    return inclusive, module_self, module_api, total, self_cost


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--backlog", action="store_true")
    ap.add_argument("--server", default=DEFAULT_SERVER)
    ap.add_argument("--module", default=DEFAULT_MODULE)
    ap.add_argument("--no-module", action="store_true")
    ap.add_argument("--library")
    ap.add_argument("--script", action="append", default=[])
    ap.add_argument("--total", action="store_true")
    ap.add_argument("--prepare")
    ap.add_argument("--top", type=int, default=0, help="also print the N functions with the most instructions of their own")
    ap.add_argument("argv", nargs="+")
    args = ap.parse_args()
    for path in [args.server] + ([] if args.no_module else [args.module]) + ([args.library] if args.library else []) + args.script:
        if not os.path.exists(path):
            raise SystemExit(f"not found: {path} (make callgrind prepares it)")

    with tempfile.TemporaryDirectory(prefix="rl-callgrind-") as tmp:
        port = free_port()
        out = os.path.join(tmp, "callgrind.out.%p")
        with open(os.path.join(tmp, "server.log"), "w") as log:
            proc = subprocess.Popen(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                 args.server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", tmp]
                + ([] if args.no_module else ["--loadmodule", args.module]),
                stdout=log, stderr=subprocess.STDOUT)
        try:
            conn = wait_for(port, proc)
            if args.backlog:
                keep_backlog(port)
                info = conn.call("INFO", "replication").decode()
                if "repl_backlog_active:1" not in info:
                    raise SystemExit(f"no backlog:\n{info}")
            if args.library:
                loaded = conn.call("FUNCTION", "LOAD", "REPLACE", open(args.library, encoding="utf-8").read())
                if isinstance(loaded, RuntimeError):
                    raise SystemExit(f"FUNCTION LOAD: {loaded}")
            shas = []
            for path in args.script:
                sha = conn.call("SCRIPT", "LOAD", open(path, encoding="utf-8").read())
                if isinstance(sha, RuntimeError):
                    raise SystemExit(f"SCRIPT LOAD {path}: {sha}")
                shas.append(sha.decode())
            # Every key the measured calls touch exists (same seed), as in the
            # benchmark's steady state.
            errors = conn.pipeline(calls(args.argv, max(args.calls // 4, args.keys * 3), args.keys, 1, shas))
            if args.prepare:
                errors += conn.pipeline(calls(args.prepare.split(), args.calls, args.keys, 2, shas))
            # Dump what was counted so far; the final dump holds only the
            # measured calls. The dump happens when the server next wakes.
            dumper = subprocess.Popen(["callgrind_control", "--dump", str(proc.pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
            conn.call("PING")
            dumper.wait(timeout=60)
            errors += conn.pipeline(calls(args.argv, args.calls, args.keys, 2, shas))
            try:
                conn.sock.sendall(resp(["SHUTDOWN", "NOSAVE"]))
            except OSError:
                pass
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # callgrind.out.<pid>.1 holds the first pass; callgrind.out.<pid>,
        # written at exit, the measured calls.
        final = os.path.join(tmp, f"callgrind.out.{proc.pid}")
        if not os.path.exists(final):
            found = os.listdir(tmp)
            raise SystemExit(f"no callgrind output at exit (found {found}); see the server log")
        inclusive, module_self, module_api, total, self_cost = parse_profile(final)

    n = args.calls
    print(f"{' '.join(args.argv)}: {n} calls over {args.keys} keys"
          f"{', with a replication backlog' if args.backlog else ''}; instructions per call")
    if errors:
        print(f"  ({len(errors)} error replies, e.g. {errors[0]})")
    dispatcher = inclusive.get("RedisModuleCommandDispatcher", 0)
    if dispatcher:
        print(f"  {dispatcher / n:8.0f}  the command (RedisModuleCommandDispatcher)")
        print(f"  {module_self / n:8.0f}    the module's own code")
        api = sum(module_api.values())
        print(f"  {api / n:8.0f}    server APIs called by the module:")
        for fn, cost in module_api.most_common():
            if cost / n >= 5:
                print(f"  {cost / n:8.0f}      {fn}")
    else:
        procs = [(c, f) for f, c in inclusive.items() if f.endswith("Command") and f != "processCommand"]
        for cost, fn in sorted(procs, reverse=True)[:1]:
            print(f"  {cost / n:8.0f}  the command ({fn})")
    if "call" in inclusive:
        print(f"  {inclusive['call'] / n:8.0f}  call() (the command plus its propagation and statistics)")
    if args.total:
        print(f"  {total / n:8.0f}  the whole request (every instruction of the server, per call)")
    if args.top:
        print(f"  the {args.top} functions with the most instructions of their own, per call:")
        for fn, cost in self_cost.most_common(args.top):
            print(f"  {cost / n:8.0f}    {fn}")


if __name__ == "__main__":
    sys.exit(main())
