"""Fails when a module imports a module that imports it back.

`cargo modules dependencies --acyclic` reports every type as a cycle with
its own methods (a method "uses" its type, the type "owns" the method), so
this reads its graph instead and lifts each `uses` edge to the modules that
hold the two items: a cycle among modules is a real one.

    python3 .ci/acyclic.py            # every crate of the workspace
"""

import json
import re
import subprocess
import sys

NODE = re.compile(r'^\s*"([^"]+)" \[label="([^|"]*)\|')
EDGE = re.compile(r'^\s*"([^"]+)" -> "([^"]+)" \[label="uses"')


def targets():
    meta = json.loads(subprocess.check_output(["cargo", "metadata", "--no-deps", "--format-version", "1"]))
    for package in meta["packages"]:
        for target in package["targets"]:
            if "lib" in target["kind"]:
                yield package["name"], ["--lib"]
            elif "bin" in target["kind"]:
                yield package["name"], ["--bin", target["name"]]


def graph(package, selector):
    dot = subprocess.check_output(
        ["cargo", "modules", "dependencies", "--package", package, *selector,
         "--no-externs", "--no-sysroot"],
        stderr=subprocess.DEVNULL,
        text=True,
    )
    kinds, uses = {}, []
    for line in dot.splitlines():
        if m := EDGE.match(line):
            uses.append(m.groups())
        elif m := NODE.match(line):
            kinds[m.group(1)] = m.group(2).split()[-1]
    return kinds, uses


def module_of(path, kinds):
    while path not in kinds or kinds[path] not in ("mod", "crate"):
        if "::" not in path:
            return path
        path = path.rsplit("::", 1)[0]
    return path


def cycle(edges):
    """A cycle in the graph, as a list of nodes, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def main():
    failed = False
    for package, selector in targets():
        kinds, uses = graph(package, selector)
        edges = {}
        for source, target in uses:
            a, b = module_of(source, kinds), module_of(target, kinds)
            if a != b and a in kinds and b in kinds:
                edges.setdefault(a, set()).add(b)
        found = cycle(edges)
        name = f"{package} {' '.join(selector)}"
        if found:
            failed = True
            print(f"{name}: import cycle: {' -> '.join(found)}")
        else:
            modules = sum(1 for k in kinds.values() if k in ("mod", "crate"))
            print(f"{name}: {modules} modules, no import cycle")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
