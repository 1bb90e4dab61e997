#!/usr/bin/env python3
"""The instruction-count gate (issue 37): instructions per call of a fixed set
of requests, counted by callgrind, checked against bench/baseline.tsv.

Time moves from run to run on a shared machine; the instructions one call of
a command executes do not (the same binary, inputs and state give the same
count). For every row of ROWS this script runs the command on one
redis-server under `valgrind --tool=callgrind` (the Redis 7.0 with symbols
that `scripts/servers.sh memcheck` builds), as `bench/callgrind.py` does for
one command: it empties the server, writes every key the row touches (one
warm-up call per key), then counts `CALLS` calls on random keys of those
(a fixed seed). Per call it reports

* **the command**: `RedisModuleCommandDispatcher` for a module command, the
  command's own function (`setCommand`, …) for a built-in one; the part
  `INFO commandstats` times. This is what the gate checks: it does not move
  between runs.
* **the request**: reading and parsing the request, the command with its
  propagation and statistics, and writing the reply (`readQueryFromClient`
  plus `writeToClient`, inclusive); everything but the server's timed
  background work (`serverCron`, the event loop's sleeps). It moves a little
  with how the pipelined requests fall into reads; the RL.ALL targets
  (TARGETS) compare it, as one request of RL.ALL replaces several.

A count above its baseline by more than TOLERANCE (2 %) fails the gate
(exit 1), as does a row without a baseline, a baseline without a row, and an
RL.ALL ratio past its enforced bound (TARGETS). A deliberate rise updates the baseline in the same commit
(`make bench-gate-update`, i.e. `--update`), with the reason in the commit
message. A count below its baseline by more than the tolerance is reported:
lower the baseline, so that the room does not hide a later rise.

Usage:
  bench/gate.py [--update] [--write-docs] [--only SUBSTRING] [--calls N] [--keys K]
                [--server BIN] [--module PATH]

`--write-docs` writes the table into bench/README.md and docs/operations.md
(between the `gate table` markers). Only the standard library; needs
valgrind and callgrind_control.
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench import free_port  # noqa: E402  (bench.py, beside this file)
from callgrind import (DEFAULT_MODULE, DEFAULT_SERVER, Connection, keep_backlog,  # noqa: E402
                       parse_profile, resp, wait_for)

BASELINE = os.path.join(HERE, "baseline.tsv")
TOLERANCE = 0.02
# A row this far over its baseline, or a ratio this close under its
# enforced bound, is told (not failed): the counts move by up to 0.7 %
# between runs, so a row that crept near the line fails at random, and
# the change that pushes it over is rarely the one that made it creep.
CREEP = 0.01
NEAR_BOUND = 0.01
CALLS = 1000
KEYS = 200


@dataclass
class Row:
    """One request of the gate. `argv` holds `{k}` where the key number goes
    (a row of several keys uses it in each). `warm` is the request that
    writes every key first (default: `argv` itself; a PEEK row warms with
    the write it peeks at). `setup` runs once before the row (policies,
    `FUNCTION LOAD`): FLUSHALL keeps neither policies nor functions, so a
    setup is not repeated. `measure` names the function whose inclusive cost
    is "the command" (default: the module's dispatcher for RL.*/CL.*, the
    largest `…Command` function otherwise). `backlog`: measured with a
    replication backlog, so every write propagates its effects."""
    name: str
    argv: list
    warm: list = None
    setup: list = field(default_factory=list)
    measure: str = None
    backlog: bool = False


def fw(n):
    """RL.ALL of n FIXEDWINDOW limits on keys all:1:{k} … all:n:{k}."""
    return ["RL.ALL", str(n), *[f"all{i}:{{k}}" for i in range(1, n + 1)], *(["FIXEDWINDOW", "1000", "3600"] * n)]


# Parameters as in bench/bench.py (every call allowed: the path that writes),
# but windows of an hour: a row lasts seconds, and a window or sub-window
# that began or ended during it would change the states, so the counts
# (a bucketed window's by up to 10 %).
COMMON = [
    ("RL.GCRA", ["RL.GCRA", "gcra:{k}", "99", "1", "6"]),
    ("RL.TOKENBUCKET", ["RL.TOKENBUCKET", "tb:{k}", "100", "1", "6"]),
    ("CL.THROTTLE", ["CL.THROTTLE", "cell:{k}", "99", "1", "6"]),
    ("RL.FIXEDWINDOW", ["RL.FIXEDWINDOW", "fw:{k}", "1000", "3600"]),
    ("RL.SLIDINGWINDOW", ["RL.SLIDINGWINDOW", "sw:{k}", "1000", "3600"]),
    ("RL.SLIDINGWINDOW BUCKETS 10", ["RL.SLIDINGWINDOW", "swb:{k}", "1000", "3600", "BUCKETS", "10"]),
    ("RL.LEAKYBUCKET", ["RL.LEAKYBUCKET", "lb:{k}", "100", "1", "6"]),
    ("RL.SLIDINGLOG", ["RL.SLIDINGLOG", "log:{k}", "100", "3600"]),
]
ALL_2 = ["RL.ALL", "2", "alla:{k}", "allb:{k}", "GCRA", "99", "1", "6", "FIXEDWINDOW", "1000", "3600"]
ALL_1 = ["RL.ALL", "1", "fw:{k}", "FIXEDWINDOW", "1000", "3600"]
SET_PX = ["SET", "set:{k}", "x", "PX", "60000"]
POLICY = ["RL.POLICY", "SET", "gate", "GCRA", "99", "1", "6"]
CONC = ["RL.CONCURRENCY", "conc:{k}", "100", "3600"]
FORCED_DEBT = ["RL.GCRA", "debt:{k}", "0", "1", "30", "FORCE"]
CONCR = ["RL.CONCURRENCY", "concr:{k}", "100", "3600"]



def functions_library():
    """`FUNCTION LOAD REPLACE <functions/ratelimit.lua>`, for the library's rows."""
    with open(os.path.join(ROOT, "functions", "ratelimit.lua"), encoding="utf-8") as f:
        return ["FUNCTION", "LOAD", "REPLACE", f.read()]


