"""``chorus sft train``: next-message SFT on the human groups of the training split with TRL.

The set: for every human message of the training split (posts, chat utterances, final opinions),
the prompt is the participant's memory state built from the human history (the same renderer the
simulations use) and the completion is the human's message; only on-topic targets are kept.
Training: TRL's ``SFTTrainer`` on a conversational prompt-completion dataset with completion-only
loss and the seed's settings (config ``training``); LoRA through peft as an option. Before anything
is loaded or written, ``sft_memory`` estimates the run's device memory (recorded in provenance and
summary) and the one device planner (``chorus.serving.plan.plan_devices``: the trainer is the phase
"train", its need the estimate's total) refuses a run that does not fit the device in use (on CPU,
where the plan is mode "cpu", the estimate is checked against the host's RAM); the plan is written
to provenance (``device_plan``) and the comparison that follows plans its own engines. The
trainer, its model and optimizer are released (``chorus.serving.device.free_device_memory``) before the
comparison's engines load. The result is a full local model folder (a LoRA adapter is merged into
the base with ``merge_and_unload`` and saved with the tokenizer, and the adapter itself is kept
beside it), so every backend can load it: its path is a serving profile wherever a profile name is
asked for, and ``register_as`` also adds it to the user's models.yaml."""
from __future__ import annotations

import json
import os
import weakref
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pandas as pd

from chorus import serving  # chorus.serving.build_engine looked up per call: tests replace it
from chorus.core.compute import measure
from chorus.core.config import ConfigError
from chorus.core.runs import RunDir, run_dir_path
from chorus.serving.device import cuda_free_gib, free_device_memory
from chorus.serving.memory import GIB, MemoryPlanError, parameter_count
from chorus.serving.profiles import BUILTIN, get_profile, models_file
from chorus.simulate.roleplay.classify import classify_texts
from chorus.simulate.roleplay.config import RoleplayConfig, SftConfig, load
from chorus.simulate.roleplay.data import FIXTURE, Group, golden_mask, load_groups, select_split
from chorus.simulate.roleplay.experiment import run_roleplay
from chorus.simulate.roleplay.agent_memory import build_memory
from chorus.simulate.roleplay.prompts import load_prompts, render
from chorus.simulate.roleplay.setups import steps
from chorus.simulate.roleplay.sft_memory import (AUTO_PRECISIONS, BNB_OPTIMIZERS, PRECISIONS, choose_precision,
                                                 plan_training, settings_for, with_precision)


def sft_examples(groups: list[Group], P: dict, kinds: list[str]) -> list[dict[str, Any]]:
    """Every (memory state, human next message) pair of ``groups`` with the record's on-topic label."""
    out = []
    for g in groups:
        for _, items in steps([g]):
            for _, pid, slot in items:
                kind, r, k = slot
                if kind not in kinds:
                    continue
                if kind == "tweet":
                    text, label = g.rounds[r].tweets.get(pid), g.rounds[r].tweet_on_topic.get(pid)
                elif kind == "chat":
                    u = g.rounds[r].chat_of(pid).utterances[k]
                    text, label = u.text, u.on_topic
                else:
                    text, label = g.participant(pid).final.text, None
                if not text or not text.strip():
                    continue
                out.append({"prompt": render(build_memory(g, pid, slot), P),
                            "completion": [{"role": "assistant", "content": text.strip()}],
                            "group_id": g.group_id, "topic": g.topic, "participant": pid, "kind": kind,
                            "round": -1 if r is None else r + 1, "k": -1 if k is None else k, "label": label})
    return out


def filter_on_topic(examples: list[dict], mode: str, classified: dict[tuple[str, str], bool | None] | None = None
                    ) -> tuple[list[dict], dict[str, int]]:
    """Keep on-topic targets. mode 'none': all; 'labels': drop those the record labels off-topic;
    'classifier': the record's label where present, else the classifier's (unparsed: dropped, counted)."""
    kept, counts = [], {"off_topic": 0, "unlabelled_kept": 0, "unparsed_dropped": 0}
    for ex in examples:
        text = ex["completion"][0]["content"]
        lab = ex["label"]
        if mode == "none":
            kept.append(ex)
            continue
        if lab is None and mode == "classifier":
            lab = (classified or {}).get((ex["topic"], text))
            if lab is None:
                counts["unparsed_dropped"] += 1
                continue
        if lab is False:
            counts["off_topic"] += 1
            continue
        if lab is None:
            counts["unlabelled_kept"] += 1
        kept.append(ex)
    return kept, counts


