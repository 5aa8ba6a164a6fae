"""MAD-Bench-style question bench: a builder that assembles JSONL from the evaluation sets shipped
with chorus (``chorus.simulate.datasets``: one loader per set) plus constructed, unlabelled value
scenarios shipped as data here; and a loader that validates any such file.

One item per line::

    {"id": str, "domain": str, "subdomain": str, "family": str, "question": str,
     "options": [str, ...] | null,          # option texts; null = numeric (free) answer
     "labels": [str, ...] | null,           # option labels; default "A", "B", ... for the options
     "system": str | null,                  # part of the stimulus where present
     "reference": str | null,               # a label, a number (numeric item), or null (unlabelled)
     "tolerance": float,                    # numeric items only, optional: |answer - reference| allowed
     "provenance": {...}}

Domains: ``knowledge`` (misconceptions / disciplinary / strategy / biomedical) and ``values``
(moral_scenarios / moral_disputes / contested), plus the opt-in ``numeric`` subdomain (knowledge: the
shipped MMLU mathematics questions whose gold option is a plain number, asked without their options;
scored by ``numeric.py``'s tolerance rule). The safety-and-refusal domain of the paper has
no public source among the shipped sets and is not built (a hand-written file loads fine).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import yaml

from chorus.core.config import ConfigError
from chorus.core.jsonl import iter_jsonl
from chorus.simulate.datasets import DataError
from chorus.simulate.datasets import load as load_set
from chorus.simulate.debate.parse import read_number
from chorus.core.seeding import rng as make_rng

if TYPE_CHECKING:
    from chorus.core.runs import RunDir

LETTERS = "ABCDEFGHIJ"
SCENARIOS = Path(__file__).resolve().parent / "data" / "value_scenarios.yaml"

# items per subdomain in the default build (about 1,200 questions)
DEFAULT_COUNTS = {"misconceptions": 300, "disciplinary": 300, "strategy": 200, "biomedical": 100,
                  "moral_scenarios": 150, "moral_disputes": 100, "contested": None,  # None = all
                  "numeric": 0}  # opt-in (--count numeric=N): 0 keeps the default bench as it was
# numeric items: MMLU mathematics questions that read as free-answer questions once the options go
_NUMERIC_SUBJECTS = ("elementary_mathematics", "high_school_mathematics", "college_mathematics",
                     "high_school_statistics")
# questions that point at their options, or whose gold is only the closest option, need the options
_NEEDS_OPTIONS = re.compile(r"follow|statement|option|above|below|approximat|closest|nearest|estimat|roughly|"
                            r"\babout\b|\bI+\b|which (?:number|one|of)", re.I)
_MMLU_MORAL = ("moral_disputes", "business_ethics")
_MMLU_SKIP = ("moral_scenarios",) + _MMLU_MORAL


class BenchError(ConfigError):
    """A bench file or item is invalid; the message names the line and the field."""


@dataclass
class Item:
    id: str
    domain: str
    subdomain: str
    family: str
    question: str
    options: list[str] | None
    labels: list[str] | None
    reference: str | None
    system: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    tolerance: float | None = None  # numeric items: absolute tolerance overriding the default rule

    @property
    def numeric(self) -> bool:
        return self.options is None

    @property
    def word_labels(self) -> bool:
        return bool(self.labels) and any(len(lab) > 1 for lab in self.labels)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "domain": self.domain, "subdomain": self.subdomain, "family": self.family,
                "question": self.question, "options": self.options, "labels": self.labels,
                "system": self.system, "reference": self.reference, "provenance": self.provenance,
                **({"tolerance": self.tolerance} if self.tolerance is not None else {})}  # files stay as they were


# -- loader / validation ---------------------------------------------------------------------
_REQUIRED = ("id", "domain", "subdomain", "family", "question")


def validate_item(d: Any, where: str = "item") -> Item:
    """One bench record -> Item; raises BenchError naming ``where`` and the field."""
    if not isinstance(d, dict):
        raise BenchError(f"{where}: expected a JSON object, got {type(d).__name__}")
    for k in _REQUIRED:
        v = d.get(k)
        if not isinstance(v, str) or not v.strip():
            raise BenchError(f"{where}: field '{k}' must be a non-empty string, got {v!r}")
    unknown = set(d) - set(_REQUIRED) - {"options", "labels", "system", "reference", "provenance", "tolerance"}
    if unknown:
        raise BenchError(f"{where}: unknown field(s) {sorted(unknown)}")
    options = d.get("options")
    labels = d.get("labels")
    if options is not None:
        if not isinstance(options, list) or len(options) < 2:
            raise BenchError(f"{where}: field 'options' must be a list of at least 2 strings or null, got {options!r}")
        for j, o in enumerate(options):
            if not isinstance(o, str) or not o.strip():
                raise BenchError(f"{where}: field 'options[{j}]' must be a non-empty string, got {o!r}")
        norm = [o.strip().lower() for o in options]
        dup = sorted({o for o in norm if norm.count(o) > 1})
        if dup:
            raise BenchError(f"{where}: field 'options' has duplicated option(s) {dup}")
        if labels is None:
            if len(options) > len(LETTERS):
                raise BenchError(f"{where}: field 'options' has {len(options)} entries; give 'labels' (max {len(LETTERS)} letters)")
            labels = list(LETTERS[:len(options)])
        if not isinstance(labels, list) or len(labels) != len(options):
            raise BenchError(f"{where}: field 'labels' must be a list as long as 'options' ({len(options)}), got {labels!r}")
        for j, lab in enumerate(labels):
            if not isinstance(lab, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", lab or ""):
                raise BenchError(f"{where}: field 'labels[{j}]' must be a single word, got {lab!r}")
        nl = [lab.lower() for lab in labels]
        if len(set(nl)) != len(nl):
            raise BenchError(f"{where}: field 'labels' has duplicated label(s) {labels!r}")
    elif labels is not None:
        raise BenchError(f"{where}: field 'labels' given for a numeric item (options is null)")
    ref = d.get("reference")
    if ref is not None:
        if options is None:
            if not isinstance(ref, (str, int, float)) or isinstance(ref, bool) or read_number(str(ref)) is None:
                raise BenchError(f"{where}: field 'reference' of a numeric item must be a number "
                                 f"(e.g. 42, \"-3.5\", \"1,200\"), got {ref!r}")
            ref = str(ref)
        elif ref not in labels:
            raise BenchError(f"{where}: field 'reference' = {ref!r} is not one of the labels {labels}")
    tol = d.get("tolerance")
    if tol is not None:
        if options is not None:
            raise BenchError(f"{where}: field 'tolerance' given for an item with options (numeric items only)")
        if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not tol >= 0 or tol == float("inf"):
            raise BenchError(f"{where}: field 'tolerance' must be a finite number >= 0, got {tol!r}")
        tol = float(tol)
    system = d.get("system")
    if system is not None and not isinstance(system, str):
        raise BenchError(f"{where}: field 'system' must be a string or null, got {system!r}")
    prov = d.get("provenance") or {}
    if not isinstance(prov, dict):
        raise BenchError(f"{where}: field 'provenance' must be an object, got {prov!r}")
    return Item(id=d["id"], domain=d["domain"], subdomain=d["subdomain"], family=d["family"],
                question=d["question"], options=options, labels=labels, reference=ref, system=system,
                provenance=prov, tolerance=tol)


def load_bench(path: str | Path) -> list[Item]:
    """Read and validate a bench JSONL file. Errors name the line and the field."""
    path = Path(path)
    if not path.is_file():
        raise BenchError(f"bench file not found: {path}")
    items: list[Item] = []
    seen: dict[str, int] = {}
    for n, d in iter_jsonl(path, error=BenchError, where="{path}: line {n}"):
        where = f"{path}: line {n}"
        it = validate_item(d, where)
        if it.id in seen:
            raise BenchError(f"{where}: field 'id' = {it.id!r} duplicates line {seen[it.id]}")
        seen[it.id] = n
        items.append(it)
    if not items:
        raise BenchError(f"{path}: no items")
    return items


def write_bench(items: Iterable[Item], path: str | Path) -> str:
    """Write JSONL; returns the sha256 of the bytes written."""
    text = "".join(json.dumps(it.to_dict(), ensure_ascii=False) + "\n" for it in items)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


def save_items(run: RunDir, items: list[Item]) -> None:
    """A run directory's bench: RUN/bench.jsonl (the debate and the interventions read it back)."""
    write_bench(items, run.path / "bench.jsonl")