def fcall(argv):
    """A module request as the Functions library's: `RL.X key …` as
    `FCALL rl_x 1 key …`, `RL.ALL n k… …` as `FCALL rl_all n k… …`."""
    name = argv[0].lower().replace(".", "_")
    if argv[0] == "RL.ALL":
        return ["FCALL", name, *argv[1:]]
    return ["FCALL", name, "1", *argv[1:]]


def fcall_name(argv):
    return fcall(argv)[1]


# The library's rows: every function in its common form on keys of its own
# (f…), a PEEK, RL.ALL of two limits and a held lease acquired again.
LIBRARY_ROWS = [
    # FORCE (issue 43): a cost that fits, as the plain call's.
    (["RL.GCRA", "fgcraf:{k}", "99", "1", "6", "FORCE"], False),
    (["RL.FIXEDWINDOW", "ffwf:{k}", "1000", "3600", "FORCE"], False),
    *[([argv[0], "f" + argv[1], *argv[2:]], False) for name, argv in COMMON if name != "RL.SLIDINGWINDOW BUCKETS 10"],
    (["RL.GCRA", "fgcrap:{k}", "99", "1", "6"], True),
    (["RL.ALL", "2", "falla:{k}", "fallb:{k}", *ALL_2[4:]], False),
    ([*CONC[:1], "fconc:{k}", *CONC[2:], "ACQUIRE", "g"], False),
]

