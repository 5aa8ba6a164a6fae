"""The SFT memory estimate in closed form on a constructed small decoder, the fit decision on
constructed device sizes, and the paper recipe (the shipped default / lora configs) at Llama-3.1-8B."""
from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import EMBEDDED

from chorus.core.config import ConfigError

from chorus.simulate.roleplay.sft_memory import (GIB, Dims, SftMemoryError, SftSettings, check_fits, decide, estimate,
                                          lora_parameter_count, settings_for)

# h 64, 2 layers, 4 heads of 16, 2 KV heads, MLP 128, vocabulary 1000, untied head
SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 128, "vocab_size": 1000, "tie_word_embeddings": False}
# per layer: q 64x64 + k 32x64 + v 32x64 + o 64x64 + gate/up 128x64 + down 64x128 + two norms of 64
PER_LAYER = 4096 + 2048 + 2048 + 4096 + 3 * 8192 + 128     # 36992
N = 64000 + 2 * PER_LAYER + 64 + 64000                     # embeddings, layers, final norm, head: 202048
T = 2 * 8                                                  # micro-batch 2 x 8 tokens
BASE = SftSettings(micro_batch=2, seq_len=8)               # bf16, checkpointing, fused AdamW, fused head


def _bytes(e, field):
    return getattr(e, field) * GIB


def test_closed_form_parameter_count_matches_the_safetensors_headers():
    import json

    from chorus.serving.memory import parameter_count
    from chorus.serving.profiles import get_profile
    assert Dims.from_config(SMALL).n_params() == N == 202048
    path = get_profile(EMBEDDED).require()   # SmolLM2: Llama layout, tied embeddings
    assert Dims.from_config(json.loads((path / "config.json").read_text())).n_params() == parameter_count(path)


def test_full_fine_tuning_components_in_closed_form():
    e = estimate(SMALL, BASE)
    assert e.n_params == e.n_trainable == N
    assert _bytes(e, "weights_gib") == pytest.approx(2 * N)            # bf16
    assert _bytes(e, "gradients_gib") == pytest.approx(2 * N)
    assert _bytes(e, "optimizer_gib") == pytest.approx(4 * N)          # m and v in bf16, no fp32 master
    assert e.optimizer_step_gib == 0                                   # fused: no temporaries
    # checkpointing: each layer's 16-bit input (2 s b h) + one layer's 34 s b h
    acts = 2 * 2 * T * 64 + 34 * T * 64
    assert _bytes(e, "activations_gib") == pytest.approx(acts) and acts == 38912
    # fused head: hidden + fp32 grad (T h (2*2 + 4)), one tile (16 x 1000 bf16), head grad fp32 + cast (V h 6)
    head = T * 64 * 8 + T * 1000 * 2 + 1000 * 64 * 6
    assert _bytes(e, "loss_head_gib") == pytest.approx(head) and head == 424192
    assert _bytes(e, "total_gib") == pytest.approx(8 * N + acts + head + GIB)

    # no checkpointing, eager attention: every layer keeps s b h (34 + 5 a s / h) bytes
    e = estimate(SMALL, replace(BASE, gradient_checkpointing=False, flash_attention=False))
    assert _bytes(e, "activations_gib") == pytest.approx(2 * T * 64 * (34 + 5 * 4 * 8 / 64)) == 74752
    # without TRL's fused head the (T, V) logits: bf16 + fp32 upcast, log-softmax, two gradients
    assert _bytes(estimate(SMALL, replace(BASE, fused_lm_head=False)), "loss_head_gib") == pytest.approx(T * 1000 * 14)
    # fp32 on CPU: 4 bytes a value, activations twice the 16-bit constants
    e = estimate(SMALL, replace(BASE, dtype="float32"))
    assert _bytes(e, "weights_gib") == pytest.approx(4 * N) and _bytes(e, "optimizer_gib") == pytest.approx(8 * N)
    assert _bytes(e, "activations_gib") == pytest.approx(2 * acts)


