"""Device memory of one SFT run, estimated before any model is loaded, and the fit decision
(``plan_training``: on a CUDA device the trainer is one ``chorus.serving.plan.Need`` of the phase "train",
decided by ``chorus.serving.plan.plan_devices`` like every other engine chorus plans; ``decide`` /
``check_fits``: the estimate against a size alone, as for CPU training against the host's RAM).

Pure arithmetic on the model's ``config.json`` (its text config for multimodal models) and the
parameter count (``chorus.serving.memory.parameter_count``: the safetensors headers; the config's closed
form when there are no weights, as for the shipped ``serving/architectures`` configs). Sizes in GiB.

What chorus trains (``simulate/roleplay/sft.py``): on a CUDA device with bf16 the model is *loaded*
in bfloat16 and TRL/transformers' ``bf16=True`` only adds autocast. transformers' Trainer keeps no
fp32 master copy, so parameters, gradients and torch's AdamW states (``zeros_like(param)``) are
all bf16; on CPU everything is fp32. LoRA adapters are fp32 even on a bf16 base (peft's
``autocast_adapter_dtype=True``), with fp32 gradients and optimizer states; the base is frozen.

Components (N = trainable parameters, p = their bytes per value, T = b * s tokens per micro-batch):

- weights: every parameter in the load dtype, plus the fp32 LoRA adapters.
- gradients: N * p (kept across gradient-accumulation micro-batches).
- optimizer states: ``adamw_torch`` / ``adamw_torch_fused``: 2 * N * p (m and v in the
  parameter's dtype); ``adafactor`` (transformers, beta1=None): fp32 row + column factors of each
  matrix, a full fp32 v for vectors; ``adamw_8bit`` / ``paged_adamw_8bit`` (bitsandbytes):
  2 * (1 + 4/256) bytes per value (uint8 m and v, one fp32 absmax per 256-block) for tensors of
  at least 4096 values, fp32 m and v below that; paged states are counted as resident.
- optimizer step: the transient of the update, which happens after the backward pass (so it
  overlaps gradients and states, not activations): ``adamw_torch`` (foreach) makes one full copy
  of v (``_foreach_sqrt``), ``adamw_torch_fused`` none, ``adafactor`` holds fp32 copies of the
  largest matrix's gradient, value, update and its negation (16 bytes per value on a 16-bit
  model, 8 on fp32), 8-bit optimizers none.
- activations, per decoder layer with 16-bit activations (Korthikanti et al. 2022, "Reducing
  Activation Recomputation in Large Transformer Models", eq. 1: s*b*h*(34 + 5*a*s/h) bytes, a =
  heads); the 5*a*s/h attention-score term is dropped with SDPA / flash attention (transformers'
  default, which chorus keeps), and the whole is scaled by p_act/2 for fp32. Without gradient
  checkpointing every layer keeps its activations; with it (transformers checkpoints each decoder
  layer) each layer keeps its 16-bit input, 2*s*b*h bytes, and one layer's full activations are
  recomputed at a time. LoRA with dropout > 0 also keeps each adapted linear's dropped input
  (p_act + 1 bytes per value, the mask included) and every adapter its rank-r intermediate.
- loss head: TRL >= 1.16 fuses the LM head with the loss (``trl.trainer.utils.add_fused_lm_head``:
  the (T, V) logits are never materialized): the valid positions' hidden states and their fp32
  gradient (T*h*(2*p_act + 4)), one 4096 x 32768 logits tile, and, when the head is trained, its
  fp32 gradient accumulator plus the cast (V*h*(4 + p)). Without the fused head (older TRL):
  T*V*(p_act + 12): the logits, their fp32 upcast / log-softmax, its gradient and the input's.
- overhead: 1 GiB (CUDA context, cuBLAS workspaces, allocator slack).

Precision (``PRECISIONS``; issue 52): the dtype the weights are loaded in, the optimizer and the
activations' dtype together. ``mixed``: fp32 weights, gradients and AdamW states under bf16 autocast
(16 bytes a parameter); ``bf16``: pure bf16 weights, gradients and AdamW states (8 bytes a
parameter; small updates round away, the price of fitting an 8B model on one 80 GB card);
``bf16-8bit``: bf16 weights and gradients with bitsandbytes' 8-bit AdamW states; ``fp32``: CPU
training, no autocast. ``choose_precision`` picks the most precise one that fits, and the plan, the
``--check`` output and the run's provenance name it.

total = weights + gradients + optimizer states + max(activations + loss head, optimizer step) +
overhead. The activation and loss-head peaks are summed although they do not quite coincide: an
upper estimate by design, a rough one (the paper's constants are for GPT-style layers with a 4h
MLP; Llama's SwiGLU at 3.5h is close). Sequences count at the configured ``max_length``: chorus
drops longer examples and TRL pads each batch to its longest, so no batch is longer."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Sequence

from chorus.core.config import ConfigError
from chorus.serving.plan import DevicePlan, DevicePlanError, Need, plan_devices

GIB = 1024 ** 3
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adafactor", "adamw_8bit", "paged_adamw_8bit")
BNB_OPTIMIZERS = ("adamw_8bit", "paged_adamw_8bit")   # need bitsandbytes (not a chorus dependency)
OVERHEAD_GIB = 1.0
FUSED_TILE = (4096, 32768)   # TRL's fused LM head: tokens x vocabulary per tile
BNB_MIN_8BIT = 4096          # bitsandbytes keeps smaller tensors' states in fp32
TRAIN_PHASE = "train"        # the device plan's phase of the trainer
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class SftMemoryError(ConfigError):
    """An SFT plan that does not fit the device: one line naming every size."""


@dataclass(frozen=True)
class Dims:
    """A decoder's widths from its config (Llama-style layout: attention q/k/v/o, gated MLP)."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    attention_bias: bool = False
    mlp_bias: bool = False

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "Dims":
        t = config.get("text_config") or config
        try:
            h, a = int(t["hidden_size"]), int(t["num_attention_heads"])
            return cls(hidden=h, layers=int(t["num_hidden_layers"]), heads=a,
                       kv_heads=int(t.get("num_key_value_heads") or a), head_dim=int(t.get("head_dim") or h // a),
                       intermediate=int(t["intermediate_size"]), vocab=int(t["vocab_size"]),
                       tied=bool(config.get("tie_word_embeddings", t.get("tie_word_embeddings", False))),
                       attention_bias=bool(t.get("attention_bias", False)), mlp_bias=bool(t.get("mlp_bias", False)))
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"config.json lacks the decoder widths the SFT memory estimate needs ({err!r})") from err

    def linears(self) -> list[tuple[str, int, int]]:
        """(name, in_features, out_features) of one layer's linear projections."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        return [("q_proj", h, q), ("k_proj", h, kv), ("v_proj", h, kv), ("o_proj", q, h),
                ("gate_proj", h, i), ("up_proj", h, i), ("down_proj", i, h)]

    def shapes(self) -> list[tuple[int, ...]]:
        """Every parameter tensor's shape, in the closed form of the layout."""
        per_layer: list[tuple[int, ...]] = []
        for name, n_in, n_out in self.linears():
            per_layer.append((n_out, n_in))
            if (self.attention_bias and name in LINEAR[:4]) or (self.mlp_bias and name in LINEAR[4:]):
                per_layer.append((n_out,))
        per_layer += [(self.hidden,), (self.hidden,)]        # input and post-attention norms
        head = [] if self.tied else [(self.vocab, self.hidden)]
        return [(self.vocab, self.hidden)] + per_layer * self.layers + [(self.hidden,)] + head

    def n_params(self) -> int:
        return sum(_numel(s) for s in self.shapes())


