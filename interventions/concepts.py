"""Concept directions (confident / despondent / agreeable, ...) read on debate contexts by domain,
debate vs reflection, beside a shuffled-label null (peer-influence paper §C.1, Figures 6-7).

Directions. A lexicon (``interventions/data/concepts_v1.yaml`` or a user file of the same shape)
gives per concept contrastive statement pairs (positive pole, negative pole, same situation).
Each statement is shown alone inside the lexicon's ``frame`` (a user message). Per concept, site
and layer the activations X of all its statements are standardised with their label-free mean
and SD (mu, sd), and the direction is the difference of class means of the standardised
activations, scaled to unit norm:

    w = (mean z[y=1] - mean z[y=0]) / ||...||,   z = (x - mu) / sd,   score(x) = ((x - mu) / sd) . w

Difference of means ("mass-mean" direction) by default rather than a logistic probe: with a
few dozen prompts and hundreds to thousands of hidden units the logistic weights are set
mostly by the penalty and fit the prompts' idiosyncrasies, the mean difference is closed
form, has no hyperparameter and flips sign exactly when the labels flip (so its shuffled-label
null is symmetric about 0). ``method: logistic`` (unit-norm coefficients of the probes.py
pipeline) is available. The direction's quality is its held-out AUROC on the contrastive
statements (folds grouped by pair: a pair never sits on both sides) beside the same AUROC
refit on ``n_perm`` shuffled labels (90th percentile), as for every probe in chorus.

Sites. Two token sites per context, read with ``probes.span_means``:

* ``reading``: the mean residual over the tokens being read. Debate: the peer messages, i.e.
  the tokens of every peer's response text in the debate prompt (without the "Agent k's
  response" name lines and quotes). Reflection (the matched control reads no peer): the tokens
  of the receiver's own previous response, the assistant turn that the reflection instruction
  asks it to review, the one earlier response a reflection context reads. For the lexicon:
  the statement's tokens.
* ``decision``: the last prompt token, the readout position of the forced-choice readout
  (the "Answer:" prefill at f = 0; ``probes.activations``). For the lexicon: the last token of
  the rendered prompt (the assistant header).

Directions are fitted per site on the lexicon's activations at the same kind of position.

Contexts are the round-1 prompts of each receiver built from round 0 of a debate run (or of
turns generated here): per (question, agent) the debate prompt quoting every other agent and
the matched reflection prompt, both with the readout prefill. Both are skipped (and counted)
when either reading span is empty.

Scores and null. Per concept, layer, site, domain ("all" pools them) and condition: the mean
score, its SE (clustered by question family) and n. Two contrasts, each with the null of
directions fitted on shuffled contrastive labels (the same ``n_perm`` permutations, projected
the same way, on the same contexts):

* ``shift`` = mean over matched (question, agent) pairs of score(debate) - score(reflection),
  in one domain; null: 90th percentile of |shift| under shuffled directions (``shift_null_q90``);
* ``spread`` = max - min over domains of the condition's mean score (needs >= 2 domains);
  null: 90th percentile of the shuffled directions' spread (``spread_null_q90``).

p-values are (1 + #null >= observed) / (1 + n_perm) on |shift| and on spread. Shuffled-label
directions can still separate debate from reflection or one domain from another (the contexts
differ in text, not only in affect), so an observed value means something only above its null.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from chorus.core.config import ConfigError, load_yaml, resolve_config
from chorus.core.seeding import rng as make_rng
from chorus.interventions import plots as ip
from chorus.interventions.experiment import source_turns, start_run
from chorus.interventions.knockout import layer_map
from chorus.interventions.mechanic import Mechanic
from chorus.interventions.probes import ProbeError, _folds, label_null, null_summary, span_means
from chorus.interventions.spans import SpanError, message_token_span
from chorus.simulate.debate.prompts import readout_prefill, turn_messages

DATA_DIR = Path(__file__).resolve().parent / "data"
SITES = ("reading", "decision")
MIN_PAIRS = 4


# -- lexicon -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lexicon:
    name: str
    frame: str
    concepts: dict[str, list[tuple[str, str]]]  # concept -> (positive, negative) statement pairs
    sha256: str
    path: str


def validate_lexicon(d: Any, source: str = "lexicon") -> Lexicon:
    """A lexicon mapping checked field by field; every error names the concept (or the field)."""
    if not isinstance(d, dict):
        raise ConfigError(f"{source}: top level must be a mapping, got {type(d).__name__}")
    frame = d.get("frame", "{text}")
    if not isinstance(frame, str) or frame.count("{text}") != 1:
        raise ConfigError(f"{source}: frame must be a string with exactly one {{text}} placeholder, got {frame!r}")
    cs = d.get("concepts")
    if not isinstance(cs, dict) or not cs:
        raise ConfigError(f"{source}: 'concepts' must be a non-empty mapping of concept name -> {{pairs: ...}}")
    out: dict[str, list[tuple[str, str]]] = {}
    for name, spec in cs.items():
        where = f"{source}: concept {name!r}"
        if not isinstance(spec, dict) or "pairs" not in spec:
            raise ConfigError(f"{where}: needs a 'pairs' list of [positive, negative] statements")
        unknown = set(spec) - {"pairs", "description"}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)} (allowed: pairs, description)")
        pairs = spec["pairs"]
        if not isinstance(pairs, list) or len(pairs) < MIN_PAIRS:
            n = len(pairs) if isinstance(pairs, list) else type(pairs).__name__
            raise ConfigError(f"{where}: needs at least {MIN_PAIRS} pairs, got {n}")
        seen: set[str] = set()
        clean = []
        for k, p in enumerate(pairs):
            if (not isinstance(p, (list, tuple)) or len(p) != 2
                    or not all(isinstance(s, str) and s.strip() for s in p)):
                raise ConfigError(f"{where}: pair {k} must be two non-empty strings [positive, negative], got {p!r}")
            a, b = p[0].strip(), p[1].strip()
            if a == b:
                raise ConfigError(f"{where}: pair {k} has the same statement on both sides: {a!r}")
            for s in (a, b):
                if s in seen:
                    raise ConfigError(f"{where}: statement repeated: {s!r}")
                seen.add(s)
            clean.append((a, b))
        out[str(name)] = clean
    raw = json.dumps({"frame": frame, "concepts": out}, sort_keys=True).encode()
    return Lexicon(name=str(d.get("name", source)), frame=frame, concepts=out,
                   sha256=hashlib.sha256(raw).hexdigest(), path=source)


def load_lexicon(name: str | Path) -> Lexicon:
    """A lexicon by name (``interventions/data/NAME.yaml``) or path."""
    p = resolve_config(name, DATA_DIR, missing=f"concepts.lexicon = {str(name)!r}: not found")
    return validate_lexicon(load_yaml(p), str(p))


def select_concepts(lex: Lexicon, names: Sequence[str] | None) -> list[str]:
    if names is None:
        return list(lex.concepts)
    bad = [c for c in names if c not in lex.concepts]
    if bad:
        raise ConfigError(f"concepts.concepts: {bad} not in lexicon {lex.name!r} (has {', '.join(lex.concepts)})")
    return list(dict.fromkeys(names))


# -- direction math (pure) ---------------------------------------------------------------------------
def standardizer(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Label-free mean and SD per unit (an SD of 0 becomes 1: a constant unit adds nothing)."""
    X = np.asarray(X, dtype=float)
    sd = X.std(axis=0)
    return X.mean(axis=0), np.where(sd > 0, sd, 1.0)


