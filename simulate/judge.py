"""The frozen LLM judge pass (BDA paper D.3) for council baselines and debate turns.

Free-text answers are scored by a candidate-restricted extractor. The residual that commits to an
option only in prose ("the authority to coin money" for option "Coining money", never its letter)
goes to ONE frozen judge model at temperature 0, which reads the option texts and the answer (not
the question, so it cannot answer for the agent) and returns the committed label or NONE. Genuine
non-commitments stay unparsed; a judge reply outside the candidates + NONE is recorded as NONE with
its raw text (``judge_parsed=False``), never guessed. Every judge call goes through the engine's
call store, so the ledger is rebuilt from the store with no model call.

* ``judge_pass(engine, records)``: the generic pass over records (``record_id``, ``candidates``,
  ``answer_text``, optional ``options``, ``parser_answer``, ``part`` and pass-through keys) ->
  the ledger, one row per record (``sent`` says whether it reached the judge).
* ``council_judge(RUN)`` (``chorus.simulate.council.judged``) / ``debate_judge(RUN)``
  (``chorus.simulate.debate.judged``): the pass over a run directory's unparsed answers; they write
  ``tables/judge_ledger.parquet`` and ``judge.json`` (``debate_judge`` also sets the ``judge`` entry
  of an existing summary.json).

The judge is a post-processor; each part holds its own adapter (``council_records`` /
``council_judged`` in ``simulate/council/judged.py``, ``debate_records`` / ``apply_debate_verdicts`` /
``debate_judged`` in ``simulate/debate/judged.py``), so a debate run never loads council code. It
reads a part's tables and never its report. Each part's ``report`` reads the ledger through these adapters and shows parse
rates (and accuracy) before and after the pass beside the originals; re-rendering it after a pass
is the caller's (``chorus council judge`` / ``chorus debate judge`` run the pass, then the report).
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from chorus import serving  # chorus.serving.build_engine looked up per call: tests replace it
from chorus.core.config import InputError, load_config, load_prompt_file
from chorus.core.seeding import call_seed, stable_int
from chorus.core.runs import RunDir, amends_run, write_json
from chorus.serving.profiles import DEFAULT_PROFILE
from chorus.simulate.debate.parse import parse_answer

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
DEFAULT_PROMPT = "judge_v1"
DEFAULT_JUDGE = DEFAULT_PROFILE  # a local profile; never a hosted API by default
NONE = "NONE"
LEDGER = "judge_ledger"
LEDGER_COLUMNS = ["part", "record_id", "candidates", "options", "answer_sha256", "answer_text", "parser_answer",
                  "sent", "judge_raw", "judge_verdict", "judge_parsed", "judged_answer", "judge_profile",
                  "prompt_name", "prompt_sha256", "cached"]


class JudgeError(InputError):
    """A record or run directory the judge pass cannot use (the message names the field)."""


def load_judge_prompt(name: str = DEFAULT_PROMPT) -> dict[str, Any]:
    return load_prompt_file(name, PROMPTS_DIR, DEFAULT_PROMPT)


# -- extraction ----------------------------------------------------------------------------------
def candidate_answer(text: str | None, candidates: Sequence[str]) -> str | None:
    """The candidate-restricted reading of a stored answer: the ``"answer"`` field of a (possibly
    truncated) JSON envelope when it names a candidate, else ``debate.parse.parse_answer``."""
    if not text:
        return None
    alt = "|".join(re.escape(c) for c in sorted(map(str, candidates), key=len, reverse=True))
    m = re.search(rf'"answer"\s*:\s*"({alt})"', text, re.I)
    if m:
        return {c.lower(): c for c in candidates}[m.group(1).lower()]
    return parse_answer(text, list(candidates))


def parse_verdict(reply: str | None, candidates: Sequence[str]) -> tuple[str, bool]:
    """(verdict, parsed) of a judge reply: a candidate label or NONE. A reply whose first line is not
    one label and that names no label, several, or NONE and a label, is (NONE, False): recorded,
    never guessed."""
    labels = [*map(str, candidates), NONE]
    text = (reply or "").strip()
    if not text:
        return NONE, False
    first = re.sub(r"^[\s*_\"'`(\[]+|[\s*_\"'`.:;,!)\]]+$", "", text.splitlines()[0])
    for lab in labels:  # the whole first line is one label (letters case-sensitive: "a" is an article)
        if first == lab or (len(lab) > 1 and first.lower() == lab.lower()):
            return lab, True
    named = {lab for lab in map(str, candidates)  # a reply that lists options is no verdict
             if re.search(rf"(?<![A-Za-z0-9]){re.escape(lab)}(?![A-Za-z0-9])", text, re.I if len(lab) > 1 else 0)}
    if len(named) > 1:
        return NONE, False
    has_none = re.search(r"(?<![A-Za-z])NONE(?![A-Za-z])", text) is not None
    ans = parse_answer(text, list(candidates))
    if has_none and ans is None:
        return NONE, True
    if ans is not None and not has_none:
        return ans, True
    return NONE, False


# -- the pass -------------------------------------------------------------------------------------
def _key(s: str) -> int:
    return stable_int(s, bits=31)


def judge_messages(candidates: Sequence[str], options: Sequence[str] | None, answer: str,
                   P: Mapping[str, Any], max_answer_chars: int = 3000) -> list[dict[str, str]]:
    """The judge's conversation. A long answer keeps its last ``max_answer_chars`` characters (the
    conclusion, where a commitment sits), so the prompt fits a small model's window."""
    if options is not None:
        opts = "\n".join(P["option_text"].format(label=c, text=t) for c, t in zip(candidates, options))
    else:
        opts = "\n".join(P["option_label"].format(label=c) for c in candidates)
    ans = answer.strip()
    if len(ans) > max_answer_chars:
        ans = "..." + ans[-max_answer_chars:]
    user = P["user"].format(options=opts, answer=ans, labels=", ".join(candidates))
    return [{"role": "system", "content": P["system"]}, {"role": "user", "content": user}]


