#!/usr/bin/env python3
"""The server's µs per call of a sliding log's admitted and refused hits
(docs/functions.md, "The cost of refused sliding-log hits"), in the module,
the library (`FCALL`, with the server's clock and with `NOW`) and the
library's EVAL form (`EVALSHA`).

One redis-server with the module and the library; for each limit, 2,000
pipelined calls per row, timed by the server (`INFO commandstats`
usec_per_call, reset before each row): admitted calls on new keys, refused
calls on a full log (filled with one call of `TOKENS limit`). Rounds
(--rounds, 3 by default) give each cell its range, min–max.

Usage: bench/refused_log.py --module target/release/libredis_ratelimit.so
[--server redis-server] [--rounds 3] [--calls 2000]
Needs redis-py (the clients' virtualenv under build/ has it).
"""

import argparse
import os
import re
import socket
import subprocess
import tempfile
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(os.path.dirname(HERE), "functions", "ratelimit.lua")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(r, name, command, calls):
    r.config_resetstat()
    p = r.pipeline(transaction=False)
    for i in range(calls):
        p.execute_command(*command(i))
    replies = p.execute(raise_on_error=False)
    stats = r.info("commandstats")
    return stats["cmdstat_" + name]["usec_per_call"], replies


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--server", default="redis-server")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    port = free_port()
    tmp = tempfile.mkdtemp()
    server = subprocess.Popen(
        [args.server, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", tmp,
         "--loadmodule", os.path.abspath(args.module)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        code = open(LIBRARY, encoding="utf-8").read()
        r.execute_command("FUNCTION", "LOAD", "REPLACE", code)
        sha = r.script_load(re.sub(r"(?ms)^-- fast paths: begin$.*?^-- fast paths: end\n", "",
                                   code[code.index("\n") + 1:]))
        n = args.calls
        cells = {}

        def now_us():
            s, us = r.time()
            return s * 1_000_000 + us

        for limit in ("100", "1000"):
            for rnd in range(args.rounds):
                r.flushall()
                tag = f"{limit}:{rnd}"
                rows = {}
                # The module.
                rows["module admitted"] = timed(r, "rl.slidinglog", lambda i: ("RL.SLIDINGLOG", f"m:{tag}:{i}", limit, "60"), n)
                r.execute_command("RL.SLIDINGLOG", f"mf:{tag}", limit, "60", "TOKENS", limit)
                rows["module refused"] = timed(r, "rl.slidinglog", lambda i: ("RL.SLIDINGLOG", f"mf:{tag}", limit, "60"), n)
                # The library, the server's clock.
                rows["FCALL admitted"] = timed(r, "fcall", lambda i: ("FCALL", "rl_slidinglog", "1", f"f:{tag}:{i}", limit, "60"), n)
                r.execute_command("FCALL", "rl_slidinglog", "1", f"ff:{tag}", limit, "60", "TOKENS", limit)
                rows["FCALL refused"] = timed(r, "fcall", lambda i: ("FCALL", "rl_slidinglog", "1", f"ff:{tag}", limit, "60"), n)
                # The library, the caller's clock.
                t = now_us()
                rows["FCALL NOW admitted"] = timed(r, "fcall", lambda i: ("FCALL", "rl_slidinglog", "1", f"fn:{tag}:{i}", limit, "60", "NOW", str(t + i)), n)
                r.execute_command("FCALL", "rl_slidinglog", "1", f"fnf:{tag}", limit, "60", "TOKENS", limit, "NOW", str(t))
                rows["FCALL NOW refused"] = timed(r, "fcall", lambda i: ("FCALL", "rl_slidinglog", "1", f"fnf:{tag}", limit, "60", "NOW", str(t + 1 + i)), n)
                # The EVAL form.
                rows["EVALSHA admitted"] = timed(r, "evalsha", lambda i: ("EVALSHA", sha, "1", f"e:{tag}:{i}", "rl_slidinglog", limit, "60"), n)
                r.execute_command("EVALSHA", sha, "1", f"ef:{tag}", "rl_slidinglog", limit, "60", "TOKENS", limit)
                rows["EVALSHA refused"] = timed(r, "evalsha", lambda i: ("EVALSHA", sha, "1", f"ef:{tag}", "rl_slidinglog", limit, "60"), n)
                for name, (us, replies) in rows.items():
                    refused = sum(1 for x in replies if isinstance(x, list) and x[0] == 1)
                    want = n if "refused" in name else 0
                    if refused != want:
                        raise SystemExit(f"{name} at limit {limit}: {refused} of {n} refused, expected {want}")
                    cells.setdefault((limit, name), []).append(us)
        cols = ["module admitted", "module refused", "FCALL admitted", "FCALL refused",
                "FCALL NOW admitted", "FCALL NOW refused", "EVALSHA admitted", "EVALSHA refused"]

        def rng(limit, name):
            v = cells[(limit, name)]
            lo, hi = min(v), max(v)
            fmt = (lambda x: f"{x:,.1f}") if hi < 10 else (lambda x: f"{x:,.0f}")
            return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"

        print(f"server µs per call (INFO commandstats), {n:,} pipelined calls a row, {args.rounds} rounds (min–max); "
              f"load average {os.getloadavg()[0]:.1f}")
        print()
        print("| limit | module: admitted (new key) / refused (full log) | library `FCALL` | library `FCALL … NOW t` | `EVALSHA` |")
        print("|---:|---|---|---|---|")
        for limit in ("100", "1000"):
            pairs = [(cols[i], cols[i + 1]) for i in range(0, len(cols), 2)]
            print(f"| {int(limit):,} | " + " | ".join(f"{rng(limit, a)} / {rng(limit, b)}" for a, b in pairs) + " |")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
