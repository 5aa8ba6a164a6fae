"""One loader per evaluation set. Each reads the set's files from a data root, checks every gold
label and returns the usable rows as ``Record``s plus the excluded rows with their reason (never
guessed). The question bench (``chorus.simulate.debate.questions``) and the council tasks
(``chorus.simulate.council.data``) both build on these, so a set is read, filtered and worded in one place.

Data roots (``resolve_root``): an explicit folder (``--data DIR``, a config's ``data_dir``) replaces
the shipped data for every set; otherwise a set is read from the data shipped inside chorus
(this package), and the optional sets that chorus may not redistribute (the ArgLLMs claim sets)
from ``$CHORUS_DATA``.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from chorus.core.config import ConfigError
from chorus.core.jsonl import iter_jsonl

SHIPPED = Path(__file__).resolve().parent
ENV = "CHORUS_DATA"


class DataError(ConfigError):
    """A data file or row is unusable, or a set is missing; the message names the set and the file."""


@dataclass(frozen=True)
class Record:
    """One usable row of a set. ``labels`` are the answer labels a reader picks from; ``options``
    the texts behind them where the labels are letters (MMLU, TruthfulQA pairs), else None."""
    id: str
    dataset: str
    question: str
    labels: tuple[str, ...]
    options: tuple[str, ...] | None
    gold: str
    file: str  # relative to the data root
    row: Any
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Loaded:
    records: list[Record]
    excluded: list[dict[str, Any]]
    root: Path
    files: dict[str, str]  # relative path -> sha256 of every file read

    def excluded_by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.excluded:
            key = e["reason"].split(":")[0]
            out[key] = out.get(key, 0) + 1
        return out


# -- the sets ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SetInfo:
    name: str
    title: str
    license: str
    files: tuple[str, ...]  # what must exist under the root (globs allowed)
    shipped: bool = True
    how_to_supply: str = ""


ARGLLMS_HOW = ("the ArgLLMs claim sets carry a non-commercial licence and are not shipped with chorus: pass "
               "--data DIR (or set data_dir, or CHORUS_DATA) to a folder holding argllms_claims/derived/*.jsonl "
               "or a clone of the ArgLLMs repository (its Datasets/ folder)")
SETS: dict[str, SetInfo] = {s.name: s for s in [
    SetInfo("truthfulqa", "TruthfulQA (2025 revision)", "Apache-2.0", ("truthfulqa/TruthfulQA.csv",)),
    SetInfo("mmlu", "MMLU test", "MIT", ("mmlu/test/*_test.csv",)),
    SetInfo("pubmedqa", "PubMedQA PQA-L", "MIT", ("pubmedqa/ori_pqal.json",)),
    SetInfo("strategyqa", "StrategyQA train", "MIT", ("strategyqa/strategyqa_train.json",)),
    SetInfo("boolq", "BoolQ dev", "CC BY-SA 3.0", ("boolq/dev.jsonl",)),
    SetInfo("truthfulclaim", "ArgLLMs TruthfulClaim (Experiment)", "ArgLLMs Academic Public License (non-commercial)",
            ("argllms_claims/derived/truthfulclaim_experiment.jsonl",), False, ARGLLMS_HOW),
    SetInfo("strategyclaim", "ArgLLMs StrategyClaim (Experiment)", "ArgLLMs Academic Public License (non-commercial)",
            ("argllms_claims/derived/strategyclaim_experiment.jsonl",), False, ARGLLMS_HOW),
    SetInfo("medclaim", "ArgLLMs MedClaim (Experiment)", "ArgLLMs Academic Public License (non-commercial)",
            ("argllms_claims/derived/medclaim_experiment.jsonl",), False, ARGLLMS_HOW),
]}
# the ArgLLMs repository keeps each set as a datasets.save_to_disk folder (an Arrow stream)
ARGLLMS_ARROW = {"truthfulclaim": "Datasets/TruthfulQA/Experiment", "strategyclaim": "Datasets/StrategyQA/Experiment",
                 "medclaim": "Datasets/MedQA/Experiment"}


class MissingSet(DataError):
    """A set's files are not under any data root searched; ``optional`` for the non-shipped sets."""

    def __init__(self, msg: str, name: str, optional: bool):
        super().__init__(msg)
        self.name = name
        self.optional = optional


