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
loop), which is what a busy server pays. Like is compared with like: the
library reads the server's clock where the peer does (redis_rate) and takes
the caller's clock (`NOW`) where the peer is handed the client's (limits,
Upstash). Targets (issue 45, each row's TARGET): the library at most that
multiple of its peer; issue 30's, the module at most 1/3 of the library.

| algorithm | peer | its call | library | module |
|---|---|---|---|---|
| moving window (sliding log) | `limits` acquire_entry | `[now_s, 100, 60, 1]` | `rl_slidinglog k 100 60 NOW t` | `RL.SLIDINGLOG` |
| sliding window counter | `limits` acquire_sliding_window_entry | 2 keys, `[100, 60, 1]` | `rl_slidingwindow k 100 60 NOW t` | `RL.SLIDINGWINDOW` |
| GCRA | go-redis/redis_rate AllowN | `[100, 10, 1, 1]` | `rl_gcra k 99 10 1` | `RL.GCRA` |
| fixed window from the first call | rate-limiter-flexible RateLimiterRedis | `[1, 60]` | `rl_fixedwindow k 100 60 ALIGN FIRST` | `RL.FIXEDWINDOW … ALIGN FIRST` |
| sliding window counter | Upstash Ratelimit.slidingWindow | 3 keys, `[100, now_ms, 60000, 1]` | `rl_slidingwindow k 100 60 NOW t` | `RL.SLIDINGWINDOW` |

A second table (`FLOOR_ROWS`) sets each of the library's functions beside
its floor: a function of bench/peers/floor_functions.lua that makes the same
`redis.call`s with the same arguments and does nothing else. Issue 45's
target for the functions without a peer above: at most 12,000 instructions
above their floor.

Usage: bench/peers.py [--calls N] [--server BIN] [--module SO] [--write-readme]
[--only TEXT] (`--only rl_concurrency`: just the rows whose library call holds
TEXT, printed, the README left alone)
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

# (algorithm, peer name, peer script, peer argv, library argv, module argv,
# issue 45's target: library / peer at most)
ROWS = [
    ("moving window", "limits (moving window)", "limits_moving_window.lua",
     ["EVALSHA", "__sha0__", "1", "lmw:__rand_int__", "__now_s__", "100", "60", "1"],
     ["FCALL", "rl_slidinglog", "1", "k:__rand_int__", "100", "60", "NOW", "__now_us__"],
     ["RL.SLIDINGLOG", "k:__rand_int__", "100", "60"], 1.70),
    ("sliding window counter", "limits (sliding window)", "limits_sliding_window.lua",
     ["EVALSHA", "__sha0__", "2", "{lsw:__key_int__}/-1", "{lsw:__key_int__}", "100", "60", "1"],
     ["FCALL", "rl_slidingwindow", "1", "k:__rand_int__", "100", "60", "NOW", "__now_us__"],
     ["RL.SLIDINGWINDOW", "k:__rand_int__", "100", "60"], 1.20),
    ("GCRA", "go-redis/redis_rate", "redis_rate_gcra.lua",
     ["EVALSHA", "__sha0__", "1", "rate:k:__rand_int__", "100", "10", "1", "1"],
     ["FCALL", "rl_gcra", "1", "k:__rand_int__", "99", "10", "1"],
     ["RL.GCRA", "k:__rand_int__", "99", "10", "1"], 0.90),
    ("fixed window (from the first call)", "rate-limiter-flexible", "rlflex_fixed_window.lua",
     ["EVALSHA", "__sha0__", "1", "rlflx:k:__rand_int__", "1", "60"],
     ["FCALL", "rl_fixedwindow", "1", "k:__rand_int__", "100", "60", "ALIGN", "FIRST"],
     ["RL.FIXEDWINDOW", "k:__rand_int__", "100", "60", "ALIGN", "FIRST"], 1.70),
    ("sliding window counter", "Upstash ratelimit", "upstash_sliding_window.lua",
     ["EVALSHA", "__sha0__", "3", "up:__key_int__:__win:60000__", "up:__key_int__:__prevwin:60000__", "",
      "100", "__now_ms__", "60000", "1"],
     ["FCALL", "rl_slidingwindow", "1", "k:__rand_int__", "100", "60", "NOW", "__now_us__"],
     ["RL.SLIDINGWINDOW", "k:__rand_int__", "100", "60"], 1.40),
]

FLOOR_LIBRARY = os.path.join(PEERS, "floor_functions.lua")
K = "k:__rand_int__"
TWO = ["2", "a:__key_int__", "b:__key_int__"]
ALL2 = ["GCRA", "99", "10", "1", "FIXEDWINDOW", "100", "60"]
NOW = ["NOW", "__now_us__"]
# (the library's call, its floor's function) with the same arguments after
# the function's name; FCALL_RO for the read-only twins. Issue 45's bound
# above the floor applies to the functions without a peer in ROWS and to
# every read-only twin (NO_PEER).
FLOOR_ROWS = [
    (["FCALL", "rl_gcra", "1", K, "99", "10", "1"], "floor_time_get_set_short"),
    (["FCALL", "rl_gcra", "1", K, "99", "10", "1", *NOW], "floor_get_set_short"),
    (["FCALL", "rl_tokenbucket", "1", K, "100", "10", "1"], "floor_time_get_set_short"),
    (["FCALL", "rl_leakybucket", "1", K, "100", "10", "1"], "floor_time_get_set_short"),
    (["FCALL", "rl_fixedwindow", "1", K, "100", "60"], "floor_time_get_set"),
    (["FCALL", "rl_fixedwindow", "1", K, "100", "60", "ALIGN", "FIRST"], "floor_time_get_set"),
    (["FCALL", "rl_slidingwindow", "1", K, "100", "60"], "floor_time_get_set"),
    (["FCALL", "rl_slidingwindow", "1", K, "100", "60", *NOW], "floor_get_set"),
    (["FCALL", "cl_throttle", "1", K, "99", "10", "1"], "floor_time_get_set_short"),
    (["FCALL", "rl_slidinglog", "1", K, "100", "60", *NOW], "floor_log"),
    (["FCALL", "rl_all", *TWO, *ALL2], "floor_all2"),
    (["FCALL", "rl_concurrency", "1", K, "100", "60", "ACQUIRE", "g"], "floor_concurrency"),
    (["FCALL_RO", "rl_gcra_ro", "1", K, "99", "10", "1"], "floor_time_get"),
    (["FCALL_RO", "rl_tokenbucket_ro", "1", K, "100", "10", "1"], "floor_time_get"),
    (["FCALL_RO", "rl_leakybucket_ro", "1", K, "100", "10", "1"], "floor_time_get"),
    (["FCALL_RO", "rl_fixedwindow_ro", "1", K, "100", "60"], "floor_time_get"),
    (["FCALL_RO", "rl_slidingwindow_ro", "1", K, "100", "60"], "floor_time_get"),
    (["FCALL_RO", "cl_throttle_ro", "1", K, "99", "10", "1"], "floor_time_get"),
    (["FCALL_RO", "rl_slidinglog_ro", "1", K, "100", "60"], "floor_log_ro"),
    (["FCALL_RO", "rl_all_ro", *TWO, *ALL2], "floor_all2_ro"),
    (["FCALL_RO", "rl_concurrency_ro", "1", K, "100", "60", "ACQUIRE", "g"], "floor_concurrency_ro"),
]
ABOVE_FLOOR = 12_000
NO_PEER = ("rl_tokenbucket", "rl_leakybucket", "cl_throttle", "rl_all", "rl_concurrency")


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
decides on the server at the server's clock does at least) {three}. A
`redis.call` costs by what it does: a read (`GET`, `PTTL`) 3–4k, `TIME`
6.9k, a write (`SET … PXAT`) 11–14k, each argument of the call about 1.4k,
and a number passed as an argument is written with `%.17g` on Redis 7.0
(2–4k more than a string from `string.format('%d')`). The peers that decide
on the client (rate-limiter-flexible only counts: the decision is
JavaScript's) or take the client's clock (limits, Upstash) run fewer or
cheaper calls. Above the floor is the library's own Lua (argument checks,
the decision, formatting) and the collector's share of its heap:
`bench/callgrind.py --top 25` shows where (`luaV_execute`, the collector's
`singlestep`/`sweeplist`/`propagatemark`, `malloc`/`free`, string interning,
`strtod`, `vfprintf`)."""


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
    ap.add_argument("--only", metavar="TEXT",
                    help="measure only the rows whose library call holds TEXT (no README written)")
    args = ap.parse_args()
    if args.only and args.write_readme:
        raise SystemExit("--only measures some rows: it cannot write the README's tables")
    wanted = lambda argv: not args.only or args.only in " ".join(argv)  # noqa: E731
    common = ["--calls", str(args.calls), "--keys", str(args.keys)]
    if args.server:
        common += ["--server", args.server]
    module_opts = ["--module", args.module] if args.module else []

    lines = [
        "| algorithm | peer's Lua (`EVALSHA`) | peer | library (`FCALL`) | module | library / peer | target | module / library |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    worst_module = 0.0
    missed = []
    for algorithm, peer, script, peer_argv, lib_argv, mod_argv, target in ROWS:
        if not wanted(lib_argv):
            continue
        p = measure(common, ["--no-module", "--script", os.path.join(PEERS, script)], peer_argv)
        lib = measure(common, ["--no-module", "--library", LIBRARY], lib_argv)
        mod = measure(common, module_opts, mod_argv)
        worst_module = max(worst_module, mod / lib)
        if lib / p > target:
            missed.append(f"{algorithm} ({peer}) {lib / p:.2f}")
        line = (f"| {algorithm} | {peer} (`bench/peers/{script}`) | {p:,} | {lib:,} | {mod:,} "
                f"| {lib / p:.2f} | ≤ {target:.2f} | {mod / lib:.2f} |")
        print(line, flush=True)
        lines.append(line)
    floor_lines = [
        "| the library's call | library | its floor (bench/peers/floor_functions.lua) | floor | above the floor | target |",
        "|---|---:|---|---:|---:|---|",
    ]
    above_missed = []
    for lib_argv, floor_fn in FLOOR_ROWS:
        if not wanted(lib_argv):
            continue
        lib = measure(common, ["--no-module", "--library", LIBRARY], lib_argv)
        floor = measure(common, ["--no-module", "--library", FLOOR_LIBRARY], [lib_argv[0], floor_fn, *lib_argv[2:]])
        shown = " ".join("k" if a == K else a.replace("__now_us__", "t").replace(":__key_int__", "")
                         for a in lib_argv[1:])
        bound = lib_argv[1] in NO_PEER or lib_argv[1].endswith("_ro")
        if bound and lib - floor > ABOVE_FLOOR:
            above_missed.append(f"{shown} {lib - floor:+,}")
        target = f"≤ +{ABOVE_FLOOR:,}" if bound else "its peer's"
        line = f"| `{lib_argv[0]} {shown}` | {lib:,} | `{floor_fn}` | {floor:,} | {lib - floor:+,} | {target} |"
        print(line, flush=True)
        floor_lines.append(line)
    if args.only:
        return 0
    floors = []
    for script, what in (("floor_noop.lua", "`return 1`"),
                         ("floor_time_get_set.lua", "`TIME`, `GET`, `SET … PXAT` and five integers")):
        f = measure(common, ["--no-module", "--script", os.path.join(PEERS, script)],
                    ["EVALSHA", "__sha0__", "1", "f:__rand_int__"])
        floors.append(f)
        print(f"floor: {what}: {f:,}", flush=True)
    verdict = (f"Targets: library ≤ each row's target × peer (issue 45): "
               f"{'met' if not missed else 'NOT met: ' + '; '.join(missed)}; module ≤ 0.33 × library "
               f"(worst {worst_module:.2f}: {'met' if worst_module <= 1 / 3 else 'NOT met'}).")
    floor_verdict = (f"Issue 45's target for the functions without a peer (rl_tokenbucket, rl_leakybucket, "
                     f"cl_throttle, rl_all, rl_concurrency, the `_ro` twins): at most {ABOVE_FLOOR:,} above "
                     f"the floor: {'met' if not above_missed else 'NOT met: ' + '; '.join(above_missed)}.")
    print(verdict)
    print(floor_verdict)
    if args.write_readme:
        text = open(README, encoding="utf-8").read()
        table = "\n".join(lines)
        block = (f"{BEGIN}\nWhole-request instructions per call (callgrind, {args.calls:,} pipelined calls over "
                 f"{args.keys:,} keys, Redis 7.0; `bench/peers.py`):\n\n{table}\n\n{verdict}\n\n"
                 + FLOORS.format(noop=f"{floors[0]:,}", three=f"{floors[1]:,}")
                 + "\n\nThe library's functions and their floors, the same way:\n\n"
                 + "\n".join(floor_lines) + f"\n\n{floor_verdict}\n{END}")
        if BEGIN in text:
            text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
        else:
            text = text.rstrip("\n") + "\n\n" + INTRO + block + "\n"
        open(README, "w", encoding="utf-8").write(text)


if __name__ == "__main__":
    sys.exit(main())
