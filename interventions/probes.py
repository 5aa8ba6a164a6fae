"""Linear probes on layer activations, always reported beside a shuffled-label null.

Activations are the residual stream (decoder-layer outputs) at the readout position (the last
prompt token, right before the option label), collected through nnsight; ``span_means`` reads
the mean over any token positions in the same trace (concept directions: interventions/concepts.py). A probe is a
scikit-learn logistic regression on standardised activations (fitted in the row space of the
training part, which gives the same solution much faster: ``_fold_features``); its score is the held-out AUROC
of out-of-fold decision values (folds grouped by question family when groups are given, so a
question's paired contexts never sit on both sides). The null refits the same pipeline on
shuffled labels ``n_perm`` times; its 90th percentile is reported beside every probe score,
because shuffled-label directions can still separate topics (peer-influence paper §C.1).

The experiment (``chorus influence probe``) reads, per selected pair, the knockout contexts with
and without the peer's message (``probe.concept: message``, ``chorus.interventions.knockout_pairs``) or
the four crossed source-cue contexts (``record``, ``status``: ``patching.cue_context``); its
activations are cached in RUN/activations.npz, so a killed run recomputes nothing it already stored.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from chorus.core.config import ConfigError, InputError
from chorus.core.runs import RunDir
from chorus.core.seeding import rng as make_rng
from chorus.interventions import plots as ip
from chorus.interventions.ablations import pair_meta
from chorus.interventions.knockout import hf_backend, _nnsight_model, envoy_layers, layer_map
from chorus.interventions.knockout_pairs import knockout_contexts
from chorus.interventions.mechanic import Mechanic
from chorus.interventions.patching import cue_context
from chorus.serving.types import validate_conversations


class ProbeError(InputError):
    """Labels or activations unusable for a probe (one class, too few samples per fold, ...)."""


def activations(engine: Any, conversations: Sequence[list[dict]], layers: Sequence[int] | str = "all") -> np.ndarray:
    """(N, len(layers), hidden) residual stream at each conversation's last prompt token."""
    return span_means(engine, conversations, [[[-1]]] * len(conversations), layers)[:, 0]


