#!/usr/bin/env python3
"""Lists import cycles between the modules (files) of each crate.

A module M of crate C "imports" module N when M's source names `crate::N`
(in a `use` or a path) or `super::N` from a top-level module. Prints every
cycle found and exits 1 if there is one; `.ci/run` runs it.
"""
import glob
import os
import re
import sys


def modules(src):
    """Top-level module name -> its source text (a module's submodule files included)."""
    mods = {}
    for path in glob.glob(os.path.join(src, "**", "*.rs"), recursive=True):
        rel = os.path.relpath(path, src)
        parts = rel[:-3].split(os.sep)
        if parts[0] in ("lib", "main"):
            continue
        name = parts[0]
        text = open(path, encoding="utf-8").read()
        # Tests may reach anywhere; they are not part of the module graph.
        text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
        mods[name] = mods.get(name, "") + text
    return mods


def edges(mods):
    out = {m: set() for m in mods}
    for m, text in mods.items():
        code = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))
        for n in mods:
            if n != m and re.search(r"\b(crate|super)::%s\b" % re.escape(n), code):
                out[m].add(n)
        # `use crate::{a, b::c}` groups
        for group in re.findall(r"crate::\{([^}]*)\}", code):
            for n in re.findall(r"\b(\w+)", group):
                if n in mods and n != m:
                    out[m].add(n)
    return out


def cycles(graph):
    found, index, low, stack, on, counter = [], {}, {}, [], set(), [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "crates"
    bad = 0
    for src in sorted(glob.glob(os.path.join(root, "*", "src"))):
        for comp in cycles(edges(modules(src))):
            bad += 1
            print(f"{os.path.dirname(src)}: modules import each other: {', '.join(comp)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
