"""Residual-stream interchange through nnsight: run the context with source cue X, keep the
residual stream (decoder-layer outputs) at the cue positions, and write it into the run with
cue Y at one layer at a time; read how the adoption margin moves with depth.

The two contexts must tokenise to the same length and differ only inside the cue span (the
experiment builds cue pairs that way and skips, counting, any pair that does not), so a
position in X is the same position in Y. One batched trace patches every layer at once: row
``i`` of the batch is Y patched at layer ``layers[i]``, plus one unpatched row.

The experiment (``chorus influence patch``) pairs the source-cue contexts of
``ablations.cue_contexts``'s design: the same peer text under two descriptions that differ in one
factor (record: good -> poor with the status fixed; status: professor -> ordinary with the
record fixed). Positions must align, so a pair whose descriptions tokenise to different lengths
is skipped and counted. Its results are keyed in the run's call store like engine calls, so a
killed run recomputes nothing it already stored.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.core.config import ConfigError, InputError
from chorus.core.progress import Progress
from chorus.core.stats import cluster_bootstrap, ratio_fields, ratio_interval
from chorus.interventions import plots as ip
from chorus.interventions.ablations import pair_meta
from chorus.interventions.knockout import hf_backend, _nnsight_model, envoy_layers, layer_map
from chorus.interventions.mechanic import Mechanic, bootstrapped
from chorus.interventions.spans import find_range, message_token_span
from chorus.simulate.debate.prompts import debate_messages, readout_prefill


class PatchError(InputError):
    """The two runs cannot be aligned position by position, or the request is out of range."""


def _check(engine: Any, x_ids: Sequence[int], y_ids: Sequence[int], positions: Sequence[int], layers: Sequence[int]):
    lm = layer_map(engine)
    if len(x_ids) != len(y_ids):
        raise PatchError(f"source and target runs differ in length ({len(x_ids)} vs {len(y_ids)} tokens): "
                         "positions cannot be aligned; use cues of equal token length")
    bad = [p for p in positions if not 0 <= p < len(y_ids)]
    if bad:
        raise PatchError(f"positions {bad} are outside the context ({len(y_ids)} tokens)")
    badl = [x for x in layers if not 0 <= x < lm.n_layers]
    if badl:
        raise PatchError(f"layer(s) {badl} out of range: the model has {lm.n_layers} decoder layers "
                         f"(valid 0..{lm.n_layers - 1})")
    return lm


def interchange(engine: Any, x_ids: Sequence[int], y_ids: Sequence[int], positions: Sequence[int],
                layers: Sequence[int] | str = "all") -> dict[str, Any]:
    """Log-softmax next-token distributions at the last position of: X, Y, and Y with the
    residual stream at ``positions`` replaced by X's after decoder layer L, for each L in
    ``layers``. Returns ``{"x": (V,), "y": (V,), "patched": (len(layers), V), "layers": [...]}``."""
    import nnsight
    import torch

    be = hf_backend(engine)
    lm = layer_map(engine)
    layers = list(range(lm.n_layers)) if layers == "all" else [int(x) for x in layers]
    _check(engine, x_ids, y_ids, positions, layers)
    nm = _nnsight_model(be.model, engine.tokenizer)
    dev = next(be.model.parameters()).device
    pos = torch.tensor(sorted(set(int(p) for p in positions)), dtype=torch.long, device=dev)
    T = len(y_ids)
    env = envoy_layers(nm, lm)
    with torch.inference_mode():
        xi = torch.tensor([list(x_ids)], device=dev)
        # logits_to_keep=1: only the last position is read; the vocabulary projection of every
        # position of every row made patching 5-9x a plain forward (issue 52)
        with nm.trace(input_ids=xi, attention_mask=torch.ones_like(xi), position_ids=torch.arange(T, device=dev)[None],
                      use_cache=False, logits_to_keep=1):
            saved = nnsight.save({})  # nnsight: only saved objects leave the trace body
            for l in sorted(set(layers)):
                saved[l] = env[l].output[0, pos, :].clone()
            x_logits = nm.output.logits[0, -1].save()
        n = len(layers)
        rows_at: dict[int, list[int]] = {}
        for i, l in enumerate(layers):
            rows_at.setdefault(l, []).append(i)
        yi = torch.tensor([list(y_ids)] * (n + 1), device=dev)
        rows_t = {l: torch.tensor(r, dtype=torch.long, device=dev)[:, None] for l, r in rows_at.items()}
        with nm.trace(input_ids=yi, attention_mask=torch.ones_like(yi),
                      position_ids=torch.arange(T, device=dev)[None].expand(n + 1, -1), use_cache=False,
                      logits_to_keep=1):
            for l in sorted(rows_at):  # forward order (nnsight requires it)
                # every row patched at this layer in one write (one nnsight operation, not one per row)
                env[l].output[rows_t[l], pos[None], :] = saved[l]
            y_logits = nm.output.logits[:, -1].save()
    lp = lambda t: torch.log_softmax(t.float(), dim=-1).cpu().numpy()
    yl = lp(y_logits)
    return {"x": lp(x_logits), "y": yl[n], "patched": yl[:n], "layers": layers}


def option_ids(engine: Any, prompt: Any, options: Sequence[str]) -> list[int]:
    """Single-token ids of the options after ``prompt`` (patching reads one next-token
    distribution; a multi-token option is an error naming it)."""
    out = []
    for o in options:
        ids = engine.option_token_ids(prompt, o)
        if len(ids) != 1:
            raise PatchError(f"option {o!r} is {len(ids)} tokens; patching and probes read single-token options")
        out.append(ids[0])
    return out


def restored_share(m_patched: np.ndarray, m_x: float, m_y: float) -> np.ndarray:
    """(m_patched - m_Y) / (m_X - m_Y): 0 = no X information carried, 1 = X's margin."""
    d = m_x - m_y
    return (np.asarray(m_patched, float) - m_y) / d if d != 0 else np.full(np.shape(m_patched), np.nan)


