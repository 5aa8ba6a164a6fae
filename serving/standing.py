"""Where a run's numbers come from, decided in one place (``standing``), and said where the numbers are.

Every console table, report section, transcript page and paper page that shows a run's numbers asks
this module what they are:

* ``embedded``: an embedded demo model produced them (``chorus.serving.profiles.embedded_note``): they
  test the plumbing, not the science;
* ``model``: a model that is not an embedded demo model produced them (the user's model): they are
  that model's results as run, nothing here calls them plumbing;
* ``oracle``: no language model was called; the numbers are the method's exact consequences
  (the belief layer's oracle mode), a check of the method, not a finding about any model;
* ``synthetic``: generated inputs with known answers (a synthetic mode); a check of the method;
* ``unrecorded``: the run's provenance names no model (hand-written, scripted or synthetic inputs).

Synthetic *data* (the role-play fixture: not human behaviour) is said beside any of these.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

from chorus.serving.profiles import embedded_note

KINDS = ("embedded", "model", "oracle", "synthetic", "unrecorded")
NO_MODEL_MODES = ("oracle", "synthetic")   # modes whose numbers no language model produced


@dataclass(frozen=True)
class Standing:
    kind: str                    # one of KINDS
    models: tuple[str, ...]      # the models that produced the numbers, as recorded
    text: str                    # the sentence shown where the numbers are
    data: str | None = None      # a note on the data itself (synthetic fixture data), part of ``text``

    @property
    def embedded(self) -> bool:
        return self.kind == "embedded"

    @property
    def caveat(self) -> str | None:
        """The warning a summary or a figure carries beside its numbers: the text when an embedded demo
        model produced them, else None (a user's model's numbers carry no warning)."""
        return self.text if self.embedded else None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "models": list(self.models), "embedded": self.embedded, "text": self.text,
                "data": self.data}


def standing(models: Iterable[Optional[str]] = (), *, mode: str | None = None, data: str | None = None) -> Standing:
    """The standing of numbers produced by ``models`` (profile names or local folders; None and empty
    entries are skipped) in ``mode`` (a part's mode: ``oracle`` and ``synthetic`` call no model, whatever
    a config names), with ``data`` (a note on synthetic data) said beside it. Never raises."""
    found = tuple(dict.fromkeys(m for m in models if isinstance(m, str) and m.strip()))
    if mode in NO_MODEL_MODES:
        kind = mode
        text = ("oracle mode: no language model is called; the numbers are the method's exact consequences, "
                "a check of the method, not a finding about any model" if mode == "oracle" else
                "synthetic mode: generated inputs with known answers; the numbers check the method, "
                "not a model")
        found = ()
    elif (note := embedded_note(found)) is not None:
        kind, text = "embedded", note
    elif found:
        kind, text = "model", f"numbers from {', '.join(found)} (not an embedded demo model): this model's results as run"
    else:
        kind, text = "unrecorded", ("no model is recorded for these numbers: they come from hand-written, scripted "
                                    "or synthetic inputs, not from a recorded engine")
    if data:
        text = f"{text}; {data}"
    return Standing(kind, found, text, data)


def recorded_models(obj: Any) -> list[str]:
    """Every ``profile`` string in a provenance record (engines, seats), depth first, once each."""
    def walk(o: Any) -> list[str]:
        if isinstance(o, dict):
            return [v for k, v in o.items() if k == "profile" and isinstance(v, str)] + [p for v in o.values() for p in walk(v)]
        if isinstance(o, list):
            return [p for v in o for p in walk(v)]
        return []
    return list(dict.fromkeys(walk(obj)))


def _read(p: Path, loader) -> Any:
    try:
        return loader(p.read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None


def _summary_models(summary: dict[str, Any]) -> list[str]:
    """The models a summary names itself (``model``: a profile or a spec; a judge or sender beside it)."""
    out = []
    for k in ("model", "judge_profile", "appraiser"):
        v = summary.get(k)
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict) and isinstance(v.get("profile"), str):
            out.append(v["profile"])
    sender = summary.get("sender")
    if isinstance(sender, dict) and isinstance(sender.get("name"), str):
        out.append(sender["name"])
    return out


def _data_note(prov: dict[str, Any], summary: dict[str, Any]) -> str | None:
    if isinstance(summary.get("data_note"), str):
        return summary["data_note"]
    if (prov.get("data") or {}).get("synthetic") if isinstance(prov.get("data"), dict) else False:
        return "SYNTHETIC fixture data: not human behaviour"
    return None


def run_standing(run_dir: str | Path, summary: dict[str, Any] | None = None) -> Standing:
    """The standing of a run directory's numbers, from its files alone: the mode and models its
    provenance.json records (``summary``, else its summary.json, adds the models it names and its data
    note; a judge pass's judge.json its judge). A run with no provenance reads as ``unrecorded``."""
    run = Path(run_dir)
    prov = _read(run / "provenance.json", json.loads) or {}
    summ = summary if summary is not None else (_read(run / "summary.json", json.loads) or {})
    judge = _read(run / "judge.json", json.loads) or {}
    mode = prov.get("mode") or (summ.get("mode") if isinstance(summ, dict) else None)
    if mode is None:
        cfg = _read(run / "config.yaml", yaml.safe_load)
        mode = cfg.get("mode") if isinstance(cfg, dict) and isinstance(cfg.get("mode"), str) else None
    models = recorded_models(prov) + (_summary_models(summ) if isinstance(summ, dict) else [])
    if isinstance(judge, dict) and isinstance(judge.get("judge_profile"), str):
        models.append(judge["judge_profile"])
    return standing(models, mode=mode, data=_data_note(prov, summ if isinstance(summ, dict) else {}))


def print_headline(console: Any, part: str, run_dir: str | Path, summary: dict[str, Any], title: str | None = None) -> None:
    """Print a run's headline (``chorus.core.headline.rows`` of ``part``) as the rich table a run ends
    with, its standing under the rows; a part without a declared headline prints the standing alone."""
    from chorus.core.headline import console_table, rows
    st = run_standing(run_dir, summary)
    found = rows(part, summary)
    if found:
        console.print(console_table(title or f"headline: {summary.get('experiment') or part}", found,
                                    f"numbers from: {st.text}"))
    else:
        console.print(f"numbers from: {st.text}", highlight=False)
