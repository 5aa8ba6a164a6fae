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
* ``unrecorded``: the run's provenance names no model (hand-written, scripted or synthetic inputs);
* ``mixed``: an analysis over sources of different standings (each named in the text).

An analysis over stored runs or trace files (``chorus.core.analyses``) has no model of its own: its
numbers stand where its sources stand (``sources_standing``), a trace file where the run directory it
lies in stands.

Synthetic *data* (the role-play fixture: not human behaviour) is said beside any of these.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

from chorus.serving.profiles import embedded_note

KINDS = ("embedded", "model", "oracle", "synthetic", "unrecorded", "mixed")
NO_MODEL_MODES = ("oracle", "synthetic")   # modes whose numbers no language model produced


@dataclass(frozen=True)
class Standing:
    kind: str                    # one of KINDS
    models: tuple[str, ...]      # the models that produced the numbers, as recorded
    text: str                    # the sentence shown where the numbers are
    data: str | None = None      # a note on the data itself (synthetic fixture data), part of ``text``
    kinds: tuple[str, ...] = ()  # a ``mixed`` standing's component kinds

    @property
    def embedded(self) -> bool:
        """An embedded demo model produced these numbers, or some of them (a mixed analysis)."""
        return self.kind == "embedded" or "embedded" in self.kinds

    @property
    def caveat(self) -> str | None:
        """The warning a summary or a figure carries beside its numbers: the text when an embedded demo
        model produced them, else None (a user's model's numbers carry no warning)."""
        return self.text if self.embedded else None

    def as_dict(self) -> dict[str, Any]:
        d = {"kind": self.kind, "models": list(self.models), "embedded": self.embedded, "text": self.text,
             "data": self.data}
        return {**d, "kinds": list(self.kinds)} if self.kinds else d


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


def _home(path: Path) -> Path | None:
    """The run directory a source lies in: itself, or the nearest parent (three at most, a trace file
    sits in ``RUN/traces/``) holding a provenance.json; None for a bare file or store."""
    for d in [path, *path.parents[:3]]:
        if (d / "provenance.json").is_file():
            return d
    return None


def source_standing(path: str | Path, _depth: int = 0) -> Standing:
    """The standing of one analysis source (a run directory or a trace file): that of the run it lies
    in, ``unrecorded`` when it lies in none."""
    home = _home(Path(path))
    if home is None or _depth > 8:   # a chain of analyses of analyses is short; a loop is a broken record
        return standing(())
    return run_standing(home, _depth=_depth + 1)


def combined(standings: list[Standing], names: list[str] | None = None) -> Standing:
    """Several sources' standings as one: the common one when they agree, else ``mixed`` naming each
    source's (``names``, in order) and keeping the models of all."""
    if not standings:
        return standing(())
    first = standings[0]
    if all(s.kind == first.kind and s.text == first.text for s in standings):
        return first
    names = names or [f"source {i + 1}" for i in range(len(standings))]
    models = tuple(dict.fromkeys(m for s in standings for m in s.models))
    kinds = tuple(dict.fromkeys(s.kind for s in standings))
    text = "mixed sources: " + "; ".join(f"{n}: {s.text}" for n, s in zip(names, standings))
    return Standing("mixed", models, text, None, kinds)


def sources_standing(sources: list[dict[str, Any]], _depth: int = 0) -> Standing:
    """The standing of an analysis from its provenance's ``sources`` records (``path``, ``resolved``)."""
    recs = [s for s in sources if isinstance(s, dict) and isinstance(s.get("resolved") or s.get("path"), str)]
    return combined([source_standing(s.get("resolved") or s["path"], _depth) for s in recs],
                    [s.get("path") or s["resolved"] for s in recs])


def run_standing(run_dir: str | Path, summary: dict[str, Any] | None = None, *, _depth: int = 0) -> Standing:
    """The standing of a run directory's numbers, from its files alone: the mode and models its
    provenance.json records (``summary``, else its summary.json, adds the models it names and its data
    note; a judge pass's judge.json its judge). An analysis that records neither a mode nor a model
    stands where its recorded sources stand. A run with no provenance reads as ``unrecorded``."""
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
    srcs = prov.get("sources")
    if isinstance(srcs, list) and srcs and "analysis" in prov:
        src = sources_standing(srcs, _depth)
        if mode is None and not models:
            return src
        models += list(src.models)   # an analysis that called models of its own rests on its sources' too
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


def standing_text(run_dir: str | Path) -> str:
    """The sentence saying where a run's numbers come from (what an analysis command prints under its table)."""
    return run_standing(run_dir).text
