"""Counterfactual debates: what a stored debate would have become had one agent not attended to
one peer at one round.

From a debate run (its turns, questions, config and call store): at round ``round`` agent
``receiver`` writes its reply with attention from every later position and every generated token
to peer ``peer``'s quoted response cut in ``layers`` (``knockout_generate.greedy``, sampled with the
debate's own temperature, top-p and request seed through the hf backend's seeded processors); every
other reply of that round is the stored one (its prompt is unchanged), and the remaining rounds
unfold normally (``chorus.simulate.debate.protocol.run_protocol`` from that round on, the same seeds).

Three arms per question, all with the debate's seeds:

* ``factual``: the stored debate;
* ``replay``: the same procedure with nothing cut. With the engine that generated the debate (hf,
  same model and dtype) it reproduces the stored debate exactly: its reply at round ``round`` is the
  engine's own seeded reply, and every later call is found in the run's call store (free);
  ``replay_equals_factual`` counts the questions where it does. That is exact in float32; in bf16 on
  a GPU the replayed reply (one sequence, KV cache) and the stored one (a padded batch) can round
  apart, and a debate generated on vLLM replays on transformers' sampler, so the comparison that
  always holds is cut against replay;
* ``cut``: the knockout.

Per arm: the questions' final majority accuracy, unanimity, wrong unanimity, the receiver's final
answer and whether it took the peer's round ``round - 1`` answer at round ``round`` and at the end;
paired deltas (cut - replay, cut - factual, replay - factual) with family-clustered bootstrap
intervals and, per question, whether the final majority changed. Readouts of the cut reply's
tokens go through the call store, so a killed run resumes with nothing lost.

Output: ``RUN/counterfactual-a{i}-p{j}-r{r}[-L{a}-{b}]/`` inside the debate run (a run directory:
config, provenance, ``tables/{turns,questions}.parquet``, ``summary.json``, ``plots/``);
``chorus debate recompute`` reads its summary into the debate's report.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from chorus.core.analyses import reader, reader_provenance
from chorus.core.config import InputError, Strict, load_named
from chorus.core.paper import fmt
from chorus.core.runs import RunDir
from chorus.core.stats import cluster_bootstrap
from chorus.interventions import knockout as ko
from chorus.interventions.knockout_generate import greedy
from chorus.interventions.plots import counterfactual as plot_counterfactual
from chorus.interventions.spans import find_range
from chorus.serving.roles import build_engines, plan_roles
from chorus.serving.types import Completion
from chorus.simulate.debate.bda import DebateTraceError, read_run
from chorus.simulate.debate.config import DebateConfig, load
from chorus.simulate.debate.metrics import question_table
from chorus.simulate.debate.prompts import load_prompts, peer_block, turn_messages
from chorus.simulate.debate.protocol import TURN_COLUMNS, run_protocol, turn_seed, turns_by_question

ARMS = ("factual", "replay", "cut")


class CounterfactualError(InputError):
    """A counterfactual that cannot be run on this debate as asked (one line naming what)."""


class CounterfactualConfig(Strict):
    run: Optional[str] = Field(None, exclude=True,
                               description="the debate run directory (chorus influence counterfactual RUN_DIR); "
                                           "not part of the run's config record: its provenance names the "
                                           "source run")
    receiver: int = Field(0, ge=0, description="the agent whose attention is cut (0-based)")
    peer: int = Field(1, ge=0, description="the peer whose response it does not attend to (0-based)")
    round: int = Field(1, ge=1, description="the round whose reply is replayed with the cut (1..rounds)")
    layers: Union[Literal["all"], list[int]] = Field("all", description="decoder layers cut: all, or a list "
                                                                        "(a band: --layers 8-15)")
    queries: Literal["after", "decision"] = Field(
        "after", description="after: every position after the peer's block and every generated token; decision: "
                             "the position where the reply starts and every generated token")
    route: Literal["nnsight", "interface"] = "nnsight"
    max_questions: Optional[int] = Field(None, ge=1, description="the first N questions of the debate (default all)")
    n_boot: int = Field(2000, ge=0)
    ci: float = Field(0.95, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _distinct(self):
        if self.receiver == self.peer:
            raise ValueError(f"receiver and peer are the same agent ({self.receiver}): an agent does not read "
                             f"itself as a peer")
        return self

    def tag(self) -> str:
        band = "" if self.layers == "all" else (f"-L{min(self.layers)}-{max(self.layers)}"
                                                if sorted(self.layers) == list(range(min(self.layers), max(self.layers) + 1))
                                                else "-L" + "_".join(map(str, sorted(self.layers))))
        q = "" if self.queries == "after" else "-decision"
        return f"counterfactual-a{self.receiver}-p{self.peer}-r{self.round}{band}{q}"


def parse_layers(text: str) -> Union[str, list[int]]:
    """``all``, ``8-15`` (a band) or ``3,4,7`` -> the config's value; one line naming the text otherwise."""
    t = text.strip()
    if t == "all":
        return "all"
    try:
        if "-" in t and "," not in t:
            a, b = (int(x) for x in t.split("-", 1))
            if b < a:
                raise ValueError
            return list(range(a, b + 1))
        return [int(x) for x in t.split(",") if x.strip()]
    except ValueError:
        raise CounterfactualError(f"--layers {text!r}: give all, a band A-B (A <= B) or a list 3,4,7") from None


