"""``chorus roleplay probes``: the DEBATE paper's three mechanism probes over several stored roleplay
runs that differ from a baseline run (the first RUN) only in the generation temperature or the
memory ablation. Pure reading of the runs' files; nothing is generated.

1. Decoding: tweet (public) / private delta SD per run at T = 0, the default (the baseline's
   temperature) and T = 1, memory as in the baseline.
2. Topic drift: the public on-topic rate in the first vs the last round (round 1 vs round 3) and
   the change, for the humans and every simulated cell of every run, from each run's stored
   classifier labels (``metrics.on_topic_by_round``).
3. Memory: delta SD with the full memory vs with the initial opinion and the first post removed
   (``memory.ablate``), at the baseline's temperature.

Every cell names the run it came from; a probe cell no run holds is listed in ``missing`` with the
command that makes it. Runs that differ from the baseline in anything else (seed, models, data,
prompts, ...) are refused in one line naming the field (exit 2).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from chorus.core.config import ConfigError
from chorus.core.runs import RunDir, config_diff, run_dir_path, write_json
from chorus.simulate.roleplay.classify import attach
from chorus.simulate.roleplay.experiment import open_finished
from chorus.simulate.roleplay.plots import probe_bars

# the config fields a probe varies; every other field must equal the baseline's
VARIED = ("generation.temperature", "memory.ablate")
IGNORED = ("name",)                      # a run's name says nothing about its numbers
ABLATED = ["initial_opinion", "first_tweet"]   # the paper's ablation
PROBE_TEMPERATURES = (0.0, 1.0)          # besides the baseline's ("default")
CHANNELS = ("public", "private")
BASELINES = ("human", "degroot")         # not role-play models: they do not depend on decoding or memory


class ProbesInputError(ConfigError):
    """The runs given cannot be read as probes of one baseline (exit 2)."""


@dataclass
class ProbeRun:
    path: Path
    config: dict[str, Any]               # the validated config, dumped (defaults filled in)
    prov: dict[str, Any]
    groups_sha: str
    summary: dict[str, Any]
    on_topic: pd.DataFrame               # metrics.on_topic_by_round of the run's stored labels

    @property
    def temperature(self) -> float:
        return float(self.config["generation"]["temperature"])

    @property
    def ablate(self) -> list[str]:
        return list(self.config.get("memory", {}).get("ablate", []))


def load_probe_run(path: str | Path) -> ProbeRun:
    """A finished roleplay run (its record checked), its config and the on-topic rates by round.
    Kept as a name because the paper renderer (``chorus paper roleplay``) reads probe runs through it."""
    from chorus.simulate.roleplay.metrics import on_topic_by_round  # lazy: pulls in scipy
    f = open_finished(path, ProbesInputError, tables=("messages", "labels"))
    # from the labels, not summary.json: runs made before the on-topic-by-round keys still answer
    return ProbeRun(f.path, f.cfg.model_dump(mode="json"), f.prov, f.groups_sha, f.run.summary(),
                    on_topic_by_round(attach(f.tables["messages"], f.tables["labels"])))


# -- grouping (pure) --------------------------------------------------------------------------------
def differences(base: ProbeRun, run: ProbeRun) -> list[str]:
    """Dotted ``field: base -> run`` for every config field (and record) in which ``run`` differs."""
    a = {k: v for k, v in base.config.items() if k not in IGNORED}
    b = {k: v for k, v in run.config.items() if k not in IGNORED}
    out = config_diff(a, b)
    for what, x, y in (("prompts (sha256)", base.prov.get("prompts", {}).get("sha256"),
                        run.prov.get("prompts", {}).get("sha256")),
                       ("evaluated groups (groups.jsonl)", base.groups_sha[:12], run.groups_sha[:12]),
                       ("versions.chorus", base.prov.get("versions", {}).get("chorus"),
                        run.prov.get("versions", {}).get("chorus"))):
        if x != y:
            out.append(f"{what}: {x!r} -> {y!r}")
    return out


def check_probes(runs: list[ProbeRun]) -> None:
    """One line naming the first field outside ``VARIED`` in which a run differs from the baseline,
    or two runs that are the same probe cell."""
    base = runs[0]
    seen: dict[tuple, ProbeRun] = {}
    for r in runs:
        bad = [d for d in differences(base, r) if not d.startswith(tuple(f"{v}:" for v in VARIED))]
        if bad:
            raise ProbesInputError(f"{r.path} differs from the baseline {base.path} in {bad[0]}; probes compare runs "
                                   f"that differ only in {' or '.join(VARIED)}")
        key = (r.temperature, tuple(sorted(r.ablate)))
        if key in seen:
            raise ProbesInputError(f"{seen[key].path} and {r.path} are the same probe cell (generation.temperature="
                                   f"{r.temperature:g}, memory.ablate={r.ablate}): give one run per cell")
        seen[key] = r


def temperature_label(t: float, default: float) -> str:
    return "default" if t == default else f"T={t:g}"


def memory_label(ablate: list[str]) -> str:
    return "full memory" if not ablate else "without " + " + ".join(ablate)


def delta_sd_rows(r: ProbeRun, probe: str, condition: str) -> list[dict[str, Any]]:
    """One row per (simulated source, setup): tweet (public) and private delta SD with their CIs,
    and the humans' of the same run for reference."""
    s = r.summary
    cells = sorted({k.rsplit("/", 1)[0] for k in s.get("cells", {})})
    rows = []
    for cell in cells:
        src, setup = cell.split("/", 1)
        if src in BASELINES:
            continue
        row = {"probe": probe, "condition": condition, "temperature": r.temperature, "memory_ablate": ", ".join(r.ablate),
               "source": src, "setup": setup}
        for ch in CHANNELS:
            d = s["cells"].get(f"{cell}/{ch}", {}).get("delta_sd", {})
            h = s.get("human", {}).get(ch, {}).get("delta_sd", {})
            name = "tweet" if ch == "public" else "private"
            row.update({f"{name}_delta_sd": d.get("mean", float("nan")), f"{name}_lo": d.get("lo", float("nan")),
                        f"{name}_hi": d.get("hi", float("nan")), f"human_{name}_delta_sd": h.get("mean", float("nan"))})
        row.update(n_groups=s.get("n_groups"), run=str(r.path))
        rows.append(row)
    return rows


