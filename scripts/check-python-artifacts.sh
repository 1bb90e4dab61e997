#!/usr/bin/env bash
# scripts/check-python-artifacts.sh — builds the Python package's wheel and sdist
# (clients/python, with hatchling, into dist/python/) and checks what a stranger installs:
# the distribution name redis-ratelimit-client (the PyPI name redis-ratelimit is another
# project's), LICENSE inside both (identical to the repository's), License-Expression MIT,
# classifiers (Python versions, frameworks, development status, typed), no project URL, the
# redis-py floor without CVE-2023-28858/28859, py.typed, the Functions library
# (redis_ratelimit/ratelimit.lua, byte for byte functions/ratelimit.lua: hatch_build.py copies it
# in, nothing under clients/ commits it) in the wheel, the sdist, a wheel built from the sdist and
# `pip install ./clients/python`; then installs the wheel into a scratch directory, imports it and
# checks that it reads its library. `make test-packages` calls it; it needs the virtualenv of
# `scripts/setup.sh python-clients`, which it makes when missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/dist/python"
venv="$root/build/python-clients"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() {
  echo "check-python-artifacts: FAILED: $*" >&2
  exit 1
}

"$root/scripts/setup.sh" python-clients
py="$venv/bin/python"
version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/clients/python/pyproject.toml" | head -n 1)"
rm -rf "$out"
mkdir -p "$out"
(cd "$root/clients/python" && "$py" -m hatchling build -t wheel -t sdist -d "$out") >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "hatchling could not build clients/python"; }
wheel="$out/redis_ratelimit_client-$version-py3-none-any.whl"
sdist="$out/redis_ratelimit_client-$version.tar.gz"
[ -f "$wheel" ] || fail "no $wheel (is the distribution named redis-ratelimit-client?)"
[ -f "$sdist" ] || fail "no $sdist"

# The metadata of both, and their LICENSE files, checked by one Python script.
"$py" - "$wheel" "$sdist" "$root/LICENSE" "$version" "$root/functions/ratelimit.lua" <<'EOF' || fail "see above"
import sys
import tarfile
import zipfile
from email.parser import Parser

wheel, sdist, license_path, version, library_path = sys.argv[1:]
license_text = open(license_path, "rb").read()
library = open(library_path, "rb").read()
problems = []

with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    info = f"redis_ratelimit_client-{version}.dist-info"
    wheel_meta = Parser().parsestr(z.read(f"{info}/METADATA").decode())
    if f"{info}/licenses/LICENSE" not in names:
        problems.append("the wheel carries no LICENSE")
    elif z.read(f"{info}/licenses/LICENSE") != license_text:
        problems.append("the wheel's LICENSE differs from the repository's")
    if "redis_ratelimit/py.typed" not in names:
        problems.append("the wheel has no redis_ratelimit/py.typed")
    if "redis_ratelimit/ratelimit.lua" not in names:
        problems.append("the wheel has no redis_ratelimit/ratelimit.lua (the Functions library)")
    elif z.read("redis_ratelimit/ratelimit.lua") != library:
        problems.append("the wheel's ratelimit.lua differs from functions/ratelimit.lua")

with tarfile.open(sdist) as t:
    top = f"redis_ratelimit_client-{version}"
    sdist_meta = Parser().parsestr(t.extractfile(f"{top}/PKG-INFO").read().decode())
    member = t.extractfile(f"{top}/LICENSE") if f"{top}/LICENSE" in t.getnames() else None
    if member is None:
        problems.append("the sdist carries no LICENSE")
    elif member.read() != license_text:
        problems.append("the sdist's LICENSE differs from the repository's")
    lua = f"{top}/src/redis_ratelimit/ratelimit.lua"
    if lua not in t.getnames():
        problems.append("the sdist has no src/redis_ratelimit/ratelimit.lua (the Functions library)")
    elif t.extractfile(lua).read() != library:
        problems.append("the sdist's ratelimit.lua differs from functions/ratelimit.lua")