@dataclass(frozen=True)
class SftSettings:
    """What the trainer will do, as the estimate needs it."""
    micro_batch: int
    seq_len: int
    dtype: Literal["bfloat16", "float32", "float16"] = "bfloat16"
    gradient_checkpointing: bool = True
    optim: str = "adamw_torch_fused"
    lora_r: int | None = None                       # None: full fine-tuning
    lora_targets: Sequence[str] | str = "all-linear"
    lora_dropout: float = 0.0
    fused_lm_head: bool = True                      # TRL >= 1.16
    flash_attention: bool = True                    # SDPA / flash: no s^2 attention scores kept
    act_dtype: str | None = None                    # activations' dtype (bf16 autocast on fp32 weights); None: dtype


@dataclass(frozen=True)
class SftMemoryEstimate:
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    optimizer_step_gib: float
    activations_gib: float
    loss_head_gib: float
    overhead_gib: float
    total_gib: float
    n_params: int
    n_trainable: int
    settings: SftSettings

    @property
    def mode(self) -> str:
        return "full" if self.settings.lora_r is None else f"LoRA r={self.settings.lora_r}"

    @property
    def precision(self) -> str:
        return precision_of(self.settings)

    @property
    def bytes_per_parameter(self) -> float:
        """Weights, gradients and optimizer states per trainable parameter (the precision's cost)."""
        return (self.gradients_gib + self.optimizer_gib) * GIB / max(1, self.n_trainable) + (
            BYTES[self.settings.dtype] if self.settings.lora_r is None else 4)

    def breakdown(self) -> str:
        step = f", optimizer step {self.optimizer_step_gib:.1f}" if self.optimizer_step_gib else ""
        return (f"weights {self.weights_gib:.1f} + gradients {self.gradients_gib:.1f} + optimizer "
                f"{self.settings.optim} {self.optimizer_gib:.1f} + activations {self.activations_gib:.1f} + loss head "
                f"{self.loss_head_gib:.1f} + overhead {self.overhead_gib:.1f} GiB{step}")

    def describe(self) -> str:
        s = self.settings
        return (f"{self.mode} fine-tuning of {self.n_params / 1e9:.2f} B parameters ({self.n_trainable / 1e9:.3f} B "
                f"trainable; precision {self.precision}: {PRECISIONS[self.precision][3]}, "
                f"{self.bytes_per_parameter:.1f} bytes a trainable parameter; micro-batch {s.micro_batch} x {s.seq_len} tokens; gradient checkpointing "
                f"{'on' if s.gradient_checkpointing else 'off'})")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["precision"] = self.precision
        d["bytes_per_parameter"] = self.bytes_per_parameter
        d["settings"]["lora_targets"] = (s if isinstance(s := self.settings.lora_targets, str) else list(s))
        return d


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _targets(dims: Dims, targets: Sequence[str] | str) -> list[tuple[str, int, int]]:
    """The adapted projections of one layer: peft's ``all-linear`` is every linear but the LM head."""
    if targets == "all-linear":
        return dims.linears()
    names = [targets] if isinstance(targets, str) else list(targets)
    return [m for m in dims.linears() if any(m[0] == t or m[0].endswith("." + t) for t in names)]


