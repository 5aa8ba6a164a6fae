"""The newcomer walk of a command, measured instead of counted by hand: every project function
that runs while the command runs (in first-call order), the files they live in, and the deepest
chain of project calls. Run it at two revisions to compare (issue 29's before / after):

    .venv/bin/python bench/walk.py --out bench/results/walk-HEAD.json -- belief multi multi_fj --set seeds=2 --out /tmp/w
    .venv/bin/python bench/walk.py --rev REV --out ... -- belief multi ...   # the same command at REV

``--root`` is the source tree the command is imported from (default: this checkout; ``--rev`` makes a
detached worktree of that revision under the system temp directory and walks it); only its
packages count (core, serving, aggregate, simulate, interventions, chorus). Pydantic validators
and other project functions called by libraries count too: they are project code a reader meets.
Module and class bodies running at import do not: where an import sits (module top or inside a
function) does not change the walk.
"""
from __future__ import annotations

import argparse
from inspect import CO_NEWLOCALS
import json
import sys
import time
from pathlib import Path

PACKAGES = ("core", "serving", "aggregate", "simulate", "interventions", "chorus")


def walk(argv: list[str], root: Path) -> dict:
    sys.path.insert(0, str(root))
    prefix = str(root) + "/"
    order: dict[tuple[str, str], int] = {}
    depth = {"now": 0, "max": 0}
    chain: list[str] = []
    deepest: list[str] = []

    def mine(frame) -> str | None:
        f = frame.f_code.co_filename
        if f.startswith(prefix):
            rel = f[len(prefix):]
            if rel.split("/")[0] in PACKAGES:
                return rel
        return None

    def prof(frame, event, arg):
        if event not in ("call", "return"):
            return
        rel = mine(frame)
        if rel is None:
            return
        if event == "call":
            if not frame.f_code.co_flags & CO_NEWLOCALS:  # a module or class body running at import, not a call
                return
            order.setdefault((rel, frame.f_code.co_qualname), len(order))
            chain.append(f"{rel}:{frame.f_code.co_qualname}")
            if len(chain) > len(deepest):
                deepest[:] = chain
        elif frame.f_code.co_flags & CO_NEWLOCALS and chain:
            chain.pop()

    import typer.main

    from chorus.cli import app
    cmd = typer.main.get_command(app)
    t0 = time.perf_counter()
    sys.setprofile(prof)
    try:
        cmd(argv, standalone_mode=False)
    finally:
        sys.setprofile(None)
    wall = time.perf_counter() - t0
    funcs = sorted(order, key=order.get)
    files: list[str] = []
    for f, _ in funcs:
        if f not in files:
            files.append(f)
    return {"command": "chorus " + " ".join(argv), "root": str(root), "functions": len(funcs), "files": len(files),
            "deepest_chain": len(deepest), "wall_s": wall, "files_in_order": files,
            "deepest_chain_calls": deepest}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--rev", default=None, help="walk this git revision (a detached worktree) instead")
    ap.add_argument("--out", default=None, help="write the walk as JSON here")
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the chorus command")
    a = ap.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    root = Path(a.root).resolve()
    if a.rev:
        import subprocess
        import tempfile
        sha = subprocess.run(["git", "rev-parse", "--short", a.rev], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        tree = Path(tempfile.gettempdir()) / f"chorus-walk-{sha}"
        if not tree.is_dir():
            subprocess.run(["git", "worktree", "add", "--detach", "-f", str(tree), sha], cwd=root, check=True,
                           capture_output=True)
        root = tree
    res = walk(argv, root)
    res["revision"] = a.rev or "working tree"
    print(f"{res['command']}: {res['functions']} project functions in {res['files']} files, deepest chain "
          f"{res['deepest_chain']} calls")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