def test_optimizers_in_closed_form():
    by = {o: estimate(SMALL, replace(BASE, optim=o)) for o in ("adamw_torch", "adafactor", "adamw_8bit")}
    e = by["adamw_torch"]   # foreach: one full copy of v at the step
    assert _bytes(e, "optimizer_gib") == pytest.approx(4 * N) and _bytes(e, "optimizer_step_gib") == pytest.approx(2 * N)
    e = by["adafactor"]     # fp32 row + column factors per matrix, a full fp32 v per norm
    rows_cols = (1000 + 64) * 2 + 2 * ((64 + 64) + (32 + 64) * 2 + (64 + 64) + (128 + 64) * 3 + 2 * 64) + 64
    assert rows_cols == 4496 and _bytes(e, "optimizer_gib") == pytest.approx(4 * rows_cols)
    # the step holds fp32 grad, value, update and its negation of the largest matrix (1000 x 64)
    assert _bytes(e, "optimizer_step_gib") == pytest.approx(16 * 64000)
    assert _bytes(e, "total_gib") == pytest.approx(4 * N + 4 * rows_cols + 16 * 64000 + GIB)   # the step dominates
    e = by["adamw_8bit"]    # uint8 m, v + fp32 absmax per 256 for tensors >= 4096 values; fp32 below
    big = 2 * 64000 + 2 * (4096 + 4096 + 3 * 8192)
    small = 2 * (2048 + 2048 + 128) + 64
    assert _bytes(e, "optimizer_gib") == pytest.approx(big * 2 * (1 + 4 / 256) + small * 8)


def test_lora_counts_adapters_only_for_gradients_and_optimizer():
    d = Dims.from_config(SMALL)
    r = 4   # r (in + out) per projection: q 512, k 384, v 384, o 512, gate / up / down 768
    assert lora_parameter_count(d, r) == 2 * (512 + 384 + 384 + 512 + 3 * 768) == 8192
    assert lora_parameter_count(d, r, ["q_proj", "v_proj"]) == 2 * (512 + 384)
    e = estimate(SMALL, replace(BASE, lora_r=r, lora_dropout=0.1))
    assert e.n_trainable == 8192
    assert _bytes(e, "weights_gib") == pytest.approx(2 * N + 4 * 8192)     # bf16 base + fp32 adapters
    assert _bytes(e, "gradients_gib") == pytest.approx(4 * 8192)
    assert _bytes(e, "optimizer_gib") == pytest.approx(8 * 8192)
    # the recomputed layer also keeps each adapter's rank-r output and its dropped input + mask
    layer = 34 * T * 64 + T * 7 * r * 2 + T * (6 * 64 + 128) * 3
    assert _bytes(e, "activations_gib") == pytest.approx(2 * 2 * T * 64 + layer)
    assert _bytes(e, "loss_head_gib") == pytest.approx(T * 64 * 8 + T * 1000 * 2)   # the frozen head has no grad


def test_the_decision_fits_or_refuses_naming_every_size():
    e = estimate(SMALL, BASE)
    check_fits(e, 1.01, "cuda:0 (test)")    # 1 GiB overhead + under 0.01 GiB: fits
    alt = estimate(SMALL, replace(BASE, lora_r=4))
    with pytest.raises(SftMemoryError) as err:
        check_fits(e, 0.5, "cuda:0 (test)", alternatives={"LoRA": alt})
    msg = str(err.value)
    assert "\n" not in msg and "does not fit cuda:0 (test) (0.5 GiB)" in msg
    assert f"needs an estimated {e.total_gib:.1f} GiB = weights 0.0 + gradients 0.0 + optimizer adamw_torch_fused" in msg
    assert f"LoRA: {alt.total_gib:.1f} GiB (does not fit either)" in msg