def _threads() -> None:
    n = os.environ.get("CHORUS_TORCH_THREADS")
    if n:
        import torch
        torch.set_num_threads(int(n))


def _train_groups(cfg: SftConfig) -> tuple[str, list[Group], list]:
    """(data path, golden training groups of the split, groups excluded by the golden mask)."""
    path = cfg.data.path or str(FIXTURE)
    kept_groups, excluded = golden_mask(load_groups(path))
    train_groups = select_split(kept_groups, cfg.data.split, "train")
    if not train_groups:
        raise ConfigError(f"data: no golden training groups in the {cfg.data.split} split of {path}")
    return path, train_groups, excluded


def _open_run(cfg: SftConfig, out: Path, P: dict, path: str, train_groups: list[Group], excluded: list,
              base: Any, base_path: Path, memory: dict[str, Any]) -> RunDir:
    return RunDir.create(out, part="sft", config=cfg, seeds={"root": cfg.seed}, command="sft train",
                         prompts={"name": P["_name"], "sha256": P["_sha256"]},
                         data={"path": path, "n_train_groups": len(train_groups), "n_excluded_by_mask": len(excluded)},
                         base_model={"profile": base.name, "path": str(base_path)}, memory_estimate=memory)


def _classify_unlabelled(cfg: SftConfig, examples: list[dict], P: dict, run: RunDir, classifier_engine: Any
                         ) -> dict[tuple[str, str], bool | None]:
    """On-topic labels for the targets the record leaves unlabelled; written as ``target_labels``."""
    eng = classifier_engine
    if eng is None:
        eng = serving.build_engine(cfg.classifier.over_model(cfg.base), store=run.store_path, role="classifier")
    lab = classify_texts(eng, [(ex["topic"], ex["completion"][0]["content"]) for ex in examples if ex["label"] is None],
                         P, max_tokens=cfg.classifier.max_tokens)
    if classifier_engine is None:
        eng.close()  # free the accelerator before training
        del eng
        free_device_memory()
    classified = {(t, x): o for t, x, o in zip(lab["topic"], lab["text"], lab["on_topic"])}
    run.write_table("target_labels", lab)
    return classified


def _on_topic_examples(cfg: SftConfig, train_groups: list[Group], P: dict, run: RunDir, classifier_engine: Any
                       ) -> tuple[list[dict], dict[str, int]]:
    """The SFT examples after the on-topic filter and ``data.limit``, with the filter's counts."""
    examples = sft_examples(train_groups, P, cfg.data.kinds)
    classified = None
    if cfg.data.on_topic == "classifier" and any(ex["label"] is None for ex in examples):
        classified = _classify_unlabelled(cfg, examples, P, run, classifier_engine)
    examples, counts = filter_on_topic(examples, cfg.data.on_topic, classified)
    if cfg.data.limit:
        examples = examples[:cfg.data.limit]
    return examples, counts


def _training_stack() -> SimpleNamespace:
    """torch, datasets, transformers and trl, imported together after the thread setting and
    before the tokenizer is loaded or anything more is written."""
    _threads()
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig as TrlConfig
    from trl import SFTTrainer
    return SimpleNamespace(torch=torch, Dataset=Dataset, AutoModelForCausalLM=AutoModelForCausalLM,
                           AutoTokenizer=AutoTokenizer, TrlConfig=TrlConfig, SFTTrainer=SFTTrainer)


def _tokenizer(lib: SimpleNamespace, cfg: SftConfig, base_path: Path) -> Any:
    tok = lib.AutoTokenizer.from_pretrained(str(base_path))
    if not getattr(tok, "chat_template", None):
        raise ConfigError(f"base.profile = {cfg.base.profile!r}: the tokenizer has no chat template; the SFT set is "
                          "conversational (use an instruct model)")
    return tok


def _fit_max_length(examples: list[dict], counts: dict[str, int], tok: Any, max_length: int) -> list[dict]:
    """Drop examples longer than ``max_length`` and count them in ``counts["too_long"]``: never
    truncate a completion away."""
    lens = [_n_tokens(tok, ex["prompt"] + ex["completion"]) for ex in examples]
    too_long = sum(n > max_length for n in lens)
    examples = [ex for ex, n in zip(examples, lens) if n <= max_length]
    counts["too_long"] = int(too_long)
    if not examples:
        raise ConfigError(f"no SFT examples left ({counts})")
    return examples