def _present(root: Path, name: str) -> str | None:
    """The first required file of ``name`` that ``root`` lacks (None: the set is there)."""
    if name in ARGLLMS_ARROW:
        for base in (root, root / "argllms_claims"):
            if list((base / ARGLLMS_ARROW[name]).glob("*.arrow")):
                return None
    for pattern in SETS[name].files:
        if not list(root.glob(pattern)):
            return pattern
    return None


def resolve_root(name: str, data_dir: str | Path | None = None) -> Path:
    """The folder ``name`` is read from. An explicit ``data_dir`` is the only root searched;
    otherwise ``$CHORUS_DATA`` (when set) and then the data shipped with chorus."""
    if name not in SETS:
        raise DataError(f"unknown data set {name!r} (known: {', '.join(SETS)})")
    info = SETS[name]
    if data_dir is not None:
        root = Path(data_dir).expanduser()
        if not root.is_dir():
            raise DataError(f"data directory not found: {root} (set {name!r})")
        missing = _present(root, name)
        if missing:
            extra = f"; {info.how_to_supply}" if not info.shipped else ""
            raise MissingSet(f"data set {name!r} ({info.title}) is not in {root}: missing {missing}{extra}",
                             name, not info.shipped)
        return root
    roots = [Path(os.environ[ENV]).expanduser()] if os.environ.get(ENV) else []
    roots.append(SHIPPED)
    for root in roots:
        if root.is_dir() and _present(root, name) is None:
            return root
    if info.shipped:  # a broken installation, not a user error
        raise MissingSet(f"data set {name!r} ({info.title}) is missing from chorus's own data ({SHIPPED}): "
                         f"missing {_present(SHIPPED, name)}; reinstall chorus", name, False)
    where = f" (CHORUS_DATA={os.environ[ENV]} lacks it)" if os.environ.get(ENV) else ""
    raise MissingSet(f"data set {name!r} ({info.title}) is not supplied{where}: {info.how_to_supply}", name, True)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rel(root: Path, f: Path) -> str:
    return f.relative_to(root).as_posix()


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    return list(iter_jsonl(path, error=DataError))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None


def _read_csv(path: Path, columns: tuple[str, ...], dataset: str) -> list[dict[str, str]]:
    """A CSV's rows as dicts of text. The header must name every one of ``columns`` and at least one
    row must follow: a lost column, an empty file or a header alone is one error naming the file and
    what it lacks (never a set or subdomain that silently shrinks to nothing, row by row). A UTF-8
    byte-order mark is read as one (``utf-8-sig``), not as part of the first column's name; every
    cell is text as written ("None", "NA" and empty cells stay strings, not missing values)."""
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False, encoding="utf-8-sig")
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty (no header, no rows) (set {dataset!r})") from None
    except pd.errors.ParserError as err:
        raise DataError(f"{path}: not a readable CSV ({' '.join(str(err).split())}) (set {dataset!r})") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text (byte {err.start}) (set {dataset!r})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(map(repr, missing))} (the header has "
                        f"{', '.join(map(repr, df.columns))}) (set {dataset!r})")
    if df.empty:
        raise DataError(f"{path}: a header and no rows (set {dataset!r})")
    return df.to_dict("records")


def _bool_gold(v: Any) -> bool | None:
    """Gold encoded as bool, 0/1 int or 0.0/1.0 float; anything else is missing."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    return None


def _text(v: Any) -> str | None:
    return v.strip() if isinstance(v, str) and v.strip() else None


def _unusable_context(question: str | None, context: str | None, max_chars: int, what: str) -> str | None:
    """Why a row with a context (abstract, passage) is left out, or None: missing text, or a context
    too long for small models' windows (excluded and counted, never truncated)."""
    if not question or not context:
        return f"missing question or {what}"
    if len(context) > max_chars:
        return f"context over {max_chars} chars"
    return None