def _binary(y: Sequence) -> np.ndarray:
    y = np.asarray(y)
    if set(np.unique(y).tolist()) - {0, 1} or len(np.unique(y)) != 2:
        raise ProbeError(f"concept labels must be 0/1 with both classes present, got {np.unique(y).tolist()}")
    return y.astype(int)


def mean_diff(Z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Unit-norm difference of class means of (already standardised) rows Z."""
    d = Z[y == 1].mean(axis=0) - Z[y == 0].mean(axis=0)
    n = np.linalg.norm(d)
    if not n > 0:
        raise ProbeError("the two classes have identical mean activations: no direction")
    return d / n


def _logistic(Z: np.ndarray, y: np.ndarray, C: float) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression

    w = LogisticRegression(C=C, max_iter=2000).fit(Z, y).coef_[0]
    n = np.linalg.norm(w)
    if not n > 0:
        raise ProbeError("the logistic probe has zero weights: no direction")
    return w / n


def fit_direction(X: np.ndarray, y: Sequence, *, method: str = "mean_diff",
                  C: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mu, sd, w): standardiser and unit direction; ``score = ((x - mu) / sd) @ w``."""
    yb = _binary(y)
    mu, sd = standardizer(X)
    Z = (np.asarray(X, dtype=float) - mu) / sd
    return mu, sd, (mean_diff(Z, yb) if method == "mean_diff" else _logistic(Z, yb, C))


def project(X: np.ndarray, mu: np.ndarray, sd: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Projection of standardised rows onto unit direction(s): w (H,) -> (N,), w (P, H) -> (N, P)."""
    return ((np.asarray(X, dtype=float) - mu) / sd) @ np.asarray(w).T


def null_directions(X: np.ndarray, y: Sequence, *, n_perm: int, seed: int = 0, method: str = "mean_diff",
                    C: float = 1.0) -> np.ndarray:
    """(n_perm, H) unit directions fitted the same way on shuffled labels (the standardiser is
    label-free, so ``fit_direction``'s mu and sd apply to each)."""
    yb = _binary(y)
    mu, sd = standardizer(X)
    Z = (np.asarray(X, dtype=float) - mu) / sd
    return label_null(yb, lambda yp: mean_diff(Z, yp) if method == "mean_diff" else _logistic(Z, yp, C),
                      n_perm=n_perm, seed=seed, stream=43)   # no folds: every permutation counts


def heldout_auroc(X: np.ndarray, y: Sequence, groups: Sequence, *, n_splits: int = 5, seed: int = 0,
                  method: str = "mean_diff", C: float = 1.0, folds: list | None = None) -> float:
    """AUROC of out-of-fold scores: direction and standardiser fitted on the training folds only."""
    from sklearn.metrics import roc_auc_score

    yb = _binary(y)
    X = np.asarray(X, dtype=float)
    folds = folds if folds is not None else _folds(yb, np.asarray(groups), n_splits, seed)
    s = np.full(len(yb), np.nan)
    for tr, te in folds:
        if len(np.unique(yb[tr])) < 2:
            raise ProbeError("a training fold holds one class only; use more pairs or fewer folds")
        mu, sd, w = fit_direction(X[tr], yb[tr], method=method, C=C)
        s[te] = project(X[te], mu, sd, w)
    return float(roc_auc_score(yb, s))


def probe_table(X: np.ndarray, y: Sequence, groups: Sequence, *, n_perm: int, n_splits: int, seed: int,
                method: str, C: float) -> dict[str, Any]:
    """Held-out AUROC of the direction beside its shuffled-label null (same folds)."""
    yb = _binary(y)
    folds = _folds(yb, np.asarray(groups), n_splits, seed)
    a = heldout_auroc(X, yb, groups, method=method, C=C, folds=folds)
    null = label_null(yb, lambda yp: heldout_auroc(X, yp, groups, method=method, C=C, folds=folds),
                      n_perm=n_perm, seed=seed, folds=folds)
    return null_summary(a, null, len(yb))


def cluster_se(x: np.ndarray, groups: Sequence) -> float:
    """Cluster-robust SE of a mean (CR1: sqrt(G/(G-1) * sum_g (sum_{i in g} (x_i - mean))^2) / n);
    with one row per cluster it is the plain SD / sqrt(n)."""
    x = np.asarray(x, dtype=float)
    g = pd.Series(x - x.mean()).groupby(np.asarray(groups)).sum().to_numpy()
    G = len(g)
    if len(x) < 2 or G < 2:
        return float("nan")
    return float(np.sqrt(G / (G - 1) * (g ** 2).sum()) / len(x))


def _p(null: np.ndarray, obs: float) -> float:
    return float((1 + (null >= obs).sum()) / (1 + len(null)))


def contrast_rows(scores: np.ndarray, null: np.ndarray, meta: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows (domain, condition) of one concept/layer/site. ``scores`` (2M,) and ``null`` (2M, P)
    alternate debate, reflection for the M matched pairs described by ``meta`` (M rows with
    ``domain`` and ``family``)."""
    deb, ref = scores[0::2], scores[1::2]
    ndeb, nref = null[0::2], null[1::2]
    dom = meta["domain"].to_numpy()
    fam = meta["family"].to_numpy()
    domains = sorted(set(dom))
    masks = {d: dom == d for d in domains}
    masks["all"] = np.ones(len(dom), bool)
    # spread: range over the domains of each condition's mean score, observed and under the null
    spread: dict[str, tuple[float, float, float]] = {}
    for cond, s, ns in (("debate", deb, ndeb), ("reflection", ref, nref)):
        if len(domains) >= 2:
            m = np.array([s[masks[d]].mean() for d in domains])
            nm = np.stack([ns[masks[d]].mean(axis=0) for d in domains])
            nsp = nm.max(axis=0) - nm.min(axis=0)
            obs = float(m.max() - m.min())
            spread[cond] = (obs, float(np.quantile(nsp, 0.9)), _p(nsp, obs))
        else:
            spread[cond] = (np.nan, np.nan, np.nan)
    rows = []
    for d, mk in masks.items():
        diff = deb[mk] - ref[mk]
        nshift = np.abs((ndeb[mk] - nref[mk]).mean(axis=0))
        shift = float(diff.mean())
        base = {"domain": d, "shift": shift, "shift_se": cluster_se(diff, fam[mk]),
                "shift_null_q90": float(np.quantile(nshift, 0.9)), "shift_p": _p(nshift, abs(shift)),
                "shift_above_null_q90": bool(abs(shift) > np.quantile(nshift, 0.9)), "n_perm": int(null.shape[1])}
        for cond, s in (("debate", deb), ("reflection", ref)):
            sp = spread[cond]
            rows.append({**base, "condition": cond, "mean": float(s[mk].mean()), "se": cluster_se(s[mk], fam[mk]),
                         "n": int(mk.sum()), "n_families": int(len(set(fam[mk]))),
                         "spread": sp[0], "spread_null_q90": sp[1], "spread_p": sp[2]})
    return rows


# -- prompts and contexts ----------------------------------------------------------------------------
def _token_positions(engine: Any, conv: list[dict], idx: int, parts: Sequence[str]) -> list[int]:
    """Token positions of the given substrings of message ``idx`` (searched in order)."""
    p = engine.render(conv)
    content = conv[idx]["content"]
    cursor, pos = 0, []
    for part in parts:
        k = content.find(part, cursor)
        if k < 0:
            raise SpanError(f"text not found in message {idx}: {part[:60]!r}")
        cursor = k + len(part)
        sp = message_token_span(engine.tokenizer, p.text, p.ids, conv, (idx, k, k + len(part)))
        pos.extend(range(sp.start, sp.end))
    return sorted(set(pos))


def lexicon_prompts(engine: Any, lex: Lexicon, concepts: Sequence[str]) -> tuple[pd.DataFrame, list, list]:
    """(meta, conversations, spans): every statement in its frame; spans = [reading, decision]."""
    meta, convs, spans = [], [], []
    for c in concepts:
        for k, pair in enumerate(lex.concepts[c]):
            for label, text in zip((1, 0), pair):
                conv = [{"role": "user", "content": lex.frame.format(text=text)}]
                meta.append({"concept": c, "pair": k, "label": label, "text": text})
                convs.append(conv)
                spans.append([_token_positions(engine, conv, 0, [text]), [-1]])
    return pd.DataFrame(meta), convs, spans


def debate_contexts(engine: Any, items: dict, turns: pd.DataFrame, P: dict, *, max_questions: int | None = None,
                    seed: int = 0) -> tuple[pd.DataFrame, list, list, list[dict]]:
    """(pairs meta, conversations, spans, skipped): per (question, agent) with round-0 turns the
    debate and reflection round-1 prompts with the readout prefill, alternating debate,
    reflection; spans = [reading positions, decision (-1)]."""
    r0 = turns[turns["round"] == 0].drop_duplicates(["qid", "agent"]).sort_values(["qid", "agent"])
    qids = [q for q in sorted(r0["qid"].unique()) if q in items]
    if max_questions is not None and len(qids) > max_questions:
        qids = [qids[k] for k in sorted(make_rng(seed, 47).choice(len(qids), max_questions, replace=False))]
    meta, convs, spans, skipped = [], [], [], []
    for qid in qids:
        g = r0[r0["qid"] == qid]
        it = items[qid]
        prev = [r if isinstance(r, str) else "" for r in g["response"]]
        agents = list(g["agent"])
        if agents != list(range(len(agents))):
            skipped.append({"qid": qid, "agent": -1, "reason": f"round-0 agents {agents} are not 0..{len(agents) - 1}"})
            continue
        answers = list(g["answer"]) if "answer" in g else [None] * len(agents)
        for a in agents:
            peers = [prev[j].strip() for j in agents if j != a and prev[j].strip()]
            if not prev[a].strip() or not peers:
                skipped.append({"qid": qid, "agent": a, "reason": "empty own response" if not prev[a].strip()
                                else "no non-empty peer response"})
                continue
            deb = readout_prefill(turn_messages(it, a, 1, "debate", prev, P), "", P)
            ref = readout_prefill(turn_messages(it, a, 1, "reflection", prev, P), "", P)
            idx = len(deb) - 2  # the user message after the own turn (the last one is the readout prefill)
            own = len(ref) - 3  # the receiver's own previous response (an assistant turn)
            convs += [deb, ref]
            spans += [[_token_positions(engine, deb, idx, peers), [-1]],
                      [_token_positions(engine, ref, own, [prev[a].strip()]), [-1]]]
            ans = answers[a]
            meta.append({"qid": qid, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                         "agent": int(a),
                         "own_answer": ans if isinstance(ans, str) else None, "n_peers": len(peers),
                         "reading_tokens_debate": len(spans[-2][0]), "reading_tokens_reflection": len(spans[-1][0])})
    return pd.DataFrame(meta), convs, spans, skipped


def cached_span_means(path: Path, engine: Any, convs: list, spans: list, layers: list[int]) -> np.ndarray:
    """``probes.span_means`` cached in ``path`` (npz) under a hash of contexts, spans, layers, model."""
    h = hashlib.sha256(json.dumps({"convs": convs, "spans": spans, "layers": layers, "model": engine.identity},
                                  sort_keys=True, default=str).encode()).hexdigest()
    if path.is_file():
        z = np.load(path, allow_pickle=False)
        if str(z["key"]) == h:
            return z["acts"]
    acts = span_means(engine, convs, spans, layers)
    np.savez_compressed(path, acts=acts, key=np.array(h))
    return acts


# -- analysis ----------------------------------------------------------------------------------------
def analyse(lex_meta: pd.DataFrame, lex_acts: np.ndarray, pairs: pd.DataFrame, ctx_acts: np.ndarray, *,
            concepts: Sequence[str], layers: Sequence[int], sites: Sequence[str], n_perm: int, n_splits: int,
            seed: int, method: str = "mean_diff", C: float = 1.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(concepts table, concept_probe table). ``lex_acts`` (N_lex, 2, L, H) and ``ctx_acts``
    (2M, 2, L, H) hold sites (reading, decision) on axis 1 and ``layers`` on axis 2."""
    rows, prow = [], []
    for c in concepts:
        sel = (lex_meta["concept"] == c).to_numpy()
        y = lex_meta.loc[sel, "label"].to_numpy()
        grp = lex_meta.loc[sel, "pair"].to_numpy()
        for site in sites:
            si = SITES.index(site)
            for k, L in enumerate(layers):
                X = lex_acts[sel, si, k]
                mu, sd, w = fit_direction(X, y, method=method, C=C)
                W0 = null_directions(X, y, n_perm=n_perm, seed=seed, method=method, C=C)
                key = {"concept": c, "layer": int(L), "site": site}
                Z = (X - mu) / sd
                prow.append({**key, "method": method, "separation": float(np.linalg.norm(
                    Z[y == 1].mean(0) - Z[y == 0].mean(0))), **probe_table(X, y, grp, n_perm=n_perm,
                                                                           n_splits=n_splits, seed=seed,
                                                                           method=method, C=C)})
                if len(pairs):
                    Xc = ctx_acts[:, si, k]
                    for r in contrast_rows(project(Xc, mu, sd, w), project(Xc, mu, sd, W0), pairs):
                        rows.append({**key, **r})
    cols = ["concept", "layer", "site", "domain", "condition", "mean", "se", "n", "n_families", "shift", "shift_se",
            "shift_null_q90", "shift_p", "shift_above_null_q90", "spread", "spread_null_q90", "spread_p", "n_perm"]
    return pd.DataFrame(rows, columns=cols), pd.DataFrame(prow)


def summarize(t: pd.DataFrame, probe: pd.DataFrame) -> dict[str, Any]:
    """Summary entries from the two tables: per concept and site the best probe layer (held-out
    AUROC) with its null, and the debate - reflection shift by domain at that layer beside the
    null's 90th percentile; counts of cells above their null."""
    out: dict[str, Any] = {}
    if not len(probe):
        return out
    best: dict[str, Any] = {}
    shift: dict[str, Any] = {}
    shift_null: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    for (c, site), g in probe.groupby(["concept", "site"], sort=False):
        b = g.loc[g["auroc"].idxmax()]
        key = f"{c}/{site}"
        best[key] = {"layer": int(b["layer"]), "auroc": float(b["auroc"]), "null_p90": float(b["null_p90"]),
                     "p_value": float(b["p_value"]), "above_null_p90": bool(b["above_null_p90"])}
        if len(t):
            cell = t[(t["concept"] == c) & (t["site"] == site) & (t["layer"] == int(b["layer"]))
                     & (t["condition"] == "debate")]
            shift[key] = {str(r["domain"]): float(r["shift"]) for _, r in cell.iterrows()}
            shift_null[key] = {str(r["domain"]): float(r["shift_null_q90"]) for _, r in cell.iterrows()}
            spread[key] = {f"{cond}": float(x["spread"].iloc[0]) for cond, x in
                           t[(t["concept"] == c) & (t["site"] == site) & (t["layer"] == int(b["layer"]))
                             & (t["domain"] == "all")].groupby("condition")}
            spread[key].update({f"{cond}_null_q90": float(x["spread_null_q90"].iloc[0]) for cond, x in
                                t[(t["concept"] == c) & (t["site"] == site) & (t["layer"] == int(b["layer"]))
                                  & (t["domain"] == "all")].groupby("condition")})
    out["probe_best_layer"] = best
    out["n_probes_above_null_p90"] = int(probe["above_null_p90"].sum())
    out["n_probes"] = int(len(probe))
    if len(t):
        one = t[t["condition"] == "debate"]
        out["shift_at_best_layer"] = shift
        out["shift_null_q90_at_best_layer"] = shift_null
        out["spread_at_best_layer"] = spread
        out["n_shift_cells_above_null_q90"] = int(one["shift_above_null_q90"].sum())
        out["n_shift_cells"] = int(len(one))
    return out


# -- the verb ----------------------------------------------------------------------------------------
def run_concepts(cfg: Any, out: Path | None = None, *, progress: Any = None, make_plots: bool = True,
                 engine: Any = None, report: Callable[..., dict[str, Any]] | None = None):
    """``chorus influence concepts``: lexicon directions, read on debate vs reflection contexts.

    ``report(run_dir, "concepts", make_plots=...)`` renders summary.json and the plots: the verb
    dispatcher (``chorus.interventions.internals.experiment.run_internals``) passes its own ``report``,
    which reads this module's ``summarize``; this module does not import the dispatcher back.
    Without one the run is finished with no summary.json and (run, {}) is returned."""
    spec = cfg.concepts
    lex = load_lexicon(spec.lexicon)  # bad lexicons fail before any model is loaded
    concepts = select_concepts(lex, spec.concepts)
    run, eng, P = start_run(cfg, "concepts", out, engine, backend="hf")  # internals need the weights
    lm = layer_map(eng)
    layers = list(range(lm.n_layers)) if spec.layers == "all" else [int(x) for x in spec.layers]
    bad = [x for x in layers if not 0 <= x < lm.n_layers]
    if bad:
        raise ConfigError(f"concepts.layers: {bad} out of range (the model has {lm.n_layers} layers, "
                          f"valid 0..{lm.n_layers - 1})")
    turns, items = source_turns(cfg, run, eng, 0, progress)
    lex_meta, lconvs, lspans = lexicon_prompts(eng, lex, concepts)
    pairs, cconvs, cspans, skipped = debate_contexts(eng, items, turns, P, max_questions=spec.max_questions,
                                                     seed=cfg.seed)
    if progress:
        progress(3, 0)
    lex_acts = cached_span_means(run.path / "concept_lexicon_activations.npz", eng, lconvs, lspans, layers)
    if progress:
        progress(3, 1)
    ctx_acts = (cached_span_means(run.path / "concept_context_activations.npz", eng, cconvs, cspans, layers)
                if cconvs else np.zeros((0, 2, len(layers), lex_acts.shape[-1])))
    if progress:
        progress(3, 1)
    t, probe = analyse(lex_meta, lex_acts, pairs, ctx_acts, concepts=concepts, layers=layers, sites=spec.sites,
                       n_perm=spec.n_perm, n_splits=spec.n_splits, seed=cfg.seed, method=spec.method, C=spec.C)
    run.write_table("concepts", t)
    run.write_table("concept_probe", probe)
    run.write_table("concept_contexts", pairs)
    run.write_table("concept_lexicon", lex_meta)
    info = {"lexicon": lex.name, "lexicon_path": lex.path, "lexicon_sha256": lex.sha256, "concepts": concepts,
            "method": spec.method, "sites": list(spec.sites), "layers": layers, "n_layers": lm.n_layers,
            "n_perm": spec.n_perm, "n_contexts": int(2 * len(pairs)), "n_pairs": int(len(pairs)),
            "n_by_domain": {str(k): int(v) for k, v in pairs["domain"].value_counts().sort_index().items()}
            if len(pairs) else {},
            "n_skipped": len(skipped), "skipped": skipped,
            "reading_site": "debate: tokens of every peer's response text; reflection: tokens of the receiver's "
                            "own previous response (the reflection analogue); lexicon: the statement's tokens",
            "decision_site": "last prompt token (the 'Answer:' readout prefill; lexicon: the assistant header)"}
    (run.path / "concepts_info.json").write_text(json.dumps(info, indent=2, default=str))
    if progress:
        progress(3, 1)
    summary = report(run.path, "concepts", make_plots=make_plots) if report is not None else {}
    run.finish()
    return run, summary


def _summarize_concepts(cfg, run, info, t, summary, make_plots) -> None:
    pt = run.path / "tables" / "concept_probe.parquet"
    probe = pd.read_parquet(pt) if pt.is_file() else pd.DataFrame()
    summary.update(summarize(t, probe))
    if make_plots and len(probe):
        for site in info.get("sites", []):
            ip.concept_site(t, probe, run.plot_path(f"concepts_{site}"), site=site, model=cfg.model.profile)


MECHANIC = Mechanic(None, _summarize_concepts, own_run=run_concepts)
