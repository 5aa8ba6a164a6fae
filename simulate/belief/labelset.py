"""A calibration set drawn from a model's own generations, for a person to label (belief-layer
paper App. B: the calibration utterances are generated to span every stance band, then labelled
by hand), and the reader of the labelled file (``chorus belief calibrate --labels``).

``chorus belief labelset`` asks the belief layer's own generator role (``LLMGenerator``, the
prompt agents speak with in a belief run) for ``per_bin`` comments at each of the nine stance bins
(speaker belief = the bin's midpoint). Identical comments (case and spacing aside) are kept once;
a bin short of ``per_bin`` after that is topped up with fresh draws, at most ``max_draws`` per
bin. Every request is seeded, ``call_seed(seed, draw, 0, bin, GEN, 0)``, and goes through the run
directory's call store: a killed run resumes, a rerun computes nothing.

Three files are written, the labeller sees only the first two:

- ``FILE.csv``: ``id, topic, text, label, rationale``, rows in a seeded shuffle, ``label`` and
  ``rationale`` empty (the scale: ``LABEL_SCALE``, the shipped set's soft label ``y``);
- ``FILE.instructions.txt``: the two positions and the scale;
- ``FILE.key.csv``: the generating bin of every id (``bin``, ``target_belief``, ``stance_phrase``,
  ``draw``, ``request_seed``), kept apart so the labelling is blind to it.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from chorus.core.config import ConfigError, Strict
from chorus.core.seeding import call_seed, rng
from chorus.serving.spec import ModelSpec

from .calibration import min_labelled
from .config import GeneratorCfg, load_command_config
from .channel import GEN, LLMGenerator, RunKey, Turn
from .topics import _LOWER, _LOWER2, _UPPER, Topic, load_topic
from chorus.serving.roles import plan_roles
from chorus.core.runs import check_output, RunDir

STREAM_SHUFFLE = 41
TOPUP_FACTOR = 3          # default cap on draws per bin, in multiples of per_bin
COLUMNS = ("id", "topic", "text", "label", "rationale")   # the labeller's file
REQUIRED = ("id", "topic", "text", "label")               # what calibrate --labels needs
KEY_COLUMNS = ("id", "bin", "target_belief", "stance_phrase", "draw", "request_seed")
LABEL_SCALE = ("label: a number from 0 to 1, how strongly the comment supports Position A over Position B "
               "(1 = fully for A, 0 = fully for B, 0.5 = balanced or unrelated; e.g. 0.8 for a clear but not "
               "absolute lean towards A); rationale: optional, one line")

# the nine bins on b, as topics.stance_bin draws them: edges 0 < ... < 1
BIN_EDGES = np.array((0.0, *_LOWER, *_UPPER, *_LOWER2, 1.0))
BIN_TARGETS = np.round((BIN_EDGES[:-1] + BIN_EDGES[1:]) / 2, 6)   # the speaker belief each bin is drawn at (no float dust in the key file)


class LabelsetConfig(Strict):
    model: ModelSpec = Field(default_factory=ModelSpec)
    topic: str = "transit_priority"
    per_bin: int = Field(10, ge=1, description="utterances per stance bin, after deduplication")
    max_draws: Optional[int] = Field(None, ge=1, description="cap on draws per bin (null: "
                                     f"{TOPUP_FACTOR} x per_bin)")
    seed: int = Field(0, ge=0, description="request seeds and the row shuffle")
    generator: GeneratorCfg = GeneratorCfg()

    @model_validator(mode="after")
    def _cap(self) -> "LabelsetConfig":
        if self.max_draws is None:
            self.max_draws = TOPUP_FACTOR * self.per_bin
        if self.max_draws < self.per_bin:
            raise ValueError(f"max_draws = {self.max_draws} is below per_bin = {self.per_bin}")
        return self


def load_labelset_config(config: str | Path, overrides: dict[str, Any] | None = None) -> LabelsetConfig:
    """``chorus belief labelset [CONFIG]``: a path or a shipped name in ``configs/labelset/`` (``default``)."""
    return load_command_config(config, LabelsetConfig, "labelset", overrides)


def plan_engines(cfg: LabelsetConfig):
    """``chorus belief labelset --check``: the topic loaded and the generator's device plan (no model call)."""
    load_topic(cfg.topic)
    return plan_roles({"engine": cfg.model})


