"""Benchmark of knockout through generation (``interventions/knockout_generate.py``): seconds per greedy
reply with a peer message cut in every layer, with the KV cache and recomputed without it, against the
plain greedy reply of the same loop and the engine's own temperature-0 generation.

    .venv/bin/python bench/bench_knockout_generate.py                      # embedded model, 4 contexts, 32 tokens
    .venv/bin/python bench/bench_knockout_generate.py --out bench/results/knockout-generate-cpu.json

Also checks that the cached and recomputed knockout replies are the same tokens.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _recorder import machine, write_result  # noqa: E402  (bench/ is the script directory)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="smollm2-135m-instruct")
    ap.add_argument("--contexts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--route", default="nnsight", choices=["nnsight", "interface"])
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    from bench_knockout import synthetic_pairs
    from chorus.interventions import knockout_pairs as kp
    from chorus.interventions.knockout_generate import greedy
    from chorus.serving import load_engine
    from chorus.serving.engine import default_dtype
    from chorus.simulate.debate.prompts import load_prompts

    eng = load_engine(a.profile, "hf", dtype=default_dtype())
    items, pairs = synthetic_pairs(a.contexts)
    ctxs = kp.knockout_contexts(items, pairs, load_prompts())
    convs = [c["full"][:-1] for c in ctxs]  # the receiver's turn, without the readout prefill: it writes
    blocks = [c["block"] for c in ctxs]
    res: dict = {"machine": machine(), "profile": a.profile, "contexts": len(convs), "max_new_tokens": a.tokens,
                 "route": a.route, "prompt_tokens_mean": statistics.mean(len(eng.render(c).ids) for c in convs)}
    runs = {"plain_loop": lambda c, b: greedy(eng, c, None, max_new_tokens=a.tokens),
            "knockout_cached": lambda c, b: greedy(eng, c, b, max_new_tokens=a.tokens, route=a.route),
            "knockout_recomputed": lambda c, b: greedy(eng, c, b, max_new_tokens=a.tokens, route=a.route, use_cache=False),
            "engine_t0": lambda c, b: eng.chat([c], temperature=0.0, max_tokens=a.tokens)[0]}
    eng.store = None
    out, secs = {}, {}
    for k, f in runs.items():
        t0 = time.perf_counter()
        out[k] = [f(c, b) for c, b in zip(convs, blocks)]
        secs[k] = (time.perf_counter() - t0) / len(convs)
    res["s_per_reply"] = secs
    res["tokens_per_reply"] = {k: statistics.mean(len(getattr(o, "ids", None) or eng.tokenizer(o.text).input_ids)
                                                  for o in v) for k, v in out.items()}
    res["cached_vs_recomputed_same_tokens"] = all(x.ids == y.ids for x, y in zip(out["knockout_cached"], out["knockout_recomputed"]))
    res["knockout_cached_vs_plain_loop"] = secs["knockout_cached"] / secs["plain_loop"]
    res["plain_loop_vs_engine"] = secs["plain_loop"] / secs["engine_t0"]
    res["replies_changed_by_knockout"] = sum(x.ids != y.ids for x, y in zip(out["knockout_cached"], out["plain_loop"]))
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=2))
    if a.out:
        write_result(a.out, res)


if __name__ == "__main__":
    main()