def span_means(engine: Any, conversations: Sequence[list[dict]], spans: Sequence[Sequence[Sequence[int]]],
               layers: Sequence[int] | str = "all") -> np.ndarray:
    """(N, S, len(layers), hidden): per conversation, the residual stream (decoder-layer outputs)
    averaged over each of its S token-position sets ``spans[i][s]``: indices into the rendered
    prompt ``engine.render(conversation).ids``, negative from its end (-1: the last prompt
    token, the readout position of ``activations``). One trace per batch reads every set."""
    import nnsight
    import torch

    be = hf_backend(engine)
    lm = layer_map(engine)
    layers = list(range(lm.n_layers)) if layers == "all" else [int(x) for x in layers]
    bad = [x for x in layers if not 0 <= x < lm.n_layers]
    if bad:
        raise ProbeError(f"layer(s) {bad} out of range (valid 0..{lm.n_layers - 1})")
    convs = validate_conversations(conversations)
    if len(spans) != len(convs):
        raise ProbeError(f"spans: {len(spans)} position lists for {len(convs)} conversations")
    prompts = [engine.render(c).ids for c in convs]
    n_sets = {len(s) for s in spans}
    if len(n_sets) > 1:
        raise ProbeError(f"spans: every conversation needs the same number of position sets, got {sorted(n_sets)}")
    S = n_sets.pop() if n_sets else 0
    for i, (p, sets) in enumerate(zip(prompts, spans)):
        for s, pos in enumerate(sets):
            if not len(pos) or any(not -len(p) <= int(x) < len(p) for x in pos):
                raise ProbeError(f"spans[{i}][{s}]: empty or outside the prompt ({len(p)} tokens): {list(pos)[:8]}")
    nm = _nnsight_model(be.model, engine.tokenizer)
    env = envoy_layers(nm, lm)
    uniq = sorted(set(layers))
    out = [None] * len(prompts)
    lengths = [len(p) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: -lengths[i])
    with torch.inference_mode():
        for batch in be._batches(order, lengths):
            ids, mask = be._pad([prompts[i] for i in batch])
            T = ids.shape[1]
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            # every (row, column) read in this batch, in padded coordinates (left padding), and
            # which (row, set) it averages into; only these rows of the states leave the trace
            rows, cols, seg = [], [], []
            for r, i in enumerate(batch):
                pad = T - lengths[i]
                for s, ps in enumerate(spans[i]):
                    for x in ps:
                        x = int(x)
                        rows.append(r)
                        cols.append(pad + (x if x >= 0 else lengths[i] + x))
                        seg.append(r * S + s)
            rt, ct = torch.tensor(rows, device=ids.device), torch.tensor(cols, device=ids.device)
            # logits_to_keep=1: the vocabulary projection of every position is not needed here
            with nm.trace(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, logits_to_keep=1):
                acts = nnsight.save([])  # nnsight: only saved objects leave the trace body
                for li in uniq:
                    acts.append(env[li].output[rt, ct, :].float().cpu())
            seg_t = torch.tensor(seg)
            count = torch.bincount(seg_t, minlength=len(batch) * S).to(torch.float64)[:, None]
            by = {}
            for li, a in zip(uniq, acts):
                tot = torch.zeros(len(batch) * S, a.shape[-1], dtype=torch.float64).index_add_(0, seg_t, a.double())
                by[li] = (tot / count).float().reshape(len(batch), S, -1)
            stack = torch.stack([by[li] for li in layers], dim=2).numpy()
            for r, i in enumerate(batch):
                out[i] = stack[r]
    return np.stack(out) if out else np.zeros((0, S, len(layers), 0), dtype=np.float32)


def _folds(y: np.ndarray, groups: np.ndarray | None, n_splits: int, seed: int):
    from sklearn.model_selection import GroupKFold, StratifiedKFold

    if groups is not None:
        k = min(n_splits, len(np.unique(groups)))
        if k < 2:
            raise ProbeError(f"need at least 2 groups for grouped folds, got {len(np.unique(groups))}")
        return list(GroupKFold(n_splits=k).split(np.zeros(len(y)), y, groups))
    k = min(n_splits, int(np.bincount(y).min()))
    if k < 2:
        raise ProbeError(f"need at least 2 samples of each class, got counts {np.bincount(y).tolist()}")
    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def _check_labels(y: Sequence) -> np.ndarray:
    y = np.asarray(y)
    classes = np.unique(y)
    if len(classes) != 2:
        raise ProbeError(f"a probe needs exactly 2 label classes, got {classes.tolist()}")
    return (y == classes[1]).astype(int)


def _fold_features(X: np.ndarray, folds: list) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per fold, the standardised activations in the row space of the training part: (train, test)
    of shape (n, r) with r <= n_train. With an L2 penalty the logistic-regression weights lie in
    the span of the training rows (any orthogonal part leaves the loss unchanged and only adds
    penalty), and an orthonormal basis keeps the penalty's norm, so fitting on these r columns is
    the same problem as on all d columns: same decision values, at a fraction of the cost when
    d (hundreds of hidden units) is much larger than n (a few dozen contexts). The basis does not
    depend on the labels, so the shuffled-label null reuses it."""
    from sklearn.preprocessing import StandardScaler

    out = []
    for tr, te in folds:
        sc = StandardScaler().fit(X[tr])
        a, b = sc.transform(X[tr]), sc.transform(X[te])
        _, s, vt = np.linalg.svd(a, full_matrices=False)
        basis = vt[s > s.max() * 1e-10].T if s.size and s.max() > 0 else np.zeros((a.shape[1], 0))
        out.append((a @ basis, b @ basis))
    return out


def heldout_auroc(X: np.ndarray, y: Sequence, *, groups: Sequence | None = None, n_splits: int = 5,
                  seed: int = 0, C: float = 1.0, folds: list | None = None,
                  features: list | None = None) -> float:
    """AUROC of out-of-fold logistic-regression decision values (standardised activations)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    yb = _check_labels(y)
    g = None if groups is None else np.asarray(groups)
    folds = folds if folds is not None else _folds(yb, g, n_splits, seed)
    features = features if features is not None else _fold_features(np.asarray(X, dtype=float), folds)
    scores = np.full(len(yb), np.nan)
    for (tr, te), (ztr, zte) in zip(folds, features):
        if len(np.unique(yb[tr])) < 2:
            raise ProbeError("a training fold holds one class only; use more samples or fewer folds")
        clf = LogisticRegression(C=C, max_iter=2000)
        clf.fit(ztr, yb[tr])
        scores[te] = clf.decision_function(zte)
    return float(roc_auc_score(yb, scores))