def lora_parameter_count(dims: Dims, r: int, targets: Sequence[str] | str = "all-linear") -> int:
    """A (r x in) and B (out x r) per adapted projection and layer."""
    return dims.layers * sum(r * (n_in + n_out) for _, n_in, n_out in _targets(dims, targets))


def _optimizer_bytes(optim: str, shapes: list[tuple[int, ...]], p: int) -> float:
    if optim in ("adamw_torch", "adamw_torch_fused"):
        return sum(2 * p * _numel(s) for s in shapes)
    if optim == "adafactor":
        return sum(4 * (_numel(s[:-1]) + _numel(s[:-2] + s[-1:])) if len(s) >= 2 else 4 * _numel(s) for s in shapes)
    if optim in BNB_OPTIMIZERS:
        return sum(2 * (1 + 4 / 256) * _numel(s) if _numel(s) >= BNB_MIN_8BIT else 8 * _numel(s) for s in shapes)
    raise ConfigError(f"training.optim = {optim!r}: the memory estimate knows {', '.join(OPTIMIZERS)}")


def _optimizer_step_bytes(optim: str, shapes: list[tuple[int, ...]], p: int) -> float:
    if optim == "adamw_torch":
        return sum(p * _numel(s) for s in shapes)
    if optim == "adafactor":
        return max(_numel(s) for s in shapes) * (16 if p == 2 else 8)
    return 0.0


