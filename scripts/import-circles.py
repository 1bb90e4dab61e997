#!/usr/bin/env python3
"""Import circles between the files of a Rust crate (issue 42), for scripts/check-layers.sh.

    scripts/import-circles.py [--graph] [--report-only] SRC_DIR …

Each SRC_DIR is a crate's source root (lib.rs or main.rs in it). A file imports another when
it names an item of it by a path: `use crate::a::b`, `super::x`, `self::x`, `$crate::…`, a
`use` or a path that starts with one of its own child modules (`use planning::plan`,
`gcra::SPEC`), a glob (`use super::*`) included. The path is resolved to the longest module
prefix that is a file (`crate::command::decide::Op` is `src/command/decide/mod.rs`); paths
into another crate (`ratelimit_core::…`, `std::…`) are not followed. Declaring a child module
(`mod x;`) is not an import. Lines inside an inline `mod name { … }` (tests) resolve from that
module.

A module's files read the module's own types through `super::` (a handler its command's
`Spec`, a child of `decide/` the types of `decide/mod.rs`): an import of a file by one nested
in it is not counted, the other way it is. So `decide/mod.rs` → `decide/lease.rs` →
`concurrency.rs` → `decide/mod.rs` is a circle, `command/mod.rs` → `gcra.rs` → `command/mod.rs`
(its `Spec`) is not.

A circle is a set of two or more files each reachable from the others; every one found is
printed with the imports that close it. Exits 1 when one is found (0 with --report-only).
--graph prints every import first (those of nested files included), `from -> to`, one a line.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def modules(root):
    """Maps each .rs file under root to its module path (a tuple), and back."""
    by_file = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)[:-3].split(os.sep)
            if rel in (["lib"], ["main"]):
                mod = ()
            elif rel[-1] == "mod":
                mod = tuple(rel[:-1])
            else:
                mod = tuple(rel)
            if rel[0] == "bin" or (len(rel) == 1 and rel[0] in ("lib", "main") and mod in by_file.values()):
                continue
            by_file[path] = mod
    return by_file, {m: f for f, m in by_file.items()}


def strip(text):
    """The code without comments, string and character literals (their braces and paths)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not re.match(r"\w", text[i - 1])):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            j = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if j < 0 else j + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def use_paths(tree):
    """The paths of a use tree `a::{b, c::{d, e}, f as g}` as lists of segments."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", tree)
    tree = re.sub(r"\s+", "", tree)
    paths = []

    def parse(s, prefix):
        # split s at top-level commas
        depth, start, parts = 0, 0, []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        for part in parts:
            if not part:
                continue
            brace = part.find("{")
            if brace >= 0 and part.endswith("}"):
                head = [x for x in part[:brace].split("::") if x]
                parse(part[brace + 1:-1], prefix + head)
            else:
                paths.append(prefix + [x for x in part.split("::") if x])

    parse(tree, [])
    return paths


def resolve(segments, current, children, files):
    """The file a path names, from module `current` (None: another crate's)."""
    if not segments:
        return None
    first = segments[0]
    if first in ("crate", "$crate"):
        base, rest = (), segments[1:]
    elif first in ("super", "self"):
        base, rest = current, segments
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    elif first in children:
        base, rest = current, segments
    else:
        return None
    mod = base
    best = files.get(base)
    for seg in rest:
        mod = mod + (seg,)
        if mod in files:
            best = files[mod]
        else:
            break
    return best


PATH = re.compile(r"(?<![\w:])(\$?crate|super|self|" + IDENT + r")((?:::(?:" + IDENT + r"|\*))+)")


def imports(path, mod, files):
    """{file: [line, …]} of the files `path` (module `mod`) imports."""
    text = strip(open(path, encoding="utf-8").read())
    out = {}
    # inline modules: (module path, brace depth at which it closes)
    stack = []
    depth = 0
    children_of = {}

    def children(m):
        if m not in children_of:
            children_of[m] = {k[-1] for k in files if len(k) == len(m) + 1 and k[:-1] == m}
        return children_of[m]

    line_no = 0
    pending_use = None
    for line in text.split("\n"):
        line_no += 1
        current = mod + tuple(name for name, _ in stack)
        found = []
        uses = line
        if pending_use is not None:
            pending_use += line
            if ";" in line:
                found += use_paths(pending_use.split(";")[0])
                pending_use = None
            uses = ""
        m = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?use\s+(.*)", uses)
        if m:
            body = m.group(1)
            if ";" in body:
                found += use_paths(body.split(";")[0])
            else:
                pending_use = body
            uses = ""
        for pm in PATH.finditer(uses):
            found.append([pm.group(1)] + [s for s in pm.group(2).split("::") if s])
        for segments in found:
            target = resolve(segments, current, children(current), files)
            if target is not None and target != path:
                out.setdefault(target, []).append(line_no)
        mm = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*\{", line)
        if mm:
            stack.append((mm.group(1), depth))
        depth += line.count("{") - line.count("}")
        while stack and depth <= stack[-1][1]:
            stack.pop()
    return out


def circles(graph):
    """Strongly connected components of two or more files (Tarjan)."""
    index, low, on, st, result, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        st.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                result.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return result


def main(argv):
    show_graph = "--graph" in argv
    report_only = "--report-only" in argv
    roots = [a for a in argv if not a.startswith("--")]
    found = 0
    for root in roots:
        by_file, files = modules(root)
        graph = {f: imports(f, m, files) for f, m in sorted(by_file.items())}
        if show_graph:
            for f in sorted(graph):
                for t in sorted(graph[f]):
                    print(f"{f} -> {t}")
        # A module and the modules nested in it are one room (its mod.rs declares them, they
        # read its types through `super::`): only imports across rooms make circles.
        for f, targets in graph.items():
            for t in list(targets):
                a, b = by_file[f], by_file[t]
                if a[:len(b)] == b:
                    del targets[t]
        for comp in circles(graph):
            found += 1
            print(f"import-circles: {len(comp)} files import each other in {root}:")
            members = set(comp)
            for f in comp:
                for t in sorted(graph[f]):
                    if t in members:
                        lines = ",".join(str(n) for n in graph[f][t][:4])
                        print(f"  {f}:{lines} -> {t}")
    if found and not report_only:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
