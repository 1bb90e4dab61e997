#!/usr/bin/env python3
"""The Functions library against the Lua users run today, and the module against the library.

For each algorithm, three pipelined runs under callgrind (`bench/callgrind.py
--total`) on the same server (the Redis 7.0 that `scripts/servers.sh memcheck`
builds, with symbols), each over 1,000 random keys on the allowed path:

* the peer's script (bench/peers/, each file names its source, commit and
  licence), called with `EVALSHA` the way its library calls it;
* the library (`functions/ratelimit.lua`, `FCALL`), reading the server's
  clock, on a server without the module;
* the module's command.

The measure is the whole request: every instruction the server runs per call
(reading, parsing, the command with its Lua, propagation, the reply, the event
loop), which is what a busy server pays. Targets (issue 30): the library at
most 0.8 x each peer, the module at most 1/3 of the library.

| algorithm | peer | its call | library | module |
|---|---|---|---|---|
| moving window (sliding log) | `limits` acquire_entry | `[now_s, 100, 60, 1]` | `rl_slidinglog k 100 60` | `RL.SLIDINGLOG` |
| sliding window counter | `limits` acquire_sliding_window_entry | 2 keys, `[100, 60, 1]` | `rl_slidingwindow k 100 60` | `RL.SLIDINGWINDOW` |
| GCRA | go-redis/redis_rate AllowN | `[100, 10, 1, 1]` | `rl_gcra k 99 10 1` | `RL.GCRA` |
| fixed window from the first call | rate-limiter-flexible RateLimiterRedis | `[1, 60]` | `rl_fixedwindow k 100 60 ALIGN FIRST` | `RL.FIXEDWINDOW … ALIGN FIRST` |
| sliding window counter | Upstash Ratelimit.slidingWindow | 3 keys, `[100, now_ms, 60000, 1]` | `rl_slidingwindow k 100 60` | `RL.SLIDINGWINDOW` |

Usage: bench/peers.py [--calls N] [--server BIN] [--module SO] [--write-readme]
(`make bench` runs it with --write-readme: the table replaces the section
between the markers in bench/README.md).
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = os.path.join(HERE, "peers")
LIBRARY = os.path.join(ROOT, "functions", "ratelimit.lua")
README = os.path.join(HERE, "README.md")
BEGIN = "<!-- peers.py: begin -->"
END = "<!-- peers.py: end -->"

# (algorithm, peer name, peer script, peer argv, library argv, module argv)
ROWS = [
    ("moving window", "limits (moving window)", "limits_moving_window.lua",
     ["EVALSHA", "__sha0__", "1", "lmw:__rand_int__", "__now_s__", "100", "60", "1"],
     ["FCALL", "rl_slidinglog", "1", "k:__rand_int__", "100", "60"],
     ["RL.SLIDINGLOG", "k:__rand_int__", "100", "60"]),
    ("sliding window counter", "limits (sliding window)", "limits_sliding_window.lua",
     ["EVALSHA", "__sha0__", "2", "{lsw:__key_int__}/-1", "{lsw:__key_int__}", "100", "60", "1"],
     ["FCALL", "rl_slidingwindow", "1", "k:__rand_int__", "100", "60"],
     ["RL.SLIDINGWINDOW", "k:__rand_int__", "100", "60"]),
    ("GCRA", "go-redis/redis_rate", "redis_rate_gcra.lua",
     ["EVALSHA", "__sha0__", "1", "rate:k:__rand_int__", "100", "10", "1", "1"],
     ["FCALL", "rl_gcra", "1", "k:__rand_int__", "99", "10", "1"],
     ["RL.GCRA", "k:__rand_int__", "99", "10", "1"]),
    ("fixed window (from the first call)", "rate-limiter-flexible", "rlflex_fixed_window.lua",
     ["EVALSHA", "__sha0__", "1", "rlflx:k:__rand_int__", "1", "60"],
     ["FCALL", "rl_fixedwindow", "1", "k:__rand_int__", "100", "60", "ALIGN", "FIRST"],
     ["RL.FIXEDWINDOW", "k:__rand_int__", "100", "60", "ALIGN", "FIRST"]),
    ("sliding window counter", "Upstash ratelimit", "upstash_sliding_window.lua",
     ["EVALSHA", "__sha0__", "3", "up:__key_int__:__win:60000__", "up:__key_int__:__prevwin:60000__", "",
      "100", "__now_ms__", "60000", "1"],
     ["FCALL", "rl_slidingwindow", "1", "k:__rand_int__", "100", "60"],
     ["RL.SLIDINGWINDOW", "k:__rand_int__", "100", "60"]),
]


INTRO = """## The Functions library and the peers' Lua