ROWS = [
    Row("SET … PX 60000", SET_PX),
    *[Row(name, argv) for name, argv in COMMON],
    # CL.THROTTLE has no PEEK (redis-cell's grammar: an optional quantity).
    *[Row(f"{name} PEEK", argv + ["PEEK"], warm=argv) for name, argv in COMMON if name != "CL.THROTTLE"],
    # FORCE (issue 43): a cost that fits (the plain call's path), and one
    # past the limit every time (GCRA of limit 1: each call adds 30 s of
    # debt). 30 s, not 6: the replies' retry and reset, in ms, then stay
    # far from a power of ten whatever the row's elapsed time, so their
    # digits, hence the count, do not move with the machine's speed (at
    # 6 s, 12,000 ms less the elapsed time crossed 10,000: 5,272-5,285).
    Row("RL.GCRA FORCE", COMMON[0][1] + ["FORCE"]),
    Row("RL.FIXEDWINDOW FORCE", COMMON[3][1] + ["FORCE"]),
    Row("RL.GCRA FORCE (past the limit)", FORCED_DEBT),
    # Calendar windows (issue 44): a UTC month, and a day in an IANA zone.
    Row("RL.FIXEDWINDOW MONTH", ["RL.FIXEDWINDOW", "fwm:{k}", "1000", "MONTH"]),
    Row("RL.FIXEDWINDOW DAY TZ Europe/Paris", ["RL.FIXEDWINDOW", "fwd:{k}", "1000", "DAY", "TZ", "Europe/Paris"]),
    Row("RL.ALL 1 (FIXEDWINDOW)", ALL_1),
    Row("RL.ALL 2 (GCRA + FIXEDWINDOW)", ALL_2),
    Row("RL.ALL 5 (5 × FIXEDWINDOW)", fw(5)),
    Row("RL.LIMIT (GCRA policy)", ["RL.LIMIT", "limit:{k}", "gate"], setup=[POLICY]),
    # RL.CONCURRENCY (issue 32): a held lease acquired again (renewed), a
    # peek at it, and releases (the warm-up acquires the lease on every key;
    # a key's first release frees it, later ones find nothing).
    Row("RL.CONCURRENCY ACQUIRE (held)", CONC + ["ACQUIRE", "g"]),
    Row("RL.CONCURRENCY ACQUIRE PEEK", CONC + ["ACQUIRE", "g", "PEEK"], warm=CONC + ["ACQUIRE", "g"]),
    Row("RL.CONCURRENCY RELEASE", CONCR + ["RELEASE", "g"], warm=CONCR + ["ACQUIRE", "g"]),
    # The Functions library (functions/ratelimit.lua, docs/functions.md): the
    # same requests through FCALL (loaded once per row), counted as FCALL's
    # own function: the engine of managed servers cannot slip either.
    *[Row(f"FCALL {fcall_name(argv)}{' FORCE' if 'FORCE' in argv else ''}{' PEEK' if peek else ''}", fcall(argv) + (["PEEK"] if peek else []),
          warm=fcall(argv) if peek else None, setup=[functions_library()], measure="fcallCommand")
      for argv, peek in LIBRARY_ROWS],
    # Issue 45's rows: the forms the peers are compared with (bench/peers.py),
    # the caller's clock NOW fixed at the row's start.
    *[Row(name, argv, setup=[functions_library()], measure="fcallCommand") for name, argv in [
        ("FCALL rl_fixedwindow ALIGN FIRST", ["FCALL", "rl_fixedwindow", "1", "ffwf:{k}", "1000", "3600", "ALIGN", "FIRST"]),
        ("FCALL rl_slidingwindow NOW", ["FCALL", "rl_slidingwindow", "1", "fswn:{k}", "1000", "3600", "NOW", "{now}"]),
        ("FCALL rl_slidinglog NOW", ["FCALL", "rl_slidinglog", "1", "flogn:{k}", "100", "3600", "NOW", "{now}"]),
    ]],
    # rl_concurrency's other common forms through the library (issue 45):
    # the read-only twin on held leases, and releases (as RL.CONCURRENCY
    # RELEASE above: a key's first release gives its lease back and deletes
    # the key, later ones find nothing).
    Row("FCALL_RO rl_concurrency_ro", ["FCALL_RO", "rl_concurrency_ro", "1", "fconcro:{k}", *CONC[2:], "ACQUIRE", "g"],
        warm=["FCALL", "rl_concurrency", "1", "fconcro:{k}", *CONC[2:], "ACQUIRE", "g"],
        setup=[functions_library()], measure="fcallroCommand"),
    Row("FCALL rl_concurrency RELEASE", fcall([CONCR[0], "f" + CONCR[1], *CONCR[2:], "RELEASE", "g"]),
        warm=fcall([CONCR[0], "f" + CONCR[1], *CONCR[2:], "ACQUIRE", "g"]),
        setup=[functions_library()], measure="fcallCommand"),
    # A calendar window through the library (issue 44): a UTC month.
    Row("FCALL rl_fixedwindow MONTH", fcall(["RL.FIXEDWINDOW", "ffwm:{k}", "1000", "MONTH"]),
        setup=[functions_library()], measure="fcallCommand"),
    # With a replication backlog: every write hands its effects to the server.
    Row("SET … PX 60000, backlog", SET_PX, backlog=True),
    Row("RL.GCRA, backlog", COMMON[0][1], backlog=True),
    Row("RL.FIXEDWINDOW, backlog", COMMON[3][1], backlog=True),
    Row("RL.ALL 1 (FIXEDWINDOW), backlog", ALL_1, backlog=True),
    Row("RL.ALL 2 (GCRA + FIXEDWINDOW), backlog", ALL_2, backlog=True),
    Row("RL.ALL 5 (5 × FIXEDWINDOW), backlog", fw(5), backlog=True),
]