# -- chorus influence counterfactual RUN_DIR: a registered verb (chorus.core.verbs) -------------------------
CONFIGS_DIR = Path(__file__).resolve().parent / "configs" / "counterfactual"


def load_counterfactual_config(config: str | Path, overrides: dict[str, Any] | None = None) -> CounterfactualConfig:
    """The config of ``chorus influence counterfactual`` (the shipped ``default``, every field at its
    default) with the command's options and ``--set`` over it, validated (errors named 'options', as
    the command always named them)."""
    return load_named(config, CounterfactualConfig, CONFIGS_DIR, overrides, default_source="options")


def _source_dir(cfg: CounterfactualConfig) -> Path:
    if cfg.run is None:
        raise CounterfactualError("no debate run directory: give RUN_DIR (the config's run)")
    return Path(cfg.run)


def plan_counterfactual(cfg: CounterfactualConfig):
    """``chorus influence counterfactual --check``: the debate run read and checked against the config
    (its rounds and agents), then the device plan of its model on transformers; no model loaded."""
    _, _, dcfg, _ = _source(_source_dir(cfg), cfg)
    return _plan(dcfg)


def run_counterfactual_verb(cfg: CounterfactualConfig, *, out: str | Path | None = None, progress: Any = None,
                            make_plots: bool = True):
    """``run_counterfactual`` as the verb runs it (``run(cfg, *, out=, progress=, make_plots=)``, the debate
    run being ``cfg.run``). Returns ``(RunDir, summary)``; the summary's ``run_dir`` is the debate run as
    given (for the terminal's last line; summary.json does not hold it)."""
    src = _source_dir(cfg)
    path, summary = run_counterfactual(src, cfg, out=out, make_plots=make_plots, progress=progress)
    return RunDir(path), {**summary, "run_dir": str(src)}


# -- reading the debate -----------------------------------------------------------------------------
def _source(run_dir: Path, cfg: CounterfactualConfig):
    try:
        turns, items, _ = read_run(run_dir)
    except DebateTraceError as err:
        raise CounterfactualError(str(err)) from None
    if not (run_dir / "config.yaml").is_file():
        raise CounterfactualError(f"{run_dir}: no config.yaml, so the debate's model, seeds and sampling are unknown")
    dcfg = load(run_dir / "config.yaml", DebateConfig)
    deb = turns[turns["condition"] == "debate"]
    if not len(deb):
        raise CounterfactualError(f"{run_dir}: no debate condition in this run (it has "
                                  f"{sorted(set(turns['condition']))}): no agent read a peer")
    R = int(deb["round"].max())
    if cfg.round > R:
        raise CounterfactualError(f"round {cfg.round} is not in this debate (rounds 1..{R})")
    for who, a in (("receiver", cfg.receiver), ("peer", cfg.peer)):
        if a >= dcfg.agents:
            raise CounterfactualError(f"{who} {a} is not an agent of this debate (agents 0..{dcfg.agents - 1})")
    return deb, items, dcfg, R