# -- loaders -------------------------------------------------------------------------------
def truthfulqa(root: Path) -> Loaded:
    """Question with its Best Answer (option A) and Best Incorrect Answer (option B), gold A:
    callers shuffle the order. Rows whose two answers are empty or equal are excluded."""
    f = root / "truthfulqa" / "TruthfulQA.csv"
    recs, exc = [], []
    for i, r in enumerate(_read_csv(f, ("Question", "Best Answer", "Best Incorrect Answer"), "truthfulqa")):
        q, good, bad = _text(r.get("Question")), _text(r.get("Best Answer")), _text(r.get("Best Incorrect Answer"))
        if not q or not good or not bad:
            exc.append({"dataset": "truthfulqa", "row": i, "reason": "missing question or best (incorrect) answer"})
            continue
        if good.lower() == bad.lower():
            exc.append({"dataset": "truthfulqa", "row": i, "reason": "best and best incorrect answers are equal"})
            continue
        recs.append(Record(id=f"tqa-{i}", dataset="truthfulqa", question=q, labels=("A", "B"), options=(good, bad),
                           gold="A", file=_rel(root, f), row=i,
                           meta={"category": r.get("Category"), "type": r.get("Type")}))
    return Loaded(recs, exc, root, {_rel(root, f): _sha(f)})


def truthfulqa_claims(root: Path) -> Loaded:
    """TruthfulQA as true/false claims: each question once, paired with its Best Answer (gold
    'true') on even rows and its Best Incorrect Answer (gold 'false') on odd rows. One claim per
    question keeps the two answers of a question out of different CV folds; the row parity fixes
    the set (no seed) and balances it within every category, since the file is sorted by category."""
    base = truthfulqa(root)
    recs = []
    for r in base.records:
        true = r.row % 2 == 0
        answer = r.options[0] if true else r.options[1]
        recs.append(Record(id=f"tqa-claim-{r.row}", dataset="truthfulqa_claims",
                           question=f"Question: {r.question}\nProposed answer: {answer}", labels=("true", "false"),
                           options=None, gold="true" if true else "false", file=r.file, row=r.row,
                           meta={**r.meta, "answer_column": "Best Answer" if true else "Best Incorrect Answer"}))
    exc = [{**e, "dataset": "truthfulqa_claims"} for e in base.excluded]
    return Loaded(recs, exc, root, base.files)


MMLU_COLUMNS = ("question", "choice0", "choice1", "choice2", "choice3", "answer")


def mmlu(root: Path, subjects: list[str] | tuple[str, ...] | None = None,
         skip: tuple[str, ...] = ()) -> Loaded:
    """MMLU test, one file per subject; options A-D. Rows with a gold outside 0-3 or empty or
    duplicated options (not scorable) are excluded."""
    files = sorted((root / "mmlu" / "test").glob("*_test.csv"))
    if not files:
        raise DataError(f"no MMLU test files under {root / 'mmlu' / 'test'} (set 'mmlu')")
    known = {f.name[: -len("_test.csv")] for f in files}
    unknown = sorted(set(subjects or ()) - known)
    if unknown:
        raise DataError(f"unknown MMLU subject(s) {unknown}; known: {', '.join(sorted(known))}")
    recs, exc, hashes = [], [], {}
    for f in files:
        subj = f.name[: -len("_test.csv")]
        if (subjects and subj not in subjects) or subj in skip:
            continue
        hashes[_rel(root, f)] = _sha(f)
        for i, r in enumerate(_read_csv(f, MMLU_COLUMNS, "mmlu")):
            ans = (r.get("answer") or "").strip()
            if ans not in ("0", "1", "2", "3"):
                exc.append({"dataset": "mmlu", "row": f"{subj}:{i}", "reason": f"missing gold: answer = {ans!r}"})
                continue
            opts = tuple((r.get(f"choice{k}") or "").strip() for k in range(4))
            q = _text(r.get("question"))
            if not q or any(not o for o in opts) or len({o.lower() for o in opts}) < 4:
                exc.append({"dataset": "mmlu", "row": f"{subj}:{i}", "reason": "empty or duplicated options"})
                continue
            recs.append(Record(id=f"mmlu-{subj}-{i}", dataset="mmlu", question=q, labels=("A", "B", "C", "D"),
                               options=opts, gold="ABCD"[int(ans)], file=_rel(root, f), row=i,
                               meta={"subject": subj}))
    return Loaded(recs, exc, root, hashes)