`bench/peers.py` (the second part of `make bench`) counts, under callgrind,
every instruction the server runs per call (the whole request: reading,
parsing, the command and its Lua, propagation, the reply, the event loop)
over a pipelined run, for the Lua that users run today for an algorithm
(bench/peers/: each script names its source, commit and licence), for the
Functions library's function for the same algorithm, and for the module's
command, on one server (Redis 7.0 with symbols). Issue 30's targets: the
library at most 0.8 × each peer, the module at most 1/3 of the library.

"""

FLOORS = """The floors, measured the same way (bench/peers/floor_*.lua): `EVALSHA` of
`return 1` costs {noop} instructions per call, and a script that does only
`TIME`, `GET` and `SET … PXAT` and returns five integers (what a limiter that
decides on the server at the server's clock does at least) {three}: each
`redis.call` costs about 11,000. The peers that decide on the client
(rate-limiter-flexible only counts: the decision is JavaScript's) or take the
client's clock (limits, Upstash) run fewer or cheaper calls; 0.8 × the cheapest
peer's count can lie below the second floor, where no script that decides at
the server's clock can reach it. Above the floor is the library's own Lua
(argument parsing and checks, the decision): `bench/callgrind.py --top 25`
shows where (`luaV_execute`, Lua calls, `malloc`/`free`, string interning,
`strtod`)."""


def measure(common, extra, argv):
    """Whole-request instructions per call (bench/callgrind.py --total)."""
    cmd = [sys.executable, os.path.join(HERE, "callgrind.py"), "--total"] + common + extra + ["--"] + argv
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    errors = re.search(r"\((\d+) error replies, e\.g\. (.*)\)", out.stdout)
    if errors:
        raise SystemExit(f"{' '.join(argv)}: {errors.group(1)} error replies, e.g. {errors.group(2)}")
    m = re.search(r"^\s*(\d+)\s+the whole request", out.stdout, re.M)
    if not m:
        raise SystemExit(f"no whole-request line:\n{out.stdout}")
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--server")
    ap.add_argument("--module")
    ap.add_argument("--write-readme", action="store_true")
    args = ap.parse_args()
    common = ["--calls", str(args.calls), "--keys", str(args.keys)]
    if args.server:
        common += ["--server", args.server]
    module_opts = ["--module", args.module] if args.module else []

    lines = [
        "| algorithm | peer's Lua (`EVALSHA`) | peer | library (`FCALL`) | module | library / peer | module / library |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    worst_library, worst_module = 0.0, 0.0
    for algorithm, peer, script, peer_argv, lib_argv, mod_argv in ROWS:
        p = measure(common, ["--no-module", "--script", os.path.join(PEERS, script)], peer_argv)
        lib = measure(common, ["--no-module", "--library", LIBRARY], lib_argv)
        mod = measure(common, module_opts, mod_argv)
        worst_library = max(worst_library, lib / p)
        worst_module = max(worst_module, mod / lib)
        line = (f"| {algorithm} | {peer} (`bench/peers/{script}`) | {p:,} | {lib:,} | {mod:,} "
                f"| {lib / p:.2f} | {mod / lib:.2f} |")
        print(line, flush=True)
        lines.append(line)
    floors = []
    for script, what in (("floor_noop.lua", "`return 1`"),
                         ("floor_time_get_set.lua", "`TIME`, `GET`, `SET … PXAT` and five integers")):
        f = measure(common, ["--no-module", "--script", os.path.join(PEERS, script)],
                    ["EVALSHA", "__sha0__", "1", "f:__rand_int__"])
        floors.append(f)
        print(f"floor: {what}: {f:,}", flush=True)
    verdict = (f"Targets: library ≤ 0.80 × peer (worst {worst_library:.2f}: "
               f"{'met' if worst_library <= 0.8 else 'NOT met'}); module ≤ 0.33 × library "
               f"(worst {worst_module:.2f}: {'met' if worst_module <= 1 / 3 else 'NOT met'}).")
    print(verdict)
    if args.write_readme:
        text = open(README, encoding="utf-8").read()
        table = "\n".join(lines)
        block = (f"{BEGIN}\nWhole-request instructions per call (callgrind, {args.calls:,} pipelined calls over "
                 f"{args.keys:,} keys, Redis 7.0; `bench/peers.py`):\n\n{table}\n\n{verdict}\n\n"
                 + FLOORS.format(noop=f"{floors[0]:,}", three=f"{floors[1]:,}") + f"\n{END}")
        if BEGIN in text:
            text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
        else:
            text = text.rstrip("\n") + "\n\n" + INTRO + block + "\n"
        open(README, "w", encoding="utf-8").write(text)


if __name__ == "__main__":
    sys.exit(main())
