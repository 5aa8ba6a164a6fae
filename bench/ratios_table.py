"""The ratio runs of ``bench/chorus_ratios.py`` as one markdown table a person reads: a row per key,
each run's ratio with its interval over passes, the median across runs, whether that median meets the
goal, and beside it the ratio against raw from text, raw from text against raw (what the raw script
pays to turn the conversations into ids) and the ratio against chorus's plain readout where the key
has them (their medians across runs).

    .venv/bin/python bench/ratios_table.py bench/results/ratios-tiny-llama-cpu-s29*.json
    .venv/bin/python bench/ratios_table.py --keys option_logprobs.debate.b1,knockout.debate.b32 FILE...

Every number comes from the files named; the header names each file's model, machine and load, and
what the intervals resample. Runs of different models are refused: one table, one model.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


class TableError(ValueError):
    """The files cannot make one table (unreadable, not ratio runs, or of different models)."""


def load(paths: list[Path]) -> list[dict[str, Any]]:
    runs = []
    for p in paths:
        try:
            d = json.loads(Path(p).read_text())
        except (OSError, ValueError) as err:
            raise TableError(f"cannot read ratio run {p}: {err}") from None
        if not isinstance(d, dict) or not isinstance(d.get("ratios"), dict):
            raise TableError(f"{p} is not a ratio run of bench/chorus_ratios.py (no 'ratios' mapping)")
        runs.append({**d, "_path": str(p)})
    models = sorted({str(r.get("model")) for r in runs})
    if len(models) > 1:
        raise TableError(f"ratio runs of different models cannot share a table: {models}")
    return runs


def _cell(v: dict[str, Any], field: str = "ratio") -> str:
    if "ratio" not in v:
        return v.get("error", v.get("skipped", "-"))[:40]
    ci = (v.get(f"{field}_ci") or {}).get("interval") or [None, None]
    x = v.get(field)
    if x is None:
        return "-"
    return f"{x:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci[0] is not None else "")


def _median(runs: list[dict[str, Any]], key: str, field: str) -> float | None:
    xs = [r["ratios"][key][field] for r in runs if key in r["ratios"] and r["ratios"][key].get(field) is not None]
    return statistics.median(xs) if xs else None


def _text_share(runs: list[dict[str, Any]], key: str) -> float | None:
    """Median across runs of raw from text / raw: what turning the conversations into ids costs a raw
    script that starts from them, against the forward handed the ids."""
    xs = [r["ratios"][key]["raw_from_text_s"] / r["ratios"][key]["raw_s"] for r in runs
          if r["ratios"].get(key, {}).get("raw_from_text_s") and r["ratios"][key].get("raw_s")]
    return statistics.median(xs) if xs else None


def table(runs: list[dict[str, Any]], keys: list[str] | None = None) -> str:
    """The markdown table of ``runs`` (one model), keys in the order of the first run that has them."""
    order: list[str] = []
    for r in runs:
        order += [k for k in r["ratios"] if k not in order]
    keys = list(keys or order)
    missing = [k for k in keys if not any(k in r["ratios"] for r in runs)]
    if missing:
        raise TableError(f"no run has key(s) {missing}; keys present: {order}")
    lines = [f"Model: {runs[0].get('model')}. Ratios chorus/raw (time; below 1: chorus faster), each with its 95% "
             "interval under resampling whole interleaved passes of that run (one run's spread, not "
             "the spread between runs)."]
    for i, r in enumerate(runs, 1):
        m = r.get("machine") or {}
        eng = r.get("engine") or {}
        load1 = (m.get("loadavg_at_start") or ["?"])[0]
        load1 = f"{load1:.2f}" if isinstance(load1, float) else load1
        lines.append(f"- run {i}: `{Path(r['_path']).name}` ({m.get('gpu') or m.get('cpu_model') or m.get('cpu', '?')}, "
                     f"{m.get('cores', '?')} cores, load {load1} at start, torch threads {eng.get('torch_threads', '?')}, "
                     f"{r.get('size', '?')} size)")
    head = ["key", "goal"] + [f"run {i}" for i in range(1, len(runs) + 1)] + ["median", "meets", "vs raw from text",
                                                                              "raw from text / raw", "vs plain readout"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in keys:
        vs = [r["ratios"].get(k, {"skipped": "absent"}) for r in runs]
        goal = next((v["goal_ratio_max"] for v in vs if "goal_ratio_max" in v), None)
        med = _median(runs, k, "ratio")
        meets = "-" if med is None or goal is None or goal == float("inf") else ("yes" if med <= goal else "**no**")
        rft, pl = _median(runs, k, "ratio_vs_raw_from_text"), _median(runs, k, "ratio_vs_chorus_plain")
        share = _text_share(runs, k)
        g = "-" if goal is None or goal == float("inf") else f"<= {goal:.3f}"
        row = [f"`{k}`", g] + [_cell(v) for v in vs] + [f"{med:.3f}" if med is not None else "-", meets,
                                                          f"{rft:.3f}" if rft is not None else "-",
                                                          f"{share:.3f}" if share is not None else "-",
                                                          f"{pl:.3f}" if pl is not None else "-"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--keys", default=None, help="comma-separated keys (default: every key, in run order)")
    a = ap.parse_args(argv)
    try:
        print(table(load(a.files), a.keys.split(",") if a.keys else None))
    except TableError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
