"""Latent state transfer between agents (peer-influence paper §C.1, Figure 8): write a sender's
residual state into a receiver's forward pass and read how far the receiver's option margins
move toward the sender's answer, as a share of the effect of reading the sender's text.

Definitions (fixed here; the seed leaves them open):

* **sender state**: the residual stream (decoder-layer output) at ``layer_s`` at the sender's
  decision token: the last token of the sender's own f = 0 readout context (its response as its
  own previous turn, the reflection instruction, then the "Answer:" prefill), i.e. the position
  whose next token is the sender's answer label. The sender's option log-probs there are kept
  (``sender_margin``) so a run shows whether the written state commits to the sender's answer.
* **receiver**: its no-message (reflection) readout context; ``site`` is where the state is
  written, after decoder layer ``layer_r``: ``readout`` = the decision token (last prompt
  token); ``anchor`` = the last content token of the final user turn, the turn that quotes the
  peers in debate (where the written message would sit).
* **write = replacement** (``h[site] := W h_s + b``), not addition: with sender = receiver, the
  same context and layer it is exactly the unpatched pass (the identity the tests check); the
  written vector stays on the manifold of that model's states at that depth instead of doubling
  the norm; and it is what "written into the forward pass" says. Addition would need a reference
  state to subtract and has no exact identity.
* **controls**: ``elsewhere`` = the same (mapped) state written at the first content token of
  the question turn, an early position that carries no answer slot; ``scrambled`` = the mapped
  state with its coordinates permuted by a seeded permutation (same norm and values, no
  direction), written at the site. At the last decoder layer ``elsewhere`` has exactly no effect
  (a position's last-layer output reaches only its own logits), which the tests assert.
* **margins**: ``logit(sender answer) - logit(receiver previous answer)`` at the receiver's
  readout, per arm: ``none`` (unpatched no-message context), ``message`` (the receiver reading
  the sender's text as a peer message: the single-peer debate context of the ablations),
  ``transfer``, ``elsewhere``, ``scrambled``. share = (m_arm - m_none) / (m_message - m_none).
* **cross-model**: widths differ, so the state is carried by a linear map ``W h + b`` fitted
  (``fit_map``, scikit-learn Ridge) on paired states of the same contexts in both models;
  held-out R² (folds grouped by question) is reported and the map is stored in the run.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus import serving  # chorus.serving.build_engine looked up per call: tests replace it
from chorus.core.config import ConfigError, InputError
from chorus.core.seeding import rng as make_rng
from chorus.core.stats import cluster_bootstrap, ratio_fields, ratio_interval
from chorus.interventions import plots as ip
from chorus.interventions.knockout import hf_backend, _nnsight_model, envoy_layers, layer_map
from chorus.interventions.mechanic import Mechanic, bootstrapped
from chorus.interventions.patching import option_ids as single_ids
from chorus.interventions.probes import activations
from chorus.interventions.spans import message_token_span
from chorus.simulate.debate.forced_choice import forced_choice, option_strings
from chorus.simulate.debate.prompts import debate_messages, readout_prefill, reflection_messages

ARMS = ("transfer", "elsewhere", "scrambled", "message", "none")
SITES = ("readout", "anchor")
ROWS_PER_TRACE = 16  # receiver rows (copies of one context) per nnsight trace


class TransferError(InputError):
    """Sender and receiver cannot be connected as asked (layers out of range, widths without a
    map, a map of the wrong shape); the message names both models."""


# -- models ------------------------------------------------------------------------------------
def model_info(engine: Any) -> dict[str, Any]:
    """name, decoder layers and residual width of an hf engine."""
    hf_backend(engine)
    lm = layer_map(engine)
    cfg = engine.model.config
    cfg = getattr(cfg, "text_config", None) or cfg
    return {"name": engine.profile.name, "model_type": lm.model_type, "n_layers": lm.n_layers,
            "width": int(cfg.hidden_size)}


def _describe(i: dict) -> str:
    return f"{i['name']} ({i['model_type']}, {i['n_layers']} layers 0..{i['n_layers'] - 1}, width {i['width']})"


@dataclass
class LinearMap:
    """``h_receiver ~= W @ h_sender + b`` between two layers; ``r2_heldout`` from grouped folds."""
    W: np.ndarray                 # (width_receiver, width_sender)
    b: np.ndarray                 # (width_receiver,)
    layer_s: int = -1
    layer_r: int = -1
    alpha: float = float("nan")
    r2_heldout: float = float("nan")
    r2_train: float = float("nan")
    n_fit: int = 0
    info: dict = field(default_factory=dict)

    def apply(self, h: np.ndarray) -> np.ndarray:
        return np.asarray(h, np.float64) @ self.W.T + self.b

    @property
    def sha256(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.W, np.float64).tobytes()
                              + np.ascontiguousarray(self.b, np.float64).tobytes()).hexdigest()

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"layer_s": self.layer_s, "layer_r": self.layer_r, "alpha": self.alpha, "r2_heldout": self.r2_heldout,
                "r2_train": self.r2_train, "n_fit": self.n_fit, "info": self.info}
        np.savez_compressed(path, W=self.W, b=self.b, meta=np.array(json.dumps(meta, default=float)))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LinearMap":
        z = np.load(path, allow_pickle=False)
        return cls(W=z["W"], b=z["b"], **json.loads(str(z["meta"])))


def _check_layers(si: dict, ri: dict, layer_s: Any, layer_r: Any) -> str:
    both = f"sender {_describe(si)}; receiver {_describe(ri)}"
    for what, L, i in (("layer_s", layer_s, si), ("layer_r", layer_r, ri)):
        if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or not 0 <= L < i["n_layers"]:
            raise TransferError(f"{what}={L!r} is out of range for {i['name']}: {both}")
    return both


def check_pair(sender: Any, receiver: Any, layer_s: int, layer_r: int, map: LinearMap | None = None) -> None:
    """Layers in range and widths compatible (equal, or a map of shape (width_r, width_s));
    every error names both models' layers and widths."""
    si, ri = model_info(sender), model_info(receiver)
    both = _check_layers(si, ri, layer_s, layer_r)
    if map is None:
        if si["width"] != ri["width"]:
            raise TransferError(f"widths differ ({si['width']} vs {ri['width']}) and no linear map was given "
                                f"(fit one with state_transfer.fit_map): {both}")
        return
    want = (ri["width"], si["width"])
    if tuple(map.W.shape) != want or tuple(map.b.shape) != (ri["width"],):
        raise TransferError(f"the map is W {tuple(map.W.shape)}, b {tuple(map.b.shape)} but must be W {want}, "
                            f"b ({ri['width']},) to carry layer {layer_s} to layer {layer_r}: {both}")


