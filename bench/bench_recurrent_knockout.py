"""Benchmark of recurrent-state knockout (issue 33 part 2) on a hybrid (Qwen3.5) model.

    .venv/bin/chorus models dummy qwen3.5-9b --layers 4 --dtype float32 --out /tmp/q35-L4
    .venv/bin/python bench/bench_recurrent_knockout.py --profile /tmp/q35-L4 --out bench/results/recurrent-knockout-q35-L4-cpu.json
    .venv/bin/python bench/bench_recurrent_knockout.py --profile /models/Qwen3.5-9B      # a GPU: bfloat16

On one batch of single-peer debate contexts whose peer message is about ``--words`` words, the
forced-choice readout (last position) is timed plain and with the peer message cut in every layer
by each token mixer (attention only, the recurrent route only, both), interleaved repeats,
medians, each ending with a device synchronisation. It also records, at this size:

* exactness: the first recurrent layer's cut output on one context against
  ``recurrent.recompute_layer`` (token by token, float64), as the largest difference relative to
  the output's largest magnitude (float32 rounding on a CPU; bfloat16 rounding in bfloat16);
* independence: the message's tokens replaced by other tokens of the same length, the readout's
  largest log-prob change with both mixers cut in every layer (0 when nothing reaches it), and
  with attention alone (what the recurrent route still carries).

``measure`` is shared with bench/gpu_check_bare.py. Dummy weights: cost and exactness, not findings.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def contexts(eng: Any, n: int, words: int) -> tuple[list[list[dict]], list[tuple[int, int, int]]]:
    """``n`` single-peer debate contexts (the knockout experiment's layout) whose peer response is
    about ``words`` words; the block target is the quoted peer block."""
    from bench_knockout import synthetic_pairs
    from chorus.interventions import knockout_pairs as kp
    from chorus.simulate.debate.prompts import load_prompts

    items, pairs = synthetic_pairs(n)
    filler = " ".join(["Each option deserves a careful look before the final answer is given."] * max(1, words // 12))
    for p in pairs:
        p["peer_text"] = f"{filler} {p['peer_text']}"
    ctxs = kp.knockout_contexts(items, pairs, load_prompts())
    return [c["full"] for c in ctxs], [c["block"] for c in ctxs]


def measure(eng: Any, n: int = 8, words: int = 300, repeats: int = 3) -> dict[str, Any]:
    import torch
    from _recorder import interleaved_medians

    from chorus.interventions import knockout as ko
    from chorus.interventions import recurrent as rc

    be, lm = eng.backend, ko.layer_map(eng)
    rc.supported(lm)
    convs, blocks = contexts(eng, n, words)
    base = ko.prepare_rows(eng, convs, [" A", " B"], blocks)
    seqs = [r.prompt for r in base]
    readout = [(len(s) - 1, len(s)) for s in seqs]
    cuts = {"attention": (lm.maskable, []), "recurrent": ([], lm.unmaskable), "both": (lm.maskable, lm.unmaskable)}

    def rows_of(mixer: str, src=base) -> list:
        att, rec = cuts[mixer]
        return [ko.Row(r.prompt, r.options, r.span, frozenset(att), "after", frozenset(rec)) for r in src]

    def last(rows: list) -> Any:
        return ko._forward(be, lm, rows, [r.prompt for r in rows], readout, keep=1)[:, -1]

    fns = {"plain": lambda: last(base), **{m: (lambda m=m: last(rows_of(m))) for m in cuts}}
    med, _ = interleaved_medians(fns, repeats)
    out: dict[str, Any] = {"model_type": lm.model_type, "n_layers": lm.n_layers, "recurrent_layers": len(lm.unmaskable),
                           "dtype": eng.dtype, "rows": len(base), "prompt_tokens_mean": statistics.mean(map(len, seqs)),
                           "span_tokens_mean": statistics.mean(len(r.span) for r in base),
                           "forward_s_median": med, **{f"ratio_{m}_vs_plain": med[m] / med["plain"] for m in cuts}}

    # exactness of the first recurrent layer at this size, against the float64 recomputation
    layer = lm.unmaskable[0]
    mod = rc.modules(lm)[layer]
    one = base[:1]
    seen: dict[str, Any] = {}
    def grab(_m, args, kw):
        seen.setdefault("x", kw.get("hidden_states", args[0] if args else None))
    h = mod.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        last(one)
    finally:
        h.remove()
    x = seen["x"].detach()
    T = x.shape[1]
    blk = torch.zeros(1, T, T, dtype=torch.bool, device=x.device)
    blk[0, one[0].span.end:, one[0].span.start:one[0].span.end] = True
    with torch.inference_mode(), rc.severed(lm, blk, {layer: torch.ones(1, dtype=torch.bool, device=x.device)}):
        cut = mod(hidden_states=x)
    ref = rc.recompute_layer(mod, x, blk.any(1), blk.any(2))
    out["exactness"] = {"layer": layer, "tokens": T,
                        "max_rel_diff": float((cut.double() - ref).abs().max() / ref.abs().max())}

    # independence: the message's tokens swapped for others of the same length
    g = torch.Generator().manual_seed(0)
    swapped = []
    for r in base:
        p = list(r.prompt)
        p[r.span.start:r.span.end] = torch.randint(1000, 20000, (len(r.span),), generator=g).tolist()
        swapped.append(ko.Row(p, r.options, r.span))
    diff = {}
    for m in ("attention", "both"):
        a, b = last(rows_of(m)), last(rows_of(m, swapped))
        diff[m] = float((a.float() - b.float()).abs().max())
    out["message_swapped_max_logprob_change"] = diff
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True, help="a Qwen3.5 folder or profile (a dummy folder for cost only)")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                    help="the engine's dtype (default: float32 on a CPU, bfloat16 on a GPU)")
    ap.add_argument("--contexts", type=int, default=8)
    ap.add_argument("--words", type=int, default=300, help="length of each peer message")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    from _recorder import machine, write_result
    from chorus.serving import load_engine
    from chorus.serving.engine import default_dtype

    eng = load_engine(a.profile, "hf", dtype=a.dtype or default_dtype())
    res = {"machine": machine(), "profile": a.profile, **measure(eng, a.contexts, a.words, a.repeats)}
    print(json.dumps(res, indent=2, default=str))
    if a.out:
        write_result(a.out, res)


if __name__ == "__main__":
    main()
