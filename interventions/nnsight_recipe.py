"""Recipe: your own nnsight intervention on chorus's message spans and layer map (interventions/README.md).

    .venv/bin/python -m chorus.interventions.nnsight_recipe            # the embedded model, hf backend, a few seconds

A debate receiver's readout context (the question, its own answer, one peer's disagreeing answer, the
"answer now" prefill) is rendered exactly as the experiments render it; ``prepare_rows`` finds the peer
text's token span; ``layer_map`` names the decoder layers; inside one nnsight trace the intervention
replaces the residual stream over the peer's tokens, at the output of the chosen layers, by its mean
over the rest of the prompt (a mean ablation of the message). The option log-probs are then read as
the engine reads them, beside the plain readout and chorus's own attention knockout of the same span
(``knockout.option_logprobs``, route nnsight). Swap the body of the ``with`` block for any other edit.
"""
from __future__ import annotations

from typing import Any, Sequence

from chorus.simulate.debate.prompts import debate_messages, load_prompts, readout_prefill
from chorus.simulate.debate.questions import validate_item
from chorus.interventions import knockout as ko
from chorus.serving.profiles import DEFAULT_PROFILE
from chorus.serving.standing import standing

ITEM = {"id": "recipe", "domain": "knowledge", "subdomain": "recipe", "family": "recipe",
        "question": "Which planet is closest to the Sun?", "options": ["Mercury", "Venus"], "reference": "A"}
OWN = "Mercury orbits closest to the Sun, well inside Venus's orbit. Answer: A"
PEER = "I think Venus is the closest, since it is the brightest planet in the sky. Answer: B"


def context() -> tuple[list[dict], tuple[int, int, int], list[str]]:
    """(conversation, block target: (message index, start, end) of the peer text, option strings)."""
    P = load_prompts()
    it = validate_item(ITEM)
    conv = readout_prefill(debate_messages(it, OWN, [(P["peer_name"].format(k=2), PEER)], P), "", P)
    idx = max(i for i, m in enumerate(conv) if PEER in m["content"])
    start = conv[idx]["content"].index(PEER)
    return conv, (idx, start, start + len(PEER)), [" " + lab for lab in it.labels]


def mean_ablate(engine: Any, layers: Sequence[int] | None = None) -> dict[str, Any]:
    """The recipe on ``engine`` (transformers backend): option log-probs plain, with the peer's residual
    mean-ablated at the output of ``layers`` (default: every layer), and with chorus's attention knockout."""
    import torch


    conv, block, opts = context()
    row = ko.prepare_rows(engine, [conv], opts, block)[0]  # prompt ids, option ids, the peer's token span
    lm = ko.layer_map(engine)                                 # decoder layers, attention modules, recurrent ones
    layers = list(range(lm.n_layers)) if layers is None else list(layers)
    nm = ko.nnsight_model(engine)
    env = ko.envoy_layers(nm, lm)
    s, e = row.span.start, row.span.end
    ids = torch.tensor([row.prompt])
    with torch.inference_mode():
        with nm.trace(input_ids=ids, use_cache=False):
            for L in sorted(layers):  # forward order: nnsight requires it
                h = env[L].output  # (1, T, hidden): a decoder layer's residual stream
                rest = torch.cat([h[:, :s], h[:, e:]], dim=1).mean(dim=1, keepdim=True)
                h[:, s:e] = rest
            logits = nm.output.logits.save()
        lp = torch.log_softmax(logits[0, -1].float(), dim=-1)
    ablated = {o: float(lp[row.options[k][0]]) for k, o in enumerate(opts)}
    return {"span_tokens": len(row.span), "layers": layers,
            "plain": engine.option_logprobs([conv], opts)[0],
            "mean_ablated": ablated,
            "attention_knockout": ko.option_logprobs(engine, [conv], opts, block, layers=layers)[0]}


def main() -> None:
    from chorus.serving import build_engine  # at call time: the seam tests patch

    eng = build_engine({"profile": DEFAULT_PROFILE, "backend": "hf", "dtype": "float32"})
    r = mean_ablate(eng)
    print(f"peer span: {r['span_tokens']} tokens; layers {r['layers'][0]}..{r['layers'][-1]}")
    for k in ("plain", "mean_ablated", "attention_knockout"):
        lp = r[k]
        print(f"{k:>20}: " + ", ".join(f"log p({o.strip()}) = {v:.4f}" for o, v in lp.items()))
    print(standing([DEFAULT_PROFILE]).text)


if __name__ == "__main__":
    main()