# Issue 37's targets, on the request counts: (row, rows it replaces, the
# issue's target, the bound enforced). One RL.ALL request replaces one
# request per limit. Where the target is out of reach (bench/README.md,
# "RL.ALL against the calls it replaces", has the arithmetic) the enforced
# bound is the reachable one, or today's ratio with room for the request
# counts' spread, so that the ratio cannot slip back.
TARGETS = [
    # 0.898 (2026-11-26, after RL.ALL's plans were pushed where they are
    # built, issue 37): the 0.9 met; enforced with room for the
    # request counts' spread (a few tenths of a percent between runs).
    ("RL.ALL 2 (GCRA + FIXEDWINDOW)", ["RL.GCRA", "RL.FIXEDWINDOW"], 0.9, 0.91),
    # The other three at today's ratio (1.00, 1.15, 1.09) with room for the
    # spread: out of reach of the targets (bench/README.md), but not
    # to slip. With a backlog, the two-limit request moves by up to ~0.6 %
    # between runs (28,955-29,113), hence its wider room.
    ("RL.ALL 2 (GCRA + FIXEDWINDOW), backlog", ["RL.GCRA, backlog", "RL.FIXEDWINDOW, backlog"], 0.9, 1.02),
    ("RL.ALL 1 (FIXEDWINDOW)", ["RL.FIXEDWINDOW"], 1.05, 1.16),
    ("RL.ALL 1 (FIXEDWINDOW), backlog", ["RL.FIXEDWINDOW, backlog"], 1.05, 1.10),
    # FORCE costs what a plain call costs, within 3 % (issue 43): the cost
    # that fits, and the one past the limit (decided twice, and written).
    # Compared as commands (the module's dispatcher): the request also
    # reads one more argument, the server's work, not FORCE's. The command
    # reads it too (about 2 % of a call). A FORCE that fits runs the plain
    # decision inline, only the overshoot out of line: 1.02, 1.02 and 1.03
    # on 2026-11-28 (1.03-1.04 before), enforced at the target. Past the
    # limit, 5,305-5,317 against 5,126-5,130 (1.035-1.037) with the row's
    # 30 s of debt per call: +54 in the parsing of the word FORCE (as every
    # FORCE), +150 in the charge, its horizon check and the second decision
    # (the reply to a debt); a plain call past the limit is a refusal that
    # writes nothing, so there is no plain call of this path to match.
    # Enforced at 1.05 (room for the counts' spread of a few tens); its
    # baseline row guards it at 2 % too.
    ("RL.GCRA FORCE", ["RL.GCRA"], 1.03, 1.03, "command"),
    ("RL.FIXEDWINDOW FORCE", ["RL.FIXEDWINDOW"], 1.03, 1.03, "command"),
    ("RL.GCRA FORCE (past the limit)", ["RL.GCRA"], 1.03, 1.05, "command"),
    # The library's: a FORCE that fits is answered by the plain call's fast
    # path (functions/ratelimit.lua, fast_form): 1.4x before (the full
    # path), 1.0x on 2026-11-28; the argument itself is FCALL's work.
    ("FCALL rl_gcra FORCE", ["FCALL rl_gcra"], 1.03, 1.03, "command"),
    ("FCALL rl_fixedwindow FORCE", ["FCALL rl_fixedwindow"], 1.03, 1.03, "command"),
]


def requests(argv, keys, now_us=0):
    """`{k}` the key number, `{now}` the row's clock (µs, the library's NOW)."""
    return [[a.replace("{k}", str(k)).replace("{now}", str(now_us)) for a in argv] for k in keys]