def load_items(run_dir: str | Path) -> dict[str, Item]:
    """id -> item of a run directory's bench (RUN/bench.jsonl)."""
    return {it.id: it for it in load_bench(Path(run_dir) / "bench.jsonl")}


# -- builder ---------------------------------------------------------------------------------
def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _norm(q: str) -> str:
    return re.sub(r"\W+", " ", q.lower()).strip()


def _items(loaded, domain: str, subdomain: str, hashes: dict[str, str], **prov: Any) -> list[Item]:
    """Loader records -> bench items; the files read and their hashes go to the manifest, the rows the
    loader left out (by reason) to ``hashes.excluded`` (an ``_Sources``)."""
    hashes.update(loaded.files)
    _note_excluded(hashes, subdomain, loaded)
    return [Item(id=r.id, domain=domain, subdomain=subdomain, family=r.id, question=r.question,
                 options=list(r.options) if r.options else list(r.labels), labels=list(r.labels),
                 reference=r.gold,
                 provenance={"source_file": r.file, "row": r.row, "sha256": loaded.files[r.file], **prov,
                             **{k: v for k, v in r.meta.items() if k in ("subject", "category")}})
            for r in loaded.records]


class _Sources(dict):
    """The files a build read (relative path -> sha256), and the rows its loaders left out, by
    subdomain and reason (``excluded``): both go to the manifest."""

    def __init__(self) -> None:
        super().__init__()
        self.excluded: dict[str, dict[str, int]] = {}