WANTED_CLASSIFIERS = [
    "Development Status ::",
    "Programming Language :: Python :: 3.9",
    "Programming Language :: Python :: 3.13",
    "Framework :: AsyncIO",
    "Framework :: FastAPI",
    "Framework :: Flask",
    "Typing :: Typed",
]
for what, meta in (("wheel", wheel_meta), ("sdist", sdist_meta)):
    if meta["Name"] != "redis-ratelimit-client":
        problems.append(f"{what}: Name is {meta['Name']!r}, not 'redis-ratelimit-client'")
    if meta["License-Expression"] != "MIT":
        problems.append(f"{what}: License-Expression is {meta['License-Expression']!r}")
    if "LICENSE" not in (meta.get_all("License-File") or []):
        problems.append(f"{what}: no License-File: LICENSE")
    classifiers = meta.get_all("Classifier") or []
    for wanted in WANTED_CLASSIFIERS:
        if not any(c.startswith(wanted) for c in classifiers):
            problems.append(f"{what}: no classifier {wanted!r}")
    if any(c.startswith("License ::") for c in classifiers):
        problems.append(f"{what}: a License classifier beside License-Expression (PyPI refuses it)")
    # No URL the project does not own: it has no public home yet.
    urls = meta.get_all("Project-URL") or []
    if urls or meta.get("Home-page") or meta.get("Download-URL"):
        problems.append(f"{what}: URLs {urls!r} (none until the project has a public home)")
    requires = meta.get_all("Requires-Dist") or []
    if "redis>=4.5.4" not in requires:
        problems.append(f"{what}: Requires-Dist {requires!r} lacks redis>=4.5.4")

for p in problems:
    print(f"check-python-artifacts: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF

# A wheel built from the sdist alone (no repository around it), and `pip install ./clients/python`
# (what make test-python runs), carry the library byte for byte too.
mkdir "$work/sdist" "$work/from-sdist"
tar -xzf "$sdist" -C "$work/sdist"
(cd "$work/sdist/redis_ratelimit_client-$version" && "$py" -m hatchling build -t wheel -d "$work/from-sdist") >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "hatchling could not build a wheel from the sdist"; }
"$py" -m pip install -q --no-deps --no-build-isolation --target "$work/checkout-site" "$root/clients/python" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "pip install ./clients/python"; }
"$py" - "$root/functions/ratelimit.lua" "$work/from-sdist/redis_ratelimit_client-$version-py3-none-any.whl" \
  "$work/checkout-site/redis_ratelimit/ratelimit.lua" <<'EOF' || fail "see above"
import sys
import zipfile

library_path, wheel, installed = sys.argv[1:]
library = open(library_path, "rb").read()
problems = []
with zipfile.ZipFile(wheel) as z:
    name = "redis_ratelimit/ratelimit.lua"
    if name not in z.namelist() or z.read(name) != library:
        problems.append("the wheel built from the sdist lacks redis_ratelimit/ratelimit.lua, or it differs")
try:
    if open(installed, "rb").read() != library:
        problems.append("pip install ./clients/python installed a ratelimit.lua that differs")
except FileNotFoundError:
    problems.append("pip install ./clients/python installed no redis_ratelimit/ratelimit.lua")
for p in problems:
    print(f"check-python-artifacts: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF

# The wheel installs, imports as redis_ratelimit, and knows its distribution's name.
"$py" -m pip install -q --no-deps --no-index --target "$work/site" "$wheel" || fail "pip could not install $wheel"
PYTHONPATH="$work/site" "$py" -c '
import importlib.metadata, redis_ratelimit
from redis_ratelimit import _engine
assert redis_ratelimit.__file__.startswith("'"$work/site"'"), redis_ratelimit.__file__
assert importlib.metadata.version("redis-ratelimit-client") == redis_ratelimit.__version__
assert str(_engine.LIBRARY_PATH).startswith("'"$work/site"'"), _engine.LIBRARY_PATH
assert _engine.LIBRARY_CODE.startswith("#!lua name=ratelimit") and _engine.LIBRARY_VERSION >= 1
' || fail "the installed wheel does not import as redis_ratelimit, or does not read its library"
echo "check-python-artifacts: $(basename "$wheel") and $(basename "$sdist") (dist/python/): name, LICENSE, classifiers, no URL, redis>=4.5.4, the Functions library (also in a wheel from the sdist and in pip install ./clients/python)"