PUBMED = ("yes", "no", "maybe")


def pubmedqa(root: Path, max_context_chars: int = 1500) -> Loaded:
    """PubMedQA PQA-L: the abstract without its conclusion and the question; gold
    ``final_decision``. ``LONG_ANSWER`` (the conclusion) leaks the answer and is never shown.
    Abstracts over ``max_context_chars`` (small models' windows) are excluded and counted."""
    f = root / "pubmedqa" / "ori_pqal.json"
    rows = _read_json(f)
    if not isinstance(rows, dict):
        raise DataError(f"{f}: expected a JSON object keyed by PMID")
    recs, exc = [], []
    for pmid, r in rows.items():
        gold = r.get("final_decision") if isinstance(r, dict) else None
        if gold not in PUBMED:
            exc.append({"dataset": "pubmedqa", "row": pmid, "reason": f"missing gold: final_decision = {gold!r}"})
            continue
        ctx = " ".join(c for c in (r.get("CONTEXTS") or []) if isinstance(c, str))
        q = _text(r.get("QUESTION"))
        why = _unusable_context(q, ctx, max_context_chars, "abstract")
        if why:
            exc.append({"dataset": "pubmedqa", "row": pmid, "reason": why})
            continue
        recs.append(Record(id=f"pmqa-{pmid}", dataset="pubmedqa",
                           question=f"Abstract (without its conclusion): {ctx}\n\nQuestion: {q}", labels=PUBMED,
                           options=None, gold=gold, file=_rel(root, f), row=pmid, meta={"pmid": pmid}))
    return Loaded(recs, exc, root, {_rel(root, f): _sha(f)})


def strategyqa(root: Path) -> Loaded:
    """StrategyQA train: yes/no questions. ``facts`` leak the answer and are never shown."""
    f = root / "strategyqa" / "strategyqa_train.json"
    rows = _read_json(f)
    if not isinstance(rows, list):
        raise DataError(f"{f}: expected a JSON list of questions")
    recs, exc = [], []
    for n, r in enumerate(rows):
        qid = r.get("qid") if isinstance(r, dict) else None
        ans = r.get("answer") if isinstance(r, dict) else None
        q = _text(r.get("question")) if isinstance(r, dict) else None
        if not isinstance(ans, bool):
            exc.append({"dataset": "strategyqa", "row": qid or n, "reason": f"missing gold: answer = {ans!r}"})
            continue
        if not q or not qid:
            exc.append({"dataset": "strategyqa", "row": qid or n, "reason": "missing qid or question"})
            continue
        recs.append(Record(id=f"sqa-{qid}", dataset="strategyqa", question=q, labels=("yes", "no"), options=None,
                           gold="yes" if ans else "no", file=_rel(root, f), row=qid, meta={"qid": qid}))
    return Loaded(recs, exc, root, {_rel(root, f): _sha(f)})