def _history(deb: pd.DataFrame, rnd: int) -> dict[str, dict[int, list[str]]]:
    """qid -> round -> every agent's response, for the questions the debate played through round ``rnd``."""
    by = turns_by_question(deb, "debate")
    return {q: v for q, v in by.items() if rnd in v and rnd - 1 in v}


# -- the run ----------------------------------------------------------------------------------------
def _line(name: str, c: dict[str, Any]) -> str:
    return (f"{name} ({c['n_questions']} questions; replay = stored debate on "
            f"{c['replay_equals_factual']['questions']} of {c['replay_equals_factual']['of']}): " + "; ".join(
                f"{a} final-majority acc {fmt(m['majority_correct_final'])}, unanimous "
                f"{fmt(m['unanimous_final'])}, wrong unanimity {fmt(m['wrong_unanimous'])}"
                for a, m in c["arms"].items()) + f"; final majorities changed by the cut: "
            f"{c['changed']['final_majority_cut_vs_replay']}")


@reader("influence counterfactual", part="debate", folder="counterfactual-", line=_line)
def brief(s: dict[str, Any]) -> dict[str, Any]:
    """What a debate run's report shows of a counterfactual made in it: the cut, each arm's outcomes,
    what the cut changed, and whether the replay is the stored debate."""
    keep = ("receiver", "peer", "round", "layers", "queries", "route", "n_questions", "changed", "replay_equals_factual")
    return {**{k: s.get(k) for k in keep},
            "arms": {a: {k: v for k, v in m.items() if k != "unanimity_by_round"} for a, m in s["arms"].items()}}