# -- the experiment: cue pairs, the pair loop, the summary --------------------------------------------
def cue_context(it, p: dict, P: dict, rec: str, st: str) -> tuple[list[dict], str]:
    desc = f"{P['status'][st]}, {P['record'][rec]}"
    name = P["peer_name_cue"].format(k=p["peer"] + 1, desc=desc)
    return readout_prefill(debate_messages(it, p["own_text"], [(name, p["peer_text"])], P), "", P), desc


def cue_pairs(items: dict, pairs: Sequence[dict], P: dict, contrast: str) -> list[dict]:
    """(X, Y) source-cue contexts differing in one factor; ``x_cue``/``y_cue`` name them."""
    out = []
    for p in pairs:
        it = items[p["qid"]]
        fixed = ("professor", "ordinary") if contrast == "record" else ("good", "poor")
        for f in fixed:
            if contrast == "record":
                (cx, dx), (cy, dy) = cue_context(it, p, P, "good", f), cue_context(it, p, P, "poor", f)
                names = (f"good_{f}", f"poor_{f}")
            else:
                (cx, dx), (cy, dy) = cue_context(it, p, P, f, "professor"), cue_context(it, p, P, f, "ordinary")
                names = (f"{f}_professor", f"{f}_ordinary")
            out.append({"meta": {**pair_meta(p, it), "x_cue": names[0], "y_cue": names[1]},
                        "x": cx, "y": cy, "x_desc": dx, "y_desc": dy})
    return out