# -- contexts and sites ------------------------------------------------------------------------
def contexts(item: Any, own_text: str, peer_text: str, P: dict, *, peer_name: str = "Agent 2") -> dict[str, list[dict]]:
    """The three conversations of one (receiver, sender) pair: ``sender`` (the sender's readout
    after its own response), ``none`` (the receiver's no-message readout), ``message`` (the
    receiver reading the sender's response as a peer message)."""
    return {"sender": readout_prefill(reflection_messages(item, peer_text, P), "", P),
            "none": readout_prefill(reflection_messages(item, own_text, P), "", P),
            "message": readout_prefill(debate_messages(item, own_text, [(peer_name, peer_text)], P), "", P)}


def site_positions(engine: Any, conversation: list[dict]) -> dict[str, int]:
    """Token positions of the sites in the rendered ``conversation`` (its last message is the
    readout prefill): readout, anchor (last content token of the final user turn), elsewhere
    (first content token of the first user turn)."""
    p = engine.render(conversation)
    users = [i for i, m in enumerate(conversation) if m["role"] == "user"]
    if not users:
        raise TransferError("the receiver context has no user turn to anchor a site in")
    last, first = message_token_span(engine.tokenizer, p.text, p.ids, conversation, users[-1]), \
        message_token_span(engine.tokenizer, p.text, p.ids, conversation, users[0])
    if last.empty or first.empty:
        raise TransferError("a user turn of the receiver context has no tokens (empty message?)")
    return {"readout": len(p.ids) - 1, "anchor": last.end - 1, "elsewhere": first.start}


