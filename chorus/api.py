"""The Python front door: the objects the CLI uses, for a notebook or a script.

    import chorus
    run = chorus.run("debate", "smoke", model="meta-llama/Llama-3.1-8B-Instruct")   # = chorus debate run smoke ...
    run.summary, run.table("turns"), run.plots, run.provenance, run.report()
    chorus.open_run("runs/debate/smoke-20261206-101500")                           # a stored run
    model = chorus.get_model("qwen3.5-9b", backend="vllm")                          # an engine for one role

``run`` goes through the same verb registry as the commands (``chorus.core.verbs``): the same config
loading and validation, the same run directory, the same resume after a kill.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from chorus.core.config import ConfigError
from chorus.core.progress import progress as progress_bar
from chorus.core.runs import RunDir
from chorus.core.verbs import REGISTRY, Verb


def verbs() -> list[str]:
    """Every registered verb as ``"GROUP NAME"`` (what ``chorus.run`` takes)."""
    import chorus.registry  # noqa: F401  (every part's verbs register on import)
    return sorted(" ".join(k) for k in REGISTRY)


def _verb(name: str) -> Verb:
    """``"debate run"``, ``"belief correct fit"`` (a group of two words), or a group alone for its
    ``run`` verb (``"debate"``)."""
    import chorus.registry  # noqa: F401
    parts = name.split()
    for key in [(" ".join(parts[:-1]), parts[-1]), (" ".join(parts), "run")] if parts else []:
        if key in REGISTRY:
            return REGISTRY[key]
    raise ConfigError(f"no verb {name!r}; the verbs: {', '.join(verbs())}")


def run(verb: str, config: str | Path | Mapping[str, Any] | None = None, *, out: str | Path | None = None,
        model: str | None = None, set: Mapping[str, Any] | None = None, plots: bool = True,
        progress: bool = True) -> "Run":
    """Run a registered verb as ``chorus GROUP NAME CONFIG --set K=V ... --out OUT`` does and return
    its ``Run``. ``config``: a shipped name, a YAML path or a mapping (the whole config; paths in it are
    read from the working directory); left out, the verb's default where it has one. ``model``: the
    model, as ``-m`` gives it (a profile, a folder or a hub id; into the field the verb names, e.g.
    ``model.profile``, every council seat, SFT's ``base.profile``); ``set``: dotted overrides
    (``{"rounds": 1, "generation.max_tokens": 32}``). Rerunning into the same ``out`` resumes."""
    v = _verb(verb)
    over = dict(set or {})
    if model is not None:
        try:
            over.update(v.model_override(model))
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if isinstance(config, Mapping):
        return _run_mapping(v, dict(config), over, out, plots, progress)
    name = str(config) if config is not None else v.default_config
    if name is None:
        raise ConfigError(f"verb {verb!r} needs a config (a shipped name, a YAML path or a mapping)")
    return _execute(v, name, over, out, plots, progress)


def _run_mapping(v: Verb, data: dict, over: dict, out, plots: bool, progress: bool) -> "Run":
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{data.get('name') or v.name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return _execute(v, str(path), over, out, plots, progress)


def _execute(v: Verb, config: str, over: dict, out, plots: bool, progress: bool) -> "Run":
    cfg = v.load_config(config, over)
    kw: dict[str, Any] = {}
    source = v.implementation().source
    if source is not None:
        kw["source"] = str(source(config))
    if v.plots:
        kw["make_plots"] = plots
    label = getattr(cfg, "name", None) or v.name
    with progress_bar(label, v.unit, enabled=progress and v.bar) as update:
        rundir, _ = v.execute(cfg, None if out is None else str(out), progress=update, **kw)
    return Run(rundir.path)


def open_run(path: str | Path) -> "Run":
    """A stored run directory (any part's) as a ``Run``."""
    return Run(path)


class Run:
    """One run directory: its summary, tables as DataFrames, plots, config, provenance and report."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not (self.path / "config.yaml").is_file() and not (self.path / "summary.json").is_file():
            raise ConfigError(f"{self.path}: not a chorus run directory (no config.yaml or summary.json)")
        self._dir = RunDir(self.path)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}: {self.provenance.get('part', '?')}, tables {self.tables})"

    @property
    def summary(self) -> dict[str, Any]:
        return self._dir.summary()

    @property
    def provenance(self) -> dict[str, Any]:
        return self._dir.provenance()

    @property
    def config(self) -> dict[str, Any]:
        p = self.path / "config.yaml"
        return (yaml.safe_load(p.read_text()) or {}) if p.is_file() else {}

    @property
    def tables(self) -> list[str]:
        return sorted(p.stem for p in (self.path / "tables").glob("*.parquet"))

    def table(self, name: str):
        """The table ``name`` as a pandas DataFrame (``run.tables`` lists them)."""
        if name not in self.tables:
            raise ConfigError(f"{self.path}: no table {name!r}; the tables: {', '.join(self.tables) or 'none'}")
        return self._dir.read_table(name)

    @property
    def plots(self) -> list[Path]:
        return sorted((self.path / "plots").glob("*.png"))

    def report(self, out: str | Path | None = None) -> Path:
        """Write the run's HTML report (``RUN/report.html`` or ``out``); returns its path."""
        from chorus.report import render_report
        return render_report(self.path, out=out)

    def _repr_html_(self) -> str:   # a notebook shows the summary
        return f"<b>{self.path}</b><pre>{json.dumps(self.summary, indent=1, default=str)[:4000]}</pre>"


def get_model(model: str | Mapping[str, Any] | None = None, *, backend: str = "auto", role: str = "model",
              store: str | Path | None = None, **options: Any):
    """An engine for one role (``chat``, ``option_logprobs``, ...): ``model`` a profile, a folder, a hub
    id or a ``ModelSpec`` mapping (default: the embedded default model); ``store`` a call store to
    resume from; ``options`` the spec's fields (``dtype``, ``tensor_parallel_size``, ...)."""
    from chorus.serving import build_engine, spec_of
    base = dict(model) if isinstance(model, Mapping) else {} if model is None else {"profile": model}
    return build_engine(spec_of({"backend": backend, **options, **base}, role), store=store, role=role)