def estimate(config: dict[str, Any], settings: SftSettings, n_params: int | None = None) -> SftMemoryEstimate:
    """The memory of one SFT run of the model ``config`` (``n_params``: the checkpoint's count,
    default the config's closed form) under ``settings``; the formulas are in the module docstring."""
    dims = Dims.from_config(config)
    s = settings
    if s.dtype not in BYTES:
        raise ConfigError(f"dtype must be one of {sorted(BYTES)}, got {s.dtype!r}")
    p = BYTES[s.dtype]
    n = int(n_params if n_params is not None else dims.n_params())
    full = s.lora_r is None
    if full:
        trainable_shapes, tp = dims.shapes(), p
        n_train, weights = n, n * p
    else:
        trainable_shapes = [sh for _, i, o in _targets(dims, s.lora_targets) for sh in ((s.lora_r, i), (o, s.lora_r))]
        trainable_shapes *= dims.layers
        tp = 4                                   # peft keeps adapters in fp32
        n_train = sum(_numel(sh) for sh in trainable_shapes)
        weights = n * p + n_train * tp
    grads = n_train * tp
    optim = _optimizer_bytes(s.optim, trainable_shapes, tp)
    step = _optimizer_step_bytes(s.optim, trainable_shapes, tp)

    T, h = s.micro_batch * s.seq_len, dims.hidden
    pa = BYTES[s.act_dtype or s.dtype]           # activations: bf16 under autocast on fp32 weights
    scale = pa / 2                               # the paper's constants are for 16-bit activations
    layer = T * h * (34 + (0 if s.flash_attention else 5 * dims.heads * s.seq_len / h)) * scale
    if not full:
        adapted = _targets(dims, s.lora_targets)
        layer += T * len(adapted) * s.lora_r * pa                                 # A's outputs
        if s.lora_dropout > 0:
            layer += T * sum(i for _, i, _ in adapted) * (pa + 1)                 # dropped inputs and masks
    acts = (dims.layers * 2 * T * h * scale + layer) if s.gradient_checkpointing else dims.layers * layer

    if s.fused_lm_head:
        head = T * h * (2 * pa + 4) + min(T, FUSED_TILE[0]) * min(dims.vocab, FUSED_TILE[1]) * pa
        if full:
            head += dims.vocab * h * (4 + p)
    else:
        head = T * dims.vocab * (pa + 12)

    g = lambda x: x / GIB  # noqa: E731
    total = weights + grads + optim + max(acts + head, step) + OVERHEAD_GIB * GIB
    return SftMemoryEstimate(weights_gib=g(weights), gradients_gib=g(grads), optimizer_gib=g(optim),
                             optimizer_step_gib=g(step), activations_gib=g(acts), loss_head_gib=g(head),
                             overhead_gib=OVERHEAD_GIB, total_gib=g(total), n_params=n, n_trainable=n_train,
                             settings=s)


def _alternatives_text(alternatives: dict[str, SftMemoryEstimate] | None, limit_gib: float) -> str:
    return "; ".join(f"{how}: {a.total_gib:.1f} GiB{'' if a.total_gib <= limit_gib else ' (does not fit either)'}"
                     for how, a in (alternatives or {}).items())


def check_fits(est: SftMemoryEstimate, device_gib: float, device: str, *,
               alternatives: dict[str, SftMemoryEstimate] | None = None) -> None:
    """Nothing when ``est`` fits ``device_gib``; else one ``SftMemoryError`` line with every
    component, the device and each alternative's estimate (what to set, and what it would need)."""
    if est.total_gib <= device_gib:
        return
    alts = _alternatives_text(alternatives, device_gib)
    raise SftMemoryError(f"the SFT plan does not fit {device} ({device_gib:.1f} GiB): {est.describe()} needs an "
                         f"estimated {est.total_gib:.1f} GiB = {est.breakdown()}" + (f"; instead {alts}" if alts else ""))


LORA_FALLBACK = "the shipped LoRA config (chorus sft train lora, simulate/roleplay/configs/sft/lora.yaml)"


def decide(config: dict[str, Any], settings: SftSettings, device: str, device_gib: float, *,
           n_params: int | None = None, lora: SftSettings | None = None) -> SftMemoryEstimate:
    """The estimate when it fits ``device_gib``; else ``SftMemoryError`` naming the sizes and what
    would fit instead: gradient checkpointing (when off) and, for full fine-tuning, ``lora`` (the
    shipped LoRA config's settings, taken at this run's batch, length and dtype)."""
    est = estimate(config, settings, n_params)
    check_fits(est, device_gib, device, alternatives=alternatives(config, settings, n_params=n_params, lora=lora))
    return est