DELTA_COLS = ["probe", "condition", "temperature", "memory_ablate", "source", "setup", "tweet_delta_sd", "tweet_lo",
              "tweet_hi", "private_delta_sd", "private_lo", "private_hi", "human_tweet_delta_sd",
              "human_private_delta_sd", "n_groups", "run"]


def temperature_probe(runs: list[ProbeRun]) -> pd.DataFrame:
    """Runs with the baseline's memory, ordered by temperature."""
    base = runs[0]
    rows = [x for r in sorted(runs, key=lambda r: r.temperature) if r.ablate == base.ablate
            for x in delta_sd_rows(r, "temperature", temperature_label(r.temperature, base.temperature))]
    return pd.DataFrame(rows, columns=DELTA_COLS)


def memory_probe(runs: list[ProbeRun]) -> pd.DataFrame:
    """Runs at the baseline's temperature: full memory first, then each ablation."""
    base = runs[0]
    rows = [x for r in sorted(runs, key=lambda r: (len(r.ablate), r.ablate)) if r.temperature == base.temperature
            for x in delta_sd_rows(r, "memory", memory_label(r.ablate))]
    return pd.DataFrame(rows, columns=DELTA_COLS)


ON_TOPIC_COLS = ["source", "setup", "condition", "first_round", "last_round", "rate_first", "rate_last", "change",
                 "n_labelled_first", "n_labelled_last", "run"]


def on_topic_probe(runs: list[ProbeRun]) -> pd.DataFrame:
    """First- vs last-round public on-topic rate: the humans once (the baseline's labels), then
    every simulated cell of every run."""
    from chorus.simulate.roleplay.metrics import on_topic_change  # lazy: pulls in scipy
    base = runs[0]
    rows = [{"source": "human", "setup": "human", "condition": "human", **v, "run": str(base.path)}
            for cell, v in on_topic_change(base.on_topic).items() if cell == "human/human"]
    for r in runs:
        cond = f"{temperature_label(r.temperature, base.temperature)}, {memory_label(r.ablate)}"
        for cell, v in on_topic_change(r.on_topic).items():
            src, setup = cell.split("/", 1)
            if src != "human":
                rows.append({"source": src, "setup": setup, "condition": cond, **v, "run": str(r.path)})
    return pd.DataFrame(rows, columns=ON_TOPIC_COLS)


def command(base: ProbeRun, sets: dict[str, str]) -> str:
    """The command that makes a missing probe run: the baseline's own config with one field set."""
    parts = " ".join(f"--set '{k}={v}'" if "[" in v else f"--set {k}={v}" for k, v in sets.items())
    return f"chorus roleplay run {base.path / 'config.yaml'} {parts}"


