"""The bad-input table of tests/test_bad_input.py, run as a user would (``python -m chorus.cli``
in a subprocess) against a source tree: exit code, whether a traceback was printed, the message's
first line, and whether a run directory was left behind. Pointing ``--tree`` at a checkout of an
older commit gives the "before" column (same interpreter and packages).

    .venv/bin/python bench/bad_input_table.py --out bench/results/bad-input-after.json
    git worktree add /tmp/before 0095bc8
    .venv/bin/python bench/bad_input_table.py --tree /tmp/before --out bench/results/bad-input-before.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cases():
    spec = importlib.util.spec_from_file_location("bad_input_cases", ROOT / "tests" / "test_bad_input.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CASES, mod._files


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree whose chorus runs the cases")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=90.0,
                    help="seconds per case; a case still running then was accepted (a run started)")
    a = ap.parse_args()
    cases, make_files = _cases()
    env = {**os.environ, "PYTHONPATH": str(a.tree.resolve()), "HF_HUB_OFFLINE": "1"}
    rows = []
    for name, argv, want, says, absent in cases:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            make_files(tmp)
            args = [x.replace("{tmp}", str(tmp)) for x in argv]
            t0 = time.perf_counter()
            try:
                p = subprocess.run([sys.executable, "-m", "chorus.cli", *args], cwd=a.tree, env=env,
                                   capture_output=True, text=True, timeout=a.timeout)
            except subprocess.TimeoutExpired as e:   # accepted: it started a run
                rows.append({"case": name, "exit": None, "expected_exit": want, "traceback": False,
                             "stderr_lines": None, "message": f"accepted: still running after {a.timeout:.0f} s",
                             "expected_fragment_found": False, "left_run_dir": bool(absent) and (tmp / absent).exists(),
                             "seconds": a.timeout})
                print(f"{name}: still running after {a.timeout:.0f} s", flush=True)
                continue
            err = p.stderr.strip().splitlines()
            msg = next((ln for ln in err if ln.startswith("error:")), err[-1] if err else "")
            rows.append({"case": name, "exit": p.returncode, "expected_exit": want,
                         "traceback": "Traceback (most recent call last)" in p.stderr,
                         "stderr_lines": len(err), "message": msg[:300],
                         "expected_fragment_found": says.replace("{tmp}", str(tmp)) in " ".join(p.stderr.split()),
                         "left_run_dir": bool(absent) and (tmp / absent).exists(),
                         "seconds": round(time.perf_counter() - t0, 1)})
            print(f"{name}: exit {p.returncode}, traceback {rows[-1]['traceback']}, {msg[:100]}", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"tree": str(a.tree), "python": sys.version.split()[0], "cases": rows}, indent=1))


if __name__ == "__main__":
    main()
