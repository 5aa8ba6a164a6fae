"""How much a readout depends on the batch it is computed in: option log-probs of chats of three
lengths read together (left-padded to the longest) against each read alone, per attention
implementation, and where along the depth the padded row's residual stream parts from its alone run.

Issue 52 asked why Gemma-4's bf16 batch-vs-alone difference on the H200 was ten times Llama's and
Qwen3.5's. What this measure shows on a CPU with the tiny dummy folders in bf16 (the bare check's
step ``bf16.invariance``; its numbers in bench/results/gpu-check-bare-tiny-cpu.json):

* only the padded rows differ (the longest, unpadded row is equal), and only under sdpa: the same
  model under eager attention is bitwise batch-invariant here. The cause is sdpa taking another kernel
  for a padded batch (an explicit mask) than for one sequence (``is_causal``), which rounds
  differently in bf16. The prompts are shorter than Gemma-4's sliding window, so the sliding masks
  under left padding play no part, and the padding side is the same in both (left);
* the padded row's residual stream drifts from its alone run by a similar relative amount per layer
  in both families (``drift_per_layer``); Gemma-4 has more layers (the drift compounds with depth)
  and its readout moves more per unit of final drift (``amplification``: tied, scaled embeddings as
  the LM head, then logit soft-capping), so the same rounding becomes a larger log-prob difference;
* Gemma-4's unscaled attention scores (``scaling = 1.0`` after q/k norms) are not the amplifier:
  rescaling them by 1/sqrt(head_dim) left most of the difference (checked by hand once, not a step).

So nothing in chorus's padding is wrong; bf16 sdpa readouts are batch-dependent at the level the model's
depth and head amplify. Readouts that must not depend on the batch: float32 (the H200's float32
Gemma-4 run: bench/results/gpu-check-bare-h200-gemma-fp32.json) or ``attn_implementation: eager``.
"""
from __future__ import annotations

from typing import Any

WORDS = ["short", "a somewhat longer question about fruit " * 3,
         "long " + "the evidence is weak but the second fits better. " * 12]
OPTIONS = ["A", "B"]


def chats() -> list[list[dict]]:
    return [[{"role": "user", "content": f"{w}\nQuestion: Which is a fruit?\nA. apple\nB. chair\nAnswer with A or B."}]
            for w in WORDS]


def batch_vs_alone(eng: Any) -> dict[str, Any]:
    """Max |log-prob difference| per chat between the batched and the alone readout."""
    cs = chats()
    batch = eng.option_logprobs(cs, OPTIONS)
    alone = [eng.option_logprobs([c], OPTIONS)[0] for c in cs]
    per_row = [max(abs(a[o] - b[o]) for o in OPTIONS) for a, b in zip(alone, batch)]
    lens = [len(eng.render(c).ids) for c in cs]
    return {"max_abs_diff": max(per_row), "per_row": per_row, "pad_tokens": [max(lens) - n for n in lens]}


def layer_drift(eng: Any) -> list[float]:
    """Relative distance, after each decoder layer (index 0: the embeddings), between the shortest
    chat's hidden states in the padded batch and alone."""
    import torch

    be = eng.backend
    prompts = [eng.render(c).ids for c in chats()]
    ids, mask = be._pad(prompts)
    one = torch.tensor([prompts[0]], device=ids.device)
    n = len(prompts[0])
    with torch.inference_mode():
        hb = be.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                      use_cache=False, output_hidden_states=True, logits_to_keep=1).hidden_states
        ha = be.model(input_ids=one, attention_mask=torch.ones_like(one),
                      position_ids=torch.arange(n, device=ids.device)[None], use_cache=False,
                      output_hidden_states=True, logits_to_keep=1).hidden_states
    return [float((x[0, -n:].float() - y[0].float()).norm() / y[0].float().norm()) for x, y in zip(hb, ha)]


def measure(eng: Any) -> dict[str, Any]:
    """``batch_vs_alone`` and ``layer_drift`` under the engine's attention and under eager (restored after)."""
    model = eng.backend.model
    own = model.config._attn_implementation
    out: dict[str, Any] = {"dtype": eng.dtype, "attn_implementation": own}
    for impl in dict.fromkeys([own, "eager"]):
        model.set_attn_implementation(impl)
        try:
            drift = layer_drift(eng)
            b = batch_vs_alone(eng)
            out[impl] = {**b, "layer_drift": drift, "drift_per_layer": drift[-1] / max(1, len(drift) - 1),
                         "amplification": b["max_abs_diff"] / drift[-1] if drift[-1] else None}
        finally:
            model.set_attn_implementation(own)
    return out