def alternatives(config: dict[str, Any], settings: SftSettings, *, n_params: int | None = None,
                 lora: SftSettings | None = None) -> dict[str, SftMemoryEstimate]:
    """What would need less instead of ``settings``: gradient checkpointing (when off) and, for full
    fine-tuning, ``lora`` taken at this run's batch, length and dtype; each with its estimate."""
    alts = {}
    if not settings.gradient_checkpointing:
        alts["with training.gradient_checkpointing=true"] = estimate(
            config, replace(settings, gradient_checkpointing=True), n_params)
    if settings.lora_r is None and lora is not None:
        lora = replace(lora, micro_batch=settings.micro_batch, seq_len=settings.seq_len, dtype=settings.dtype,
                       fused_lm_head=settings.fused_lm_head)
        alts[LORA_FALLBACK] = estimate(config, lora, n_params)
    return alts


# name: (the weights' load dtype, the optimizer it sets (None: the configured one), the activations'
# dtype, what it holds). Most precise first: choose_precision takes the first that fits.
PRECISIONS: dict[str, tuple[str, str | None, str, str]] = {
    "mixed": ("float32", None, "bfloat16", "fp32 weights, gradients and optimizer states, bf16 autocast"),
    "bf16": ("bfloat16", None, "bfloat16", "pure bf16 weights, gradients and optimizer states"),
    "bf16-8bit": ("bfloat16", "adamw_8bit", "bfloat16", "bf16 weights and gradients, 8-bit optimizer states"),
    "fp32": ("float32", None, "float32", "fp32 weights, gradients, optimizer states and activations"),
}
AUTO_PRECISIONS = ("mixed", "bf16", "bf16-8bit")  # on a bf16 GPU, in order of preference


def precision_of(s: SftSettings) -> str:
    """The precision ``s`` trains in (a name of ``PRECISIONS``)."""
    if s.dtype == "float32":
        return "fp32" if (s.act_dtype or s.dtype) == "float32" else "mixed"
    return "bf16-8bit" if s.optim in BNB_OPTIMIZERS else "bf16"


