"""One campaign-wide numbers file (BDA paper D.7): every number of the paper's tables, figures and
diagnostics, across councils, datasets, conditions and generation seeds, exported from the stored
traces into ``CAMPAIGN/numbers.json``; the paper report (``chorus.papers.bda``) renders only
from it, and ``verify_campaign`` is its drift guard.

    chorus paper bda RUN [RUN ...] --out CAMPAIGN            # export (arithmetic over stored traces), then the paper
    chorus council campaign-verify CAMPAIGN [--all]          # re-derive from the stores; exit 1 on drift
    chorus paper bda CAMPAIGN                                # CAMPAIGN/paper.md + figures/ again, paper order

Campaign directory: ``config.yaml`` (the typed export config), ``provenance.json`` (versions, seeds, every trace file read with its sha256: ``chorus verify`` checks them),
``numbers.json`` (``sources``: each input with its council identity; ``cells``: each cell's trace files
with their sha256; ``sections``: one entry per registered section), ``paper.md``, ``figures/*.png``."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import Field, field_validator

from chorus.aggregate.trace import load_traces
from chorus.core.config import Strict, load_config
from chorus.core.runs import RunDir, file_sha256, json_safe, mark_failed, write_json
from chorus.core.stats import check_tolerance
from chorus.simulate.council.campaign_inputs import CampaignError, collect
from chorus.simulate.council.campaign_sections import SECTIONS, Context, Options
from chorus.simulate.council.config import DEFAULT_AGG_METHODS
from chorus.serving.standing import combined, source_standing

NUMBERS = "numbers.json"
SCHEMA = "chorus.campaign/1"
TOLERANCE = 1.5e-3   # the paper's drift guard: a re-derived number may differ by this much


class CampaignConfig(Strict):
    """What a campaign (``chorus paper bda RUN... --out CAMPAIGN``) exports: its inputs and the aggregation settings every section shares."""
    inputs: list[str] = Field(min_length=1, description="council run directories or trace stores")
    methods: Optional[list[str]] = Field(None, description="aggregation methods (default: the council default)")
    outer_folds: int = Field(5, ge=2)
    inner_folds: int = Field(5, ge=2)
    n_resamples: int = Field(2000, ge=100)
    seed: int = 0
    protocol: str = Field("strict", pattern="^(strict|general)$")
    budgets: list[int] = Field(default_factory=lambda: [10, 25, 50, 100], description="label-efficiency budgets")
    label_seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    sections: Optional[list[str]] = Field(None, description="sections to export (default: all registered)")
    sweeps: list[str] = Field(default_factory=list, description="chorus aggregate sweep run directories (the "
                              "dose-response grid, the sleeper axis), embedded verbatim with their provenance")

    @field_validator("sections")
    @classmethod
    def _sections(cls, v):
        for s in v or []:
            if s not in SECTIONS.keys():
                raise ValueError(f"unknown campaign section {s!r}; known: {', '.join(SECTIONS.keys())}")
        return v

    @field_validator("methods")
    @classmethod
    def _methods(cls, v):
        from chorus.aggregate.methods import check_method  # lazy: pulls in scipy
        for m in v or []:
            check_method(m)
        return v

    def options(self) -> Options:
        return Options(methods=tuple(self.methods or DEFAULT_AGG_METHODS), sweeps=tuple(self.sweeps),
                       outer_folds=self.outer_folds,
                       inner_folds=self.inner_folds, n_resamples=self.n_resamples, seed=self.seed,
                       protocol=self.protocol, budgets=tuple(self.budgets), label_seeds=tuple(self.label_seeds))

    def chosen(self) -> list[str]:
        return list(self.sections or SECTIONS.keys())


def export(cfg: CampaignConfig, progress=None, collected=None) -> dict[str, Any]:
    """The numbers dict of ``cfg``'s inputs (no file written); ``collected``: ``collect(cfg.inputs)`` done already."""
    sources, cells = collected if collected is not None else collect(cfg.inputs)
    ctx = Context(cells, cfg.options(), sources)
    from chorus.aggregate.methods import describe  # lazy: pulls in scipy
    # where each input's numbers come from (embedded demo model, a user's model, synthetic, unrecorded),
    # decided by chorus.serving.standing and kept in the file, so the paper says it without the stores
    stands = [source_standing(s.path) for s in sources]
    numbers: dict[str, Any] = {
        "schema": SCHEMA, "options": asdict(ctx.options),
        "methods": {m: describe(m) for m in ctx.options.methods},
        "sources": [{"path": str(s.path), "council": s.council, "kind": s.kind, "seats": list(s.seats),
                     "rounds": s.rounds, "standing": st.as_dict()} for s, st in zip(sources, stands)],
        "standing": combined(stands, [s.council for s in sources]).as_dict(),
        "cells": {k: {"council": c.council, "dataset": c.dataset, "condition": c.condition, "K": c.K,
                      "adversaries": c.adversaries, **c.source_record()} for k, c in cells.items()},
        "sections": {}}
    names = cfg.chosen()
    if progress is not None:
        progress(len(names), 0)
    for name in names:
        s = SECTIONS.get(name)
        numbers["sections"][name] = {"paper": s.title, "needs": s.spec["needs"], **json_safe(s.export(ctx))}
        if progress is not None:
            progress(len(names), 1)   # chorus.core.progress: (total, advance)
    return numbers