STREAM_NULL = 41   # the shuffled-label null's permutations (kept stable: changing it changes every null)


def label_null(yb: np.ndarray, refit: Callable[[np.ndarray], Any], *, n_perm: int, seed: int,
               folds: Sequence = (), stream: int = STREAM_NULL) -> np.ndarray:
    """The shuffled-label null, the one loop every probe's null runs: ``refit`` (score or direction)
    on each of ``n_perm`` permutations of ``yb`` drawn in order from ``rng(seed, stream)``; a
    permutation that leaves a training fold of ``folds`` with one class is drawn, then skipped."""
    r = make_rng(seed, stream)
    out = []
    for _ in range(n_perm):
        yp = r.permutation(yb)
        if any(len(np.unique(yp[tr])) < 2 for tr, _ in folds):
            continue
        out.append(refit(yp))
    return np.asarray(out)


def null_summary(score: float, null: np.ndarray, n: int) -> dict[str, Any]:
    """A held-out score beside its null: the null's 90th percentile and mean, its size, the
    permutation p-value (1 + #null >= score) / (1 + #null), and whether the score beats the p90."""
    q = float(np.quantile(null, 0.9)) if len(null) else np.nan
    return {"auroc": score, "null_p90": q, "null_mean": float(null.mean()) if len(null) else np.nan,
            "n_null": int(len(null)), "p_value": float((1 + (null >= score).sum()) / (1 + len(null))),
            "above_null_p90": bool(len(null) and score > q), "n": int(n)}


def shuffled_null(X: np.ndarray, y: Sequence, *, groups: Sequence | None = None, n_perm: int = 100,
                  n_splits: int = 5, seed: int = 0, C: float = 1.0) -> np.ndarray:
    """Held-out AUROCs of the same probe refit on ``n_perm`` label permutations (same folds)."""
    yb = _check_labels(y)
    g = None if groups is None else np.asarray(groups)
    folds = _folds(yb, g, n_splits, seed)
    feats = _fold_features(np.asarray(X, dtype=float), folds)  # label-free: shared by every permutation
    return label_null(yb, lambda yp: heldout_auroc(X, yp, folds=folds, C=C, features=feats),
                      n_perm=n_perm, seed=seed, folds=folds)


def probe_layers(acts: np.ndarray, y: Sequence, *, layers: Sequence[int], groups: Sequence | None = None,
                 n_perm: int = 100, n_splits: int = 5, seed: int = 0, C: float = 1.0) -> pd.DataFrame:
    """One probe per layer: held-out AUROC, the null's mean and 90th percentile, and the
    permutation p-value (1 + #null >= AUROC) / (1 + n_perm)."""
    rows = []
    for k, layer in enumerate(layers):
        X = acts[:, k, :]
        a = heldout_auroc(X, y, groups=groups, n_splits=n_splits, seed=seed, C=C)
        null = shuffled_null(X, y, groups=groups, n_perm=n_perm, n_splits=n_splits, seed=seed, C=C)
        rows.append({"layer": int(layer), **null_summary(a, null, len(X))})
    return pd.DataFrame(rows)