def boolq(root: Path, max_context_chars: int = 1500) -> Loaded:
    """BoolQ dev: a Wikipedia passage and a yes/no question (gold ``answer``). Passages over
    ``max_context_chars`` are excluded and counted."""
    f = root / "boolq" / "dev.jsonl"
    recs, exc = [], []
    for n, r in _read_jsonl(f):
        ans = r.get("answer") if isinstance(r, dict) else None
        if not isinstance(ans, bool):
            exc.append({"dataset": "boolq", "row": n, "reason": f"missing gold: answer = {ans!r}"})
            continue
        q, passage = _text(r.get("question")), _text(r.get("passage"))
        why = _unusable_context(q, passage, max_context_chars, "passage")
        if why:
            exc.append({"dataset": "boolq", "row": n, "reason": why})
            continue
        q = q[0].upper() + q[1:] + ("" if q.endswith("?") else "?")  # the set's questions are lower-case, no '?'
        recs.append(Record(id=f"boolq-{n}", dataset="boolq", question=f"Passage ({r.get('title', '')}): {passage}\n\n"
                           f"Question: {q}", labels=("yes", "no"), options=None, gold="yes" if ans else "no",
                           file=_rel(root, f), row=n, meta={"title": r.get("title")}))
    return Loaded(recs, exc, root, {_rel(root, f): _sha(f)})


def _argllms_rows(name: str, root: Path) -> tuple[Path, list[tuple[int, Any]]]:
    """The claim rows from the JSONL export, or from the ArgLLMs repository's Arrow stream."""
    jsonl = root / SETS[name].files[0]
    if jsonl.is_file():
        return jsonl, _read_jsonl(jsonl)
    for base in (root, root / "argllms_claims"):
        arrows = sorted((base / ARGLLMS_ARROW[name]).glob("*.arrow"))
        if arrows:
            import pyarrow as pa

            rows = []
            for a in arrows:
                with pa.memory_map(str(a)) as src:
                    rows += pa.ipc.open_stream(src).read_all().to_pylist()
            return arrows[0], [(n, r) for n, r in enumerate(rows, 1)]
    raise MissingSet(f"data set {name!r}: no {jsonl} nor {root / ARGLLMS_ARROW[name]}/*.arrow; {ARGLLMS_HOW}",
                     name, True)


def argllms_claims(name: str, root: Path) -> Loaded:
    """An ArgLLMs claim set (K = 2, gold 'true'/'false' from ``valid``, encoded as int, bool or
    float). MedClaim shows the vignette as background before the claim."""
    f, rows = _argllms_rows(name, root)
    recs, exc = [], []
    for n, r in rows:
        g = _bool_gold(r.get("valid")) if isinstance(r, dict) else None
        if g is None:
            exc.append({"dataset": name, "row": n, "reason": f"missing gold: field 'valid' = {r.get('valid')!r}"})
            continue
        if name == "medclaim":
            q, c = _text(r.get("question")), _text(r.get("claim_only"))
            text = f"Background: {q}\nClaim: {c}" if q and c else None
        else:
            text = _text(r.get("claim"))
        if not text:
            exc.append({"dataset": name, "row": n, "reason": "missing field 'claim'"})
            continue
        recs.append(Record(id=f"{name}-{n}", dataset=name, question=text, labels=("true", "false"), options=None,
                           gold="true" if g else "false", file=_rel(root, f), row=n))
    return Loaded(recs, exc, root, {_rel(root, f): _sha(f)})


# -- one entry point -----------------------------------------------------------------------
LOADERS: dict[str, Callable[..., Loaded]] = {
    "truthfulqa": truthfulqa, "truthfulqa_claims": truthfulqa_claims, "mmlu": mmlu, "pubmedqa": pubmedqa,
    "strategyqa": strategyqa, "boolq": boolq,
    **{n: (lambda root, _n=n: argllms_claims(_n, root)) for n in ARGLLMS_ARROW},
}
SOURCE_SET = {"truthfulqa_claims": "truthfulqa"}  # a derived view reads another set's files


def load(name: str, data_dir: str | Path | None = None, **options: Any) -> Loaded:
    """Load set ``name`` (a key of ``LOADERS``) from its data root; options go to its loader."""
    if name not in LOADERS:
        raise DataError(f"unknown data set {name!r} (known: {', '.join(LOADERS)})")
    root = resolve_root(SOURCE_SET.get(name, name), data_dir)
    try:
        return LOADERS[name](root, **options)
    except FileNotFoundError as err:
        raise DataError(f"data set {name!r}: file missing: {err.filename}") from None