def build_campaign(cfg: CampaignConfig, out: str | Path, progress=None) -> Path:
    """Export ``cfg`` into ``out``: config, provenance, ``numbers.json``; returns the numbers file."""
    collected = collect(cfg.inputs)   # bad inputs are refused before the campaign directory is touched
    # every trace file read, with its sha256, where ``chorus verify`` checks the sources of an analysis or a
    # paper: the campaign is the BDA paper's record
    traces = [{"field": "inputs", "reads": "traces", "kind": "traces", "path": str(f), "resolved": str(f.resolve()),
               "fingerprint": file_sha256(f)} for src in collected[0] for f in src.files]
    run = RunDir.create(out, part="campaign", config=cfg, seeds={"root": cfg.seed}, command="council campaign",
                        paper="bda", sources=traces)
    try:
        numbers = export(cfg, progress, collected)
    except BaseException as e:
        mark_failed(f"{type(e).__name__}: {e}")
        raise
    p = run.path / NUMBERS
    write_json(p, numbers)
    run.finish()
    return p


def read_numbers(campaign: str | Path) -> dict[str, Any]:
    p = Path(campaign)
    p = p / NUMBERS if p.is_dir() else p
    if not p.is_file():
        raise CampaignError(f"no campaign numbers file at {p} (make it with: chorus paper bda RUN... --out DIR)")
    try:
        d = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise CampaignError(f"{p}: not JSON ({e.msg}, line {e.lineno})") from None
    if d.get("schema") != SCHEMA:
        raise CampaignError(f"{p}: schema {d.get('schema')!r}, expected {SCHEMA!r}")
    return d


# -- the drift guard --------------------------------------------------------------------------------
@dataclass
class Mismatch:
    where: str
    stored: Any
    derived: Any


def _compare(where: str, stored: Any, derived: Any, tol: float, out: list[Mismatch], counter: list[int]) -> None:
    if isinstance(stored, dict) and isinstance(derived, dict):
        for k in sorted(set(stored) | set(derived)):
            _compare(f"{where}.{k}", stored.get(k), derived.get(k), tol, out, counter)
        return
    if isinstance(stored, list) and isinstance(derived, list) and len(stored) == len(derived):
        for j, (a, b) in enumerate(zip(stored, derived)):
            _compare(f"{where}[{j}]", a, b, tol, out, counter)
        return
    counter[0] += 1
    num = (int, float)
    if isinstance(stored, num) and isinstance(derived, num) and not isinstance(stored, bool):
        if abs(float(stored) - float(derived)) <= tol:
            return
    elif stored == derived:
        return
    out.append(Mismatch(where, stored, derived))