@dataclass
class BinTurn(Turn):
    """A batch of draws across bins: the bin takes the turn's place in each request seed."""
    bins: np.ndarray = None  # (R,)

    def seed(self, i: int, role: int, attempt: int = 0) -> int:
        return call_seed(self.root_seed, self.runs[i].seed, self.round, int(self.bins[i]), role, attempt)


def dedup_key(text: str) -> str:
    """Two comments a labeller would see as the same: equal up to case and spacing."""
    return " ".join(text.split()).casefold()


def draw(engine: Any, topic: Topic, cfg: LabelsetConfig, progress: Callable[[int, int], Any] | None = None,
         ) -> pd.DataFrame:
    """Every draw, one row each: bin, draw index, request seed, text and status (kept /
    duplicate / failed). Rounds of one batch each until every bin has ``per_bin`` kept or
    ``max_draws`` drawn; a duplicate loses to the earlier draw (round, then bin, then index).
    ``progress``: counts the kept utterances of the nine bins' ``per_bin`` each."""
    g = LLMGenerator(engine, cfg.generator.temperature, cfg.generator.top_p, cfg.generator.max_tokens)
    nb = len(BIN_TARGETS)
    kept, nxt = [0] * nb, [0] * nb
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    if progress:
        progress(nb * cfg.per_bin, 0)
    while True:
        want = [(k, j) for k in range(nb) for j in range(nxt[k], min(nxt[k] + cfg.per_bin - kept[k], cfg.max_draws))]
        if not want:
            break
        ks = np.array([k for k, _ in want])
        turn = BinTurn(cfg.seed, 0, 0, [RunKey(seed=j, topic=topic) for _, j in want],
                       np.zeros(len(want), dtype=int), BIN_TARGETS[ks], bins=ks)
        out = g.generate(turn)
        before = sum(kept)
        for i, ((k, j), text) in enumerate(zip(want, out.texts)):
            status = "failed" if text is None else "duplicate" if dedup_key(text) in seen else "kept"
            if status == "kept":
                seen.add(dedup_key(text))
                kept[k] += 1
            rows.append({"bin": k, "draw": j, "target_belief": float(BIN_TARGETS[k]),
                         "stance_phrase": topic.stance_phrases[k], "request_seed": turn.seed(i, GEN),
                         "text": text, "status": status,
                         "completion_tokens": int(out.completion_tokens[i]) if out.completion_tokens is not None else 0})
            nxt[k] = max(nxt[k], j + 1)
        if progress and sum(kept) > before:
            progress(nb * cfg.per_bin, sum(kept) - before)
    return pd.DataFrame(rows)


def assign_ids(draws: pd.DataFrame, topic_id: str, seed: int) -> pd.DataFrame:
    """The kept draws in a seeded shuffle, with ids in that order (``s<seed>-<n>``): neither the
    row order nor the id tells the bin."""
    kept = draws[draws.status == "kept"].reset_index(drop=True)
    kept = kept.iloc[rng(seed, STREAM_SHUFFLE).permutation(len(kept))].reset_index(drop=True)
    width = max(3, len(str(len(kept))))
    return kept.assign(id=[f"s{seed}-{i + 1:0{width}d}" for i in range(len(kept))], topic=topic_id)


# -- files ---------------------------------------------------------------------------------------
def sibling(out: Path, suffix: str) -> Path:
    """``labels.csv`` -> ``labels<suffix>`` (the key, the instructions, the run directory)."""
    return out.with_name(out.name[:-4] + suffix if out.name.lower().endswith(".csv") else out.name + suffix)


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)   # atomic: a kill never leaves half a file


def instructions(topic: Topic) -> str:
    return (f"Label each row of the CSV: read the comment (column text) from a town-meeting discussion in "
            f"{topic.setting}.\n\nPosition A: {topic.a_plus}.\nPosition B: {topic.a_minus}.\n\n{LABEL_SCALE}.\n"
            f"Leave id, topic and text unchanged. Judge the text alone, not your own opinion.\n")


