"""limits_suite/run.py, the runner of `limits`' own tests: what it deselects is what the README
says, and its server's port can be set."""

from __future__ import annotations

import re
from pathlib import Path

from limits_suite import run

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_the_readme_names_what_is_deselected() -> None:
    # pytest's "N deselected" counts every test the selection leaves out: the runner selects
    # classes, not a -k expression, so that count is the DESELECTED list.
    cmd = run.pytest_command([])
    assert "-k" not in cmd
    assert cmd.count("--deselect") == len(run.DESELECTED)
    said = re.search(r"(\d+) are deselected", README)
    assert said is not None and int(said.group(1)) == len(run.DESELECTED)


def test_the_port_can_be_set(monkeypatch) -> None:
    args, rest = run.parse_args(["--port", "23456", "-q"])
    assert args.port == 23456 and rest == ["-q"]
    monkeypatch.setenv("RL_SUITE_PORT", "23457")
    assert run.parse_args([])[0].port == 23457
    monkeypatch.delenv("RL_SUITE_PORT")
    assert run.parse_args([])[0].port == 0  # a free one