def with_precision(s: SftSettings, name: str) -> SftSettings:
    """``s`` trained in precision ``name``: its load dtype, optimizer and activations' dtype."""
    if name not in PRECISIONS:
        raise ConfigError(f"training.precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    dtype, optim, act, _ = PRECISIONS[name]
    if optim is None and s.optim in BNB_OPTIMIZERS:
        optim = "adamw_torch_fused"  # an 8-bit optimizer is the precision bf16-8bit, not this one
    return replace(s, dtype=dtype, act_dtype=act, optim=optim or s.optim)


def choose_precision(config: dict[str, Any], settings: SftSettings, usable_gib: float, *,
                     n_params: int | None = None, candidates: Sequence[str] = AUTO_PRECISIONS
                     ) -> tuple[SftSettings, dict[str, float]]:
    """The most precise of ``candidates`` whose estimate fits ``usable_gib`` (else the last, the
    smallest, which the plan then refuses with its line), and every candidate's estimated GiB."""
    totals: dict[str, float] = {}
    chosen = None
    for name in candidates:
        s = with_precision(settings, name)
        totals[name] = round(estimate(config, s, n_params).total_gib, 3)
        if chosen is None and totals[name] <= usable_gib:
            chosen = s
    return chosen or with_precision(settings, candidates[-1]), totals


class SftPlanError(SftMemoryError, DevicePlanError):
    """The device planner refuses the trainer: its one line (role, sizes, device), then the
    estimate's components and what would fit instead. A ``ConfigError`` (the CLI's one-line exit)
    and a ``chorus.serving.plan.DevicePlanError`` (every refused plan)."""


def trainer_need(est: SftMemoryEstimate, profile: str, *, phase: str = TRAIN_PHASE) -> Need:
    """The trainer as the device planner sees it: role "trainer", backend "trainer", its need the
    estimate's total (``need_gib``), its weights one copy in the training dtype."""
    s = est.settings
    return Need("trainer", profile, "trainer", s.dtype, est.n_params * BYTES[s.dtype] / GIB, phase=phase,
                need_gib=est.total_gib)


def plan_training(config: dict[str, Any], settings: SftSettings, device: str, device_gib: float | None, *,
                  cuda: bool = True, n_params: int | None = None, lora: SftSettings | None = None,
                  profile: str = "model", n_devices: int = 1, max_utilization: float = 0.9
                  ) -> tuple[SftMemoryEstimate, DevicePlan]:
    """The SFT run's estimate and its device plan: the trainer (``trainer_need``) planned by
    ``chorus.serving.plan.plan_devices`` as the phase "train", the same code every other plan of chorus is.

    ``cuda``: ``device_gib`` is the CUDA device's total, of which the plan uses ``max_utilization``
    (``plan_devices``' default); a trainer the planner cannot fit raises ``SftPlanError`` (the
    planner's line, then the components and the alternatives, each judged against that usable
    part). Without CUDA (``cuda=False``) the plan is mode "cpu" and ``device_gib`` is the host's
    RAM, where CPU training holds the same tensors: a run that does not fit it is refused by
    ``check_fits``'s ``SftMemoryError``."""
    est = estimate(config, settings, n_params)
    alts = alternatives(config, settings, n_params=n_params, lora=lora)
    need = trainer_need(est, profile)
    if not cuda:
        if device_gib is not None:
            check_fits(est, device_gib, device, alternatives=alts)
        return est, plan_devices([need], None)
    if device_gib is None:
        raise ConfigError("plan_training: a CUDA plan needs the device's size (device_gib)")
    try:
        return est, plan_devices([need], device_gib, n_devices=n_devices, max_utilization=max_utilization)
    except DevicePlanError as err:
        alt = _alternatives_text(alts, device_gib * max_utilization)
        raise SftPlanError(f"{err} (device {device}); the SFT estimate: {est.describe()} needs {est.total_gib:.1f} GiB = "
                           f"{est.breakdown()}" + (f"; instead {alt}" if alt else "")) from None


def settings_for(cfg: Any, *, dtype: str = "bfloat16", fused_lm_head: bool = True) -> SftSettings:
    """The settings of an ``SftConfig`` (``chorus.simulate.roleplay.config``) at the configured length."""
    t, lora = cfg.training, cfg.lora
    return SftSettings(micro_batch=t.per_device_batch_size, seq_len=t.max_length, dtype=dtype,
                       gradient_checkpointing=t.gradient_checkpointing, optim=t.optim,
                       lora_r=lora.r if lora.enabled else None, lora_targets=lora.target_modules,
                       lora_dropout=lora.dropout, fused_lm_head=fused_lm_head)


def recipe_rows(full: SftSettings, lora: SftSettings) -> list[SftSettings]:
    """Full fine-tuning with each optimizer and LoRA, with and without gradient checkpointing."""
    return [replace(s, gradient_checkpointing=ckpt) for ckpt in (True, False)
            for s in [replace(full, lora_r=None, optim=o) for o in OPTIMIZERS[:4]] + [lora]]


def format_table(config: dict[str, Any], rows: list[SftSettings], n_params: int | None = None,
                 device_gib: float | None = None) -> str:
    """One line per settings: each component and the total in GiB (and whether it fits ``device_gib``)."""
    out = [f"{'mode':<10} {'optimizer':<18} {'ckpt':<5} {'weights':>8} {'grads':>7} {'optim':>7} {'step':>6} "
           f"{'activ.':>7} {'head':>6} {'total':>7}" + ("  fits" if device_gib else "")]
    for s in rows:
        e = estimate(config, s, n_params)
        line = (f"{e.mode:<10} {s.optim:<18} {'on' if s.gradient_checkpointing else 'off':<5} {e.weights_gib:8.2f} "
                f"{e.gradients_gib:7.2f} {e.optimizer_gib:7.2f} {e.optimizer_step_gib:6.2f} {e.activations_gib:7.2f} "
                f"{e.loss_head_gib:6.2f} {e.total_gib:7.2f}")
        out.append(line + (f"  {'yes' if e.total_gib <= device_gib else 'no'}" if device_gib else ""))
    return "\n".join(out)


if __name__ == "__main__":  # python -m chorus.simulate.roleplay.sft_memory [ARCH] [DEVICE_GIB]: the shipped recipes
    import sys

    from chorus.serving.dummy import published_config
    from chorus.simulate.roleplay.config import SftConfig, load
    arch = sys.argv[1] if len(sys.argv) > 1 else "llama-3.1-8b-instruct"
    dev = float(sys.argv[2]) if len(sys.argv) > 2 else None
    cfg = published_config(arch)
    full, lora = (settings_for(load(n, SftConfig, part="sft")) for n in ("default", "lora"))
    print(f"{arch}: {Dims.from_config(cfg).n_params():,} parameters (closed form of config.json), bfloat16, "
          f"micro-batch {full.micro_batch} x {full.seq_len} tokens (sft default.yaml / lora.yaml), GiB:")
    print(format_table(cfg, recipe_rows(full, lora), device_gib=dev))
