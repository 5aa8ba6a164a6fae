"""Fingerprints of every table a shipped belief config writes (oracle mode, plots off), to prove a
refactor of the belief layer leaves its outputs identical.

    .venv/bin/python bench/belief_fingerprint.py --write tests/data/belief_tables_sha256.json   # record
    .venv/bin/python bench/belief_fingerprint.py --check tests/data/belief_tables_sha256.json   # compare
    .venv/bin/python bench/belief_fingerprint.py --write-summary tests/data/belief_tables_summary.json
    .venv/bin/python bench/belief_fingerprint.py --check-summary tests/data/belief_tables_summary.json

Each shipped config runs as a user runs it (``chorus belief sweep`` for a config with a sweep,
``run`` otherwise: one loader, the topic deciding two stances or concepts), forced to ``mode: oracle`` (LLM configs
need a model; a sweep over a stored channel correction keeps 'none'), at ``--seeds`` replicates and ``--rounds`` rounds so the whole set takes a minute.
A table's fingerprint is the sha256 of its column names, dtypes and row hashes: bit for bit, so it holds
only on a machine whose numpy takes the same SIMD paths as the recording one (numpy's AVX-512 exp/log
move the last bit of a few thousand of the channel configs' values, about 2e-15 relative): a benchmark
for that machine. The summary (``--write-summary`` / ``--check-summary``) holds on any CPU: a table's
row count, dtypes and every non-float column exactly (and where its floats are NaN or infinite), and for
each float column its L2 norm and four signed sums (``table_summary``), compared within a stated
relative tolerance of the column's norm (``compare_summaries``, 1e-9 by default: a change of one value
by more than 1e-9 of the column's norm moves every signed sum by exactly that much and fails).
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


PROJECTIONS = 4       # signed sums per float column
RTOL = 1e-9           # of the column's L2 norm; CPU-to-CPU differences measured at about 2e-15


def table_summary(df: pd.DataFrame) -> dict:
    """What a table must keep on any CPU: its shape and non-float values exactly, and for each float
    column the L2 norm and PROJECTIONS sums of its finite values with fixed random signs. The sums are
    math.fsum (exactly rounded, so no summation order or SIMD width enters) of exact products (a sign
    flip), so the summary of a table is the same bits wherever the table is."""
    import math

    import numpy as np
    floats = [c for c in df.columns if df[c].dtype.kind == "f"]
    exact = df.drop(columns=floats)
    h = hashlib.sha256(json.dumps([[str(c), str(t)] for c, t in df.dtypes.items()]).encode())
    h.update(pd.util.hash_pandas_object(exact, index=False).to_numpy().tobytes() if len(exact.columns) else b"")
    cols = {}
    for k, c in enumerate(floats):
        x = df[c].to_numpy(dtype=float)
        h.update(np.isnan(x).tobytes() + np.sign(np.where(np.isinf(x), x, 0)).tobytes())
        fin = x[np.isfinite(x)]
        signs = np.random.default_rng([k, len(x)]).integers(0, 2, size=(PROJECTIONS, fin.size)) * 2 - 1
        cols[str(c)] = {"norm": math.sqrt(math.fsum(fin * fin)), "sums": [math.fsum(s * fin) for s in signs]}
    return {"rows": len(df), "exact_sha256": h.hexdigest(), "floats": cols}


def compare_summaries(want: dict, got: dict, rtol: float = RTOL) -> str | None:
    """None when ``got`` matches ``want`` within ``rtol`` of each float column's norm; else what differs."""
    if want["rows"] != got["rows"] or want["exact_sha256"] != got["exact_sha256"] or set(want["floats"]) != set(got["floats"]):
        return "rows, dtypes, non-float values or non-finite positions"
    for c, w in want["floats"].items():
        g = got["floats"][c]
        tol = rtol * w["norm"] + 1e-300
        worst = max(abs(a - b) for a, b in zip([w["norm"], *w["sums"]], [g["norm"], *g["sums"]]))
        if worst > tol:
            return f"column {c} moved by {worst:.3g} (tolerance {tol:.3g} = {rtol:g} x its norm)"
    return None


def shipped_configs() -> list[Path]:
    from chorus.simulate.belief.config import CONFIGS_DIR
    return sorted(CONFIGS_DIR.glob("*.yaml"))


