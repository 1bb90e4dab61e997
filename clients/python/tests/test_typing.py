"""`mypy --strict` on a user's app: tests/typing/app_ok.py type-checks cleanly, and every line
of tests/typing/app_misuse.py marked `# error` is reported (and no other line)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

HERE = Path(__file__).resolve().parent / "typing"


def mypy(tmp_path: Path, *args: str) -> list[str]:
    # import-untyped: redis-py before 5 has no py.typed; what is checked here is this package.
    stdout, stderr, _ = api.run(["--strict", "--no-error-summary", "--show-error-codes",
                                 "--disable-error-code", "import-untyped",
                                 "--cache-dir", str(tmp_path / "mypy-cache"), *args])
    assert not stderr, stderr
    return [line for line in stdout.splitlines() if ": error:" in line]


def in_file(errors: list[str], path: Path) -> list[str]:
    return [e for e in errors if Path(e.split(":")[0]).resolve() == path]


def test_a_typed_app_passes_and_misuse_is_caught(tmp_path: Path) -> None:
    ok, misuse = HERE / "app_ok.py", HERE / "app_misuse.py"
    errors = mypy(tmp_path, str(ok), str(misuse))
    assert in_file(errors, ok) == []
    marked = {i for i, line in enumerate(misuse.read_text().splitlines(), 1)
              if re.search(r"# error: ", line)}
    reported = {int(e.split(":")[1]) for e in in_file(errors, misuse)}
    assert reported == marked, "\n".join(errors)


def test_the_package_itself_passes_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("limits", minversion="5")  # limits_storage needs it (Python 3.10+)
    assert mypy(tmp_path, "-p", "redis_ratelimit") == []
