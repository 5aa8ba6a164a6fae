"""Why each project import that sits inside a function is there (issue 29: "project imports at module
top, only heavy third-party imports lazy; chorus --help under a second"), read from the code and
from what importing each module loads (a fresh interpreter per module):

- ``heavy``: moving it to the module's top would load a third-party package the module does not
  load already and that is not light (scipy, networkx, torch, matplotlib, vLLM, ...);
- ``help``: the module loads at ``chorus --help`` and moving it would load more there;
- ``nested``: it sits in a ``try`` / ``if`` / ``with`` / loop block of the function (an optional
  backend or a fallback), not in the function's own body;
- ``seam``: looked up at call time on purpose (its line says so: ``# at call time``), a function
  tests replace on its module (``chorus.serving.build_engine``, the device probes);
- ``name``: the module binds that name another way (a local, a top-level name, or two imports
  of one name from different places);
- ``movable``: none of the above; it could sit at the top.

    .venv/bin/python bench/lazy_imports.py REV      # writes bench/results/lazy-REV.json
"""
from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "serving", "aggregate", "simulate", "interventions", "chorus")
# third-party packages a module may load at its top without counting as heavy
LIGHT = {"numpy", "pandas", "pyarrow", "dateutil", "cloudpickle", "pydantic", "pydantic_core", "annotated_types",
         "typing_extensions", "typing_inspection", "cython_runtime", "yaml", "typer", "shellingham",
         "annotated_doc"}
_LOADS = ("import importlib, json, sys\nbefore = set(sys.modules)\nimportlib.import_module(sys.argv[1])\n"
          "print(json.dumps(sorted(set(sys.modules) - before)))")
_HELP = ("import json, sys\nsys.argv = ['chorus', '--help']\nimport chorus.cli as c\ntry:\n    c.main()\n"
         "except SystemExit:\n    pass\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)")


def _name(root: Path, p: Path) -> str:
    parts = list(p.relative_to(root).with_suffix("").parts)
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    if (root / "setup.py").is_file() and parts[0] != "chorus":   # one import root (chorus.core, ...)
        parts = ["chorus", *parts]
    return ".".join(parts)


def _modules(root: Path) -> dict[str, Path]:
    return {_name(root, p): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}


def _loads(root: Path, mods) -> dict[str, list[str] | None]:
    out = {}
    for m in mods:
        r = subprocess.run([sys.executable, "-c", _LOADS, m], cwd=root, capture_output=True, text=True)
        out[m] = json.loads(r.stdout) if r.returncode == 0 else None
    return out


def _help_set(root: Path) -> set[str]:
    r = subprocess.run([sys.executable, "-c", _HELP], cwd=root, capture_output=True, text=True)
    return set(json.loads(r.stderr.strip().splitlines()[-1]))


def _targets(node, pkg: str, known) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] in PACKAGES]
    base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)] if node.level else []
    mod = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
    if mod.split(".")[0] not in PACKAGES:
        return []
    return [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]


def classify(root: Path) -> dict:
    mods = _modules(root)
    loads, help_set = _loads(root, mods), _help_set(root)
    std = set(sys.stdlib_module_names)
    rows = []
    for m, p in mods.items():
        text = p.read_text()
        tree, lines = ast.parse(text), text.splitlines()
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        top = {st.name for st in tree.body if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        top |= {t.id for st in tree.body if not isinstance(st, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                                                  ast.AsyncFunctionDef, ast.ClassDef))
                for t in ast.walk(st) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
        sources: dict[str, set[str]] = {}   # a name imported inside functions, from where
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom):
                for a in n.names:
                    sources.setdefault(a.asname or a.name, set()).add(f"{n.level}{n.module}.{a.name}")
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            direct = {id(n) for n in fn.body}
            for n in ast.walk(fn):
                if not isinstance(n, (ast.Import, ast.ImportFrom)) or not _targets(n, pkg, mods):
                    continue
                if any(x is not fn and isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef)) and n in ast.walk(x)
                       for x in ast.walk(fn)):
                    continue   # counted under the inner function
                where = f"{p.relative_to(root)}:{n.lineno}"
                if "# at call time" in lines[n.lineno - 1]:
                    rows.append((where, "seam", ""))
                    continue
                if id(n) not in direct:
                    rows.append((where, "nested", ""))
                    continue
                new = set()
                for x in _targets(n, pkg, mods):
                    new |= set(loads.get(x) or []) | {x}
                added = new - set(loads.get(m) or []) - {m}
                third = {a.split(".")[0] for a in added} - set(PACKAGES) - std - LIGHT
                third = {t for t in third if not t.startswith("_")}
                bound = {a.asname or a.name.split(".")[0] for a in n.names}
                local = {t.id for t in ast.walk(fn) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
                local |= {b for b in bound if b in top or len(sources.get(b, ())) > 1}
                if third:
                    rows.append((where, "heavy", ",".join(sorted(third))))
                elif m in help_set and added - help_set:
                    rows.append((where, "help", ""))
                elif bound & local:
                    rows.append((where, "name", ",".join(sorted(bound & local))))
                else:
                    rows.append((where, "movable", ""))
    return {"inside_functions": len(rows), "by_reason": dict(Counter(r[1] for r in rows)),
            "heavy_packages": dict(Counter(pk for r in rows if r[1] == "heavy" for pk in r[2].split(","))),
            "help_modules": len(help_set), "imports": [list(r) for r in sorted(rows)]}


def main() -> int:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as d:
        data = subprocess.run(["git", "archive", rev, *PACKAGES], cwd=ROOT, capture_output=True, check=True).stdout
        tarfile.open(fileobj=io.BytesIO(data)).extractall(d, filter="data")
        res = {"rev": rev, "commit": sha, **classify(Path(d))}
    out = ROOT / "bench" / "results" / f"lazy-{sha}.json"
    out.write_text(json.dumps(res, indent=1))
    print(out, {k: v for k, v in res.items() if k != "imports"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