def _write_sft_set(run: RunDir, examples: list[dict]) -> None:
    pd.DataFrame([{k: v for k, v in ex.items() if k not in ("prompt", "completion")} |
                  {"target": ex["completion"][0]["content"]} for ex in examples]).pipe(lambda d: run.write_table("sft_set", d))


def _training_args(lib: SimpleNamespace, cfg: SftConfig, output_dir: Path,
                   progress: Callable[[int, int], None] | None, s: Any) -> Any:
    """TRL's ``SFTConfig`` with the config's settings and the precision ``s`` (``_memory_check``'s
    settings: bf16 autocast and the optimizer), built before any model is loaded."""
    cuda = lib.torch.cuda.is_available()
    try:   # transformers checks these values itself (a scheduler name, bf16 where the device has none)
        return _trl_config(lib, cfg, output_dir, progress, s.act_dtype == "bfloat16", cuda, s.optim)
    except ValueError as err:
        raise ConfigError(f"training: {' '.join(str(err).split())}") from None


def _trl_config(lib: SimpleNamespace, cfg: SftConfig, output_dir: Path, progress: Callable[[int, int], None] | None,
                bf16: bool, cuda: bool, optim: str) -> Any:
    t = cfg.training
    return lib.TrlConfig(output_dir=str(output_dir), num_train_epochs=t.epochs, learning_rate=t.learning_rate,
                         per_device_train_batch_size=t.per_device_batch_size,
                         gradient_accumulation_steps=t.gradient_accumulation_steps,
                         max_steps=t.max_steps or -1, max_length=t.max_length, completion_only_loss=True,
                         logging_steps=t.logging_steps, save_strategy="no", report_to=[], seed=cfg.seed,
                         data_seed=cfg.seed, bf16=bf16, use_cpu=not cuda, lr_scheduler_type=t.lr_scheduler,
                         warmup_steps=t.warmup_ratio, weight_decay=t.weight_decay, dataloader_num_workers=0,
                         disable_tqdm=progress is not None, gradient_checkpointing=t.gradient_checkpointing,
                         optim=optim, logging_nan_inf_filter=False)   # a NaN loss is logged as NaN, not hidden


def _precision_candidates(cfg: SftConfig, cuda: bool, bf16_ok: bool) -> tuple[str, ...]:
    """The precisions the run may train in, most precise first: the configured one; else fp32 where
    bf16 is off or missing; an 8-bit optimizer asked for by name; else, on a bf16 device, mixed, then
    pure bf16, then (where bitsandbytes is installed) bf16 with an 8-bit optimizer."""
    import importlib.util

    t = cfg.training
    if t.precision:
        return (t.precision,)
    if t.bf16 is False or (t.bf16 is None and not (cuda and bf16_ok)):
        return ("fp32",)
    if t.optim in BNB_OPTIMIZERS:
        return ("bf16-8bit",)
    if not cuda:
        return ("bf16",)  # bf16 asked for on a CPU: loaded in bf16, as before
    bnb = importlib.util.find_spec("bitsandbytes") is not None
    return tuple(p for p in AUTO_PRECISIONS if bnb or p != "bf16-8bit")