def missing(runs: list[ProbeRun]) -> list[dict[str, str]]:
    """Probe cells no run holds, each with the command that makes it."""
    base = runs[0]
    have = {(r.temperature, tuple(sorted(r.ablate))) for r in runs}
    mem = tuple(sorted(base.ablate))
    out = []
    if "full_dynamics" not in base.config["setups"]:
        out.append({"probe": "all", "missing": f"the baseline {base.path} has no full_dynamics setup",
                    "command": command(base, {"setups": "[full_dynamics]"})})
    for t in PROBE_TEMPERATURES:
        if (t, mem) not in have:
            out.append({"probe": "temperature", "missing": f"no run at generation.temperature={t:g} with "
                                                           f"{memory_label(base.ablate)}",
                        "command": command(base, {"generation.temperature": f"{t:g}"})})
    for abl in ([], ABLATED):
        if (base.temperature, tuple(sorted(abl))) not in have:
            out.append({"probe": "memory", "missing": f"no run {memory_label(abl)} at the baseline's generation."
                                                      f"temperature={base.temperature:g}",
                        "command": command(base, {"memory.ablate": "[" + ",".join(abl) + "]"})})
    return out


def analyse(paths: list[str | Path]) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """(probes.json content, tables) for the runs at ``paths`` (the first is the baseline)."""
    if not paths:
        raise ProbesInputError("give at least one roleplay run directory (the first is the baseline)")
    runs = [load_probe_run(p) for p in paths]
    check_probes(runs)
    base = runs[0]
    tables = {"temperature": temperature_probe(runs), "memory": memory_probe(runs), "on_topic": on_topic_probe(runs)}
    out = {"baseline": str(base.path),
           "runs": [{"path": str(r.path), "temperature": r.temperature, "memory_ablate": r.ablate,
                     "differs_from_baseline": differences(base, r), "n_groups": r.summary.get("n_groups"),
                     "synthetic_data": bool(r.prov.get("data", {}).get("synthetic"))} for r in runs],
           "method": __doc__.split("\n\n", 1)[1].split("\nEvery cell")[0],
           **{k: v.to_dict("records") for k, v in tables.items()},
           "missing": missing(runs)}
    return out, tables


# -- files --------------------------------------------------------------------------------------------
def fmt(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3g}"
    return "-" if v is None else str(v)


def md_table(df: pd.DataFrame, cols: list[str]) -> list[str]:
    if not len(df):
        return ["(no run holds this probe)", ""]
    return (["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            + ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in df.to_dict("records")] + [""])


def markdown(s: dict[str, Any], tables: dict[str, pd.DataFrame]) -> str:
    lines = ["# Role-play mechanism probes", "", f"Baseline: `{s['baseline']}`", ""]
    lines += [f"- `{r['path']}`: T={fmt(r['temperature'])}, {memory_label(r['memory_ablate'])}"
              + (" (SYNTHETIC data)" if r["synthetic_data"] else "") for r in s["runs"]]
    lines += ["", "## Method", "", s["method"], ""]
    dcols = ["condition", "source", "setup", "tweet_delta_sd", "private_delta_sd", "human_tweet_delta_sd",
             "human_private_delta_sd", "run"]
    lines += ["## 1. Decoding: tweet / private delta SD by temperature", ""] + md_table(tables["temperature"], dcols)
    lines += ["## 2. Topic drift: public on-topic rate, first vs last round", ""] + md_table(
        tables["on_topic"], ["source", "setup", "condition", "first_round", "last_round", "rate_first", "rate_last",
                             "change", "run"])
    lines += ["## 3. Memory: full vs ablated", ""] + md_table(tables["memory"], dcols)
    lines += ["## Missing: probe cells no run holds, and the command that makes each", ""]
    lines += [f"- {m['probe']}: {m['missing']}. Run: `{m['command']}`" for m in s["missing"]] or ["(nothing)"]
    return "\n".join(lines) + "\n"


def write_probes(paths: list[str | Path], out: str | Path | None = None, make_plots: bool = True
                 ) -> tuple[Path, dict[str, Any]]:
    """``chorus roleplay probes`` from Python: its sealed analysis run (summary.json, probes.md,
    tables/*.parquet, plots/probes.png) at ``out``; returns (run directory, summary)."""
    from chorus.core.analyses import get_analysis
    import chorus.simulate.roleplay.analyses  # noqa: F401  (registers the analysis)
    r = get_analysis("roleplay probes").run({"runs": [str(p) for p in paths]}, out, plots=make_plots)
    return r.path, r.summary