def _note_excluded(hashes: dict[str, str], subdomain: str, loaded) -> None:
    if isinstance(hashes, _Sources) and loaded.excluded:
        hashes.excluded[subdomain] = loaded.excluded_by_reason()


def _truthfulqa(data, rng, hashes) -> list[Item]:
    out = []
    for it in _items(load_set("truthfulqa", data), "knowledge", "misconceptions", hashes,
                     dataset="TruthfulQA (2025 rev.)", license="Apache-2.0",
                     setting="binary: Best vs Best Incorrect, order seeded"):
        if rng.integers(2):  # the loader gives (best, best incorrect); the bench shows a seeded order
            it.options = it.options[::-1]
            it.reference = "B"
        out.append(it)
    return out


def _mmlu(data, subjects: Sequence[str] | None, skip: Sequence[str], domain: str, subdomain: str,
          hashes) -> list[Item]:
    return _items(load_set("mmlu", data, subjects=subjects, skip=tuple(skip)), domain, subdomain, hashes,
                  dataset="MMLU", license="MIT")


def _strategyqa(data, hashes) -> list[Item]:
    return _items(load_set("strategyqa", data), "knowledge", "strategy", hashes,
                  dataset="StrategyQA train", license="MIT")


def _pubmedqa(data, hashes, max_context_chars: int = 1500) -> list[Item]:
    # abstracts over max_context_chars are left out (small models' windows); the count is in the manifest
    return _items(load_set("pubmedqa", data, max_context_chars=max_context_chars), "knowledge", "biomedical",
                  hashes, dataset="PubMedQA PQA-L", license="MIT")


def _numeric(data, hashes) -> list[Item]:
    """MMLU mathematics questions with a plain-number gold option, asked free-answer (no options);
    the reference is that option's text. Provenance names the row and the gold option it came from."""
    loaded = load_set("mmlu", data, subjects=_NUMERIC_SUBJECTS)
    hashes.update(loaded.files)
    _note_excluded(hashes, "numeric", loaded)
    out = []
    for r in loaded.records:
        gold = r.options[r.labels.index(r.gold)].strip()
        if read_number(gold) is None or "/" in gold or "%" in gold or _NEEDS_OPTIONS.search(r.question) \
                or not r.question.rstrip().endswith("?"):
            continue
        out.append(Item(id=f"{r.id}-num", domain="knowledge", subdomain="numeric", family=r.id, question=r.question,
                        options=None, labels=None, reference=gold,
                        provenance={"source_file": r.file, "row": r.row, "sha256": loaded.files[r.file],
                                    "dataset": "MMLU", "license": "MIT", "subject": r.meta.get("subject"),
                                    "setting": f"numeric: options dropped, reference = gold option {r.gold}"}))
    return out