def _memory_check(lib: SimpleNamespace, cfg: SftConfig, base_path: Path) -> tuple[dict[str, Any], Any, Any]:
    """The run's precision, memory estimate (``sft_memory``) and device plan: on CUDA the trainer is
    the phase "train" of ``chorus.serving.plan.plan_devices`` on device 0's total memory, in the most
    precise of ``_precision_candidates`` that fits its usable part, refused with the planner's line
    (role, sizes, device) and the alternatives' estimates when none does; on CPU the plan is mode
    "cpu" and the estimate is checked against the host's total RAM, where CPU training holds the
    same tensors. Returns (the record for provenance and summary, the plan, the settings trained)."""
    import importlib.util

    t = cfg.training
    torch = lib.torch
    cuda = torch.cuda.is_available()
    cands = _precision_candidates(cfg, cuda, cuda and torch.cuda.is_bf16_supported())
    if (t.optim in BNB_OPTIMIZERS or "bf16-8bit" in cands[:1]) and importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(f"training.optim = {t.optim!r} / precision bf16-8bit needs bitsandbytes, which is not "
                          "installed (it is not a chorus dependency); use adamw_torch_fused or adafactor")
    import trl.trainer.utils as trl_utils
    # TRL >= 1.16 fuses the LM head
    base = settings_for(cfg, dtype="bfloat16", fused_lm_head=hasattr(trl_utils, "add_fused_lm_head"))
    if cuda:
        props = torch.cuda.get_device_properties(0)
        device, device_gib = f"cuda:0 ({props.name})", props.total_memory / GIB
    else:
        import psutil
        device, device_gib = "host RAM (CPU training)", psutil.virtual_memory().total / GIB
    try:
        n = parameter_count(base_path)
    except MemoryPlanError:  # no safetensors (e.g. .bin weights): the config's closed form
        n = None
    config = json.loads((base_path / "config.json").read_text())
    usable = device_gib * (0.9 if cuda else 1.0)  # plan_devices' max_utilization on CUDA
    s, considered = choose_precision(config, base, usable, n_params=n, candidates=cands)
    est, plan = plan_training(config, s, device, device_gib, cuda=cuda,
                              n_params=n, lora=settings_for(load("lora", SftConfig, part="sft")),
                              profile=cfg.base.profile)
    precision = {"name": est.precision, "holds": PRECISIONS[est.precision][3], "load_dtype": s.dtype,
                 "optim": s.optim, "autocast_bf16": s.act_dtype == "bfloat16" and s.dtype == "float32",
                 "bytes_per_parameter": round(est.bytes_per_parameter, 3), "considered_gib": considered,
                 "usable_gib": round(usable, 3)}
    memory = {"device": device, "device_gib": round(device_gib, 3), "fits": True, "total_gib": round(est.total_gib, 3),
              "precision": precision, "estimate": est.to_dict()}
    reason = (f"{plan.reason}; trains in precision {est.precision} ({precision['holds']}; "
              f"{est.bytes_per_parameter:.1f} bytes a trainable parameter; estimated {est.total_gib:.2f} GiB of "
              f"{usable:.2f} usable; considered " + ", ".join(f"{k} {v:.2f} GiB" for k, v in considered.items()) + ")")
    return memory, replace(plan, reason=reason), s


def _trainer(lib: SimpleNamespace, cfg: SftConfig, base_path: Path, tok: Any, ds: Any, args: Any,
             progress: Callable[[int, int], None] | None, precision_dtype: str) -> Any:
    """TRL's ``SFTTrainer`` on ``ds`` with ``args`` (and LoRA through peft if enabled)."""
    torch = lib.torch
    # the precision's load dtype (_memory_check): fp32 under mixed precision, else bf16 when training in bf16
    model = lib.AutoModelForCausalLM.from_pretrained(str(base_path), dtype=getattr(torch, precision_dtype))
    peft_config = None
    if cfg.lora.enabled:
        from peft import LoraConfig
        peft_config = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                                 target_modules=cfg.lora.target_modules, task_type="CAUSAL_LM")
    callbacks = [_FiniteCheck()] + ([_ProgressCallback(progress)] if progress else [])
    return lib.SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=peft_config,
                          callbacks=callbacks)


def _save_model(cfg: SftConfig, trainer: Any, tok: Any, run: RunDir) -> Path:
    """The trained model as a full folder (a LoRA adapter is kept beside it, then merged in)."""
    model_dir = run.path / "model"
    trained = trainer.model
    if cfg.lora.enabled:
        trained.save_pretrained(str(run.path / "adapter"))
        trained = trained.merge_and_unload()
    trained.save_pretrained(str(model_dir))
    tok.save_pretrained(str(model_dir))
    return model_dir


