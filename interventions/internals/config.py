"""Typed config of ``chorus influence knockout | patch | probe | concepts | transfer``: what every
influence verb holds (``chorus.interventions.config.SourcedConfig``: the debate it reads, the model, seed,
pair selection) plus each internals verb's own spec. Validated before any model call; the model must
run on the transformers backend (internals need the weights)."""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from chorus.core.config import Strict
from chorus.core.runs import RunName
from chorus.serving.spec import ModelSpec, RoleSpec
from chorus.interventions.config import SourcedConfig, fold_flat_source, load as load_influence

Layers = Union[Literal["all"], list[int]]


class KnockoutSpec(Strict):
    queries: list[Literal["after", "decision"]] = ["after", "decision"]
    sweep_queries: list[Literal["after", "decision"]] = Field(
        ["after"], description="query variants of the single-layer and cumulative sweeps")
    single: bool = True
    cumulative: bool = True
    layers: Layers = Field("all", description="layers of the sweeps (start layers of the cumulative sweep)")
    block: Literal["peer_block", "peer_text"] = Field(
        "peer_block", description="peer_block: the quoted response with its name line; peer_text: the text only")
    route: Literal["nnsight", "interface"] = Field(
        "nnsight", description="nnsight: edit each attention module's mask input inside an nnsight trace; interface: "
                               "a registered transformers attention function (bitwise equal; bench/bench_knockout.py)")
    cross_check: int = Field(2, ge=0, description="contexts whose every condition is recomputed by the other route; "
                                                   "the run fails on a difference above cross_check_tol")
    cross_check_tol: float = Field(1e-4, ge=0.0, description="largest tolerated |log-prob difference| between the routes")
    mixers: list[Literal["attention", "recurrent", "both"]] = Field(
        ["attention"], min_length=1,
        description="which token mixers of each condition's layers are cut: attention (the mask), recurrent (the "
                    "Gated DeltaNet state and convolution of a hybrid model's recurrent layers, "
                    "interventions/recurrent.py), both; each mixer is its own set of conditions")

    @field_validator("queries", "sweep_queries", "mixers")
    @classmethod
    def _uniq(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"repeated entry in {v}")
        return v


class PatchSpec(Strict):
    contrast: Literal["record", "status"] = Field(
        "record", description="record: good -> poor track record (status fixed); status: professor -> ordinary")
    direction: Literal["x_into_y"] = "x_into_y"
    layers: Layers = "all"
    max_pairs: Optional[int] = Field(None, ge=1)


class ProbeSpec(Strict):
    concept: Literal["record", "status", "message"] = Field(
        "record", description="record: good vs poor track record; status: professor vs ordinary; "
                              "message: peer message present vs absent")
    layers: Layers = "all"
    n_perm: int = Field(100, ge=1)
    n_splits: int = Field(5, ge=2)
    C: float = Field(1.0, gt=0.0)


class TransferMapSpec(Strict):
    alphas: list[float] = Field([1.0, 10.0, 100.0, 1000.0, 10000.0], min_length=1,
                                description="ridge penalties tried (RidgeCV, leave-one-out choice)")
    n_splits: int = Field(5, ge=2, description="question-grouped folds of the held-out R²")


class TransferSpec(Strict):
    """``chorus influence transfer``: the receiver is ``model.profile``; see interventions/state_transfer.py."""
    sender: Union[Literal["same"], RoleSpec] = Field(
        "same", description="the sender's model role: 'same' (the receiver's model), a profile name, or a model "
        "spec; its residual states are read through transformers, in the receiver's dtype unless it sets one")
    layers: Layers = Field("all", description="receiver layers (the residual after each is written)")
    sender_layers: Optional[list[int]] = Field(
        None, description="sender layer per receiver layer (default: same index, or same relative depth)")
    site: Literal["readout", "anchor"] = Field(
        "readout", description="readout: the receiver's decision token; anchor: last token of the final user turn")
    map: TransferMapSpec = TransferMapSpec()
    max_pairs: Optional[int] = Field(None, ge=1)

    def sender_spec(self, receiver: ModelSpec) -> Optional[ModelSpec]:
        """The sender role's spec (unset fields: backend hf, the receiver's dtype); None when the
        sender is the receiver's own model, which then plays both (one engine)."""
        if self.sender == "same":
            return None
        spec = self.sender.over({"backend": "hf", "dtype": receiver.dtype}, "sender")
        return None if (spec.profile, spec.dtype) == (receiver.profile, receiver.dtype) else spec

    @model_validator(mode="after")
    def _lengths(self):
        if isinstance(self.sender, RoleSpec) and self.sender.backend not in ("hf", None):
            raise ValueError(f"transfer.sender.backend: the sender's residual states are read through "
                             f"transformers, so its backend must be hf, got {self.sender.backend!r}")
        if self.sender_layers is not None and (self.layers == "all" or len(self.sender_layers) != len(self.layers)):
            raise ValueError(f"transfer.sender_layers ({self.sender_layers}) needs one entry per receiver layer "
                             f"in transfer.layers ({self.layers})")
        if any(a <= 0 for a in self.map.alphas):
            raise ValueError(f"transfer.map.alphas must be positive, got {self.map.alphas}")
        return self


class ConceptSpec(Strict):
    """``chorus influence concepts``: lexicon directions read on debate vs reflection contexts
    (interventions/concepts.py)."""
    lexicon: str = Field("concepts_v1", description="a lexicon in interventions/data/ (name) or a YAML path")
    concepts: Optional[list[str]] = Field(None, min_length=1,
                                          description="subset of the lexicon's concepts (default all)")
    layers: Layers = "all"
    sites: list[Literal["reading", "decision"]] = Field(
        ["reading", "decision"], min_length=1,
        description="reading: mean over the peer-message (debate) / own-previous-response (reflection) tokens; "
                    "decision: the readout token")
    method: Literal["mean_diff", "logistic"] = Field(
        "mean_diff", description="direction: difference of standardised class means, or a logistic probe's weights")
    n_perm: int = Field(100, ge=1, description="shuffled-label directions of the null")
    n_splits: int = Field(5, ge=2, description="pair-grouped folds of the held-out AUROC")
    C: float = Field(1.0, gt=0.0, description="logistic method only")
    max_questions: Optional[int] = Field(None, ge=1, description="questions read (seeded choice; default all)")

    @field_validator("sites")
    @classmethod
    def _uniq_sites(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"repeated site in {v}")
        return v


class InternalsConfig(SourcedConfig):
    name: RunName = "internals"
    knockout: KnockoutSpec = KnockoutSpec()
    patch: PatchSpec = PatchSpec()
    probe: ProbeSpec = ProbeSpec()
    concepts: ConceptSpec = ConceptSpec()
    transfer: TransferSpec = TransferSpec()

    @classmethod
    def fold_legacy(cls, data):
        # records from when this config derived from the readout verbs' also carry their blocks
        return fold_flat_source(data, unused=("voting", "readout", "cues"))

    @model_validator(mode="after")
    def _hf_only(self):
        if self.model.backend not in ("hf", "auto"):
            raise ValueError(f"model.backend = {self.model.backend!r}: knockout, patching and probes need the "
                             "transformers weights; use backend: hf")
        return self


def load(config: str | Path, overrides: dict | None = None) -> InternalsConfig:
    """An internals config by path or shipped name (``interventions/configs``), with overrides."""
    return load_influence(config, InternalsConfig, overrides)