def _recipe():
    from chorus.serving.dummy import published_config
    from chorus.simulate.roleplay.config import SftConfig, load
    cfg = published_config("llama-3.1-8b-instruct")
    return cfg, settings_for(load("default", SftConfig, part="sft")), settings_for(load("lora", SftConfig, part="sft"))


def test_paper_recipe_at_8b_fits_an_h100_only_as_shipped():
    cfg, full, lora = _recipe()
    assert (full.micro_batch, full.seq_len, full.lora_r, full.gradient_checkpointing, full.optim) == \
        (4, 4096, None, True, "adamw_torch_fused")
    n = 8_030_261_248   # Llama-3.1-8B's published parameter count
    e = estimate(cfg, full)
    assert e.n_params == n
    T, h, V = 4 * 4096, 4096, 128256
    acts = 32 * 2 * T * h + 34 * T * h                                   # 6.125 GiB
    head = T * h * 8 + 4096 * 32768 * 2 + V * h * 6
    assert e.activations_gib == pytest.approx(6.125)
    assert _bytes(e, "total_gib") == pytest.approx(8 * n + acts + head + GIB)
    assert e.total_gib == pytest.approx(70.64, abs=0.01)
    h100 = 79.1   # about what PyTorch reports as an H100 80GB's total memory
    check_fits(e, h100, "H100")
    # foreach AdamW's copy of v at the step outweighs the activations then: 5 GiB more than fused
    assert estimate(cfg, replace(full, optim="adamw_torch")).total_gib == pytest.approx(e.total_gib - (acts + head) / GIB
                                                                                       + 2 * n / GIB)
    # the former default (no checkpointing) does not fit; the refusal names the fallback
    no_ckpt = replace(full, gradient_checkpointing=False)
    assert estimate(cfg, no_ckpt).activations_gib == pytest.approx(68.0)
    lora_e = estimate(cfg, lora)
    assert lora_e.n_trainable == 41_943_040 and lora_e.total_gib < 30          # r=16 on all seven projections
    assert estimate(cfg, replace(lora, gradient_checkpointing=False)).total_gib > h100
    with pytest.raises(SftMemoryError) as err:
        decide(cfg, no_ckpt, "cuda:0 (NVIDIA H100 80GB HBM3)", h100, lora=lora)
    assert str(err.value) == (
        "the SFT plan does not fit cuda:0 (NVIDIA H100 80GB HBM3) (79.1 GiB): full fine-tuning of 8.03 B parameters "
        "(8.030 B trainable; precision bf16: pure bf16 weights, gradients and optimizer states, 8.0 bytes a trainable "
        "parameter; micro-batch 4 x 4096 tokens; gradient checkpointing off) needs an estimated "
        "132.5 GiB = weights 15.0 + gradients 15.0 + optimizer adamw_torch_fused 29.9 + activations 68.0 + loss head "
        "3.7 + overhead 1.0 GiB; instead with training.gradient_checkpointing=true: 70.6 GiB; the shipped LoRA config "
        "(chorus sft train lora, simulate/roleplay/configs/sft/lora.yaml): 25.2 GiB")
    # on a 40 GiB card even the checkpointed full run is refused, and LoRA is what fits
    with pytest.raises(SftMemoryError, match=r"does not fit A100 \(40.0 GiB\).* needs an estimated 70.6 GiB.*"
                                             r"lora.yaml\): 25.2 GiB$"):
        decide(cfg, full, "A100", 40.0, lora=lora)
    assert decide(cfg, lora, "A100", 40.0, lora=lora).total_gib == pytest.approx(lora_e.total_gib)