def _write_results(cfg: SftConfig, run: RunDir, trainer: Any, result: Any, model_dir: Path, n_examples: int,
                   counts: dict[str, int], n_train_groups: int, memory: dict[str, Any]) -> dict[str, Any]:
    """Train log, summary (with the memory estimate) and optional registration."""
    log = pd.DataFrame([r for r in trainer.state.log_history if "loss" in r])
    run.write_table("train_log", log)
    losses = log["loss"].tolist() if len(log) else []
    summary = {"experiment": cfg.name, "base_profile": cfg.base.profile, "model_path": str(model_dir.resolve()),
               "profile": str(model_dir.resolve()), "lora": cfg.lora.enabled,
               "adapter_path": str((run.path / "adapter").resolve()) if cfg.lora.enabled else None,
               "n_examples": n_examples, "filtered": counts, "n_train_groups": n_train_groups,
               "split": cfg.data.split, "global_steps": int(trainer.state.global_step),
               "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
               "train_runtime_s": result.metrics.get("train_runtime"),
               "steps_per_second": result.metrics.get("train_steps_per_second"),
               "settings": cfg.training.model_dump(), "memory_estimate": memory}
    if cfg.register_as:
        reg = register_profile(cfg.register_as, model_dir, family=get_profile(cfg.base.profile).family)
        summary["registered_as"] = reg["file"] if reg["written"] else None
        if not reg["written"]:   # the user's file is not edited: the lines to add, and why
            summary["register"] = {k: reg[k] for k in ("file", "lines", "why")}
    run.update_provenance(trained_model={"path": str(model_dir.resolve())})
    run.write_summary(summary)
    return summary


def _train(lib: SimpleNamespace, cfg: SftConfig, base_path: Path, tok: Any, ds: Any, args: Any, run: RunDir,
           progress: Callable[[int, int], None] | None, n_info: tuple[int, dict[str, int], int], memory: dict[str, Any]
           ) -> tuple[Path, dict[str, Any], list[weakref.ref]]:
    """Train, save, write the results; the trainer lives only in this frame, so returning drops it.
    Returns weak references to its model and optimizer, to check that they are gone."""
    trainer = _trainer(lib, cfg, base_path, tok, ds, args, progress, memory["precision"]["load_dtype"])
    result = trainer.train()
    _check_finite(trainer, run)   # before anything is saved: a model of NaN is never written
    model_dir = _save_model(cfg, trainer, tok, run)
    summary = _write_results(cfg, run, trainer, result, model_dir, *n_info, memory)
    refs = [weakref.ref(trainer.model), weakref.ref(trainer.optimizer)]
    trainer.accelerator.free_memory()  # accelerate's own hold on the prepared model, optimizer and scheduler
    return model_dir, summary, refs


class TrainingDiverged(RuntimeError):
    """The loss or the weights went NaN or infinite during training; nothing was saved."""


def nonfinite_tensors(model: Any, trainable_only: bool = False) -> tuple[int, int]:
    """(tensors holding a NaN or an infinity, tensors looked at): the model's parameters and buffers
    (only the trained parameters with ``trainable_only``), one device sync for all of them."""
    import torch

    ts = [p for p in model.parameters() if p.requires_grad] if trainable_only else \
        [t for t in model.state_dict().values() if torch.is_tensor(t) and t.is_floating_point()]
    if not ts:
        return 0, 0
    ok = torch.stack([torch.isfinite(t).all() for t in ts]).cpu()
    return int((~ok).sum()), len(ts)


class _FiniteCheck:
    """TrainerCallback that stops training at the first step whose loss or gradient norm (as logged)
    or trained weights are not finite, and remembers that step (``_check_finite`` then refuses)."""

    def __new__(cls):
        import math

        from transformers import TrainerCallback

        class CB(TrainerCallback):
            first: tuple[int, str] | None = None   # (step, what went non-finite)

            def _stop(self, state, control, what: str) -> None:
                if self.first is None:
                    self.first = (int(state.global_step), what)
                control.should_training_stop = True

            def on_step_end(self, args, state, control, model=None, **kw):
                if model is not None:
                    bad, n = nonfinite_tensors(model, trainable_only=True)
                    if bad:
                        self._stop(state, control, f"{bad} of {n} trained tensors hold NaN or inf")

            def on_log(self, args, state, control, logs=None, **kw):
                for k in ("loss", "grad_norm"):
                    v = (logs or {}).get(k)
                    if isinstance(v, (int, float)) and not math.isfinite(v):
                        self._stop(state, control, f"{k} = {v}")
        return CB()


