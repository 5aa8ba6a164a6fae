"""Knockout is not deletion, measured (issue 51 item 7): on single-peer debate prompts, the embedded
model's next-token distributions and forced-choice readout under

  (c) the plain prompt (the peer's message in place),
  (a) the chorus knockout (``interventions/knockout.py``: every layer's attention from the positions
      after the message to the message's tokens cut, ``queries="after"``; the tokens stay in place),
  (b) deletion (the same tokens removed from the prompt, so every later token moves back by the
      message's length; the chat template around the message stays),

compared at the positions after the message (the first three, and all of them up to the readout) and
at the final readout. Distances between next-token distributions are total variation (0..1) and
KL(plain || x) in nats; deletion's positions are aligned to the plain prompt's by the tokens after
the message (position t of the plain prompt is t - len(message) of the deleted one). The readout is
the forced-choice margin (log-prob of the peer's answer minus the receiver's own), as the knockout
reports read it; "no message" is the reflection prompt (the message and its wrapper never written).

    PYTHONPATH=. .venv/bin/python bench/knockout_vs_deletion.py --contexts 4 \
        --out bench/results/knockout-vs-deletion-smollm2-cpu.json

SmolLM2-135M-Instruct in float32 on a CPU: plumbing-sized, but the effects it shows (knockout and
deletion differ right after the message by about as much as either differs from the plain prompt)
are the ones the docs describe.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recorder import machine, write_result  # noqa: E402
from bench_knockout import synthetic_pairs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, default=4)
    ap.add_argument("--profile", default="smollm2-135m-instruct")
    ap.add_argument("--near", type=int, default=3, help="positions right after the message compared on their own")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    t0 = time.perf_counter()

    import torch

    from chorus.interventions import knockout as ko
    from chorus.interventions import knockout_pairs as kp
    from chorus.serving import load_engine
    from chorus.simulate.debate.forced_choice import option_strings
    from chorus.simulate.debate.prompts import load_prompts

    torch.set_grad_enabled(False)
    eng = load_engine(a.profile, "hf", dtype="float32")
    be, lm = eng.backend, ko.layer_map(eng)
    items, pairs = synthetic_pairs(a.contexts)
    ctxs = kp.knockout_contexts(items, pairs, load_prompts())
    t_load = time.perf_counter() - t0

    def all_positions(rows, seqs):
        readout = [(len(s) - 1, len(s)) for s in seqs]
        out = []
        for r, s in zip(rows, seqs):  # one at a time: no padding, every position read
            out.append(ko._forward(be, lm, [r], [s], [readout[0]], keep=0)[0][-len(s):])
        return out

    def tv(p, q):  # p, q: (T, V) log-probs
        return 0.5 * (p.exp() - q.exp()).abs().sum(-1)

    def kl(p, q):
        return (p.exp() * (p - q)).sum(-1)

    per = []
    for c in ctxs:
        m = c["meta"]
        opts = option_strings(m["labels"])
        row = ko.prepare_rows(eng, [c["full"]], opts, [c["block"]])[0]
        none = ko.prepare_rows(eng, [c["none"]], opts, [None])[0]
        s, e = row.span.start, row.span.end
        plain_ids = row.prompt
        del_ids = plain_ids[:s] + plain_ids[e:]
        rows = [ko.Row(plain_ids, row.options),
                ko.Row(plain_ids, row.options, row.span, frozenset(lm.maskable), "after"),
                ko.Row(del_ids, row.options),
                ko.Row(none.prompt, none.options)]
        lp_plain, lp_ko, lp_del, lp_none = all_positions(rows, [r.prompt for r in rows])
        # positions after the message: plain/knockout e..T-1, deletion s..T'-1 (the same tokens)
        P, K, D = lp_plain[e:], lp_ko[e:], lp_del[s:]
        assert P.shape == D.shape, (P.shape, D.shape)
        near = slice(0, a.near)

        peer, own = " " + m["peer_answer"], " " + m["own_answer"]
        oi = {o: ids[0] for o, ids in zip(opts, row.options)}

        def margin(lp):
            return float(lp[-1, oi[peer]] - lp[-1, oi[own]])

        d = {"qid": m.get("qid"), "tokens": len(plain_ids), "message_tokens": e - s,
             "positions_after": int(P.shape[0])}
        for name, (x, y) in {"knockout_vs_plain": (P, K), "deletion_vs_plain": (P, D),
                             "knockout_vs_deletion": (K, D)}.items():
            t, k = tv(x, y), kl(x, y)
            d[name] = {f"tv_first_{a.near}": float(t[near].mean()), "tv_all_after": float(t.mean()),
                       "tv_readout": float(t[-1]), f"kl_first_{a.near}": float(k[near].mean()),
                       "kl_all_after": float(k.mean()), "kl_readout": float(k[-1])}
        d["margin"] = {"plain": margin(lp_plain), "knockout": margin(lp_ko), "deletion": margin(lp_del),
                       "no_message": margin(lp_none)}
        d["margin"]["effect_knockout"] = d["margin"]["plain"] - d["margin"]["knockout"]
        d["margin"]["effect_deletion"] = d["margin"]["plain"] - d["margin"]["deletion"]
        d["margin"]["effect_no_message"] = d["margin"]["plain"] - d["margin"]["no_message"]
        d["margin"]["knockout_minus_deletion"] = d["margin"]["knockout"] - d["margin"]["deletion"]
        per.append(d)
        print(f"context {len(per)}/{len(ctxs)}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    def mean(path):
        vals = [x for x in (_get(d, path) for d in per)]
        return {"mean": statistics.fmean(vals), "min": min(vals), "max": max(vals)}

    summary = {}
    for name in ("knockout_vs_plain", "deletion_vs_plain", "knockout_vs_deletion"):
        summary[name] = {k: mean((name, k)) for k in per[0][name]}
    summary["margin"] = {k: mean(("margin", k)) for k in per[0]["margin"]}
    summary["margin"]["abs_knockout_minus_deletion"] = {
        "mean": statistics.fmean(abs(d["margin"]["knockout_minus_deletion"]) for d in per)}
    res = {"machine": machine(), "profile": a.profile, "dtype": eng.dtype, "n_layers": lm.n_layers,
           "layers_cut": len(lm.maskable), "queries": "after", "contexts": len(per), "near": a.near,
           "command": "PYTHONPATH=. .venv/bin/python bench/knockout_vs_deletion.py --contexts "
                      f"{a.contexts} --out {a.out}" if a.out else None,
           "summary": summary, "per_context": per, "seconds_load": t_load,
           "seconds": time.perf_counter() - t0}
    print(json.dumps({"summary": summary, "seconds_load": t_load, "seconds": res["seconds"]}, indent=2))
    if a.out:
        write_result(a.out, res)


def _get(d, path):
    for k in path:
        d = d[k]
    return d


if __name__ == "__main__":
    main()