def refuse_labelled(out: Path) -> None:
    """A labelset never overwrites a file a person has started to label."""
    if not out.is_file():
        return
    try:
        old = pd.read_csv(out, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        raise ConfigError(f"--out {out}: exists and is not a labelset CSV; choose another --out") from None
    for c in ("label", "rationale"):
        if c in old and old[c].str.strip().ne("").any():
            n = int(old[c].str.strip().ne("").sum())
            raise ConfigError(f"--out {out}: exists with {n} filled-in {c} value(s); it is not overwritten "
                              f"(choose another --out)")


def write_files(rows: pd.DataFrame, topic: Topic, out: Path) -> dict[str, Path]:
    sheet = rows.assign(label="", rationale="")[list(COLUMNS)]
    key = rows[list(KEY_COLUMNS)]
    paths = {"csv": out, "key": sibling(out, ".key.csv"), "instructions": sibling(out, ".instructions.txt")}
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_csv(sheet, paths["csv"])
    _write_csv(key, paths["key"])
    paths["instructions"].write_text(instructions(topic))
    return paths


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def run_labelset(cfg: LabelsetConfig, out: Path, run_dir: Path | None = None, engine: Any = None, *,
                 progress: Callable[[int, int], Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """Draw, deduplicate, shuffle, write the three files and the run directory (default: beside
    the CSV, ``FILE.run/``, so rerunning the same command resumes). ``engine``: a ready engine
    (tests); default ``chorus.serving.build_engine`` on the run's call store. ``progress``: the kept
    utterances (``chorus.core.progress``)."""
    topic = load_topic(cfg.topic)
    out = Path(out)
    if out.exists() and not out.is_file():
        raise ConfigError(f"--out {out}: is a directory; give a .csv file path")
    refuse_labelled(out)
    for f in (out, sibling(out, ".key.csv"), sibling(out, ".instructions.txt")):
        check_output(f)   # the sheet and its two files: never over (or into) a run's record
    if engine is None:
        from chorus.serving.profiles import get_profile
        get_profile(cfg.model.profile)   # an unknown profile fails before any directory exists
    run = RunDir.create(run_dir or sibling(out, ".run"), part="belief", config=cfg, seeds={"root": cfg.seed},
                        command="labelset", model=cfg.model.profile, topic=topic.id,
                        topic_sha256=topic.sha256, labelset_csv=str(out))
    own = engine is None
    if own:
        from chorus.serving import build_engine
        engine = build_engine(cfg.model, store=run.store_path)
    t0 = time.perf_counter()
    try:
        draws = draw(engine, topic, cfg, progress)
    finally:
        computed = int(getattr(engine, "model_calls", 0) or 0)
        if own:
            run.record_engines("engine", engine)
            engine.close()
    rows = assign_ids(draws, topic.id, cfg.seed)
    paths = write_files(rows, topic, out)
    run.write_table("draws", draws)
    run.write_table("labelset", rows)
    by_bin = draws.groupby("bin").status.value_counts().unstack(fill_value=0)
    per_bin = [{"bin": int(k), "target_belief": float(BIN_TARGETS[k]),
                **{s: int(by_bin.at[k, s]) if s in by_bin else 0 for s in ("kept", "duplicate", "failed")},
                "drawn": int((draws.bin == k).sum())} for k in range(len(BIN_TARGETS))]
    summary = {"command": "labelset", "model": cfg.model.profile, "topic": topic.id, "seed": cfg.seed,
               "per_bin_wanted": cfg.per_bin, "max_draws": cfg.max_draws, "rows": int(len(rows)),
               "drawn": int(len(draws)), "duplicates": int((draws.status == "duplicate").sum()),
               "failed": int((draws.status == "failed").sum()),
               "short_bins": [b["bin"] for b in per_bin if b["kept"] < cfg.per_bin], "per_bin": per_bin,
               "model_calls_computed": computed, "generation_wall_s": round(time.perf_counter() - t0, 2),
               "files": {k: str(p) for k, p in paths.items()},
               "sha256": {k: _sha256(p) for k, p in paths.items()}, "label_scale": LABEL_SCALE}
    run.write_summary(summary)
    run.finish()
    return run, summary


# -- reading a labelled file back ----------------------------------------------------------------
def read_labels_csv(path: str | Path, topic: str | None = None, skip_unlabelled: bool = False) -> pd.DataFrame:
    """A filled-in labelset CSV as calibrate's labelled set (``id``, ``text``, ``y``, ...). Refused
    with one line naming the problem and the value: a missing file or column, a duplicate or empty
    id, an empty text, a label that is not a number in [0, 1], another topic, unlabelled rows
    (unless ``skip_unlabelled``: left out, counted in ``attrs['n_unlabelled']``), fewer labelled
    rows than the 80/20 split needs. The key file beside it, when present, adds ``bin`` and
    ``target_belief``."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--labels {p}: no such file")
    try:
        df = pd.read_csv(p, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except pd.errors.EmptyDataError:
        raise ConfigError(f"--labels {p}: the file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ConfigError(f"--labels {p}: not a readable CSV ({' '.join(str(err).split())[:160]})") from None
    df.columns = [c.strip() for c in df.columns]
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ConfigError(f"--labels {p}: missing column(s) {', '.join(missing)} (has: {', '.join(df.columns)})")
    if df.empty:
        raise ConfigError(f"--labels {p}: no rows")
    df = df.apply(lambda s: s.str.strip())
    for i, r in df.iterrows():
        if not r.id:
            raise ConfigError(f"--labels {p}: line {i + 2} has an empty id")
    dup = df.id[df.id.duplicated()]
    if len(dup):
        raise ConfigError(f"--labels {p}: id {dup.iloc[0]!r} appears more than once")
    empty = df.id[df.text.eq("")]
    if len(empty):
        raise ConfigError(f"--labels {p}: row id {empty.iloc[0]!r} has an empty text")
    topics = sorted(set(df.topic))
    if len(topics) != 1 or not topics[0]:
        raise ConfigError(f"--labels {p}: one topic per file, found {topics}")
    load_topic(topics[0])   # a topic chorus does not have fails here, naming it
    if topic is not None and topics[0] != load_topic(topic).id:
        raise ConfigError(f"--labels {p}: topic {topics[0]!r}, but --topic {topic!r}")
    y = np.full(len(df), np.nan)
    for i, (rid, v) in enumerate(zip(df.id, df.label)):
        if v == "":
            continue
        try:
            x = float(v)
        except ValueError:
            raise ConfigError(f"--labels {p}: row id {rid!r}: label {v!r} is not a number") from None
        if not (0.0 <= x <= 1.0):   # NaN fails here too
            raise ConfigError(f"--labels {p}: row id {rid!r}: label {v!r} outside [0, 1]")
        y[i] = x
    unl = np.isnan(y)
    if unl.any() and not skip_unlabelled:
        raise ConfigError(f"--labels {p}: {int(unl.sum())} of {len(df)} rows have no label (first: row id "
                          f"{df.id[unl].iloc[0]!r}); fill them in, or pass --skip-unlabelled to fit on the "
                          f"{int((~unl).sum())} labelled rows")
    need = min_labelled()
    if (~unl).sum() < need:
        raise ConfigError(f"--labels {p}: {int((~unl).sum())} labelled rows; the 80/20 split needs at least {need}")
    out = df.assign(y=y)[~unl].drop(columns=["label"]).reset_index(drop=True)
    key = sibling(p, ".key.csv")
    if key.is_file():
        k = pd.read_csv(key, dtype={"id": str})
        if not {"id", "bin", "target_belief"} <= set(k.columns):
            raise ConfigError(f"{key}: the key file lacks id, bin or target_belief")
        out = out.merge(k[["id", "bin", "target_belief"]], on="id", how="left")
    out.attrs.update(sha256=_sha256(p), source=str(p), topic=topics[0], n_unlabelled=int(unl.sum()),
                     key=str(key) if key.is_file() else None)
    return out