def run_counterfactual(run_dir: str | Path, cfg: CounterfactualConfig | None = None, *, out: str | Path | None = None,
                       engine: Any = None, make_plots: bool = True, progress: Any = None) -> tuple[Path, dict[str, Any]]:
    """``chorus influence counterfactual RUN``: the factual, replayed and cut debates of every question
    -> ``RUN/counterfactual-.../`` (or ``out``); returns (its path, summary)."""
    cfg = cfg or CounterfactualConfig()
    src = Path(run_dir)
    deb, items, dcfg, R = _source(src, cfg)
    hist = _history(deb, cfg.round)
    qids = sorted(hist)[:cfg.max_questions]  # None: all
    if not qids:
        raise CounterfactualError(f"{src}: no question was debated through round {cfg.round}")
    P = load_prompts(dcfg.prompts)
    g = dcfg.generation
    eng = engine or _engine(src, dcfg)
    lm = ko.layer_map(eng)  # the hf backend's layers (one line if it is not hf)
    plan = ko.plan(eng, cfg.layers)
    if not plan["masked"]:
        raise CounterfactualError(f"none of layers {cfg.layers} can be masked ({lm.model_type}: recurrent layers "
                                  f"{lm.unmaskable}); a reply's recurrent route cannot be cut with a KV cache")
    outp = Path(out) if out is not None else src / cfg.tag()
    run = RunDir.create(outp, part="influence-counterfactual", config=cfg, seeds={"root": dcfg.seed},
                        command="influence counterfactual", source_run=str(src.resolve()),
                        prompts={"name": P["_name"], "sha256": P["_sha256"]}, masked_layers=plan["masked"],
                        unmaskable_layers=plan["unmaskable"],
                        **reader_provenance("influence counterfactual", src, "debate", __name__))
    run.record_engines("model", eng)
    sel = {q: items[q] for q in qids}
    stored = {(r.qid, int(r.agent)): r for r in deb[deb["round"] == cfg.round].itertuples()}

    def reply_of(arm: str):
        """``given`` of run_protocol: at the cut round, the receiver's reply by this arm, the others stored."""
        def given(cond, it, agent, rnd, msgs, seed):
            if rnd != cfg.round:
                return None
            if agent != cfg.receiver:
                return _stored_completion(stored[(it.id, agent)])
            return cut_replies[arm][it.id]
        return given

    # the receiver's round-r reply in each arm: cached knockout generations (a kill loses none)
    cut_replies: dict[str, dict[str, Any]] = {}
    reqs, meta = [], []
    for q in qids:
        prev = hist[q][cfg.round - 1]
        msgs = turn_messages(sel[q], cfg.receiver, cfg.round, "debate", prev, P)
        name = P["peer_name"].format(k=cfg.peer + 1)
        s, e = find_range(msgs[-1]["content"], peer_block(name, prev[cfg.peer], P))
        seed = turn_seed(dcfg.seed, q, cfg.receiver, cfg.round, "debate")
        for arm in ("replay", "cut"):
            reqs.append({"messages": msgs, "block": None if arm == "replay" else [len(msgs) - 1, s, e],
                         "layers": plan["masked"] if arm == "cut" else [], "queries": cfg.queries,
                         "route": cfg.route, "temperature": g.temperature, "top_p": g.top_p,
                         "max_tokens": g.max_tokens, "seed": seed})
            meta.append((arm, q))
    if progress:
        progress(len(reqs), 0)
    computed: list[int] = []
    t0 = time.perf_counter()
    res = eng.cached("knockout_generate", reqs,
                     lambda todo: computed.extend(todo) or _generate(eng, reqs, todo, progress))
    gen = {"replies": len(reqs), "computed": len(computed), "wall_s": time.perf_counter() - t0}
    for (arm, q), r in zip(meta, res):
        cut_replies.setdefault(arm, {})[q] = _completion(r)

    before = {q: hist[q][cfg.round - 1] for q in qids}
    arms = {"factual": deb[deb["qid"].isin(qids)].assign(condition="factual")}
    info: dict[str, Any] = {}
    for arm in ("replay", "cut"):
        t, inf = run_protocol(eng, list(sel.values()), agents=dcfg.agents, rounds=R, conditions=["debate"],
                              temperature=g.temperature, top_p=g.top_p, max_tokens=g.max_tokens, seed=dcfg.seed,
                              prompts=P, start=(cfg.round, before), given=reply_of(arm))
        early = deb[deb["qid"].isin(qids) & (deb["round"] < cfg.round)]
        arms[arm] = pd.concat([early, t], ignore_index=True).assign(condition=arm)
        info[arm] = {"new_tokens": inf["new_tokens"], "model_s": inf["model_s"], "wall_s": inf["wall_s"],
                     "batches": inf["batches"], "excluded": inf["excluded"]}
    turns = pd.concat([arms[a][TURN_COLUMNS] for a in ARMS], ignore_index=True)
    run.write_table("turns", turns)
    q = question_arms(turns, cfg, R, dcfg.seed)
    run.write_table("questions", q)
    summary = summarize(turns, q, cfg, seed=dcfg.seed)
    summary.update(source_run=str(src.resolve()), model=dcfg.model.profile, receiver=cfg.receiver, peer=cfg.peer,
                   round=cfg.round, rounds=R, layers=cfg.layers, masked_layers=plan["masked"],
                   unmaskable_layers=plan["unmaskable"], queries=cfg.queries, route=cfg.route,
                   cost={"receiver_replies": gen,
                         **{arm: {k: v for k, v in d.items() if k != "excluded"} for arm, d in info.items()}},
                   excluded={arm: d["excluded"] for arm, d in info.items()})
    run.write_summary(summary)
    if make_plots:
        plot_counterfactual(summary, run.plot_path("counterfactual"))
    run.finish()
    return run.path, summary