def _check(i: int, r: Mapping[str, Any]) -> None:
    for f in ("record_id", "candidates", "answer_text"):
        if f not in r:
            raise JudgeError(f"record {i}: field {f!r} is missing")
    cands = list(r["candidates"])
    if len(cands) < 2 or len(set(map(str, cands))) != len(cands) or NONE in cands:
        raise JudgeError(f"record {i} ({r['record_id']}): candidates must be >= 2 distinct labels other than "
                         f"{NONE!r}, got {cands}")
    opts = r.get("options")
    if opts is not None and len(list(opts)) != len(cands):
        raise JudgeError(f"record {i} ({r['record_id']}): {len(list(opts))} option texts for {len(cands)} candidates")
    pa = r.get("parser_answer")
    if pa is not None and pa not in cands:
        raise JudgeError(f"record {i} ({r['record_id']}): parser_answer {pa!r} is not one of {cands}")


def judge_pass(engine: Any, records: Sequence[Mapping[str, Any]], *, prompt: str = DEFAULT_PROMPT, seed: int = 0,
               max_tokens: int = 16, max_answer_chars: int = 3000,
               progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """The ledger of a judge pass over ``records`` (one row each, in order).

    A record without ``parser_answer`` is read by ``candidate_answer``; only records it cannot
    read go to the judge (one batch, temperature 0, ``max_tokens`` new tokens, per-record seed).
    Keys of a record beyond the ledger's own columns pass through (``dataset``, ``condition``, ...).
    """
    P = load_judge_prompt(prompt)
    rows: list[dict[str, Any]] = []
    ids = set()
    for i, r in enumerate(records):
        _check(i, r)
        if r["record_id"] in ids:
            raise JudgeError(f"record {i}: record_id {r['record_id']!r} repeats")
        ids.add(r["record_id"])
        cands = [str(c) for c in r["candidates"]]
        text = "" if r["answer_text"] is None else str(r["answer_text"])
        pa = r["parser_answer"] if "parser_answer" in r else candidate_answer(text, cands)
        extra = {k: v for k, v in r.items() if k not in LEDGER_COLUMNS}
        rows.append({"part": r.get("part"), "record_id": str(r["record_id"]), "candidates": cands,
                     "options": None if r.get("options") is None else [str(o) for o in r["options"]],
                     "answer_sha256": hashlib.sha256(text.encode()).hexdigest(), "answer_text": text,
                     "parser_answer": pa, "sent": pa is None, "judge_raw": None, "judge_verdict": None,
                     "judge_parsed": None, "judged_answer": pa, "judge_profile": None,
                     "prompt_name": P["_name"], "prompt_sha256": P["_sha256"], "cached": None, **extra})
    sent = [row for row in rows if row["sent"]]
    if sent:
        convs = [judge_messages(row["candidates"], row["options"], row["answer_text"], P, max_answer_chars)
                 for row in sent]
        outs = engine.chat(convs, temperature=0.0, max_tokens=max_tokens,
                           seed=[call_seed(seed, _key(row["record_id"])) for row in sent], progress=progress)
        profile = getattr(engine, "identity", {}).get("profile") or getattr(getattr(engine, "profile", None),
                                                                            "name", None)
        for row, out in zip(sent, outs):
            verdict, ok = parse_verdict(out.text, row["candidates"])
            row.update(judge_raw=out.text, judge_verdict=verdict, judge_parsed=ok,
                       judged_answer=None if verdict == NONE else verdict, judge_profile=profile,
                       cached=bool(out.cached))
    df = pd.DataFrame(rows)
    if df.empty:
        df = pd.DataFrame(columns=LEDGER_COLUMNS)
    return df


def ledger_counts(ledger: pd.DataFrame) -> dict[str, int]:
    """Records, read by the extractor, sent to the judge, mapped to an option, NONE, unparsed replies."""
    s = ledger[ledger["sent"].astype(bool)] if len(ledger) else ledger
    return {"records": int(len(ledger)), "read_by_parser": int(len(ledger) - len(s)), "sent": int(len(s)),
            "mapped": int((s["judge_verdict"] != NONE).sum()) if len(s) else 0,
            "none": int(((s["judge_verdict"] == NONE) & s["judge_parsed"].astype(bool)).sum()) if len(s) else 0,
            "judge_unparsed": int((~s["judge_parsed"].astype(bool)).sum()) if len(s) else 0}


def read_ledger(run_dir: str | Path) -> pd.DataFrame | None:
    p = Path(run_dir) / "tables" / f"{LEDGER}.parquet"
    return pd.read_parquet(p) if p.is_file() else None


def judged_answers(ledger: pd.DataFrame | None) -> dict[str, str]:
    """record_id -> the answer after the pass, for the records the pass read or mapped."""
    if ledger is None or not len(ledger):
        return {}
    got = ledger[ledger["judged_answer"].notna()]
    return dict(zip(got["record_id"], got["judged_answer"]))


def judge_engine(profile: Any, backend: str, store: Path, engine: Any) -> Any:
    """The judge role's engine: ``profile`` is a profile name or a ``ModelSpec``."""
    if engine is not None:
        return engine
    return serving.build_engine(serving.spec_of(profile, backend=backend), store=store, role="judge")


def write_ledger(run_dir: Path, ledger: pd.DataFrame, info: dict[str, Any], engine: Any) -> None:
    run = RunDir(run_dir)
    run.write_table(LEDGER, ledger)
    write_json(run_dir / "judge.json", info)
    prov = engine.provenance() if hasattr(engine, "provenance") else {"profile": info.get("judge_profile")}
    run.update_provenance(judge={"engine": prov, "prompt": {"name": info["prompt_name"],
                                                            "sha256": info["prompt_sha256"]}})


def judge_info(ledger: pd.DataFrame, P: dict, engine: Any, part: str, rates: list[dict[str, Any]]) -> dict[str, Any]:
    ident = getattr(engine, "identity", None) or {}
    return {"part": part, "judge_profile": ident.get("profile"), "judge_weights_sha256": ident.get("weights_sha256"),
            "judge_dtype": ident.get("dtype"), "prompt_name": P["_name"], "prompt_sha256": P["_sha256"],
            "temperature": 0.0, "counts": ledger_counts(ledger),
            "cached": int(ledger["cached"].fillna(False).astype(bool).sum()) if len(ledger) else 0,
            "parse_rates": rates}


def dumps(info: Mapping[str, Any]) -> str:
    return json.dumps(info, indent=2, default=str)