def run_patch_pairs(eng: Any, cps: list[dict], layers: Any, progress: Progress | None = None) -> tuple[pd.DataFrame, dict]:
    lm = layer_map(eng)
    layers = list(range(lm.n_layers)) if layers == "all" else [int(x) for x in layers]
    bad = [x for x in layers if not 0 <= x < lm.n_layers]
    if bad:
        raise ConfigError(f"patch.layers: {bad} out of range (the model has {lm.n_layers} layers, valid 0..{lm.n_layers - 1})")
    jobs, skipped = [], []
    for c in cps:
        px, py = eng.render(c["x"]), eng.render(c["y"])
        idx = len(c["y"]) - 2
        sx = message_token_span(eng.tokenizer, px.text, px.ids, c["x"], (idx, *find_range(c["x"][idx]["content"], c["x_desc"])))
        sy = message_token_span(eng.tokenizer, py.text, py.ids, c["y"], (idx, *find_range(c["y"][idx]["content"], c["y_desc"])))
        if len(px.ids) != len(py.ids) or (sx.start, sx.end) != (sy.start, sy.end) or \
                px.ids[:sy.start] != py.ids[:sy.start] or px.ids[sy.end:] != py.ids[sy.end:]:
            skipped.append({"qid": c["meta"]["qid"], "x_cue": c["meta"]["x_cue"], "y_cue": c["meta"]["y_cue"],
                            "reason": f"cue spans do not align ({sx.end - sx.start} vs {sy.end - sy.start} tokens)"})
            continue
        labs = c["meta"]["labels"]
        oid = option_ids(eng, py, [" " + x for x in labs])
        jobs.append((c, px, py, list(range(sy.start, sy.end)), oid))
    if progress:
        progress(len(jobs), 0)
    reqs = [{"x": c["x"], "y": c["y"], "positions": pos, "layers": layers} for c, px, py, pos, oid in jobs]

    def compute(todo: list[int]) -> list[dict]:
        out = []
        for t in todo:
            c, px, py, pos, oid = jobs[t]
            r = interchange(eng, px.ids, py.ids, pos, layers)
            out.append({"x": r["x"][oid].tolist(), "y": r["y"][oid].tolist(), "patched": r["patched"][:, oid].tolist()})
            if progress:
                progress(len(jobs), 1)
        return out
    res = eng.cached("patch", reqs, compute)
    rows = []
    for (c, px, py, pos, oid), r in zip(jobs, res):
        m = c["meta"]
        labs = m["labels"]
        ip, io = labs.index(m["peer_answer"]), labs.index(m["own_answer"])
        mx, my = r["x"][ip] - r["x"][io], r["y"][ip] - r["y"][io]
        for k, L in enumerate(layers):
            mp = r["patched"][k][ip] - r["patched"][k][io]
            rows.append({**{a: b for a, b in m.items() if a != "labels"}, "layer": L, "n_positions": len(pos),
                         "margin_x": mx, "margin_y": my, "margin_patched": mp,
                         "restored": float(restored_share(mp, mx, my))})
    return pd.DataFrame(rows), {"n_pairs": len(jobs), "n_skipped": len(skipped), "skipped": skipped}


def summarize_patch(t: pd.DataFrame, *, n_boot: int, seed: int, ci: float) -> dict[str, Any]:
    """Per layer: mean patched margin shift (m_patched - m_Y) and the restored share as a ratio
    of means, mean(m_patched - m_Y) / mean(m_X - m_Y)."""
    out: dict[str, Any] = {"curve": [], "ci_level": ci}   # the level every interval here covers
    if not len(t):
        return out
    one = t.drop_duplicates(["qid", "x_cue"])
    d = (one["margin_x"] - one["margin_y"]).to_numpy(float)
    est, lo, hi = iv = cluster_bootstrap(lambda i: float(d[i].mean()), one["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
    out["cue_effect_x_minus_y"] = {"mean": est, "ci_low": lo, "ci_high": hi, **iv.fields(), "n": int(len(one))}
    for L, g in t.groupby("layer", sort=True):
        num = (g["margin_patched"] - g["margin_y"]).to_numpy(float)
        den = (g["margin_x"] - g["margin_y"]).to_numpy(float)
        r = ratio_interval(num, den, g["family"].to_numpy(), ci=ci, resampled="question family")   # Fieller: unbounded, and saying so, near 0
        out["curve"].append({"layer": int(L), "restored": r["estimate"], **ratio_fields(r),
                             "shift": float(num.mean()), "n": int(len(g))})
    return out


def _measure_patch(cfg, run, eng, items, pairs, P, progress, info) -> None:
    info["n_layers"] = layer_map(eng).n_layers
    if pairs:
        cps = cue_pairs(items, pairs, P, cfg.patch.contrast)
        if cfg.patch.max_pairs:
            cps = cps[:cfg.patch.max_pairs]
        table, pinfo = run_patch_pairs(eng, cps, cfg.patch.layers, progress)
        info.update(pinfo)
        run.write_table("patch", table)


MECHANIC = Mechanic(_measure_patch, bootstrapped(summarize_patch, ("curve", ip.patch_curve, "patch_curve")))
