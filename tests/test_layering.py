"""The package layering, read from the code: every import of every module (an AST pass, so
imports inside functions count too) must point down the layers, never up or sideways into a
cycle, and never take a ``_private`` name from another package.

    core  <-  serving  <-  simulate, aggregate  <-  interventions  <-  chorus (CLI, demo, report)

One import root: the parts are ``chorus.core``, ``chorus.serving``, ... (their folders sit at the
repository root; setup.py maps them); every other module of ``chorus.*`` is the application. An
import of a part by its old top-level name (``import core``) is an error (``test_one_import_root``).

``aggregate`` is pure math over council traces (it imports only ``core``); ``simulate``'s live
councils write traces in its format and hand them to its estimators, so ``simulate`` may import
``aggregate`` and never the reverse.

Inside the packages no two modules import each other, directly or round a longer circle, even
from inside functions (``test_no_module_cycles``): a function-level import hides a circle from
Python, not from the design. ``python tests/test_layering.py`` prints the package graph and
every module circle.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a package may import only packages of a strictly lower rank (and itself)
RANK = {"core": 0, "serving": 1, "aggregate": 2, "simulate": 3, "interventions": 4, "chorus": 5}
PACKAGES = tuple(RANK)          # the folders at the repository root, one layer each
PARTS = PACKAGES[:-1]           # imported as chorus.<part>


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(parts if parts[0] == "chorus" else ["chorus", *parts])


def _layer(module: str) -> str | None:
    """The layer of a module name of chorus (None: not chorus's)."""
    parts = module.split(".")
    if parts[0] != "chorus":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in PARTS else "chorus"


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


def _targets(target: str, names: list[str]) -> list[str]:
    """``from chorus import serving`` imports the part chorus.serving, not the application."""
    if target == "chorus" and names and all(n in PARTS for n in names):
        return [f"chorus.{n}" for n in names]
    return [target]


def old_roots(paths) -> list[str]:
    """Imports of a part by its old top-level name (``core``, ``serving``, ...)."""
    return [f"{p.relative_to(ROOT)}:{line}: {target}" for p in paths for target, _, line in _imports(p)
            if target.split(".")[0] in PARTS]


def scan() -> tuple[dict[str, set[str]], list[str], list[str]]:
    """The package graph, the upward imports and the cross-package private imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    upward, private = [], []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            src = _module_name(path)
            for target, names, line in [(t, n, ln) for t0, n, ln in _imports(path) for t in _targets(t0, n)]:
                top = _layer(target)
                if top is None or top == pkg:
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


# -- module circles ---------------------------------------------------------------------------------
# The graph: module -> every project module an import of it runs (AST, so imports inside functions
# count; ``importlib.import_module`` and other dynamic imports are not seen). Resolution:
#
# * ``import a.b.c``, ``from a.b import c`` where ``a/b/c.py`` (or ``a/b/c/``) exists: ``a.b.c``;
# * ``from a.b import name`` otherwise: the package ``a.b`` itself (its ``__init__.py``, whose
#   namespace the name is read from), or, for a lazy PEP 562 package (a module-level ``_EXPORTS``
#   dict of name -> submodule, as ``aggregate/__init__.py``), the submodule that defines the name;
# * a target's parent packages (``a``, ``a.b``: Python runs their ``__init__.py`` first) count
#   only for an importer outside them.
#
# The last rule is the one decision. A module's own parent packages are always imported (at
# least begun) before the module runs, so the implicit parent import of ``from .sibling import x``
# never closes a circle; counting it would tie every package whose ``__init__.py`` re-exports its
# submodules to each submodule that imports a sibling (``serving/__init__.py`` re-exports
# ``serving.engine``, which imports ``serving.types``: "serving.engine -> serving ->
# serving.engine"; 31 such non-circles when this was written). What does count is a submodule
# naming its package explicitly: ``from serving import ModelSpec`` inside ``serving/engine.py``
# would be an edge to ``serving/__init__.py``. So a circle through an ``__init__.py`` that
# re-exports a submodule is reported exactly when that submodule (or one it imports) imports the
# package back, where the re-export would meet a half-initialised package.
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _lazy_exports(path: Path) -> dict[str, str]:
    """name -> submodule of a PEP 562 package's module-level ``_EXPORTS`` literal (else {})."""
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS"
                                                for t in node.targets):
            try:
                d = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return {k: v for k, v in d.items() if isinstance(k, str) and isinstance(v, str)}
    return {}


