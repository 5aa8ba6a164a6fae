"""Benchmark of the role-play part (issue 8).

    .venv/bin/python bench/bench_roleplay.py                                  # 8 groups, full dynamics, hf
    .venv/bin/python bench/bench_roleplay.py --groups 4 --max-tokens 16 --one-by-one 1 --sft-steps 2
    python3 bench/bench_roleplay.py --gpu-lora-only --out lora.json         # on a GPU machine

Without a call store, so every request is computed:
(1) batched: full dynamics through ``simulate`` (one engine call per turn-step across all groups);
    simulated groups per minute;
(2) raw engine: exactly the batches (1) sent, replayed with ``engine.chat`` and nothing around it
    (target: (1) reaches >= 0.8 x the raw tokens/s at the same batch sizes);
(3) group by group: the first ``--one-by-one`` groups simulated alone (speedup of (1) per group);
(4) SFT steps per second on CPU (TRL, LoRA, the embedded model) over ``--sft-steps`` steps;
(5) with a GPU: one LoRA SFT step (forward, backward, AdamW) of the Llama-3.1-8B architecture with
    random weights (bf16), batch 4 x 1024 tokens, completion-only labels on the last half.
Groups beyond the fixture's 8 are copies with new ids (the timing depends on shapes, not content).
SmolLM2-135M numbers are plumbing, not findings.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from _recorder import Recorder, machine  # noqa: E402  (bench/ is the script directory)


def fixture_groups(n: int):
    from chorus.simulate.roleplay.data import golden_mask, load_groups
    base, _ = golden_mask(load_groups())
    out = []
    for i in range(n):
        g = copy.deepcopy(base[i % len(base)])
        g.group_id = f"{g.group_id}-c{i}"
        out.append(g)
    return out


def bench_simulation(a) -> dict:
    from chorus.serving import load_engine
    from chorus.simulate.roleplay.prompts import load_prompts
    from chorus.simulate.roleplay.setups import simulate
    P = load_prompts()
    groups = fixture_groups(a.groups)
    eng = load_engine(a.profile, a.backend)            # no store: everything is computed
    kw = dict(temperature=0.7, top_p=1.0, max_tokens=a.max_tokens, max_utterances=a.max_utterances)
    rec = Recorder(eng)
    t0 = time.perf_counter()
    msgs, info = simulate(rec, groups, a.setup, P, source="base", seed=0, **kw)
    batched_s = time.perf_counter() - t0
    res = {"groups": len(groups), "setup": a.setup, "requests": info["n_requests"], "engine_calls": len(rec.calls),
           "batch_sizes": sorted({len(c) for c, _ in rec.calls}), "new_tokens": info["new_tokens"],
           "batched_s": round(batched_s, 2), "groups_per_min": round(60 * len(groups) / batched_s, 3),
           "batched_tok_s": round(info["new_tokens"] / batched_s, 2)}
    if not a.skip_raw:
        t0, raw_tokens = time.perf_counter(), 0
        for convs, kws in rec.calls:
            raw_tokens += sum(o.completion_tokens for o in eng.chat(convs, **kws))
        raw_s = time.perf_counter() - t0
        res.update(raw_s=round(raw_s, 2), raw_new_tokens=raw_tokens, raw_tok_s=round(raw_tokens / raw_s, 2),
                   ratio_batched_to_raw=round((info["new_tokens"] / batched_s) / (raw_tokens / raw_s), 3))
    if a.one_by_one:
        t0 = time.perf_counter()
        for g in groups[:a.one_by_one]:
            simulate(eng, [g], a.setup, P, source="base", seed=1, **kw)
        per_group = (time.perf_counter() - t0) / a.one_by_one
        res.update(one_by_one_groups=a.one_by_one, one_by_one_s_per_group=round(per_group, 2),
                   speedup_vs_one_by_one=round(per_group * len(groups) / batched_s, 2))
    eng.close()
    return res


def bench_sft(a) -> dict:
    import tempfile

    from chorus.simulate.roleplay.config import SftConfig, load
    from chorus.simulate.roleplay.sft import train_sft
    cfg = load("smoke", SftConfig, {"training.max_steps": a.sft_steps, "data.limit": 4 * a.sft_steps,
                                    "training.per_device_batch_size": 2}, part="sft")
    with tempfile.TemporaryDirectory() as d:
        _, s = train_sft(cfg, Path(d) / "sft")
    return {"steps": s["global_steps"], "per_device_batch": 2, "lora": s["lora"], "train_runtime_s": s["train_runtime_s"],
            "steps_per_second": s["steps_per_second"], "first_loss": s["first_loss"], "last_loss": s["last_loss"]}


def bench_gpu_lora(seq: int = 1024, batch: int = 4, steps: int = 3) -> dict:
    """One LoRA step time for the Llama-3.1-8B architecture, random bf16 weights (no download)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA GPU"}
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    init_s = time.perf_counter() - t0
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-5)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
    labels = ids.clone()
    labels[:, : seq // 2] = -100        # completion-only loss: the prompt half is masked
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return {"arch": "Llama-3.1-8B (random weights, bf16)", "gpu": torch.cuda.get_device_name(0),
            "batch": batch, "seq_len": seq, "lora_r": 16, "target_modules": "all-linear",
            "gradient_checkpointing": True, "trainable_params": trainable, "init_s": round(init_s, 2),
            "step_s": [round(x, 3) for x in times], "step_s_after_warmup": round(min(times[1:] or times), 3),
            "tokens_per_s": round(batch * seq / min(times[1:] or times), 1),
            "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2), "torch": torch.__version__}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--setup", default="full_dynamics", choices=["full_dynamics", "next_message"])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-utterances", type=int, default=2)
    ap.add_argument("--profile", default="smollm2-135m-instruct")
    ap.add_argument("--backend", default="hf")
    ap.add_argument("--one-by-one", type=int, default=1, help="groups timed alone (0 = skip)")
    ap.add_argument("--skip-raw", action="store_true")
    ap.add_argument("--skip-sim", action="store_true")
    ap.add_argument("--sft-steps", type=int, default=0, help="CPU SFT steps to time (0 = skip)")
    ap.add_argument("--gpu-lora-only", action="store_true", help="only (5); needs torch, transformers, peft")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    a = ap.parse_args()
    res = {"machine": {**machine(), "CHORUS_TORCH_THREADS": os.environ.get("CHORUS_TORCH_THREADS")},
           "command": " ".join(sys.argv)}
    if a.gpu_lora_only:
        res["gpu_lora"] = bench_gpu_lora()
    else:
        if not a.skip_sim:
            res["simulation"] = bench_simulation(a)
        if a.sft_steps:
            res["sft_cpu"] = bench_sft(a)
        res["gpu_lora"] = bench_gpu_lora()
    print(json.dumps(res, indent=2))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
