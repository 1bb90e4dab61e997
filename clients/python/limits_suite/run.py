"""Runs the `limits` library's own strategy tests (moving window, sliding window counter, sync
and async) against redis-ratelimit's storages: `redis+rl://` and `async+redis+rl://`.

    python -m limits_suite.run [--sdist DIR] [--port N] [pytest args…]   (from clients/python)

Downloads the sdist of the installed `limits` version from PyPI (`pip download`) unless --sdist
names an unpacked one, starts redis-server with the module ($RATELIMIT_MODULE) on a loopback port
(--port N, else $RL_SUITE_PORT, else a free one), points the suite's "redis" storage at it and
runs the classes in CLASSES (tests/test_strategy.py's TestMovingWindow and TestSlidingWindow and
their async twins) but the tests in DESELECTED, so pytest's "deselected" count is exactly those.
Exits with pytest's status. Needs pytest, pytest-asyncio, pytest-lazy-fixtures, flaky.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from tests.helpers import RedisServer

# The suite's classes that exercise the strategies this storage implements.
CLASSES = [
    "tests/test_strategy.py::TestMovingWindow",
    "tests/test_strategy.py::TestSlidingWindow",
    "tests/aio/test_strategy.py::TestAsyncMovingWindow",
    "tests/aio/test_strategy.py::TestAsyncSlidingWindow",
]

# The tests of those classes that assert what the module does differently (the README's
# "Differences from limits' own Redis storage" names both reasons).
DESELECTED = [
    # A log of 1,000,000 entries: RL.SLIDINGLOG refuses a limit above the module setting
    # sliding-log-max-limit (default 1000, at most 100000).
    "tests/test_strategy.py::TestMovingWindow::test_moving_window_huge_cost[redis+rl]",
    "tests/aio/test_strategy.py::TestAsyncMovingWindow::"
    "test_moving_window_huge_cost[async+redis+rl]",
    # limits' own Redis storage floors the previous window's weighted count
    # (floor(previous × ttl / expiry) + current + cost ≤ limit), so it admits up to one token
    # more than the estimate; RL.SLIDINGWINDOW tests the estimate exactly. This test asserts
    # the floor.
    "tests/test_strategy.py::TestSlidingWindow::"
    "test_sliding_window_counter_previous_window[redis+rl]",
    "tests/aio/test_strategy.py::TestAsyncSlidingWindow::"
    "test_sliding_window_counter_previous_window[async+redis+rl]",
]

# Appended to the suite's tests/utils.py: only our storages, under the suite's own ids.
OVERRIDE = '''

# --- redis-ratelimit: only the module's storages
import redis_ratelimit  # noqa: E402,F401  (registers redis+rl://)

_RL_PORT = int(os.environ["RL_SUITE_PORT"])
ALL_STORAGES = {
    "redis": pytest.param(f"redis+rl://127.0.0.1:{_RL_PORT}", {}, lf("redis_basic"),
                          marks=pytest.mark.redis, id="redis+rl"),
}
ALL_STORAGES_ASYNC = {
    "redis": pytest.param(f"async+redis+rl://127.0.0.1:{_RL_PORT}",
                          {"implementation": "redispy"}, lf("redis_basic"),
                          marks=pytest.mark.redis, id="async+redis+rl"),
}
all_storage = pytest.mark.parametrize("uri, args, fixture", ALL_STORAGES.values())
moving_window_storage = all_storage
sliding_window_counter_storage = all_storage
async_all_storage = pytest.mark.parametrize("uri, args, fixture", ALL_STORAGES_ASYNC.values())
async_moving_window_storage = async_all_storage
async_sliding_window_counter_storage = async_all_storage
'''

CONFTEST = '''
import os

import pytest
import redis


@pytest.fixture
def redis_basic():
    client = redis.Redis("127.0.0.1", int(os.environ["RL_SUITE_PORT"]))
    client.flushall()
    return client
'''

INI = '''[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
markers =
    unit: unit
    integration: integration
    redis: redis
    flaky: flaky
    benchmark: benchmark
addopts = --tb=short -rfEsxX -p no:cacheprovider
filterwarnings =
    ignore::pytest.PytestUnknownMarkWarning
'''


def fetch_sdist(dest: Path) -> Path:
    import limits

    version = limits.__version__
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
                    ":all:", f"limits=={version}", "-d", str(dest)], check=True)
    archive = next(dest.glob(f"limits-{version}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(dest)
    return dest / f"limits-{version}"


def parse_args(argv: Optional[List[str]] = None) -> Tuple[argparse.Namespace, List[str]]:
    """(run.py's own options, the arguments left for pytest)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help="an unpacked limits sdist (default: download)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("RL_SUITE_PORT", "0")),
                        help="the loopback port of the server it starts (default: "
                             "$RL_SUITE_PORT, else a free one)")
    return parser.parse_known_args(argv)


def pytest_command(pytest_args: List[str]) -> List[str]:
    """The suite's pytest command line: CLASSES but DESELECTED, then ``pytest_args``."""
    selection = [arg for test in DESELECTED for arg in ("--deselect", test)]
    return [sys.executable, "-m", "pytest", "-p", "flaky", *CLASSES, *selection, *pytest_args]


def main() -> int:
    args, pytest_args = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sdist = args.sdist or fetch_sdist(work / "dl")
        shutil.copytree(sdist / "tests", work / "suite" / "tests")
        suite = work / "suite"
        with open(suite / "tests" / "utils.py", "a") as f:
            f.write(OVERRIDE)
        (suite / "tests" / "conftest.py").write_text(CONFTEST)
        (suite / "tests" / "aio" / "conftest.py").unlink(missing_ok=True)
        (suite / "pytest.ini").write_text(INI)
        with RedisServer(port=args.port) as server:
            env = dict(os.environ, RL_SUITE_PORT=str(server.port))
            return subprocess.run(pytest_command(pytest_args), cwd=suite, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