def _check_finite(trainer: Any, run: RunDir) -> None:
    """A training run whose loss or weights went non-finite is an error naming the step and the count
    of non-finite tensors, raised before the model is saved (its loss log is kept for diagnosis)."""
    import math

    first = next((cb.first for cb in trainer.callback_handler.callbacks if getattr(cb, "first", None)), None)
    log = [r for r in trainer.state.log_history if "loss" in r]
    if first is None:   # a loss the last log caught, after the last step's check
        bad_log = next((r for r in log if any(isinstance(r.get(k), (int, float)) and not math.isfinite(r[k])
                                              for k in ("loss", "grad_norm"))), None)
        first = (int(bad_log.get("step", -1)), f"loss = {bad_log.get('loss')}") if bad_log else None
    bad, n = nonfinite_tensors(trainer.model)
    if first is None and not bad:
        return
    run.write_table("train_log", pd.DataFrame(log))
    step = f"at step {first[0]} ({first[1]})" if first else "by the end"
    raise TrainingDiverged(f"training went non-finite {step}: {bad} of {n} tensors of the model hold NaN or inf; "
                           f"the model was not saved (its loss log is in {run.path / 'tables' / 'train_log.parquet'}); "
                           f"lower training.learning_rate (it is {trainer.args.learning_rate:g})")


def _release(refs: list[weakref.ref]) -> dict[str, Any]:
    """Give the device back once the trainer is out of scope: collect it and empty the cache."""
    free_device_memory()
    out: dict[str, Any] = {"model_freed": refs[0]() is None, "optimizer_freed": refs[1]() is None}
    free = cuda_free_gib()
    if free is not None:
        import torch
        out |= {"cuda_free_gib": round(free[0], 3), "cuda_total_gib": round(free[1], 3),
                "cuda_allocated_gib": round(torch.cuda.memory_allocated() / 1024 ** 3, 3)}
    return out


def _check_released(released: dict[str, Any]) -> None:
    # the comparison's engines need the device the trainer held: a leak would fail them later, unclearly
    if not (released["model_freed"] and released["optimizer_freed"]) or released.get("cuda_allocated_gib", 0.0) > 1.0:
        raise RuntimeError(f"the trained model is saved, but the trainer's memory was not released before the "
                           f"comparison ({released}); run the comparison separately: chorus roleplay run CONFIG "
                           "with the model folder as a profile")


def check_sft(cfg: SftConfig) -> None:
    """Every input of an SFT run that can be checked before anything loads (``--check`` runs it, and
    ``train_sft`` first): the prompts, the training groups, the base model's folder, the name to
    register under and the user's models.yaml it goes into, and the comparison's config. Each would
    otherwise fail only after the whole training run. Returns the trainer's device plan, whose reason
    names the precision it would train in and the estimate (``_memory_check``; no model is loaded)."""
    import yaml

    load_prompts(cfg.prompts)
    _train_groups(cfg)
    get_profile(cfg.base.profile).require()
    if cfg.register_as:
        if cfg.register_as in BUILTIN:
            raise ConfigError(f"register_as = {cfg.register_as!r} is a built-in profile name")
        f = models_file()
        try:
            data = yaml.safe_load(f.read_text()) if f.is_file() else {}
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            raise ConfigError(f"register_as: {f} (where the model would be registered) is not readable YAML "
                              f"({type(err).__name__}); fix it or leave register_as unset") from None
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"register_as: {f} (where the model would be registered) is not a mapping of "
                              f"profile names; fix it or leave register_as unset")
    if cfg.compare:
        try:
            load_prompts(load(cfg.compare, RoleplayConfig).prompts)
        except ConfigError as err:
            raise ConfigError(f"compare = {cfg.compare!r}: {err}") from None
    _, plan, _ = _memory_check(_training_stack(), cfg, get_profile(cfg.base.profile).require())
    return plan