def _engine(src: Path, dcfg) -> Any:
    """The debate's model on transformers (knockout edits its attention), on the debate's call store:
    the factual side's calls are found there, and a rerun repeats nothing."""
    spec = dcfg.model.model_copy(update={"backend": "hf"})
    return build_engines({"model": spec}, store=src / "calls.sqlite", plan=_plan(dcfg))["model"]


def _plan(dcfg) -> Any:
    """The device plan of the debate's model on transformers (knockout edits its attention)."""
    spec = dcfg.model.model_copy(update={"backend": "hf"})
    return plan_roles({"model": spec}, phase_of=lambda role: "counterfactual")


def _generate(eng: Any, reqs: list[dict], todo: list[int], progress: Any) -> list[dict]:
    out = []
    for i in todo:
        r = reqs[i]
        block = tuple(r["block"]) if r["block"] is not None else None
        rep = greedy(eng, r["messages"], block, layers=r["layers"] or "all", queries=r["queries"],
                     max_new_tokens=r["max_tokens"], route=r["route"], temperature=r["temperature"],
                     top_p=r["top_p"], seed=r["seed"])
        out.append({"text": rep.text, "completion_tokens": len(rep.ids), "finish_reason": rep.finish_reason,
                    "prompt_tokens": len(eng.render(r["messages"]).ids)})
        if progress:
            progress(len(reqs), 1)
    return out


def _completion(d: dict[str, Any]):
    return Completion(text=d["text"], prompt_tokens=d["prompt_tokens"], completion_tokens=d["completion_tokens"],
                      finish_reason=d["finish_reason"], cached=True)


def _stored_completion(row: Any):
    return Completion(text=row.response, prompt_tokens=int(row.prompt_tokens), completion_tokens=int(row.completion_tokens),
                      finish_reason="length" if bool(row.truncated) else "stop", cached=True)


# -- analysis (pure) -----------------------------------------------------------------------------------
def question_arms(turns: pd.DataFrame, cfg: CounterfactualConfig, R: int, seed: int) -> pd.DataFrame:
    """One row per (arm, question): the debate's per-question indicators (``chorus.simulate.debate.metrics.
    question_table``) plus the receiver's answers and whether it took the peer's pre-round answer."""
    q = question_table(turns, seed=seed)
    q = q.rename(columns={"condition": "arm"})
    ans = turns.set_index(["condition", "qid", "agent", "round"])["answer"]
    peer_prev = {qid: ans.get(("factual", qid, cfg.peer, cfg.round - 1)) for qid in q["qid"].unique()}

    def get(arm, qid, agent, rnd):
        v = ans.get((arm, qid, agent, rnd))
        return v if isinstance(v, str) else None
    q["receiver_at_round"] = [get(a, x, cfg.receiver, cfg.round) for a, x in zip(q["arm"], q["qid"])]
    q["receiver_final"] = [get(a, x, cfg.receiver, R) for a, x in zip(q["arm"], q["qid"])]
    q["peer_answer_before"] = [peer_prev[x] if isinstance(peer_prev[x], str) else None for x in q["qid"]]
    q["receiver_before"] = [get("factual", x, cfg.receiver, cfg.round - 1) for x in q["qid"]]
    pa, rb = q["peer_answer_before"], q["receiver_before"]
    # adoption is read where it can happen: the receiver and the peer disagreed before the round
    disagree = pa.notna() & rb.notna() & (pa != rb)
    q["disagreed_before"] = disagree
    q["adopted_at_round"] = np.where(disagree, (q["receiver_at_round"] == pa).astype(float), np.nan)
    q["adopted_final"] = np.where(disagree, (q["receiver_final"] == pa).astype(float), np.nan)
    q["majority_final"] = q[f"majority_{R}"]
    q["unanimous_final"] = q[f"unanimous_{R}"].astype(float)
    q["majority_correct_final"] = q[f"majority_correct_{R}"] if f"majority_correct_{R}" in q else None
    return q