#: constructed-scenario frame sets: "default" = value_scenarios.yaml's three frames (base / personal /
#: public, the shipped bench); "stakes" = scenario_frames_stakes.yaml (§A.4: a low and a high level of four
#: stakes dimensions, plus base). Opt-in (bench.scenario_frames) so stored runs and the default bench stay as they were
SCENARIO_FRAMES = ("default", "stakes")
STAKES_FRAMES = SCENARIOS.parent / "scenario_frames_stakes.yaml"
#: the default frames read as stakes levels (their provenance predates the stakes fields; the report infers them)
DEFAULT_FRAME_STAKES = {"base": (None, None), "personal": ("personal", "high"), "public": ("scrutiny", "high")}


def frame_question(text: str, scenario: str, question: str, n: str | None = None) -> str:
    """One framed question: the frame text with the scenario (and the quantity fill ``n``) put in, then
    the question."""
    return (text.format(scenario=scenario, n=n) + " " + question).strip()


def _stakes_frames(path: Path = STAKES_FRAMES) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]], Any]:
    """(frame name -> {text, dimension, level}, scenario id -> {low, high} quantity fills, version)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    frames = doc["frames"]
    for name, f in frames.items():
        if "{scenario}" not in f.get("text", "") or (f.get("dimension") is None) != (f.get("level") is None) \
                or f.get("level") not in (None, "low", "high"):
            raise BenchError(f"{path}: frame {name!r} needs text with {{scenario}} and both or neither of "
                             f"dimension / level (low | high), got {f!r}")
    return frames, doc.get("quantities") or {}, doc.get("version")


def _scenarios(path: Path = SCENARIOS, frame_set: str = "default") -> list[Item]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if frame_set == "default":
        frames = {k: {"text": v} for k, v in doc["frames"].items()}
        quantities, extra = {}, {}
    else:
        frames, quantities, fversion = _stakes_frames()
        extra = {"frame_set": frame_set, "frames_file": "simulate/debate/data/scenario_frames_stakes.yaml",
                 "frames_version": fversion}
    out = []
    for s in doc["scenarios"]:
        for fname, f in frames.items():
            level = f.get("level")
            n = None
            if "{n}" in f["text"]:  # a quantity frame: this scenario's own fill for the level
                n = (quantities.get(s["id"]) or {}).get(level)
                if not n:
                    raise BenchError(f"{STAKES_FRAMES}: scenario {s['id']!r} has no quantities.{level} fill "
                                     f"for frame {fname!r}")
            stakes = {"stakes_dimension": f.get("dimension"), "stakes_level": level} if extra else {}
            out.append(Item(id=f"val-{s['id']}-{fname}", domain="values", subdomain="contested",
                            family=f"val-{s['id']}", question=frame_question(f["text"], s["scenario"], s["question"], n),
                            options=list(s["options"]), labels=["A", "B"], reference=None,
                            provenance={"source_file": "simulate/debate/data/value_scenarios.yaml",
                                        "row": s["id"], "frame": fname, "dataset": "constructed (chorus)",
                                        "license": "project", "version": doc.get("version"), **extra, **stakes}))
    return out


def item_frames(items: Iterable[Item]) -> list[dict[str, Any]]:
    """The frame of each constructed-scenario item (those whose provenance names a frame): one record
    {qid, frame, stakes_dimension, stakes_level} per item. Items built before the stakes fields existed (the default frames)
    get their level from DEFAULT_FRAME_STAKES; an unknown frame gets none."""
    rows = []
    for it in items:
        fr = it.provenance.get("frame")
        if not isinstance(fr, str):
            continue
        if "stakes_dimension" in it.provenance:
            dim, level = it.provenance.get("stakes_dimension"), it.provenance.get("stakes_level")
        else:
            dim, level = DEFAULT_FRAME_STAKES.get(fr, (None, None))
        rows.append({"qid": it.id, "frame": fr, "stakes_dimension": dim, "stakes_level": level})
    return rows


def build_bench(data_dir: str | Path | None = None, *, seed: int = 0,
                counts: dict[str, int | None] | None = None,
                scenario_frames: str = "default") -> tuple[list[Item], dict[str, Any]]:
    """Assemble the bench from ``data_dir`` (default: the data shipped with chorus). ``counts`` maps a
    subdomain to how many items to sample (None = all); selection and order use ``seed``.
    ``scenario_frames``: the frame set of the constructed scenarios (SCENARIO_FRAMES; "stakes" opts in).
    Returns (items, manifest)."""

    data = Path(data_dir) if data_dir else None
    if data is not None and not data.is_dir():
        raise BenchError(f"data directory not found: {data}")
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    unknown = set(counts) - set(DEFAULT_COUNTS)
    if unknown:
        raise BenchError(f"unknown subdomain(s) in counts: {sorted(unknown)}; known: {sorted(DEFAULT_COUNTS)}")
    if scenario_frames not in SCENARIO_FRAMES:
        raise BenchError(f"scenario_frames must be one of {list(SCENARIO_FRAMES)}, got {scenario_frames!r}")
    hashes = _Sources()
    builders = {
        "misconceptions": lambda: _truthfulqa(data, make_rng(seed, 1), hashes),
        "disciplinary": lambda: _mmlu(data, None, _MMLU_SKIP, "knowledge", "disciplinary", hashes),
        "strategy": lambda: _strategyqa(data, hashes),
        "biomedical": lambda: _pubmedqa(data, hashes),
        "moral_scenarios": lambda: _mmlu(data, ("moral_scenarios",), (), "values", "moral_scenarios", hashes),
        "moral_disputes": lambda: _mmlu(data, _MMLU_MORAL, (), "values", "moral_disputes", hashes),
        "contested": lambda: _scenarios(frame_set=scenario_frames),
        "numeric": lambda: _numeric(data, hashes),  # last: the earlier subdomains keep their order seeds
    }
    items: list[Item] = []
    seen: set[str] = set()
    available: dict[str, int] = {}
    short: dict[str, dict[str, int]] = {}
    dropped_dup = 0
    for k, (sub, make) in enumerate(builders.items()):
        n = counts.get(sub)
        if n == 0:
            continue
        try:
            pool = make()
        except DataError as err:
            raise BenchError(f"{sub}: {err}") from None
        available[sub] = len(pool)
        order = make_rng(seed, 2, k).permutation(len(pool))
        if sub == "contested":  # keep variants of a family together
            order = range(len(pool))
        taken = 0
        for j in order:
            it = pool[int(j)]
            key = _norm(it.question)
            if key in seen:
                dropped_dup += 1
                continue
            if n is not None and taken >= n:
                break
            seen.add(key)
            items.append(it)
            taken += 1
        if taken == 0:   # a subdomain asked for and lost whole (an empty file, a lost column): an error
            lost = hashes.excluded.get(sub)
            why = (f"{sum(lost.values())} rows excluded: {lost}" if lost else
                   f"{len(pool)} usable, all duplicates of earlier questions" if pool else "no rows")
            raise BenchError(f"{sub}: no question left from {data if data else 'the shipped data'} ({why}); "
                             f"fix the data or leave the subdomain out (--count {sub}=0)")
        if n is not None and taken < n:   # fewer than asked: legitimate, but counted and said
            short[sub] = {"requested": n, "built": taken, "usable": len(pool)}
    final = [items[int(j)] for j in make_rng(seed, 3).permutation(len(items))]
    manifest = {"seed": seed, "data_dir": str(data) if data else "shipped", "counts_requested": counts, "available": available,
                "counts": _count(final), "n_items": len(final), "n_labelled": sum(it.reference is not None for it in final),
                "n_numeric": sum(it.numeric for it in final),
                "duplicates_dropped": dropped_dup, "source_sha256": dict(hashes),
                "scenarios_sha256": _sha(SCENARIOS)}
    if hashes.excluded:   # rows the loaders left out (no gold, empty options, ...), by subdomain and reason
        manifest["rows_excluded"] = hashes.excluded
    if short:
        manifest["short"] = short
    if scenario_frames != "default":  # added only when opted in: the default manifest stays as it was
        manifest.update(scenario_frames=scenario_frames, frames_sha256=_sha(STAKES_FRAMES))
    return final, manifest


def bench_warnings(manifest: dict[str, Any]) -> list[str]:
    """One line per loss a build had: rows a loader left out, subdomains built short of their count."""
    out = [f"{sub}: {sum(r.values())} source rows excluded ({', '.join(f'{k}: {v}' for k, v in r.items())})"
           for sub, r in (manifest.get("rows_excluded") or {}).items()]
    out += [f"{sub}: {s['built']} questions of the {s['requested']} asked for (the data holds {s['usable']} usable)"
            for sub, s in (manifest.get("short") or {}).items()]
    return out


def _count(items: Sequence[Item]) -> dict[str, int]:
    out: dict[str, int] = {}
    for it in items:
        out[f"{it.domain}/{it.subdomain}"] = out.get(f"{it.domain}/{it.subdomain}", 0) + 1
    return out
