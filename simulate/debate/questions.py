"""MAD-Bench-style question bench: a builder that assembles JSONL from the evaluation sets shipped
with chorus (``simulate.datasets``: one loader per set) plus constructed, unlabelled value
scenarios shipped as data here; and a loader that validates any such file.

One item per line::

    {"id": str, "domain": str, "subdomain": str, "family": str, "question": str,
     "options": [str, ...] | null,          # option texts; null = numeric (free) answer
     "labels": [str, ...] | null,           # option labels; default "A", "B", ... for the options
     "system": str | null,                  # part of the stimulus where present
     "reference": str | null,               # a label, or null (unlabelled)
     "provenance": {...}}

Domains: ``knowledge`` (misconceptions / disciplinary / strategy / biomedical) and ``values``
(moral_scenarios / moral_disputes / contested). The safety-and-refusal domain of the paper has
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

from core.config import ConfigError
from core.jsonl import iter_jsonl
from simulate.datasets import DataError
from simulate.datasets import load as load_set

if TYPE_CHECKING:
    from core.runs import RunDir

LETTERS = "ABCDEFGHIJ"
SCENARIOS = Path(__file__).resolve().parent / "data" / "value_scenarios.yaml"

# items per subdomain in the default build (about 1,200 questions)
DEFAULT_COUNTS = {"misconceptions": 300, "disciplinary": 300, "strategy": 200, "biomedical": 100,
                  "moral_scenarios": 150, "moral_disputes": 100, "contested": None}  # None = all
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

    @property
    def numeric(self) -> bool:
        return self.options is None

    @property
    def word_labels(self) -> bool:
        return bool(self.labels) and any(len(lab) > 1 for lab in self.labels)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "domain": self.domain, "subdomain": self.subdomain, "family": self.family,
                "question": self.question, "options": self.options, "labels": self.labels,
                "system": self.system, "reference": self.reference, "provenance": self.provenance}


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
    unknown = set(d) - set(_REQUIRED) - {"options", "labels", "system", "reference", "provenance"}
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
            if not isinstance(ref, (str, int, float)) or isinstance(ref, bool):
                raise BenchError(f"{where}: field 'reference' of a numeric item must be a number or string, got {ref!r}")
            ref = str(ref)
        elif ref not in labels:
            raise BenchError(f"{where}: field 'reference' = {ref!r} is not one of the labels {labels}")
    system = d.get("system")
    if system is not None and not isinstance(system, str):
        raise BenchError(f"{where}: field 'system' must be a string or null, got {system!r}")
    prov = d.get("provenance") or {}
    if not isinstance(prov, dict):
        raise BenchError(f"{where}: field 'provenance' must be an object, got {prov!r}")
    return Item(id=d["id"], domain=d["domain"], subdomain=d["subdomain"], family=d["family"],
                question=d["question"], options=options, labels=labels, reference=ref, system=system,
                provenance=prov)


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
    """Loader records -> bench items; the files read and their hashes go to the manifest."""
    hashes.update(loaded.files)
    return [Item(id=r.id, domain=domain, subdomain=subdomain, family=r.id, question=r.question,
                 options=list(r.options) if r.options else list(r.labels), labels=list(r.labels),
                 reference=r.gold,
                 provenance={"source_file": r.file, "row": r.row, "sha256": loaded.files[r.file], **prov,
                             **{k: v for k, v in r.meta.items() if k in ("subject", "category")}})
            for r in loaded.records]


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


def _scenarios(path: Path = SCENARIOS) -> list[Item]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    frames = doc["frames"]
    out = []
    for s in doc["scenarios"]:
        for fname, ftext in frames.items():
            q = (ftext.format(scenario=s["scenario"]) + " " + s["question"]).strip()
            out.append(Item(id=f"val-{s['id']}-{fname}", domain="values", subdomain="contested",
                            family=f"val-{s['id']}", question=q, options=list(s["options"]), labels=["A", "B"],
                            reference=None,
                            provenance={"source_file": "simulate/debate/data/value_scenarios.yaml",
                                        "row": s["id"], "frame": fname, "dataset": "constructed (chorus)",
                                        "license": "project", "version": doc.get("version")}))
    return out


def build_bench(data_dir: str | Path | None = None, *, seed: int = 0,
                counts: dict[str, int | None] | None = None) -> tuple[list[Item], dict[str, Any]]:
    """Assemble the bench from ``data_dir`` (default: the data shipped with chorus). ``counts`` maps a
    subdomain to how many items to sample (None = all); selection and order use ``seed``.
    Returns (items, manifest)."""
    from core.seeding import rng as make_rng

    data = Path(data_dir) if data_dir else None
    if data is not None and not data.is_dir():
        raise BenchError(f"data directory not found: {data}")
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    unknown = set(counts) - set(DEFAULT_COUNTS)
    if unknown:
        raise BenchError(f"unknown subdomain(s) in counts: {sorted(unknown)}; known: {sorted(DEFAULT_COUNTS)}")
    hashes: dict[str, str] = {}
    builders = {
        "misconceptions": lambda: _truthfulqa(data, make_rng(seed, 1), hashes),
        "disciplinary": lambda: _mmlu(data, None, _MMLU_SKIP, "knowledge", "disciplinary", hashes),
        "strategy": lambda: _strategyqa(data, hashes),
        "biomedical": lambda: _pubmedqa(data, hashes),
        "moral_scenarios": lambda: _mmlu(data, ("moral_scenarios",), (), "values", "moral_scenarios", hashes),
        "moral_disputes": lambda: _mmlu(data, _MMLU_MORAL, (), "values", "moral_disputes", hashes),
        "contested": lambda: _scenarios(),
    }
    items: list[Item] = []
    seen: set[str] = set()
    available: dict[str, int] = {}
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
    final = [items[int(j)] for j in make_rng(seed, 3).permutation(len(items))]
    manifest = {"seed": seed, "data_dir": str(data) if data else "shipped", "counts_requested": counts, "available": available,
                "counts": _count(final), "n_items": len(final), "n_labelled": sum(it.reference is not None for it in final),
                "duplicates_dropped": dropped_dup, "source_sha256": hashes,
                "scenarios_sha256": _sha(SCENARIOS)}
    return final, manifest


def _count(items: Sequence[Item]) -> dict[str, int]:
    out: dict[str, int] = {}
    for it in items:
        out[f"{it.domain}/{it.subdomain}"] = out.get(f"{it.domain}/{it.subdomain}", 0) + 1
    return out