def plain_inventory(traces: list) -> dict[str, Any]:
    """The inventory's fast subset recounted in plain Python, on purpose apart from the export's code
    (numpy, ``chorus.core.stats``): trace counts, moves by force, parse rate, seat round-0 accuracy, majority
    accuracy (ties fractional) and its equal-width ECE."""
    moves = [m for tr in traces for m in tr.moves]
    by_force: dict[str, int] = {}
    for m in moves:
        by_force[m.force] = by_force.get(m.force, 0) + 1
    seats: dict[str, list[int]] = {}
    for tr in traces:
        if tr.gold is None:
            continue
        for m in tr.moves:
            if m.round == 0 and m.force == "propose":
                seats.setdefault(m.agent, [0, 0])
                seats[m.agent][0] += m.answer == tr.gold
                seats[m.agent][1] += 1
    gaps, n_lab, acc = [0.0] * 10, 0, 0.0
    for tr in traces:
        if tr.gold is None:
            continue
        votes: dict[str, int] = {}
        seen: set[str] = set()
        for m in tr.moves:
            if m.round == 0 and m.force == "propose" and m.agent not in seen:
                seen.add(m.agent)
                votes[m.answer] = votes.get(m.answer, 0) + 1
        if votes:
            top = max(votes.values())
            winners = [c for c, v in votes.items() if v == top]
            frac = top / sum(votes.values())
        else:
            winners, frac = list(tr.candidates), 1.0 / len(tr.candidates)
        ok = (tr.gold in winners) / len(winners)
        n_lab += 1
        acc += ok
        gaps[min(int(frac * 10), 9)] += ok - frac
    n_abst = by_force.get("abstain", 0)
    return {"n_traces": len(traces), "n_labelled": n_lab, "n_moves": len(moves),
            "moves_by_force": dict(sorted(by_force.items())),
            "move_parse_rate": 1.0 - n_abst / len(moves) if moves else None,
            "round0_accuracy_by_seat": {a: (c / n if n else None) for a, (c, n) in sorted(seats.items())},
            "plurality_accuracy": acc / n_lab if n_lab else None,
            "plurality_ece_ew": sum(abs(g) for g in gaps) / n_lab if n_lab else None}


def verify_campaign(campaign: str | Path, *, full: bool = False, tolerance: float = TOLERANCE
                    ) -> tuple[int, list[Mismatch], list[str]]:
    """Re-derive the numbers file from its stores: every trace file's sha256, the inventory recounted in
    plain Python, then the cheap sections (``full``: every section) re-exported and compared number by
    number. Returns (numbers compared, mismatches, sections re-derived)."""
    tolerance = check_tolerance(tolerance)
    root = Path(campaign)
    numbers = read_numbers(root)
    cfg = load_config(root / "config.yaml", CampaignConfig) if (root / "config.yaml").is_file() else None
    bad: list[Mismatch] = []
    counter = [0]
    for key, c in numbers["cells"].items():
        for f, sha in c["sha256"].items():
            counter[0] += 1
            now = file_sha256(Path(f)) if Path(f).is_file() else "missing"
            if now != sha:
                bad.append(Mismatch(f"cells.{key}.sha256[{f}]", sha, now))
    inv = numbers["sections"].get("inventory", {}).get("cells", {})
    for key, stored in inv.items():
        files = numbers["cells"].get(key, {}).get("files", [])
        if not all(Path(f).is_file() for f in files):
            continue
        derived = plain_inventory([t for f in files for t in load_traces(f)])
        _compare(f"sections.inventory.cells.{key}", {k: stored.get(k) for k in derived}, derived, tolerance, bad, counter)
    redo = [n for n in numbers["sections"] if n in SECTIONS.keys() and (full or SECTIONS.get(n).spec["cheap"])]
    if cfg is not None and redo:
        again = export(cfg.model_copy(update={"sections": redo}))
        for n in redo:
            _compare(f"sections.{n}", numbers["sections"][n], again["sections"][n], tolerance, bad, counter)
    return counter[0], bad, redo
