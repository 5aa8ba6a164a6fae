"""The device plans chorus makes for the papers' GPU jobs on one 80 GB card, from sizes alone.

    .venv/bin/python bench/plan_paper.py --out bench/results/device-plans-h100.json

Sizes are the closed-form parameter counts of the published config.json files
(``chorus.serving.dummy.published_config``; text weights only: a checkpoint with vision or audio towers
or per-layer embeddings is larger, and on a user's machine the plan reads the real safetensors
headers instead). The plans are the same code a council or a role-play comparison calls
(``chorus.serving.roles.plan_roles`` → ``chorus.serving.plan.plan_devices``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chorus.serving.dummy import published_config  # noqa: E402
from chorus.serving.memory import BYTES, GIB  # noqa: E402
from chorus.serving.plan import DevicePlanError, Need, plan_devices  # noqa: E402
from chorus.simulate.roleplay.config import SftConfig, load  # noqa: E402
from chorus.simulate.roleplay.sft_memory import Dims, estimate, settings_for  # noqa: E402

H100_GIB = 79.1  # an H100 80GB's total as torch reports it (torch.cuda.get_device_properties)
SEATS = ("llama-3.1-8b-instruct", "qwen3.5-9b", "gemma-4-e4b-it")


def gib(arch: str, dtype: str = "bfloat16") -> float:
    return Dims.from_config(published_config(arch)).n_params() * BYTES[dtype] / GIB


def council(device: float, config: str = "open_weight") -> dict:
    """The BDA paper's open-weight council as the shipped config ``simulate/council/configs/open_weight.yaml``
    declares it: every role the run uses (seats, the baselines' synthesizer, Self-MoA and ArgLLMs on seat
    A1's engine) in one phase, the judge after, in its own; roles of one profile share an engine."""
    from chorus.simulate.council.config import load as load_council
    cfg = load_council(config)
    needs = [Need(role, s.profile, s.backend, s.dtype, gib(s.profile), phase="judge" if role == "judge" else "council")
             for role, s in cfg.roles().items()]
    return plan_devices(needs, device).to_dict()


def sft_compare(device: float, arch: str = SEATS[0]) -> dict:
    """The DEBATE SFT comparison: train (the shipped recipe, full fine-tuning with checkpointing),
    then the base and the SFT model one at a time on vLLM, then the classifier."""
    settings = settings_for(load("default", SftConfig, part="sft"))
    est = estimate(published_config(arch), settings)
    w = gib(arch)
    needs = [Need("trainer", arch, "trainer", "bfloat16", w, phase="train", need_gib=est.total_gib),
             Need("base", arch, "vllm", "bfloat16", w, phase="base"),
             Need("sft", arch + "-sft", "vllm", "bfloat16", w, phase="sft"),
             Need("classifier", arch, "vllm", "bfloat16", w, phase="classifier")]
    return {"trainer_estimate_gib": round(est.total_gib, 2), **plan_devices(needs, device).to_dict()}


def rows(plan: dict) -> list[str]:
    out = [f"  plan: {plan['mode']}"]
    for ph in plan["phases"]:
        for e in ph["engines"]:
            util, kv = e.get("gpu_memory_utilization"), e.get("kv_gib")
            out.append(f"    {ph['name']:<10} {ph['mode']:<6} {'+'.join(e['roles']):<16} {e['backend']:<7} "
                       f"weights {e['weights_gib']:6.2f} GiB  needs {e['need_gib']:6.2f} GiB  "
                       f"util {util if util is not None else '-':<6} KV {'-' if kv is None else f'{kv:.2f} GiB'}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device-gib", type=float, default=H100_GIB)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    res: dict = {"device_gib": a.device_gib, "sizes_gib": {s: round(gib(s), 2) for s in SEATS}}
    for name, fn in (("bda_open_weight_council", council), ("debate_sft_comparison", sft_compare)):
        try:
            res[name] = fn(a.device_gib)
        except DevicePlanError as err:
            res[name] = {"error": str(err)}
    print(f"device {a.device_gib} GiB; bf16 weights (closed form): "
          + ", ".join(f"{k} {v} GiB" for k, v in res["sizes_gib"].items()))
    for name in ("bda_open_weight_council", "debate_sft_comparison"):
        print(name)
        print("\n".join(rows(res[name]) if "error" not in res[name] else ["  error: " + res[name]["error"]]))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