def test_cli_refuses_a_plan_that_does_not_fit_before_anything_is_loaded_or_written(tmp_path):
    """CPU: the estimate is compared with the host's RAM; 64 x 65,536 tokens of the embedded model without
    checkpointing need terabytes. One line, exit 2, no run directory, no model loaded."""
    from typer.testing import CliRunner

    from chorus.cli import app
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["sft", "train", "default", "--out", str(out), "--set", "training.max_length=65536",
                                 "--set", "training.per_device_batch_size=64",
                                 "--set", "training.gradient_checkpointing=false"])
    assert r.exit_code == 2, r.output
    msg = " ".join(r.output.split())
    assert "error: the SFT plan does not fit host RAM (CPU training)" in msg
    assert "gradient checkpointing off) needs an estimated" in msg and "lora.yaml): " in msg
    assert not out.exists()


def test_precision_is_stated_and_the_most_precise_that_fits_is_chosen():
    """Issue 52: pure bf16 is 8 bytes a parameter, mixed precision (fp32 weights, gradients and AdamW
    states) 16, bf16 with an 8-bit optimizer about 6; on an 80 GB card the 8B recipe fits only in
    pure bf16 (or 8-bit), on a larger one mixed is taken where it fits, and the choice is named."""
    from chorus.simulate.roleplay.sft_memory import choose_precision, precision_of, with_precision
    cfg, full, _ = _recipe()
    n = 8_030_261_248
    e = {p: estimate(cfg, with_precision(full, p)) for p in ("mixed", "bf16", "bf16-8bit", "fp32")}
    assert {p: x.precision for p, x in e.items()} == {p: p for p in e}
    assert e["bf16"].bytes_per_parameter == pytest.approx(8.0)
    assert e["mixed"].bytes_per_parameter == pytest.approx(16.0)
    assert e["bf16-8bit"].bytes_per_parameter == pytest.approx(6.0, abs=0.05)
    assert e["bf16"].total_gib == pytest.approx(70.64, abs=0.01)  # the shipped estimate, unchanged
    # mixed keeps bf16 activations (autocast): its excess over pure bf16 is the 8 bytes a parameter alone
    assert e["mixed"].activations_gib == pytest.approx(e["bf16"].activations_gib)
    assert _bytes(e["mixed"], "total_gib") - _bytes(e["bf16"], "total_gib") == pytest.approx(
        8 * n + 128256 * 4096 * 2, rel=1e-6)  # plus the head's gradient cast in fp32 rather than bf16
    h100_usable = 79.1 * 0.9
    s, considered = choose_precision(cfg, full, h100_usable)
    assert precision_of(s) == "bf16" and considered["mixed"] > h100_usable >= considered["bf16"]
    s, _ = choose_precision(cfg, full, 400.0)
    assert precision_of(s) == "mixed" and s.dtype == "float32" and s.act_dtype == "bfloat16"
    s, _ = choose_precision(cfg, full, 60.0)   # none fits: the smallest, which the plan then refuses
    assert precision_of(s) == "bf16-8bit" and s.optim == "adamw_8bit"
    assert "precision bf16: pure bf16" in e["bf16"].describe() and e["bf16"].to_dict()["precision"] == "bf16"
    with pytest.raises(ConfigError, match="training.precision must be one of"):
        with_precision(full, "fp8")


def test_check_prints_the_precision_and_the_plan():
    """``chorus sft train --check``: the trainer's plan, whose reason names the precision it trains in
    (CPU here: fp32) and every precision considered, with no model loaded."""
    from typer.testing import CliRunner

    from chorus.cli import app
    r = CliRunner().invoke(app, ["sft", "train", "smoke", "--check"])
    assert r.exit_code == 0, r.output
    msg = " ".join(r.output.split())
    assert "phase train (cpu): smollm2-135m-instruct/trainer/float32 for trainer (needs" in msg
    assert "trains in precision fp32 (fp32 weights, gradients, optimizer states and activations; 16.0 bytes a " \
           "trainable parameter; estimated" in msg
    r = CliRunner().invoke(app, ["sft", "train", "smoke", "--check", "--set", "training.precision=bf16"])
    assert r.exit_code == 0, r.output
    assert "trains in precision bf16 (pure bf16" in " ".join(r.output.split())