def fingerprint(path: Path, tmp: Path, seeds: int, rounds: int, kind=table_sha256) -> dict:
    import yaml
    from chorus.core.runs import RunDir
    over = {"mode": "oracle", **({"seeds": seeds} if seeds else {}), **({"rounds": rounds} if rounds else {})}
    data = yaml.safe_load(path.read_text())
    out = tmp / path.stem
    if "stored" in (data.get("sweep") or {}).get("channel_correction", []):
        over["sweep.channel_correction"] = ["none"]   # a stored correction is a fit on the user's machine
    from chorus.simulate.belief.config import load_belief_config   # one config for every topic
    from chorus.simulate.belief.experiment import run_experiment
    cfg = load_belief_config(path, over)
    run_experiment(cfg, out, sweep=bool(cfg.sweep), make_plots=False)
    run = RunDir(out)
    return {p.stem: kind(run.read_table(p.stem)) for p in sorted((out / "tables").glob("*.parquet"))}


def fingerprints(seeds: int = 2, rounds: int = 6, kind=table_sha256) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as d:
        return {p.stem: fingerprint(p, Path(d), seeds, rounds, kind) for p in shipped_configs()}


def engine_only(fp: dict[str, dict]) -> dict[str, dict]:
    """Only the tables the engine writes (the analysis tables go through LAPACK as well)."""
    from chorus.simulate.belief.concept_analysis import TABLES as CONCEPT_TABLES
    from chorus.simulate.belief.experiment import TABLES as BETA_TABLES
    keep = set(BETA_TABLES) | set(CONCEPT_TABLES)
    return {c: {t: h for t, h in ts.items() if t in keep} for c, ts in fp.items()}


def check_summaries(path: str, rtol: float | None) -> int:
    rec = json.loads(Path(path).read_text())
    rtol = rec["rtol"] if rtol is None else rtol
    t0 = time.perf_counter()
    got = engine_only(fingerprints(rec["seeds"], rec["rounds"], table_summary))
    want = rec["configs"]
    bad = []
    for c in sorted(set(want) | set(got)):
        for t in sorted(set(want.get(c, {})) | set(got.get(c, {}))):
            w, g = want.get(c, {}).get(t), got.get(c, {}).get(t)
            why = "missing" if w is None or g is None else compare_summaries(w, g, rtol)
            if why:
                bad.append(f"{c}/{t}: {why}")
    print(f"{sum(map(len, got.values()))} tables of {len(got)} configs in {time.perf_counter() - t0:.1f} s: "
          + (f"within {rtol:g} of each float column's norm" if not bad else f"{len(bad)} differ:\n" + "\n".join(bad)))
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", help="record the fingerprints here")
    g.add_argument("--check", help="compare with the fingerprints recorded here")
    g.add_argument("--write-summary", help="record the engine tables' summaries (any CPU) here")
    g.add_argument("--check-summary", help="compare the engine tables with the summaries recorded here")
    ap.add_argument("--rtol", type=float, help="with --check-summary: tolerance, of each float column's norm "
                                               "(default: the one recorded)")
    ap.add_argument("--seeds", type=int, default=2, help="replicates per condition (0: the config's own)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds (0: the config's own)")
    ap.add_argument("--out", help="with --check: write the comparison as JSON here")
    ap.add_argument("--tables", choices=("all", "engine"), default="all",
                    help="with --check: every table, or only what the engine writes (elementwise arithmetic, numpy's "
                         "exp/log and seeded draws; the analysis tables go through LAPACK too); bit for bit, "
                         "both hold only where numpy takes the recording machine's SIMD paths")
    a = ap.parse_args()
    if a.check_summary:
        return check_summaries(a.check_summary, a.rtol)
    t0 = time.perf_counter()
    if a.write_summary:
        fp = engine_only(fingerprints(a.seeds, a.rounds, table_summary))
        Path(a.write_summary).write_text(json.dumps({"seeds": a.seeds, "rounds": a.rounds, "rtol": RTOL,
                                                     "configs": fp}, indent=1) + "\n")
        print(f"{sum(map(len, fp.values()))} table summaries of {len(fp)} configs recorded in "
              f"{time.perf_counter() - t0:.1f} s -> {a.write_summary}")
        return 0
    fp = fingerprints(a.seeds, a.rounds)
    wall = time.perf_counter() - t0
    if a.write:
        Path(a.write).write_text(json.dumps({"seeds": a.seeds, "rounds": a.rounds, "configs": fp}, indent=1) + "\n")
        print(f"{sum(map(len, fp.values()))} tables of {len(fp)} configs recorded in {wall:.1f} s -> {a.write}")
        return 0
    want = json.loads(Path(a.check).read_text())["configs"]
    if a.tables == "engine":
        want, fp = engine_only(want), engine_only(fp)
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
