"""The house's shape at a git revision, read from the code (issue 29's before/after numbers):
lines per package and in ``simulate/belief/``, files over 400 lines, project imports and how many
sit inside functions, module circles (``tests/test_layering.py``'s own graph), registered verbs.

    .venv/bin/python bench/house_stats.py REV [REV ...]   # writes bench/results/house-REV.json each
"""
from __future__ import annotations

import ast
import importlib.util
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "serving", "aggregate", "simulate", "interventions", "chorus")


def _tree(rev: str, dest: Path) -> str:
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    data = subprocess.run(["git", "archive", rev, *PACKAGES], cwd=ROOT,
                          capture_output=True, check=True).stdout
    tarfile.open(fileobj=io.BytesIO(data)).extractall(dest, filter="data")
    return sha


def _in_function(tree: ast.AST) -> set[int]:
    """ids of the import nodes that sit inside a function body."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside |= {id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return inside


def _project(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] in PACKAGES
    return any(a.name.split(".")[0] in PACKAGES for a in node.names)


def stats(src: Path) -> dict:
    lines: dict[str, int] = {}
    big, n_imports, n_inside = [], 0, 0
    for pkg in PACKAGES:
        for path in sorted((src / pkg).rglob("*.py")):
            text = path.read_text()
            n = text.count("\n")
            lines[pkg] = lines.get(pkg, 0) + n
            rel = str(path.relative_to(src))
            if n > 400:
                big.append((rel, n))
            tree = ast.parse(text)
            inside = _in_function(tree)
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and _project(node):
                    n_imports += 1
                    n_inside += id(node) in inside
    belief = sum(p.read_text().count("\n") for p in (src / "simulate" / "belief").rglob("*.py"))
    # today's circle finder over that tree: every revision counted the same way
    spec = importlib.util.spec_from_file_location("layering_now", ROOT / "tests" / "test_layering.py")
    lay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lay)
    lay.ROOT = src
    circles = lay.module_cycles(lay.module_graph())
    return {"lines": lines, "lines_total": sum(lines.values()), "lines_simulate_belief": belief,
            "files_over_400": len(big), "files_over_400_list": sorted(big, key=lambda x: -x[1]),
            "project_imports": n_imports, "project_imports_inside_functions": n_inside,
            "module_circles": len(circles), "module_circles_list": circles, "verbs_registered": _verbs(src)}


def _verbs(src: Path) -> int:
    """``register(Verb(...))`` calls in the tree (0 before the registry), counted from the AST; a
    call inside a loop counts once per literal entry of the loop's list."""
    def is_register(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and getattr(node.func, "id", "") == "register"

    n = 0
    for path in src.rglob("*.py"):
        tree = ast.parse(path.read_text())
        looped: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.For):
                calls = [c for c in ast.walk(node) if is_register(c)]
                if calls:
                    looped |= {id(c) for c in calls}
                    n += len(node.iter.elts) if isinstance(node.iter, (ast.List, ast.Tuple)) else 1
        n += sum(1 for node in ast.walk(tree) if is_register(node) and id(node) not in looped)
    return n


def main(revs: list[str]) -> None:
    out_dir = ROOT / "bench" / "results"
    for rev in revs:
        with tempfile.TemporaryDirectory() as tmp:
            sha = _tree(rev, Path(tmp))
            res = {"rev": rev, "commit": sha, **stats(Path(tmp))}
        path = out_dir / f"house-{sha}.json"
        path.write_text(json.dumps(res, indent=2) + "\n")
        print(path, {k: v for k, v in res.items() if not k.endswith("_list") and k != "lines"})


if __name__ == "__main__":
    main(sys.argv[1:] or ["HEAD"])
