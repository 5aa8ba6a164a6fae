"""Fingerprints of every table a shipped belief config writes (oracle mode, plots off), to prove a
refactor of the belief layer leaves its outputs identical.

    .venv/bin/python bench/belief_fingerprint.py --write tests/data/belief_tables_sha256.json   # record
    .venv/bin/python bench/belief_fingerprint.py --check tests/data/belief_tables_sha256.json   # compare

Each shipped config runs as a user runs it (``chorus belief sweep`` for a config with a sweep,
``run`` otherwise: one loader, the topic deciding two stances or concepts), forced to ``mode: oracle`` (LLM configs
need a model; a sweep over a stored channel correction keeps 'none'), at ``--seeds`` replicates and ``--rounds`` rounds so the whole set takes a minute.
A table's fingerprint is the sha256 of its column names, dtypes and row hashes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def table_sha256(df: pd.DataFrame) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([[str(c), str(t)] for c, t in df.dtypes.items()]).encode())
    h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return h.hexdigest()


def shipped_configs() -> list[Path]:
    from simulate.belief.config import CONFIGS_DIR
    return sorted(CONFIGS_DIR.glob("*.yaml"))


def fingerprint(path: Path, tmp: Path, seeds: int, rounds: int) -> dict[str, str]:
    import yaml
    from core.runs import RunDir
    over = {"mode": "oracle", **({"seeds": seeds} if seeds else {}), **({"rounds": rounds} if rounds else {})}
    data = yaml.safe_load(path.read_text())
    out = tmp / path.stem
    if "stored" in (data.get("sweep") or {}).get("channel_correction", []):
        over["sweep.channel_correction"] = ["none"]   # a stored correction is a fit on the user's machine
    from simulate.belief.config import load_belief_config   # one config for every topic
    from simulate.belief.experiment import run_experiment
    cfg = load_belief_config(path, over)
    run_experiment(cfg, out, sweep=bool(cfg.sweep), make_plots=False)
    run = RunDir(out)
    return {p.stem: table_sha256(run.read_table(p.stem)) for p in sorted((out / "tables").glob("*.parquet"))}


def fingerprints(seeds: int = 2, rounds: int = 6) -> dict[str, dict[str, str]]:
    with tempfile.TemporaryDirectory() as d:
        return {p.stem: fingerprint(p, Path(d), seeds, rounds) for p in shipped_configs()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", help="record the fingerprints here")
    g.add_argument("--check", help="compare with the fingerprints recorded here")
    ap.add_argument("--seeds", type=int, default=2, help="replicates per condition (0: the config's own)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds (0: the config's own)")
    ap.add_argument("--out", help="with --check: write the comparison as JSON here")
    ap.add_argument("--tables", choices=("all", "engine"), default="all",
                    help="with --check: every table, or only what the engine writes (elementwise arithmetic and "
                         "seeded draws, the same bits on any x86-64 machine; the analysis tables go through "
                         "LAPACK and SIMD exp/log, whose last bits may differ between CPUs)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    fp = fingerprints(a.seeds, a.rounds)
    wall = time.perf_counter() - t0
    if a.write:
        Path(a.write).write_text(json.dumps({"seeds": a.seeds, "rounds": a.rounds, "configs": fp}, indent=1) + "\n")
        print(f"{sum(map(len, fp.values()))} tables of {len(fp)} configs recorded in {wall:.1f} s -> {a.write}")
        return 0
    want = json.loads(Path(a.check).read_text())["configs"]
    if a.tables == "engine":
        from simulate.belief.concept_analysis import TABLES as CONCEPT_TABLES
        from simulate.belief.experiment import TABLES as BETA_TABLES
        keep = set(BETA_TABLES) | set(CONCEPT_TABLES)
        want = {c: {t: h for t, h in ts.items() if t in keep} for c, ts in want.items()}
        fp = {c: {t: h for t, h in ts.items() if t in keep} for c, ts in fp.items()}
    bad = [f"{c}/{t}" for c in sorted(set(want) | set(fp)) for t in sorted(set(want.get(c, {})) | set(fp.get(c, {})))
           if want.get(c, {}).get(t) != fp.get(c, {}).get(t)]
    print(f"{sum(map(len, fp.values()))} tables of {len(fp)} configs in {wall:.1f} s: "
          + ("identical" if not bad else f"{len(bad)} differ: {', '.join(bad)}"))
    if a.out:
        import os
        import platform
        import subprocess
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        Path(a.out).write_text(json.dumps({
            "command": "belief_fingerprint.py " + " ".join(sys.argv[1:]), "revision": rev, "against": a.check,
            "seeds": a.seeds or "config", "rounds": a.rounds or "config", "configs": len(fp),
            "tables": sum(map(len, fp.values())), "differ": bad, "identical": not bad, "wall_s": round(wall, 2),
            "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "cpu": platform.processor()}},
            indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
