"""What the READMEs and docs tell a Python user: the distribution's name in every install
command, the import `limits` needs in the first snippet, snippets that compile; and tests that
import their helpers as a package."""

from __future__ import annotations

import importlib.metadata
import re
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
REPO = PACKAGE.parents[1]
DOCS = [PACKAGE / "README.md", REPO / "README.md", REPO / "docs" / "applications.md",
        REPO / "examples" / "python" / "README.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_install_command_names_the_distribution(doc: Path) -> None:
    if not doc.exists():
        pytest.skip("outside a checkout of the repository (an sdist)")
    text = " ".join(doc.read_text().split())  # Markdown wraps lines anywhere
    assert "pip install redis-ratelimit-client" in text, f"{doc.name} never says how to install"
    # `pip install redis-ratelimit` installs another project (PyPI's redis-ratelimit 1.0.3).
    assert not re.search(r"pip install ['\"]?redis-ratelimit(?!-client)\b", text)


def test_the_first_snippet_imports_the_package() -> None:
    """limits has no plugin entry point: without the import, "unknown storage scheme"."""
    text = (PACKAGE / "README.md").read_text()
    first = re.search(r"```python\n(.*?)```", text, re.S)
    assert first is not None and first.group(1).startswith("import redis_ratelimit")
    assert "unknown storage scheme" in text


def test_python_snippets_compile() -> None:
    for doc in (PACKAGE / "README.md", REPO / "docs" / "applications.md"):
        if not doc.exists():
            continue
        for i, code in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)):
            compile(textwrap.dedent(code), f"{doc.name} snippet {i + 1}", "exec")


def test_the_installed_distribution() -> None:
    """The name a stranger installs, and the redis-py floor without CVE-2023-28858/28859."""
    requires = importlib.metadata.requires("redis-ratelimit-client") or []
    assert "redis>=4.5.4" in requires


def test_tests_import_helpers_as_a_package() -> None:
    for path in [*PACKAGE.glob("tests/*.py"), *PACKAGE.glob("limits_suite/*.py"),
                 PACKAGE / "bench.py"]:
        text = path.read_text()
        assert "sys.path.insert" not in text.replace('"sys.path.insert"', ""), path
        assert "from conftest import" not in text.replace('"from conftest import"', ""), path