def train_sft(cfg: SftConfig, out: Path | None = None, *, progress: Callable[[int, int], None] | None = None,
              classifier_engine: Any = None) -> tuple[RunDir, dict[str, Any]]:
    check_sft(cfg)   # every input that would otherwise fail after the training run, before it
    P = load_prompts(cfg.prompts)
    path, train_groups, excluded = _train_groups(cfg)
    base = get_profile(cfg.base.profile)
    base_path = base.require()  # fails before any training
    lib = _training_stack()
    run_path = run_dir_path(out, "sft", cfg.name)
    memory, plan, s = _memory_check(lib, cfg, base_path)  # refuses before any model load or run directory
    args = _training_args(lib, cfg, run_path / "trainer", progress, s)
    run = _open_run(cfg, run_path, P, path, train_groups, excluded, base, base_path, memory)
    # the precision trained in beside the plan (the comparison (compare) records its own plan)
    run.update_provenance(device_plan=plan.to_dict(), training_precision=memory["precision"])
    # the training's compute (labelling, training, saving; not the comparison, whose run records its own)
    with measure(run):
        examples, counts = _on_topic_examples(cfg, train_groups, P, run, classifier_engine)
        tok = _tokenizer(lib, cfg, base_path)
        examples = _fit_max_length(examples, counts, tok, cfg.training.max_length)
        _write_sft_set(run, examples)
        ds = lib.Dataset.from_list([{"prompt": ex["prompt"], "completion": ex["completion"]} for ex in examples])
        model_dir, summary, refs = _train(lib, cfg, base_path, tok, ds, args, run, progress,
                                          (len(examples), counts, len(train_groups)), memory)
    summary["compute"] = run.provenance()["compute"]
    summary["released_before_compare"] = _release(refs)
    run.write_summary(summary)
    if cfg.compare:
        _check_released(summary["released_before_compare"])
        summary["compare_run"] = str(compare(cfg, model_dir, run.path / "compare", progress=progress))
        run.write_summary(summary)
    run.finish()
    return run, summary


def _n_tokens(tok, messages: list[dict]) -> int:
    return len(tok(tok.apply_chat_template(messages, tokenize=False), add_special_tokens=False).input_ids)


class _ProgressCallback:
    """TrainerCallback that drives chorus' progress bar (steps)."""

    def __new__(cls, update):
        from transformers import TrainerCallback

        class CB(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                update(state.max_steps, 0)

            def on_step_end(self, args, state, control, **kw):
                update(state.max_steps, 1)
        return CB()


def register_profile(name: str, model_dir: Path, family: str = "other") -> dict[str, Any]:
    """Add ``name: {path, family}`` to the user's models.yaml (``$CHORUS_MODELS_FILE``) without losing
    anything in it: the entry's lines are appended to the file's text (its comments, order and every
    other entry stay byte for byte), and only when the file read back then holds exactly what it held
    plus this entry. An entry of that name with another path, a file that is not a plain mapping, or
    one that would read back otherwise is not edited: the lines to add are returned (and printed by
    ``chorus sft train``) instead. Returns ``{file, written, lines, why}``."""
    import yaml

    if name in BUILTIN:
        raise ConfigError(f"register_as = {name!r} is a built-in profile name")
    f = models_file()
    entry = {name: {"path": str(Path(model_dir).resolve()), "family": family}}
    lines = yaml.safe_dump(entry, sort_keys=False, allow_unicode=True)
    res: dict[str, Any] = {"file": str(f), "written": False, "lines": lines, "why": None}
    text = f.read_text(encoding="utf-8") if f.is_file() else ""
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as err:
        res["why"] = f"{f} is not valid YAML ({' '.join(str(err).split())[:120]})"
        return res
    if not isinstance(data, dict):
        res["why"] = f"{f} is not a mapping of profile names"
        return res
    if name in data:
        if data[name] == entry[name]:
            res["written"] = True   # already there, as it would be written
        else:
            res["why"] = f"{f} already has an entry {name!r} ({data[name]!r}); it is left as it is"
        return res
    new = text + ("\n" if text and not text.endswith("\n") else "") + lines
    try:
        back = yaml.safe_load(new)
    except yaml.YAMLError:
        back = None
    if back != {**data, **entry}:   # e.g. a flow mapping ({a: b}) or an open block: appending would change it
        res["why"] = f"{f} cannot take the entry by appending it without changing what it holds"
        return res
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_name(f.name + ".tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(f)
    res["written"] = True
    return res


def compare(cfg: SftConfig, model_dir: Path, out: Path, progress=None) -> Path:
    """Run the roleplay config ``cfg.compare`` with the base and the SFT model side by side."""
    rcfg: RoleplayConfig = load(cfg.compare, RoleplayConfig)
    b = cfg.base
    # the SFT model is the base's role with the trained weights: same backend, dtype and options
    models = [b.model_copy(update={"label": "base"}),
              b.model_copy(update={"label": "sft", "profile": str(Path(model_dir).resolve())})]
    data = rcfg.data.model_copy(update={"split": cfg.data.split, "path": rcfg.data.path or cfg.data.path})
    rcfg = rcfg.model_copy(update={"models": models, "data": data})
    run, _ = run_roleplay(rcfg, out, progress=progress)
    return run.path