class Server:
    """redis-server under callgrind; each `dump()` writes the counts since the
    previous one to its own file (callgrind.out.<pid>.<n>)."""

    def __init__(self, args, tmp):
        self.tmp = tmp
        port = free_port()
        self.log = open(os.path.join(tmp, "server.log"), "w")
        # A fixed hash seed (bench/fixed_seed.c): the same hash chains, so
        # the same lookups, in every run.
        seed_lib = os.path.join(tmp, "fixed_seed.so")
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", seed_lib, os.path.join(HERE, "fixed_seed.c"), "-ldl"],
                       check=True)
        env = dict(os.environ, LD_PRELOAD=seed_lib)
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/callgrind.out.%p",
             args.server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp, "--enable-debug-command", "yes",
             "--loadmodule", args.module],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = port
        self.conn = wait_for(port, self.proc)
        # Calls slowed down by valgrind or by a busy machine would go to the
        # slow log, which costs instructions inside the command.
        self.conn.call("CONFIG", "SET", "slowlog-log-slower-than", "-1")
        # The cron shrinks or grows a client's reply buffer by its recent
        # peak, a matter of timing; replies past it go to a list, at a cost
        # inside the command (up to 2 % of a call).
        if self.conn.call("DEBUG", "REPLYBUFFER", "RESIZING", "0") != b"OK":
            raise SystemExit("DEBUG REPLYBUFFER RESIZING 0 failed")
        self.dumps = 0

    def dump(self):
        """Dumps the counts; returns the file. callgrind acts on the request
        when the server next runs, so the server is kept busy with PINGs
        until callgrind_control returns."""
        dumper = subprocess.Popen(["callgrind_control", "--dump", str(self.proc.pid)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while dumper.poll() is None:
            if time.time() > deadline:
                dumper.kill()
                raise SystemExit("callgrind_control --dump did not return")
            self.conn.call("PING")
            time.sleep(0.05)
        self.dumps += 1
        path = os.path.join(self.tmp, f"callgrind.out.{self.proc.pid}.{self.dumps}")
        if not os.path.exists(path):
            raise SystemExit(f"no dump at {path}: {os.listdir(self.tmp)}")
        return path

    def stop(self):
        try:
            self.conn.sock.sendall(resp(["SHUTDOWN", "NOSAVE"]))
        except OSError:
            pass
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def command_cost(row, inclusive):
    if row.measure:
        return inclusive.get(row.measure, 0)
    if row.argv[0].upper().startswith(("RL.", "CL.")):
        return inclusive.get("RedisModuleCommandDispatcher", 0)
    procs = [c for f, c in inclusive.items() if f.endswith("Command") and f != "processCommand"]
    return max(procs, default=0)


# Requests per pipelined batch: the replies of one batch fit the client's
# 16 KB reply buffer (500 replies of five integers would not, and how many
# spill to a reply list would depend on how the requests fell into reads).
BATCH = 100
# Where to keep each row's profile (callgrind_annotate reads them): --keep.
KEEP_DIR = None


# The rows' windows begin on multiples of their length (an hour; a bucketed
# sliding window's buckets: 360 s). A window or bucket that begins during a
# row changes the keys' states, and the counts by up to 3 % (seen once, at a
# full hour): such a row is measured again, whole, inside the next one.
BOUNDARY_S = 360


def measure(server, row, calls, keys):
    """(the command, the request, the module's own code) per call of `row`,
    measured within one BOUNDARY_S period of the server's clock."""
    for _ in range(3):
        started = int(server.conn.call("TIME")[0])
        result = measure_once(server, row, calls, keys)
        if int(server.conn.call("TIME")[0]) // BOUNDARY_S == started // BOUNDARY_S:
            return result
        print(f"  {row.name}: a window began during the row; measured again", file=sys.stderr, flush=True)
    raise SystemExit(f"{row.name}: a window began during each of three runs of the row")


def measure_once(server, row, calls, keys):
    """One measurement of `row` (see measure)."""
    conn = server.conn
    if conn.call("FLUSHALL") != b"OK":
        raise SystemExit("FLUSHALL failed")
    t = conn.call("TIME")
    now_us = int(t[0]) * 1_000_000 + int(t[1])
    errors = conn.pipeline(requests(row.warm or row.argv, range(keys), now_us), BATCH)
    rng = random.Random(37)
    errors += conn.pipeline(requests(row.argv, [rng.randrange(keys) for _ in range(calls // 4)], now_us), BATCH)
    if errors:
        raise SystemExit(f"{row.name}: {len(errors)} error replies, e.g. {errors[0]}")
    server.dump()  # what came before: not counted
    measured = requests(row.argv, [rng.randrange(keys) for _ in range(calls)], now_us)
    errors = conn.pipeline(measured, BATCH)
    path = server.dump()
    if errors:
        raise SystemExit(f"{row.name}: {len(errors)} error replies, e.g. {errors[0]}")
    inclusive, module_self, *_ = parse_profile(path)
    if KEEP_DIR:
        os.replace(path, os.path.join(KEEP_DIR, "".join(c for c in row.name if c.isalnum())))
    else:
        os.remove(path)
    request = inclusive.get("readQueryFromClient", 0) + inclusive.get("writeToClient", 0)
    return command_cost(row, inclusive) / calls, request / calls, module_self / calls


def read_baseline():
    base = {}
    if not os.path.exists(BASELINE):
        return base
    for line in open(BASELINE, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        name, count = line.rsplit("\t", 1)
        base[name] = int(count)
    return base


BASELINE_HEAD = """\
# Instructions per call of each request of bench/gate.py ("the command":
# the module's dispatcher, or the built-in command's own function), Redis
# 7.0.15 built by `scripts/servers.sh memcheck`, release module. `make
# bench-gate` fails when a count rises more than 2 % above its line here.
# A deliberate rise: `make bench-gate-update`, committed with the change
# that causes it and the reason in the commit message.
# row<TAB>instructions
"""


def write_baseline(results):
    with open(BASELINE, "w", encoding="utf-8") as f:
        f.write(BASELINE_HEAD)
        for row in ROWS:
            if row.name in results:
                f.write(f"{row.name}\t{round(results[row.name][0])}\n")


def table(results, base):
    """The gate's table (markdown lines)."""
    def ratio(a, b):
        return f"{a / b:.2f}" if a and b else ""

    lines = ["| request | the command | × `SET … PX` | × baseline | the request | × `SET … PX` | module's own code |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in ROWS:
        if row.name not in results:
            continue
        cmd, req, own = results[row.name]
        set_name = "SET … PX 60000, backlog" if row.backlog else "SET … PX 60000"
        set_cmd, set_req, _ = results.get(set_name, (0, 0, 0))
        b = base.get(row.name)
        # The module's own code, for the module's commands only.
        own_text = f"{own:,.0f}" if row.argv[0].startswith(("RL.", "CL.")) else ""
        lines.append(f"| {row.name} | {cmd:,.0f} | {ratio(cmd, set_cmd)} | {ratio(cmd, b)} | {req:,.0f} "
                     f"| {ratio(req, set_req)} | {own_text} |")
    return lines


def targets(results):
    """(lines, failures) for TARGETS."""
    lines, failures = [], []
    for name, parts, target, bound, *what in TARGETS:
        if name not in results or any(p not in results for p in parts):
            continue
        # The request (default), or the command ("command").
        which, unit = (0, "call") if what == ["command"] else (1, "request")
        req = results[name][which]
        replaced = sum(results[p][which] for p in parts)
        ratio = req / replaced
        text = (f"{name}: {req:,.0f} instructions per {unit}, {ratio:.2f} × "
                f"{' + '.join(parts)} ({replaced:,.0f}); target ≤ {target}: "
                f"{'ok' if ratio <= target else 'missed'}; enforced ≤ {bound}: "
                f"{'ok' if ratio <= bound else 'FAILED'}")
        lines.append(text)
        if ratio > bound:
            failures.append(text)
        elif ratio > bound * (1 - NEAR_BOUND):
            print(f"note: {name}: {ratio:.3f}, within {NEAR_BOUND:.1%} of its enforced bound {bound}")
    return lines, failures


def write_docs(lines, target_lines):
    block = ("<!-- gate table: written by bench/gate.py --write-docs -->\n"
             f"`make bench-gate`, {time.strftime('%Y-%m-%d')}, instructions per call:\n\n"
             + "\n".join(lines) + "\n\n" + "\n".join(f"- {t}" for t in target_lines)
             + "\n<!-- /gate table -->")
    for path in (os.path.join(HERE, "README.md"), os.path.join(ROOT, "docs", "operations.md")):
        text = open(path, encoding="utf-8").read()
        start = text.find("<!-- gate table")
        end = text.find("<!-- /gate table -->")
        if start < 0 or end < 0:
            raise SystemExit(f"{path}: no gate table markers")
        text = text[:start] + block + text[end + len("<!-- /gate table -->"):]
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=CALLS)
    ap.add_argument("--keys", type=int, default=KEYS)
    ap.add_argument("--server", default=DEFAULT_SERVER)
    ap.add_argument("--module", default=DEFAULT_MODULE)
    ap.add_argument("--keep", metavar="DIR", help="keep each row's callgrind profile in DIR")
    ap.add_argument("--only", help="only the rows whose name contains this (no baseline checks of others)")
    ap.add_argument("--update", action="store_true", help="write the counts to bench/baseline.tsv")
    ap.add_argument("--write-docs", action="store_true", help="write the table to bench/README.md, docs/operations.md")
    args = ap.parse_args()
    for path in (args.server, args.module):
        if not os.path.exists(path):
            raise SystemExit(f"not found: {path} (make bench-gate prepares it)")
    rows = [r for r in ROWS if not args.only or args.only in r.name]
    if args.keep:
        global KEEP_DIR
        KEEP_DIR = os.path.abspath(args.keep)
        os.makedirs(KEEP_DIR, exist_ok=True)
    started = time.time()
    results = {}
    with tempfile.TemporaryDirectory(prefix="rl-gate-") as tmp:
        server = Server(args, tmp)
        try:
            done_setup = set()
            # Every row without a backlog first; then one SYNC keeps a backlog
            # for the rest of the server's life.
            for backlog in (False, True):
                todo = [r for r in rows if r.backlog == backlog]
                if not todo:
                    continue
                if backlog:
                    keep_backlog(server.port)
                    info = server.conn.call("INFO", "replication").decode()
                    if "repl_backlog_active:1" not in info:
                        raise SystemExit(f"no backlog:\n{info}")
                    # The SYNC's fork ends before anything is counted.
                    deadline = time.time() + 60
                    while b"rdb_bgsave_in_progress:0" not in server.conn.call("INFO", "persistence"):
                        if time.time() > deadline:
                            raise SystemExit("the SYNC's background save did not end")
                        time.sleep(0.2)
                for row in todo:
                    for cmd in row.setup:
                        if tuple(cmd) not in done_setup:
                            reply = server.conn.call(*cmd)
                            if isinstance(reply, RuntimeError):
                                raise SystemExit(f"{row.name}: setup {cmd[:3]}: {reply}")
                            done_setup.add(tuple(cmd))
                    results[row.name] = measure(server, row, args.calls, args.keys)
                    print(f"  {row.name}: {results[row.name][0]:,.0f}", file=sys.stderr, flush=True)
        finally:
            server.stop()

    base = read_baseline()
    lines = table(results, base)
    target_lines, failures = targets(results)
    print(f"Instructions per call ({args.calls} calls over {args.keys} keys per row; "
          f"{time.time() - started:.0f} s under callgrind):\n")
    print("\n".join(lines))
    print()
    for t in target_lines:
        print(t)
    if args.write_docs:
        write_docs(lines, target_lines)
    if args.update:
        if args.only:
            raise SystemExit("--update writes every row: run it without --only")
        write_baseline(results)
        print(f"\nwrote {os.path.relpath(BASELINE, ROOT)}")
        return 0
    creeping = []
    for row in rows:
        cmd = results[row.name][0]
        b = base.get(row.name)
        if b is not None and b * (1 + CREEP) < cmd <= b * (1 + TOLERANCE):
            creeping.append(f"{row.name} {cmd / b - 1:+.1%}")
        if b is None:
            failures.append(f"{row.name}: no baseline (add it: make bench-gate-update)")
        elif cmd > b * (1 + TOLERANCE):
            failures.append(f"{row.name}: {cmd:,.0f} instructions, {cmd / b - 1:+.1%} over the baseline {b:,}")
        elif cmd < b * (1 - TOLERANCE):
            print(f"note: {row.name}: {cmd:,.0f}, {cmd / b - 1:+.1%} under the baseline {b:,}: "
                  "lower it (make bench-gate-update)")
    if not args.only:
        for name in base:
            if name not in results:
                failures.append(f"{name}: a baseline without a row (remove it: make bench-gate-update)")
    if creeping:
        print(f"note: {len(creeping)} row{'s' if len(creeping) > 1 else ''} more than {CREEP:.0%} over their baselines (the gate fails "
              f"at {TOLERANCE:.0%}): find what made them creep, or re-measure on purpose "
              f"(make bench-gate-update): {', '.join(creeping)}")
    if failures:
        print("\nbench-gate: FAILED")
        for f in failures:
            print(f"  {f}")
        return 1
    print(f"\nbench-gate: ok (every count within {TOLERANCE:.0%} of bench/baseline.tsv)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