METRICS = ("majority_correct_final", "unanimous_final", "wrong_unanimous", "adopted_at_round", "adopted_final")


def summarize(turns: pd.DataFrame, q: pd.DataFrame, cfg: CounterfactualConfig, seed: int = 0) -> dict[str, Any]:
    """From the arms' turns and their question table (``question_arms``): per arm, the means of
    ``METRICS`` over the questions where each is defined; the paired deltas (cut - replay, cut -
    factual, replay - factual) with family-clustered bootstrap intervals; how many final majorities
    and receiver answers the cut changed; and whether the replay reproduced the stored debate (every
    turn's text at every round from ``cfg.round`` on)."""
    R = int(q["final_round"].max())
    w = {a: q[q["arm"] == a].set_index("qid").sort_index() for a in ARMS}
    qids = w["factual"].index
    fam = w["factual"]["family"].to_numpy()
    out: dict[str, Any] = {"n_questions": int(len(qids)), "arms": {}, "deltas": []}
    for a in ARMS:
        out["arms"][a] = {m: _nanmean(w[a][m]) for m in METRICS}
        out["arms"][a]["n_scored"] = int(w[a]["majority_correct_final"].notna().sum())
        out["arms"][a]["n_disagreed_before"] = int(w[a]["disagreed_before"].sum())
        out["arms"][a]["unanimity_by_round"] = {int(r): _nanmean(w[a][f"unanimous_{r}"].astype(float))
                                                for r in range(R + 1)}
    for a, b in (("cut", "replay"), ("cut", "factual"), ("replay", "factual")):
        for m in METRICS:
            x, y = w[a][m].astype(float).to_numpy(), w[b][m].astype(float).to_numpy()
            ok = np.isfinite(x) & np.isfinite(y)
            if not ok.any():
                out["deltas"].append({"a": a, "b": b, "metric": m, "delta": float("nan"), "ci_low": float("nan"),
                                      "ci_high": float("nan"), "n": 0})
                continue
            d = (x - y)[ok]
            est, lo, hi = iv = cluster_bootstrap(lambda i: float(d[i].mean()), fam[ok], n_boot=cfg.n_boot, seed=seed,
                                            ci=cfg.ci, resampled="question family")
            out["deltas"].append({"a": a, "b": b, "metric": m, "delta": est, "ci_low": lo, "ci_high": hi, **iv.fields(),
                                  "n": int(ok.sum())})
    same = lambda a, b, col: int(sum(x == y for x, y in zip(w[a][col], w[b][col])))
    out["changed"] = {"final_majority_cut_vs_replay": int(len(qids)) - same("cut", "replay", "majority_final"),
                      "receiver_final_cut_vs_replay": int(len(qids)) - same("cut", "replay", "receiver_final"),
                      "receiver_at_round_cut_vs_replay": int(len(qids)) - same("cut", "replay", "receiver_at_round")}
    # the replay against the stored debate, text by text, from the cut round on
    key = ["qid", "round", "agent"]
    f = turns[(turns["condition"] == "factual") & (turns["round"] >= cfg.round)].set_index(key)["response"]
    r = turns[(turns["condition"] == "replay") & (turns["round"] >= cfg.round)].set_index(key)["response"]
    joined = pd.concat({"f": f, "r": r}, axis=1)
    per_q = joined.groupby(level="qid").apply(lambda g: bool((g["f"] == g["r"]).all()))
    out["replay_equals_factual"] = {"questions": int(per_q.sum()), "of": int(len(per_q)),
                                    "all": bool(per_q.all()) if len(per_q) else False}
    return out


def _nanmean(x) -> float:
    v = np.asarray(pd.Series(x).astype(float), float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else float("nan")