def scramble(vec: np.ndarray, seed: Sequence[int]) -> np.ndarray:
    """``vec`` with its coordinates permuted by a permutation seeded by ``seed`` (norm kept)."""
    return np.asarray(vec)[make_rng(*seed).permutation(np.shape(vec)[-1])]


# -- forward passes ----------------------------------------------------------------------------
def read_states(engine: Any, ids: Sequence[int], layers: Sequence[int], position: int = -1,
                option_ids: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(len(layers), width) residual states after each decoder layer at ``position`` (float32,
    exact for fp32/bf16/fp16 models), and the log-probs of ``option_ids`` at the last position."""
    import nnsight
    import torch

    be = hf_backend(engine)
    lm = layer_map(engine)
    nm = _nnsight_model(be.model, engine.tokenizer)
    env = envoy_layers(nm, lm)
    dev = next(be.model.parameters()).device
    T = len(ids)
    pos = position % T
    with torch.inference_mode():
        xi = torch.tensor([list(ids)], device=dev)
        with nm.trace(input_ids=xi, attention_mask=torch.ones_like(xi), position_ids=torch.arange(T, device=dev)[None],
                      use_cache=False, logits_to_keep=1):
            saved = nnsight.save({})  # nnsight: only saved objects leave the trace body
            for L in sorted(set(layers)):
                saved[L] = env[L].output[0, pos, :].float().cpu()
            logits = nm.output.logits[0, -1].float().cpu().save()
    states = np.stack([saved[L].numpy() for L in layers]) if layers else np.zeros((0, 0), np.float32)
    lp = None
    if option_ids is not None:
        lp = torch.log_softmax(logits, dim=-1)[list(option_ids)].numpy().astype(float)
    return states, lp


def write_and_read(engine: Any, ids: Sequence[int], writes: Sequence[Sequence[tuple[int, int, np.ndarray]]],
                   option_ids: Sequence[int]) -> np.ndarray:
    """Option log-probs at the last position of ``ids``: row 0 unpatched, row 1 + i with the
    residual after decoder layer L at position p replaced by v for each (L, p, v) in
    ``writes[i]``. Rows are copies of one context, so positions need no alignment."""
    import torch

    be = hf_backend(engine)
    lm = layer_map(engine)
    nm = _nnsight_model(be.model, engine.tokenizer)
    env = envoy_layers(nm, lm)
    dev = next(be.model.parameters()).device
    dtype = next(be.model.parameters()).dtype
    T = len(ids)
    rows: list[Sequence[tuple[int, int, Any]]] = [[]] + list(writes)
    for r in rows:
        for L, p, v in r:
            if not 0 <= L < lm.n_layers or not 0 <= p < T:
                raise TransferError(f"write at layer {L}, position {p} is outside the model ({lm.n_layers} layers) "
                                    f"or the context ({T} tokens)")
    out = []
    with torch.inference_mode():
        for c0 in range(0, len(rows), ROWS_PER_TRACE):
            chunk = rows[c0:c0 + ROWS_PER_TRACE]
            n = len(chunk)
            by_layer: dict[int, list[tuple[int, int, Any]]] = {}
            for i, r in enumerate(chunk):
                for L, p, v in r:
                    by_layer.setdefault(L, []).append((i, p, torch.as_tensor(np.asarray(v, np.float32)).to(dev, dtype)))
            xi = torch.tensor([list(ids)] * n, device=dev)
            with nm.trace(input_ids=xi, attention_mask=torch.ones_like(xi),
                          position_ids=torch.arange(T, device=dev)[None].expand(n, -1), use_cache=False,
                          logits_to_keep=1):
                for L in sorted(by_layer):  # forward order (nnsight requires it)
                    o = env[L].output
                    for i, p, v in by_layer[L]:
                        o[i, p, :] = v
                logits = nm.output.logits[:, -1].save()
            out.append(torch.log_softmax(logits.float(), dim=-1)[:, list(option_ids)].cpu().numpy())
    return np.concatenate(out).astype(float)


def transfer_layers(sender: Any, receiver: Any, sender_ctx: Any, receiver_ctx: Any,
                    layer_pairs: Sequence[tuple[int, int]], *, options: Sequence[str], site: str = "readout",
                    maps: dict | None = None, seed: Sequence[int] = (0,), controls: bool = True) -> dict[str, Any]:
    """Option log-probs of the receiver per arm for every (layer_s, layer_r) in ``layer_pairs``:
    ``{"none": (O,), "sender": (O,), "transfer"|"elsewhere"|"scrambled": (K, O), "positions": ...}``.
    ``maps``: {(layer_s, layer_r): LinearMap} (required where widths differ); contexts are
    conversations (rendered by each engine) or token ids."""
    if site not in SITES:
        raise TransferError(f"site must be one of {', '.join(SITES)}, got {site!r}")
    maps = maps or {}
    pairs = [(int(a), int(b)) for a, b in layer_pairs]
    for ls, lr in pairs:
        check_pair(sender, receiver, ls, lr, maps.get((ls, lr)))
    r_conv = not isinstance(receiver_ctx[0], (int, np.integer))
    r_prompt = receiver.render(list(receiver_ctx)) if r_conv else None
    s_prompt = sender.render(list(sender_ctx)) if not isinstance(sender_ctx[0], (int, np.integer)) else None
    r_ids = r_prompt.ids if r_prompt else [int(x) for x in receiver_ctx]
    s_ids = s_prompt.ids if s_prompt else [int(x) for x in sender_ctx]
    if r_conv:
        pos = site_positions(receiver, list(receiver_ctx))
    elif site == "anchor":
        raise TransferError("site 'anchor' needs the receiver context as a conversation, not token ids")
    else:  # token ids: no turns to find; elsewhere is the first token
        pos = {"readout": len(r_ids) - 1, "anchor": len(r_ids) - 1, "elsewhere": 0}
    r_opt = single_ids(receiver, r_prompt, options) if r_prompt else _bare_ids(receiver, options)
    s_opt = single_ids(sender, s_prompt, options) if s_prompt else _bare_ids(sender, options)
    s_layers = sorted({ls for ls, _ in pairs})
    states, s_lp = read_states(sender, s_ids, s_layers, -1, s_opt)
    by_l = dict(zip(s_layers, states))
    writes, arms = [], []
    for k, (ls, lr) in enumerate(pairs):
        m = maps.get((ls, lr))
        v = m.apply(by_l[ls]) if m is not None else by_l[ls]
        writes.append([(lr, pos[site], v)])
        arms.append(("transfer", k))
        if controls:
            writes.append([(lr, pos["elsewhere"], v)])
            arms.append(("elsewhere", k))
            writes.append([(lr, pos[site], scramble(v, (*seed, ls, lr)))])
            arms.append(("scrambled", k))
    lp = write_and_read(receiver, r_ids, writes, r_opt)
    out: dict[str, Any] = {"options": list(options), "none": lp[0], "sender": s_lp, "layer_pairs": pairs,
                           "positions": {**pos, "site": site, "written": pos[site], "sender": len(s_ids) - 1}}
    for arm in ("transfer", "elsewhere", "scrambled") if controls else ("transfer",):
        out[arm] = np.stack([lp[1 + j] for j, (a, _) in enumerate(arms) if a == arm])
    return out


def _bare_ids(engine: Any, options: Sequence[str]) -> list[int]:
    out = []
    for o in options:
        ids = engine.tokenizer(o, add_special_tokens=False).input_ids
        if len(ids) != 1:
            raise TransferError(f"option {o!r} is {len(ids)} tokens in {engine.profile.name}; transfer reads "
                                "single-token options")
        out.append(ids[0])
    return out


def transfer(sender_engine: Any, receiver_engine: Any, sender_ctx: Any, receiver_ctx: Any, *, layer_s: int,
             layer_r: int, site: str = "readout", map: LinearMap | None = None, options: Sequence[str] = (" A", " B"),
             seed: Sequence[int] = (0,)) -> dict[str, Any]:
    """One layer pair: the receiver's option log-probs unpatched (``none``), with the sender's
    state written at ``site`` (``transfer``) and the two controls (``elsewhere``, ``scrambled``),
    and the sender's own readout (``sender``). See ``transfer_layers``."""
    r = transfer_layers(sender_engine, receiver_engine, sender_ctx, receiver_ctx, [(layer_s, layer_r)], options=options,
                        site=site, maps={(layer_s, layer_r): map} if map is not None else None, seed=seed)
    return {**r, **{a: r[a][0] for a in ("transfer", "elsewhere", "scrambled")}}


def margin(lp: Sequence[float], options: Sequence[str], toward: str, away: str) -> float:
    """logit(toward) - logit(away) from option log-probs (differences of log-probs)."""
    o = list(options)
    return float(lp[o.index(toward)] - lp[o.index(away)])


def share(m_arm: Any, m_none: Any, m_message: Any) -> np.ndarray:
    """(m_arm - m_none) / (m_message - m_none); NaN where the message has no effect."""
    d = np.asarray(m_message, float) - np.asarray(m_none, float)
    num = np.asarray(m_arm, float) - np.asarray(m_none, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d != 0, num / np.where(d != 0, d, 1.0), np.nan)


# -- the cross-model map -------------------------------------------------------------------------
def fit_map(sender: Any, receiver: Any, conversations: Sequence[list[dict]], layer_pairs: Sequence[tuple[int, int]], *,
            groups: Sequence[Any] | None = None, alphas: Sequence[float] = (1.0, 10.0, 100.0, 1000.0, 10000.0),
            n_splits: int = 5) -> dict[tuple[int, int], LinearMap]:
    """A ridge map per layer pair from the sender's to the receiver's decision-token states on the
    same ``conversations``. Ridge (RidgeCV, alpha by efficient leave-one-out): far fewer samples
    than dimensions, so an unregularised least-squares map would interpolate noise; the closed
    form is exact and multi-output, and a linear map is what the seed names. Held-out R²
    (variance-weighted over the receiver's coordinates) from folds grouped by ``groups``
    (question), NaN with a reason when fewer than 2 groups or 4 samples."""
    from sklearn.linear_model import RidgeCV
    from sklearn.metrics import r2_score
    from sklearn.model_selection import GroupKFold, KFold

    pairs = [(int(a), int(b)) for a, b in layer_pairs]
    si, ri = model_info(sender), model_info(receiver)
    for ls, lr in pairs:
        _check_layers(si, ri, ls, lr)
    if len(conversations) < 2:
        raise TransferError(f"a map needs at least 2 paired contexts, got {len(conversations)}")
    s_layers, r_layers = sorted({a for a, _ in pairs}), sorted({b for _, b in pairs})
    xs = activations(sender, conversations, s_layers).astype(np.float64)
    ys = activations(receiver, conversations, r_layers).astype(np.float64)
    g = np.asarray(groups) if groups is not None else np.arange(len(conversations))
    k = min(n_splits, len(np.unique(g)))
    out = {}
    for ls, lr in pairs:
        X, Y = xs[:, s_layers.index(ls)], ys[:, r_layers.index(lr)]
        reg = RidgeCV(alphas=list(alphas)).fit(X, Y)
        r2, why = float("nan"), None
        if k >= 2 and len(X) >= 4:
            cv = GroupKFold(n_splits=k) if groups is not None else KFold(n_splits=k)
            pred = np.zeros_like(Y)
            for tr, te in cv.split(X, Y, g):
                pred[te] = RidgeCV(alphas=list(alphas)).fit(X[tr], Y[tr]).predict(X[te])
            r2 = float(r2_score(Y, pred, multioutput="variance_weighted"))
        else:
            why = f"no held-out R²: {len(X)} samples in {len(np.unique(g))} groups"
        out[(ls, lr)] = LinearMap(W=np.asarray(reg.coef_, np.float64), b=np.asarray(reg.intercept_, np.float64),
                                  layer_s=ls, layer_r=lr, alpha=float(reg.alpha_), r2_heldout=r2,
                                  r2_train=float(r2_score(Y, reg.predict(X), multioutput="variance_weighted")),
                                  n_fit=int(len(X)), info={"folds": int(k), "note": why, "sender": si["name"],
                                                           "receiver": ri["name"]})
    return out


def default_sender_layers(n_s: int, n_r: int, receiver_layers: Sequence[int]) -> list[int]:
    """The sender layer at the same relative depth as each receiver layer (the same index when
    the depths are equal)."""
    if n_s == n_r:
        return [int(x) for x in receiver_layers]
    return [int(round(x * (n_s - 1) / max(n_r - 1, 1))) for x in receiver_layers]


# -- experiment ----------------------------------------------------------------------------------
def run_pairs(sender: Any, receiver: Any, items: dict, pairs: Sequence[dict], P: dict,
              layer_pairs: Sequence[tuple[int, int]], *, site: str, maps: dict | None, seed: int,
              progress: Any = None) -> pd.DataFrame:
    """Table rows per pair, layer pair and arm (margin toward the sender's answer, share). The
    message arm is the receiver's ordinary readout (engine store); the others go through
    ``receiver.cached("transfer", ...)`` keyed on both models, the contexts, layers, site and map."""
    maps = maps or {}
    ctxs = [contexts(items[p["qid"]], p["own_text"], p["peer_text"], P,
                     peer_name=P["peer_name"].format(k=p["peer"] + 1)) for p in pairs]
    msg = forced_choice(receiver, [c["message"] for c in ctxs], [list(items[p["qid"]].labels) for p in pairs])
    lp_pairs = [tuple(x) for x in layer_pairs]
    map_keys = {f"{a},{b}": m.sha256 for (a, b), m in maps.items()}
    reqs = [{"sender": sender.identity, "sender_messages": c["sender"], "messages": c["none"],
             "layer_pairs": [list(x) for x in lp_pairs], "site": site, "maps": map_keys, "seed": [seed, n]}
            for n, c in enumerate(ctxs)]
    if progress:
        progress(len(ctxs), 0)

    def compute(todo: list[int]) -> list[dict]:
        res = []
        for n in todo:
            opts = option_strings(items[pairs[n]["qid"]].labels)
            r = transfer_layers(sender, receiver, ctxs[n]["sender"], ctxs[n]["none"], lp_pairs, options=opts,
                                site=site, maps=maps, seed=(seed, n))
            res.append({"none": r["none"].tolist(), "sender": r["sender"].tolist(), "positions": r["positions"],
                        **{a: r[a].tolist() for a in ("transfer", "elsewhere", "scrambled")}})
            if progress:
                progress(len(ctxs), 1)
        return res
    results = receiver.cached("transfer", reqs, compute)
    rows = []
    for n, (p, r) in enumerate(zip(pairs, results)):
        it = items[p["qid"]]
        opts = list(it.labels)
        to, away = p["peer_answer"], p["own_answer"]
        m_none = margin(r["none"], opts, to, away)
        m_msg = float(msg[n][to] - msg[n][away])
        base = {"pair": n, "qid": p["qid"], "family": p["family"], "subdomain": p.get("subdomain"),
                "receiver": p["receiver"], "peer": p["peer"], "own_answer": away, "peer_answer": to,
                "reference": getattr(it, "reference", None), "site": site,
                "sender_margin": margin(r["sender"], opts, to, away), "margin_none": m_none, "margin_message": m_msg,
                "written_position": r["positions"]["written"], "elsewhere_position": r["positions"]["elsewhere"]}
        for k, (ls, lr) in enumerate(lp_pairs):
            arm_m = {"none": m_none, "message": m_msg,
                     **{a: margin(r[a][k], opts, to, away) for a in ("transfer", "elsewhere", "scrambled")}}
            for arm in ARMS:
                rows.append({**base, "layer_s": ls, "layer_r": lr, "arm": arm, "margin": arm_m[arm],
                             "share": float(share(arm_m[arm], m_none, m_msg))})
    return pd.DataFrame(rows)


def summarize(t: pd.DataFrame, *, n_boot: int, seed: int, ci: float) -> dict[str, Any]:
    """Per arm and layer pair: share as a ratio of means, mean(m_arm - m_none) /
    mean(m_message - m_none), with a question-clustered (family) bootstrap interval, and the
    mean margin shift in logits."""
    out: dict[str, Any] = {"curve": [], "ci_level": ci}   # the level every interval here covers
    if not len(t):
        return out
    one = t.drop_duplicates("pair")
    eff = (one["margin_message"] - one["margin_none"]).to_numpy(float)
    est, lo, hi = iv = cluster_bootstrap(lambda i: float(eff[i].mean()), one["family"].to_numpy(), n_boot=n_boot,
                                    seed=seed, ci=ci, resampled="question family")
    sm = one["sender_margin"].to_numpy(float)
    out["n_pairs"] = int(len(one))
    out["message_effect"] = {"mean": est, "ci_low": lo, "ci_high": hi, **iv.fields()}
    out["sender_margin_mean"] = float(sm.mean())
    out["sender_commits_share"] = float((sm > 0).mean())  # sender state favours its own answer
    for (ls, lr, arm), g in t.groupby(["layer_s", "layer_r", "arm"], sort=True):
        g = g.sort_values("pair")
        num = (g["margin"] - g["margin_none"]).to_numpy(float)
        den = (g["margin_message"] - g["margin_none"]).to_numpy(float)
        fam = g["family"].to_numpy()
        r = ratio_interval(num, den, fam, ci=ci, resampled="question family")   # Fieller: unbounded, and saying so, near a 0 message effect
        sh, shlo, shhi = iv = cluster_bootstrap(lambda i: float(num[i].mean()), fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
        out["curve"].append({"arm": arm, "layer_s": int(ls), "layer_r": int(lr), "share": r["estimate"],
                             **ratio_fields(r), "shift": sh, "shift_ci_low": shlo, "shift_ci_high": shhi, **iv.fields("shift_"),
                             "n": int(len(g))})
    out["by_sender"] = by_sender(t, n_boot=n_boot, seed=seed, ci=ci)
    return out


def by_sender(t: pd.DataFrame, *, n_boot: int, seed: int, ci: float) -> list[dict[str, Any]]:
    """Figure 8's reading: on labelled pairs, the margin shift toward the *sender's* answer (m_arm - m_none,
    logits) of the transfer and message arms, split by whether the sender was right. A wrong sender's
    state still pulling toward its answer is transfer of the sender's answer, not of the truth."""
    if not {"reference", "peer_answer"} <= set(t.columns):
        return []
    lab = t[t["arm"].isin(["transfer", "message"]) & t["reference"].map(lambda r: isinstance(r, str))]
    out = []
    for (right, ls, lr, arm), g in lab.assign(sender_right=lab["peer_answer"] == lab["reference"]).groupby(
            ["sender_right", "layer_s", "layer_r", "arm"], sort=True):
        num = (g["margin"] - g["margin_none"]).to_numpy(float)
        sh, lo, hi = iv = cluster_bootstrap(lambda i: float(num[i].mean()), g["family"].to_numpy(), n_boot=n_boot,
                                       seed=seed, ci=ci, resampled="question family")
        out.append({"sender_right": bool(right), "arm": arm, "layer_s": int(ls), "layer_r": int(lr), "shift": sh,
                    "ci_low": lo, "ci_high": hi, **iv.fields(), "n": int(len(g))})
    return out


def fit_contexts(items: dict, pairs: Sequence[dict], P: dict) -> tuple[list[list[dict]], list[str]]:
    """The map's fit set: both agents' f = 0 readout contexts of every pair (the kind of state that
    is transferred) and the prompt file's neutral filler sentences; groups = question id."""
    convs, groups = [], []
    for p in pairs:
        for text in (p["own_text"], p["peer_text"]):
            convs.append(readout_prefill(reflection_messages(items[p["qid"]], text, P), "", P))
            groups.append(p["qid"])
    for k, s in enumerate(P.get("filler_sentences", [])):
        convs.append([{"role": "user", "content": s}])
        groups.append(f"filler-{k}")
    return convs, groups


def run_experiment(cfg: Any, run: Any, receiver: Any, items: dict, pairs: Sequence[dict], P: dict,
                   progress: Any = None, sender: Any = None) -> dict[str, Any]:
    """``chorus influence transfer``: load the sender (``transfer.sender``; 'same' = the receiver),
    resolve the layer pairs, fit and store the maps where widths differ (RUN/maps/*.npz), write
    tables/transfer.parquet; returns the run info."""
    spec = cfg.transfer
    pairs = list(pairs)[:spec.max_pairs] if spec.max_pairs else list(pairs)
    sspec = spec.sender_spec(cfg.model) if sender is None else None
    own = sspec is not None
    if own:
        # the sender's weights are read too (transformers); no store: states, not calls
        sender = serving.build_engine(sspec, role="sender")
    sender = sender if sender is not None else receiver
    try:
        run.record_engines("sender", sender)
        si, ri = model_info(sender), model_info(receiver)
        r_layers = list(range(ri["n_layers"])) if spec.layers == "all" else [int(x) for x in spec.layers]
        bad = [x for x in r_layers if not 0 <= x < ri["n_layers"]]
        if bad:
            raise ConfigError(f"transfer.layers: {bad} out of range for the receiver {_describe(ri)}; "
                              f"sender {_describe(si)}")
        s_layers = spec.sender_layers if spec.sender_layers is not None else \
            default_sender_layers(si["n_layers"], ri["n_layers"], r_layers)
        bad = [x for x in s_layers if not 0 <= x < si["n_layers"]]
        if bad:
            raise ConfigError(f"transfer.sender_layers: {bad} out of range for the sender {_describe(si)}; "
                              f"receiver {_describe(ri)}")
        lp = list(zip(s_layers, r_layers))
        info: dict[str, Any] = {"sender": si, "receiver": ri, "site": spec.site, "layer_pairs": [list(x) for x in lp],
                                "n_pairs": len(pairs), "write": "replacement", "maps": []}
        maps: dict = {}
        if si["width"] != ri["width"] and pairs:
            convs, groups = fit_contexts(items, pairs, P)
            key = hashlib.sha256(json.dumps({"convs": convs, "s": sender.identity, "r": receiver.identity,
                                             "lp": lp, "alphas": spec.map.alphas, "k": spec.map.n_splits},
                                            sort_keys=True, default=str).encode()).hexdigest()
            paths = {x: run.path / "maps" / f"transfer_L{x[0]}_to_L{x[1]}.npz" for x in lp}
            if all(p.is_file() for p in paths.values()) and \
                    all(LinearMap.load(p).info.get("key") == key for p in paths.values()):
                maps = {x: LinearMap.load(p) for x, p in paths.items()}  # resumed run: same fit set
            else:
                maps = fit_map(sender, receiver, convs, lp, groups=groups, alphas=spec.map.alphas,
                               n_splits=spec.map.n_splits)
                for x, m in maps.items():
                    m.info["key"] = key
                    m.save(paths[x])
            info["maps"] = [{"layer_s": m.layer_s, "layer_r": m.layer_r, "alpha": m.alpha, "r2_heldout": m.r2_heldout,
                             "r2_train": m.r2_train, "n_fit": m.n_fit, "note": m.info.get("note"),
                             "file": str(paths[x].relative_to(run.path))} for x, m in maps.items()]
        if pairs:
            run.write_table("transfer", run_pairs(sender, receiver, items, pairs, P, lp, site=spec.site, maps=maps,
                                                  seed=cfg.seed, progress=progress))
        return info
    finally:
        if own:
            sender.close()


def _measure_transfer(cfg, run, eng, items, pairs, P, progress, info) -> None:
    info.update(run_experiment(cfg, run, eng, items, pairs, P, progress))  # latent state transfer


MECHANIC = Mechanic(_measure_transfer, bootstrapped(summarize, ("curve", ip.transfer_curve, "transfer_share")))
