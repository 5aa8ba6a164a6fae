"""The package layering, read from the code: every import of every module (an AST pass, so
imports inside functions count too) must point down the layers, never up or sideways into a
cycle, and never take a ``_private`` name from another package.

    core  <-  serving  <-  simulate, aggregate  <-  interventions  <-  chorus (CLI, demo, report)

``aggregate`` is pure math over council traces (it imports only ``core``); ``simulate``'s live
councils write traces in its format and hand them to its estimators, so ``simulate`` may import
``aggregate`` and never the reverse. ``python tests/test_layering.py`` prints the package graph.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a package may import only packages of a strictly lower rank (and itself)
RANK = {"core": 0, "serving": 1, "aggregate": 2, "simulate": 3, "interventions": 4, "chorus": 5}
PACKAGES = tuple(RANK)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import in the file."""
    mod = _module_name(path)
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((target, [a.name for a in node.names], node.lineno))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def scan() -> tuple[dict[str, set[str]], list[str], list[str]]:
    """The package graph, the upward imports and the cross-package private imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    upward, private = [], []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            src = _module_name(path)
            for target, names, line in _imports(path):
                top = target.split(".")[0]
                if top not in RANK or top == pkg:
                    continue
                graph[pkg].add(top)
                where = f"{path.relative_to(ROOT)}:{line}"
                if RANK[top] >= RANK[pkg]:
                    upward.append(f"{where}: {src} ({pkg}) imports {target} ({top})")
                taken = [p for p in target.split(".")[1:] if _private(p)] + [n for n in names if _private(n)]
                if taken:
                    private.append(f"{where}: {src} takes {', '.join(taken)} from {target}")
    return graph, upward, private


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    import networkx as nx
    return list(nx.simple_cycles(nx.DiGraph([(a, b) for a, bs in graph.items() for b in bs])))


def test_every_package_is_scanned():
    for pkg in PACKAGES:
        assert (ROOT / pkg / "__init__.py").is_file(), pkg
    found = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert found <= set(PACKAGES), f"a top-level package without a layer: {sorted(found - set(PACKAGES))}"


def test_imports_point_down_the_layers():
    _, upward, _ = scan()
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_package_graph_is_acyclic():
    graph, _, _ = scan()
    assert not _cycles(graph), f"package cycles: {_cycles(graph)}"
    assert not graph["core"], f"core must import no part of chorus, imports {sorted(graph['core'])}"


def test_no_private_name_crosses_a_package():
    _, _, private = scan()
    assert not private, "private names taken across packages:\n" + "\n".join(private)


def test_scan_catches_a_violation(tmp_path, monkeypatch):
    """The scan itself: an upward import inside a function and a private name are seen; a private
    name inside one package is not an error."""
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "serving" / "bad.py").write_text("def f():\n    from simulate.x import y\n")
    (tmp_path / "chorus" / "worse.py").write_text("from serving.backends.hf import _eos\n")
    (tmp_path / "simulate" / "rel.py").write_text("from .x import _y\n")  # same package: allowed
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph, upward, private = scan()
    assert graph["serving"] == {"simulate"} and graph["chorus"] == {"serving"}
    assert len(upward) == 1 and "serving/bad.py:2" in upward[0]
    assert len(private) == 1 and "_eos" in private[0]


if __name__ == "__main__":  # print the package graph
    g, up, priv = scan()
    for pkg in PACKAGES:
        print(f"{pkg:14s} -> {', '.join(sorted(g.get(pkg, ()), key=RANK.get)) or '(nothing)'}")
    print("\n".join(["upward:"] + up if up else []) + "\n".join(["private:"] + priv if priv else []))
    sys.exit(bool(up or priv or _cycles(g)))
