"""The build hook that puts the Functions library into the package (hatchling's ``custom`` hook,
named in pyproject.toml).

The library has one home, the repository's ``functions/ratelimit.lua``; the package carries it as
``redis_ratelimit/ratelimit.lua`` (what ``redis_ratelimit._engine`` loads). Built from a checkout
(``pip install ./clients/python``, ``hatchling build``), the hook copies that file into the wheel
(``redis_ratelimit/ratelimit.lua``) and the sdist (``src/redis_ratelimit/ratelimit.lua``); built
from the sdist, the file is already there and is packaged as any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

IN_PACKAGE = Path("src") / "redis_ratelimit" / "ratelimit.lua"


class FunctionsLibraryHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: Dict[str, Any]) -> None:
        root = Path(self.root).resolve()
        library = root.parent.parent / "functions" / "ratelimit.lua"
        in_checkout = (root.name, root.parent.name) == ("python", "clients") and library.is_file()
        if not in_checkout:
            if (root / IN_PACKAGE).is_file():
                return  # an sdist: it carries the library
            raise RuntimeError(
                f"redis-ratelimit-client: no Functions library: neither {library} (clients/python "
                f"in a checkout of the repository) nor {root / IN_PACKAGE} (an sdist)")
        target = IN_PACKAGE if self.target_name == "sdist" else IN_PACKAGE.relative_to("src")
        build_data["force_include"][str(library)] = target.as_posix()
