"""Serving benchmarks: chorus over the raw engines, and the call store.

    .venv/bin/python bench/bench_serving.py                 # hf + vllm on this machine, store
    .venv/bin/python bench/bench_serving.py --only store
    .venv/bin/python bench/bench_serving.py --gpu-llama8b   # on a GPU: Llama-3.1-8B architecture, random weights

Throughput is output tokens/s of greedy chat generation (64 new tokens max) for 1, 8, 32 and 128
requests. chorus and the raw engine run the same token prompts, alternating, medians over repeats.
Writes bench/results/serving-<host>.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _recorder import machine  # noqa: E402  (bench/ is the script directory)

PROFILE = "smollm2-135m-instruct"
TOPICS = ["rivers", "mountains", "trains", "bread", "music", "winter", "bees", "the ocean", "libraries", "clocks",
          "bridges", "gardens", "rain", "chess", "maps", "lanterns"]


def convs(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"Write a few sentences about {TOPICS[i % len(TOPICS)]} (note {i})."}]
            for i in range(n)]


def bench_hf(sizes, repeats, new_tokens):
    import torch

    from chorus.serving import load_engine

    eng = load_engine(PROFILE, "hf", dtype="float32")
    be = eng.backend
    model = be.model
    rows = []
    for n in sizes:
        cs = convs(n)
        prompts = [eng.render(c).ids for c in cs]

        def raw():
            # a plain transformers generate() loop over the same micro-batches (left padding)
            toks = 0
            order = sorted(range(n), key=lambda i: -len(prompts[i]))
            for b in range(0, n, be.batch_size):
                idx = order[b:b + be.batch_size]
                ids, mask = be._pad([prompts[i] for i in idx])
                with torch.inference_mode():
                    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                                         do_sample=False, pad_token_id=be.pad_id, eos_token_id=be.eos_ids)
                for row in out[:, ids.shape[1]:].tolist():
                    k = next((j + 1 for j, t in enumerate(row) if t in be.eos_ids), len(row))
                    toks += k
            return toks

        def ours():
            return sum(o.completion_tokens for o in eng.chat(cs, temperature=0, max_tokens=new_tokens))

        rows.append(_race("hf", n, ours, raw, repeats))
    eng.close()
    return rows


def bench_vllm(sizes, repeats, new_tokens, eager=False):
    from chorus.serving import load_engine

    eng = load_engine(PROFILE, "vllm", dtype="float32", enforce_eager=eager)
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = eng.backend.llm
    rows = []
    for n in sizes:
        cs = convs(n)
        prompts = [TokensPrompt(prompt_token_ids=eng.render(c).ids) for c in cs]
        sp = SamplingParams(temperature=0, max_tokens=new_tokens)

        def raw():
            return sum(len(o.outputs[0].token_ids) for o in llm.generate(prompts, sp, use_tqdm=False))

        def ours():
            return sum(o.completion_tokens for o in eng.chat(cs, temperature=0, max_tokens=new_tokens))

        rows.append(_race("vllm", n, ours, raw, repeats))
    eng.close()
    return rows


def _race(backend, n, ours, raw, repeats):
    ours(), raw()  # warm-up (and compile) at this batch size
    t_ours, t_raw, tok_o, tok_r = [], [], 0, 0
    for _ in range(repeats):
        t0 = time.perf_counter(); tok_o = ours(); t_ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); tok_r = raw(); t_raw.append(time.perf_counter() - t0)
    mo, mr = statistics.median(t_ours), statistics.median(t_raw)
    # tokens/s compares only when both sides generated the same tokens (bench/gpu_check.py fails otherwise)
    row = {"backend": backend, "requests": n, "new_tokens_chorus": tok_o, "new_tokens_raw": tok_r,
           "equal_work": tok_o == tok_r,
           "chorus_tok_s": round(tok_o / mo, 1), "raw_tok_s": round(tok_r / mr, 1),
           "ratio": round((tok_o / mo) / (tok_r / mr), 3), "chorus_s": round(mo, 3), "raw_s": round(mr, 3)}
    print(json.dumps(row), flush=True)
    return row


def bench_store(n_calls=10_000):
    from chorus.serving.store import CallStore, request_key

    with tempfile.TemporaryDirectory() as d:
        st = CallStore(Path(d) / "calls.sqlite")
        model = {"profile": PROFILE, "weights_sha256": "x" * 64, "dtype": "float32"}
        reqs = [{"messages": [{"role": "user", "content": f"question {i} " + "lorem ipsum " * 20}], "temperature": 0.0,
                 "top_p": 1.0, "max_tokens": 64, "stop": [], "seed": i, "json_schema": None, "choices": None}
                for i in range(n_calls)]
        out = {"text": "an answer of moderate length " * 8, "prompt_tokens": 60, "completion_tokens": 64,
               "finish_reason": "length", "conformed": None, "parsed": None, "latency_s": 0.01, "error": None}
        # the engine's path per call: hash the request, look it up (miss), write it with its group
        t0 = time.perf_counter()
        for g in range(0, n_calls, 16):
            keys = [request_key(model, "chat", r) for r in reqs[g:g + 16]]
            st.get_many(keys)
            st.put_many([(k, "chat", model, r, out, "hf") for k, r in zip(keys, reqs[g:g + 16])])
        write_per_call_ms = (time.perf_counter() - t0) / n_calls * 1e3
        st.close()
        st = CallStore(Path(d) / "calls.sqlite")
        t0 = time.perf_counter()
        keys = [request_key(model, "chat", r) for r in reqs]
        got = st.get_many(keys)
        read_all_s = time.perf_counter() - t0
        assert len(got) == n_calls
        # the same through the engine: 10,000 store hits (render + hash + lookup)
        from chorus.serving import load_engine
        eng = load_engine(PROFILE, "hf", store=Path(d) / "engine.sqlite")
        cs = [[{"role": "user", "content": f"q{i}"}] for i in range(n_calls)]
        from chorus.serving.types import Completion, RequestSampling
        rows = []
        for i, c in enumerate(cs):  # pre-fill as if these calls had been made
            k = request_key(eng.identity, "chat", {"messages": c, **RequestSampling(temperature=0, max_tokens=8).key_dict()})
            rows.append((k, "chat", eng.identity, {"messages": c}, Completion("x", 1, 1, "stop").to_dict(), "hf"))
        eng.store.put_many(rows)
        t0 = time.perf_counter()
        res = eng.chat(cs, temperature=0, max_tokens=8)
        engine_hits_s = time.perf_counter() - t0
        assert all(r.cached for r in res) and eng.model_calls == 0
        eng.close()
    row = {"store_write_per_call_ms": round(write_per_call_ms, 4), "store_read_10k_s": round(read_all_s, 3),
           "engine_10k_hits_s": round(engine_hits_s, 3)}
    print(json.dumps(row), flush=True)
    return row


def bench_gpu_llama8b(sizes=(1, 8, 32, 128, 256), new_tokens=256, repeats=2):
    """vLLM on a GPU with the Llama-3.1-8B architecture and random weights (load_format=dummy)."""
    from chorus.serving.dummy import write_config_and_tokenizer

    # the published config (serving/architectures) and the stand-in tokenizer, no weights: vLLM draws them
    d = Path(tempfile.mkdtemp()) / "llama-3.1-8b-dummy"
    write_config_and_tokenizer("llama-3.1-8b-instruct", d)
    (d / "model.safetensors").write_bytes(b"")  # satisfies the folder check; dummy load ignores it
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from chorus.serving import load_engine

    eng = load_engine(str(d), "vllm", dtype="bfloat16", load_format="dummy", max_model_len=4096)
    llm = eng.backend.llm
    # equal work: chorus's requests cannot ignore EOS, so neither side does (same greedy requests,
    # same stopping rule); the generated totals are compared row by row (``equal_work``)
    sp = SamplingParams(temperature=0, max_tokens=new_tokens)
    rows = []
    for n in sizes:
        cs = convs(n)
        prompts = [TokensPrompt(prompt_token_ids=eng.render(c).ids) for c in cs]

        def raw():
            return sum(len(o.outputs[0].token_ids) for o in llm.generate(prompts, sp, use_tqdm=False))

        def ours():
            # the engine path (render, store keys, stepping) with the same requests
            return sum(o.completion_tokens for o in eng.chat(cs, temperature=0, max_tokens=new_tokens, stop=None))

        rows.append(_race("vllm-gpu-llama8b-dummy", n, ours, raw, repeats))
    eng.close()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["hf", "vllm", "store"], action="append")
    ap.add_argument("--sizes", default="1,8,32,128")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--gpu-llama8b", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    res = {"machine": machine(), "command": " ".join(sys.argv), "new_tokens": a.new_tokens, "repeats": a.repeats}
    parts = a.only or ["store", "hf", "vllm"]
    if a.gpu_llama8b:
        res["gpu_llama8b"] = bench_gpu_llama8b()
        parts = a.only or []
    if "store" in parts:
        res["store"] = bench_store()
    if "hf" in parts:
        res["hf"] = bench_hf(sizes, a.repeats, a.new_tokens)
    if "vllm" in parts:
        res["vllm"] = bench_vllm(sizes, a.repeats, a.new_tokens)
    out = Path(a.out or ROOT / "bench" / "results" / f"serving-{platform.node()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