# -- the experiment: contexts, cached activations, the per-layer probes ---------------------------------
def probe_contexts(items: dict, pairs: Sequence[dict], P: dict, concept: str) -> tuple[list[dict], list[list[dict]], list[int]]:
    meta, convs, labels = [], [], []
    for c in (knockout_contexts(items, pairs, P) if concept == "message" else []):
        for lab, conv in ((1, c["full"]), (0, c["none"])):
            meta.append({**c["meta"], "context": "full" if lab else "no_message"})
            convs.append(conv)
            labels.append(lab)
    if concept in ("record", "status"):
        for p in pairs:
            it = items[p["qid"]]
            for rec in ("good", "poor"):
                for st in ("professor", "ordinary"):
                    conv, _ = cue_context(it, p, P, rec, st)
                    meta.append({**pair_meta(p, it), "context": f"{rec}_{st}"})
                    convs.append(conv)
                    labels.append(int(rec == "good") if concept == "record" else int(st == "professor"))
    return meta, convs, labels


def probe_activations(run: RunDir, eng: Any, convs: list[list[dict]], layers: list[int]) -> np.ndarray:
    """Activations, cached in RUN/activations.npz under a hash of the contexts and layers."""
    h = hashlib.sha256(json.dumps({"convs": convs, "layers": layers, "model": eng.identity},
                                  sort_keys=True).encode()).hexdigest()
    path = run.path / "activations.npz"
    if path.is_file():
        z = np.load(path, allow_pickle=False)
        if str(z["key"]) == h:
            return z["acts"]
    acts = activations(eng, convs, layers)
    np.savez_compressed(path, acts=acts, key=np.array(h))
    return acts


def _measure_probe(cfg, run, eng, items, pairs, P, progress, info) -> None:
    lm = layer_map(eng)
    layers = list(range(lm.n_layers)) if cfg.probe.layers == "all" else [int(x) for x in cfg.probe.layers]
    bad = [x for x in layers if not 0 <= x < lm.n_layers]
    if bad:
        raise ConfigError(f"probe.layers: {bad} out of range (valid 0..{lm.n_layers - 1})")
    info["n_layers"] = lm.n_layers
    if pairs:
        meta, convs, labels = probe_contexts(items, pairs, P, cfg.probe.concept)
        if progress:
            progress(len(layers) + 1, 0)
        acts = probe_activations(run, eng, convs, layers)
        if progress:
            progress(len(layers) + 1, 1)
        groups = [m["family"] for m in meta]
        t = probe_layers(acts, labels, layers=layers, groups=groups, n_perm=cfg.probe.n_perm,
                         n_splits=cfg.probe.n_splits, seed=cfg.seed, C=cfg.probe.C)
        t["concept"] = cfg.probe.concept
        run.write_table("probe", t)
        run.write_table("probe_contexts", pd.DataFrame([{**{k: v for k, v in m.items() if k != "labels"},
                                                         "label": y} for m, y in zip(meta, labels)]))
        if progress:
            progress(len(layers) + 1, len(layers))


def _summarize_probe(cfg, run, info, t, summary, make_plots) -> None:
    if len(t):
        summary["concept"] = cfg.probe.concept
        summary["layers"] = t.to_dict(orient="records")
        best = t.loc[t["auroc"].idxmax()]
        summary["best_layer"] = {"layer": int(best["layer"]), "auroc": float(best["auroc"]),
                                 "null_p90": float(best["null_p90"]), "p_value": float(best["p_value"])}
        summary["n_layers_above_null_p90"] = int(t["above_null_p90"].sum())
        if make_plots:
            ip.probe_curve(t, run.plot_path("probe_auroc"), concept=cfg.probe.concept)


MECHANIC = Mechanic(_measure_probe, _summarize_probe)