def _parents(mod: str) -> list[str]:
    parts = mod.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def module_graph() -> dict[str, set[str]]:
    """Project module -> the project modules its imports run (resolution: the comment above)."""
    mods = _modules()
    lazy = {m: _lazy_exports(p) for m, p in mods.items() if p.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for src, path in mods.items():
        own = set(_parents(src)) | ({src} if path.name == "__init__.py" else set())
        out: set[str] = set()
        for target, names, _ in _imports(path):
            base = target
            while base and base not in mods:  # a.b.attr, or an import of something outside chorus
                base = base.rpartition(".")[0]
            if not base:
                continue
            if base != target or not names:  # ``import a.b.c``; ``from a.b.c.attr import x``
                hits = {base}
            else:
                hits = set()
                for n in names:
                    sub = f"{target}.{n}" if f"{target}.{n}" in mods else \
                        f"{target}.{lazy[target][n]}" if n in lazy.get(target, {}) else target
                    hits.add(sub if sub in mods else target)
            out |= hits | {p for h in hits for p in _parents(h) if p in mods and p not in own}
        out.discard(src)
        graph[src] = out
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every elementary circle as ``a -> b -> a``, starting at its first module by name, sorted."""
    import networkx as nx
    found = []
    for c in nx.simple_cycles(nx.DiGraph([(a, b) for a, bs in graph.items() for b in bs])):
        k = c.index(min(c))
        c = c[k:] + c[:k]
        found.append(" -> ".join(c + [c[0]]))
    return sorted(found)


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


def test_one_import_root():
    """Every part is imported as chorus.<part>: no module, test, benchmark or script names the old roots."""
    paths = [p for top in (*PACKAGES, "tests", "bench", "scripts") for p in sorted((ROOT / top).rglob("*.py"))]
    found = old_roots(paths)
    assert not found, "imports of a part by its old top-level name:\n" + "\n".join(found)


def test_scan_catches_a_violation(tmp_path, monkeypatch):
    """The scan itself: an upward import inside a function and a private name are seen; a private
    name inside one package is not an error."""
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "serving" / "bad.py").write_text("def f():\n    from chorus.simulate.x import y\n")
    (tmp_path / "chorus" / "worse.py").write_text("from chorus.serving.backends.hf import _eos\n")
    (tmp_path / "aggregate" / "ok.py").write_text("from chorus import core\n")  # a part, not the application
    (tmp_path / "simulate" / "rel.py").write_text("from .x import _y\n")  # same package: allowed
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph, upward, private = scan()
    assert graph["serving"] == {"simulate"} and graph["chorus"] == {"serving"}
    assert len(upward) == 1 and "serving/bad.py:2" in upward[0]
    assert len(private) == 1 and "_eos" in private[0]
    (tmp_path / "simulate" / "old.py").write_text("import serving\nfrom core.runs import RunDir\n")
    assert old_roots(sorted(tmp_path.rglob("*.py"))) == ["simulate/old.py:1: serving", "simulate/old.py:2: core.runs"]


def test_no_module_cycles():
    cycles = module_cycles(module_graph())
    assert not cycles, f"{len(cycles)} import circles between modules:\n" + "\n".join(cycles)


def test_module_cycle_check_catches_a_circle(tmp_path, monkeypatch):
    """A circle closed inside a function, one through a package that re-exports a submodule which
    imports it back, and one through a lazy (PEP 562) export are found; a package re-exporting a
    submodule that imports a sibling is no circle."""
    files = {
        "simulate/__init__.py": "",
        "simulate/a.py": "from chorus.simulate.b import g\n",
        "simulate/b.py": "def g():\n    from chorus.simulate import a\n",  # from pkg import submodule
        "serving/__init__.py": "from chorus.serving.x import X\n",
        "serving/x.py": "from .y import Y\nX = Y\n",  # the sibling: no circle through serving
        "serving/y.py": "Y = 1\n",
        "core/__init__.py": "from chorus.core.p import P\n",
        "core/p.py": "P = 1\ndef f():\n    from chorus.core import P\n",  # imports its package back
        "aggregate/__init__.py": "_EXPORTS = {'T': 't'}\n",
        "aggregate/t.py": "def h():\n    import chorus.aggregate.u\nT = 1\n",
        "aggregate/u.py": "from chorus.aggregate import T\n",  # the lazy export: aggregate.t
    }
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = module_graph()
    assert graph["chorus.serving"] == {"chorus.serving.x"} and graph["chorus.serving.x"] == {"chorus.serving.y"}
    assert module_cycles(graph) == ["chorus.aggregate.t -> chorus.aggregate.u -> chorus.aggregate.t",
                                    "chorus.core -> chorus.core.p -> chorus.core",
                                    "chorus.simulate.a -> chorus.simulate.b -> chorus.simulate.a"]


def test_only_core_plots_imports_matplotlib():
    """Figures are made one way, ``core.plots`` (a Figure on the Agg canvas, no pyplot)."""
    found = [f"{p.relative_to(ROOT)}:{line}: {target}" for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
             if p != ROOT / "core" / "plots.py"
             for target, _, line in _imports(p) if target.split(".")[0] == "matplotlib"]
    assert not found, "matplotlib imported outside core/plots.py:\n" + "\n".join(found)


if __name__ == "__main__":  # print the package graph and the module circles
    g, up, priv = scan()
    for pkg in PACKAGES:
        print(f"{pkg:14s} -> {', '.join(sorted(g.get(pkg, ()), key=RANK.get)) or '(nothing)'}")
    print("\n".join(["upward:"] + up if up else []) + "\n".join(["private:"] + priv if priv else []))
    circles = module_cycles(module_graph())
    print(f"module circles: {len(circles)}" + "".join(f"\n  {c}" for c in circles))
    sys.exit(bool(up or priv or _cycles(g) or circles))


# -- data edges: which part's runs a module opens -------------------------------------------------------------
def _folder_uses(path: Path, folder: str) -> list[int]:
    """Lines where the file reaches into a run folder ``folder`` (exact, or a prefix ending in ``-``) by
    name: ``x / "belief" / "summary.json"``, ``x.glob("bda-*/summary.json")``. (Naming the folder alone,
    ``CONFIGS / "belief"``, is not reading a run's files.)"""
    def named(v: str) -> bool:
        return v.startswith(folder) if folder.endswith("-") else (v == folder or v.startswith(folder + "/"))

    def const(node: ast.AST) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left = node.left
            inner = isinstance(left, ast.BinOp) and isinstance(left.op, ast.Div) and named(const(left.right) or "")
            if inner or ("/" in (const(node.right) or "") and named(const(node.right) or "")):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("glob", "rglob"):
            if any(named(c) and "/" in c for c in (const(a) for a in node.args) if c):
                lines.append(node.lineno)
    return lines


def data_edges(readers: dict, writers: dict[str, str]) -> list[str]:
    """What breaks the declared data edges: an analysis that reads runs of a part above its own layer, and
    any module below the application, other than the analysis's own, that opens its run folder by name
    (the way a report read analyses behind the registry's back). ``writers``: part -> module of its runs."""
    bad = []
    mods = _modules()
    for r in readers.values():
        src, own = _layer(writers[r.part]), _layer(r.module)
        if RANK[own] < RANK[src]:
            bad.append(f"{r.module}: {r.command!r} reads {r.part} runs, written a layer above it ({src})")
        for mod, path in mods.items():
            if mod == r.module or _layer(mod) == "chorus":
                continue
            for line in _folder_uses(path, r.folder):
                bad.append(f"{path.relative_to(ROOT)}:{line}: opens {r.command!r}'s folder {r.folder!r}; "
                           f"ask chorus.core.analyses.readers_in")
    return bad


def _writers() -> dict[str, str]:
    from chorus.registry import REGISTRY
    out = {}
    for (g, n), v in REGISTRY.items():
        if n == "run":
            run = v.implementation().run
            out[g] = getattr(run, "func", run).__module__   # (a functools.partial: the function it fixes)
    return out


def test_data_flows_only_through_declared_readers():
    """Every analysis made inside the run it reads is registered with the part it reads; the registry
    sees all of them, and no other module opens their folders."""
    from chorus.core.analyses import READERS
    writers = _writers()   # (imports chorus.registry: every reader registers)
    assert {"debate bda", "debate belief", "influence counterfactual"} <= set(READERS)
    assert all(r.part in writers for r in READERS.values())
    bad = data_edges(READERS, writers)
    assert not bad, "undeclared data edges:\n" + "\n".join(bad)


def test_data_edge_check_catches_a_report_reading_behind_the_registry(tmp_path, monkeypatch):
    from chorus.core.analyses import Reader
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "simulate" / "report.py").write_text(
        "def report(run):\n    s = (run / 'belief' / 'summary.json').read_text()\n    return sorted(run.glob('bda-*/x'))\n")
    (tmp_path / "simulate" / "belief_run.py").write_text("def out(src):\n    return src / 'belief' / 'summary.json'\n")
    (tmp_path / "simulate" / "configs.py").write_text("def cfg(d):\n    return d / 'belief'\n")   # a folder named alone
    (tmp_path / "chorus" / "viewer.py").write_text("def f(run):\n    return run / 'belief'\n")   # the application: allowed
    (tmp_path / "aggregate" / "up.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    readers = {"debate belief": Reader("debate belief", "debate", "belief", dict, str, "chorus.simulate.belief_run"),
               "debate bda": Reader("debate bda", "debate", "bda-", dict, str, "chorus.aggregate.up")}
    bad = data_edges(readers, {"debate": "chorus.simulate.debate.experiment"})
    assert sorted(bad) == sorted([
        "simulate/report.py:2: opens 'debate belief''s folder 'belief'; ask chorus.core.analyses.readers_in",
        "simulate/report.py:3: opens 'debate bda''s folder 'bda-'; ask chorus.core.analyses.readers_in",
        "chorus.aggregate.up: 'debate bda' reads debate runs, written a layer above it (simulate)"])
