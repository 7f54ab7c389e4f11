"""No import circles inside capture/, report/ or verify/: read from the source (ast), with the
imports at module level and inside functions alike (a function-level import only defers a circle).

An import of a module's own ancestor package (`import cagtool` for its __file__) is not an edge:
Python has begun initialising every ancestor before the module runs, so that import never starts
a package's code. A `from pkg import name` is an edge to pkg.name when that is a module."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "cagtool"
CHECKED = ("cagtool.capture", "cagtool.report", "cagtool.verify")


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the cagtool modules it imports (anywhere in its code)."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        here = name if is_package else name.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(filter(None, (known(alias.name) for alias in node.names if alias.name.split(".")[0] == "cagtool")))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != "cagtool":
                    continue
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    out.add(target if target in modules else known(source) or source)
        ancestors = {name.rsplit(".", n)[0] for n in range(1, name.count(".") + 1)}
        graph[name] = out - ancestors - {name}
    return graph


def circles(graph: dict[str, set[str]], within: tuple[str, ...]) -> list[list[str]]:
    """The strongly connected components of more than one module among the modules `within`
    (Tarjan's algorithm, iterative)."""
    nodes = {n for n in graph if n.startswith(within)}
    edges = {n: sorted(m for m in graph[n] if m in nodes) for n in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles_in_capture_report_verify():
    assert circles(import_graph(), CHECKED) == []


def test_the_reader_finds_a_circle():
    """The check itself: a circle planted in a graph of the real package's shape is found, one
    through a function-level import included."""
    graph = import_graph()
    assert "cagtool.verify.patch" in graph["cagtool.verify.value_patches"]  # a module-level `from x import y`
    assert "cagtool.capture.recorder" in graph["cagtool.capture.processes.follow"]  # inside a function
    graph["cagtool.capture.recorder"] = graph["cagtool.capture.recorder"] | {"cagtool.capture.processes.follow"}
    assert ["cagtool.capture.processes.follow", "cagtool.capture.recorder"] in circles(graph, CHECKED)
