"""``chorus report RUN``: one self-contained HTML file for any run directory (no network, no
external assets: CSS inline, plots embedded as base64 PNG, no scripts).

Everything shown is read from the run's files (summary.json, tables/*.parquet, plots/*.png,
provenance.json, config.yaml); nothing is typed here. A demo directory (``chorus demo``) is
rendered as one section per stage, each stage from its own run directory; a stage that was
interrupted or failed is named as such and the rest still renders.
"""
from __future__ import annotations

import base64
import html
import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from chorus import __version__
from chorus.core.analyses import brief_for, readers_in
from chorus.core.config import InputError
from chorus.core.headline import UNDEFINED, Row, num
from chorus.core.undefined import INTERVAL_KEYS, NO_REASON, is_undefined, why_undefined
from chorus.core.headline import rows as headline_rows
from chorus.core.runs import MANIFEST, SealState, in_use, seal_state
from chorus.serving.standing import Standing, run_standing, standing
from chorus.stages import REGISTRY, STAGES
from chorus.transcripts import transcripts_link

CSS = """body{font-family:system-ui,-apple-system,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.6em}h3{margin-bottom:.3em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3}pre{background:#f7f7f7;padding:.6em;overflow:auto;font-size:12px;max-height:30em}
img{max-width:100%;border:1px solid #eee}figure{display:inline-block;margin:.5em;max-width:48%;vertical-align:top}
figure.wide{display:block;max-width:100%}
figcaption{font-size:12px;color:#555;text-align:center}.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:.5em 1em}
.bad{background:#fdecea;border-left:4px solid #d33;padding:.5em 1em}.ok{color:#1a7f37;font-weight:bold}
.failed{color:#d33;font-weight:bold}.undef{color:#b26a00}.standing{font-style:italic}.seal{font-size:1.1em}.sealok{color:#1a7f37}.other{color:#b26a00;font-weight:bold}nav a{margin-right:1em}
details{margin:.4em 0}summary{cursor:pointer;color:#345}"""

MAX_ROWS = 25
WIDE_PX = 1100  # PNGs wider than this (about 7.3 in at the 150 dpi of chorus.core.plots) take the full width


def _png_width(data: bytes) -> int:
    """Pixel width from a PNG's IHDR chunk (0 when the bytes are not a PNG)."""
    return int.from_bytes(data[16:20], "big") if data[:8] == b"\x89PNG\r\n\x1a\n" else 0


class ReportError(InputError):
    """The directory cannot be rendered (missing, or not a chorus run directory)."""


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{UNDEFINED} (NaN)" if not math.isfinite(v) else f"{v:.4g}"
    return str(v)


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _df_table(df: pd.DataFrame, limit: int = MAX_ROWS, na_rep: str = "–") -> str:
    more = f"<p><i>first {limit} of {len(df)} rows</i></p>" if len(df) > limit else ""
    shown = df.head(limit).copy()
    for c in shown.columns:  # long free text (generations) would swamp the page
        if shown[c].dtype == object:
            shown[c] = shown[c].map(lambda v: (str(v)[:200] + "…") if isinstance(v, str) and len(v) > 200 else v)
    return shown.to_html(index=False, escape=True, border=0, na_rep=na_rep,
                         float_format=lambda x: f"{x:.4g}") + more


def _mark_single_cluster(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A table of interval records with a column that names each interval's level (issue 51): what it
    resampled and how many units ("[0.31, 0.52] (95%, 40 question families resampled)"), refused below
    ``MIN_UNITS`` units, "level not recorded" where the record does not say; an interval from fewer
    than two clusters whose unit is not named is marked as no interval (the bootstrap returned the one
    cluster's value)."""
    from chorus.core.stats import record_interval_text
    df = pd.DataFrame(rows)
    lo = "ci_low" if "ci_low" in df.columns else "lo" if "lo" in df.columns else None
    if lo is None:
        return df
    hi = "ci_high" if lo == "ci_low" else "hi"

    def text(r: dict[str, Any]) -> str:
        n = r.get("n_clusters")
        unit = r.get("resampled") if r.get("resampled") not in (None, "unit") else None
        if unit is None and isinstance(n, (int, float)) and n < 2:
            return "from 1 cluster: not an interval"
        if not isinstance(r.get(lo), (int, float)) or not isinstance(r.get(hi), (int, float)):
            return ""
        return record_interval_text({**r, "resampled": unit}, lo=lo, hi=hi,
                                    resampled="cluster" if n is not None else None)
    col = "interval (level)" if "interval" in df.columns else "interval"
    df[col] = [text(r) for r in rows]
    return df


def _reasoned_kv(name: str, d: dict[str, Any], why: dict[str, Any], none_undefined: bool = False) -> str:
    """A flat dict's key/value rows, an undefined value with its reason. NaN is undefined; so is None
    where a reason is recorded for it (a summary written with NaN as null) or ``none_undefined``."""
    def cell(k: str, v: Any) -> str:
        if is_undefined(v) or v is None:
            path = f"{name}.{k}" if name else k
            reason = why_undefined(path, why, d)
            if v is not None or reason != NO_REASON or none_undefined:
                return f"<span class='undef'>{UNDEFINED}: {_esc(reason)}</span>"
        return _esc(_fmt(v))
    return "<table>" + "".join(f"<tr><th>{_esc(k)}</th><td>{cell(k, v)}</td></tr>" for k, v in d.items()) + "</table>"


def _table_reasons(name: str, df: pd.DataFrame, why: dict[str, Any]) -> str:
    """Under a table, why each column's undefined cells are undefined (the table shows them as
    "undefined"; a reason recorded per row, ``why`` or ``interval_why``, is a column of the table)."""
    notes = []
    for c in df.columns:
        col = df[c]
        if col.dtype.kind != "f" or col.isna().sum() == 0 or c in ("why", "interval_why"):
            continue
        reason = why_undefined(f"{name}[].{c}", why)
        if reason == NO_REASON and ("interval_why" in df.columns and c in INTERVAL_KEYS or "why" in df.columns):
            reason = "see the row's " + ("interval_why" if "interval_why" in df.columns and c in INTERVAL_KEYS else "why")
        notes.append(f"<li>{_esc(c)}: undefined in {int(col.isna().sum())} of {len(col)} rows: {_esc(reason)}</li>")
    return f"<ul class='undef'>{''.join(notes)}</ul>" if notes else ""


def _render_value(name: str, obj: Any, depth: int = 0, why: dict[str, Any] | None = None) -> str:
    """A summary value as HTML: flat dicts as key/value tables, dicts of flat dicts as a matrix,
    lists of flat dicts as a table, deeper structure as nested headings, then JSON. Undefined values
    (NaN) say so with their reason (``why_undefined``)."""
    why = why or {}
    if _scalar(obj):
        return _reasoned_kv("", {name: obj}, why)
    if isinstance(obj, dict) and obj and all(_scalar(v) for v in obj.values()):
        return f"<h4>{_esc(name)}</h4>{_reasoned_kv(name, obj, why)}" if name else _reasoned_kv(name, obj, why)
    if (isinstance(obj, dict) and obj and all(isinstance(v, dict) and v and all(_scalar(x) for x in v.values())
                                              for v in obj.values())):
        df = pd.DataFrame(obj).reset_index().rename(columns={"index": ""})
        return (f"<h4>{_esc(name)}</h4>" + _df_table(df, 60, na_rep=UNDEFINED)
                + _matrix_reasons(name, obj, why))
    if isinstance(obj, list) and obj and all(isinstance(v, dict) and all(_scalar(x) for x in v.values()) for v in obj):
        df = _mark_single_cluster(obj)
        return f"<h4>{_esc(name)}</h4>" + _df_table(df, 60, na_rep=UNDEFINED) + _table_reasons(name, df, why)
    if isinstance(obj, dict) and depth < 2:
        scal = {k: v for k, v in obj.items() if _scalar(v)}
        parts = [f"<h4>{_esc(name)}</h4>" if name else "", _reasoned_kv(name, scal, why) if scal else ""]
        parts += [_render_value(f"{name}.{k}" if name else k, v, depth + 1, why) for k, v in obj.items()
                  if not _scalar(v)]
        return "".join(parts)
    return f"<h4>{_esc(name)}</h4><pre>{_esc(json.dumps(obj, indent=1, default=str)[:20000])}</pre>"


def _matrix_reasons(name: str, obj: dict[str, dict[str, Any]], why: dict[str, Any]) -> str:
    """Under a matrix (a dict of flat dicts), why its undefined cells are undefined, one line per reason."""
    found: dict[str, list[str]] = {}
    for col, d in obj.items():
        for k, v in d.items():
            if is_undefined(v):
                found.setdefault(why_undefined(f"{name}.{col}.{k}", why, d), []).append(f"{col}.{k}")
    return ("<ul class='undef'>" + "".join(f"<li>{_esc(', '.join(cells))}: undefined: {_esc(r)}</li>"
                                           for r, cells in found.items()) + "</ul>") if found else ""


def _scalars(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary's own ``headline`` block when it has one, else its top-level scalars: the run's details
    under its declared headline, or the headline of a part that declares none."""
    if isinstance(summary.get("headline"), dict):
        return {k: v for k, v in summary["headline"].items() if _scalar(v)}
    return {k: v for k, v in summary.items() if _scalar(v)}


def _details_table(d: dict[str, Any], why: dict[str, Any]) -> str:
    """Key/value rows; an undefined value (NaN) says so, with the reason the summary records; None is a
    value not given (shown "–")."""
    return _reasoned_kv("", d, why, none_undefined=True)


def _row_cells(r: Row) -> str:
    est = (_esc(num(r.estimate)) + (f" <small>({_esc(r.detail)})</small>" if r.detail else "")
           if r.defined else f"<span class='undef'>{UNDEFINED}: {_esc(r.why)}</span>")
    iv = r.interval_text()
    iv_html = f"<span class='undef'>{_esc(iv)}</span>" if (r.single_cluster or r.interval is None) and iv else _esc(iv)
    return f"<td>{_esc(r.name)}</td><td>{est}</td><td>{iv_html}</td><td>{_esc(_fmt(r.n))}</td>"


def headline_table(found: list[Row]) -> str:
    """A part's declared headline rows as an HTML table (estimate, interval, n; undefined ones with why)."""
    return ("<table class='headline'><tr><th>headline</th><th>estimate</th><th>interval</th><th>n</th></tr>"
            + "".join(f"<tr>{_row_cells(r)}</tr>" for r in found) + "</table>")


def standing_line(st: Standing) -> str:
    """Where the numbers come from, where they are shown (a warning unless a user's model produced them)."""
    cls = "standing" if st.kind == "model" else "warn standing"
    return f"<p class='{cls}'><b>Numbers from</b>: {_esc(st.text)}.</p>"


def _key_numbers(name: str, rec: dict[str, Any] | None, part: str | None) -> str:
    """A demo stage's declared headline for the overview, each row with its interval and n (an undefined
    one with its reason); a stage whose part declares none shows its first scalars."""
    summ = (rec or {}).get("summary") or {}
    found = headline_rows(part, summ)
    if found:
        return "<br>".join(f"{_esc(r.name)}: " + (_esc(r.text()) if r.defined else f"<span class='undef'>{_esc(r.text())}</span>")
                           for r in found)
    why = summ.get("undefined") or {}
    return "<br>".join(f"{_esc(k)} = " + (f"{UNDEFINED}: {_esc(why_undefined(k, why))}" if is_undefined(v) else _esc(_fmt(v)))
                       for k, v in list(_scalars(summ).items())[:4])


def _read_json(p: Path) -> dict[str, Any] | None:
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _version_note(prov: dict[str, Any] | None) -> str:
    if prov is None:
        return "<p class='warn'>missing: provenance.json (versions, models and seeds unknown)</p>"
    made = (prov.get("versions") or {}).get("chorus")
    if made and made.split(".")[:2] != __version__.split(".")[:2]:
        return (f"<p class='warn'>This run was made by chorus {_esc(made)}; this is chorus {_esc(__version__)}. "
                "It is rendered with what it has: sections this version expects may be missing.</p>")
    return ""


def seal_warnings(run: Path, st: SealState) -> list[str]:
    """What the page's banner says about the run's record, as plain lines (the command prints them)."""
    out = []
    who = in_use(run)
    if who:
        out.append(f"{run} is in use by {who}: its files are being written now")
    if not st.sealed:
        out.append(f"UNVERIFIED: {run} has no {MANIFEST} (the run did not finish, its record was removed, or an "
                   f"older chorus made it): nothing shown is checked against a record")
    if st.problems:
        out.append("NOT AS WRITTEN: " + "; ".join(st.problems))
    if st.unsealed:
        out.append(f"NOT SEALED: {len(st.unsealed)} file(s) present that the run's record does not list: "
                   + ", ".join(st.unsealed[:20]) + (" ..." if len(st.unsealed) > 20 else ""))
    return out


def _seal_banner(run: Path, st: SealState) -> str:
    lines = seal_warnings(run, st)
    if not lines:
        return (f"<p class='sealok'>Sealed: the run's {st.n_files} files are the ones it wrote "
                f"(checked against its {MANIFEST} when this page was rendered).</p>")
    return "".join(f"<p class='bad seal'><b>{_esc(ln.split(':', 1)[0])}</b>:{_esc(ln.split(':', 1)[1])}</p>"
                   if ln.split(":", 1)[0].isupper() else f"<p class='warn seal'>{_esc(ln)}</p>" for ln in lines)


def _flag(p: Path, unsealed: frozenset[Path]) -> str:
    """A marker beside a table or plot the run's record does not list."""
    return " <b class='failed'>(not sealed)</b>" if p.resolve() in unsealed else ""


def _figure(png: Path, unsealed: frozenset[Path] = frozenset()) -> str:
    """A plot, as its vector SVG where the run wrote one beside the PNG (``chorus.core.plots.save``)."""
    data = png.read_bytes()
    svg = png.with_suffix(".svg")
    shown, mime = (svg.read_bytes(), "image/svg+xml") if svg.is_file() else (data, "image/png")
    b64 = base64.b64encode(shown).decode()
    # a multi-panel figure shrunk to half the page is illegible: wide ones get the full width
    wide = " class='wide'" if _png_width(data) > WIDE_PX else ""
    return (f"<figure{wide}><img alt='{_esc(png.stem)}' src='data:{mime};base64,{b64}'>"
            f"<figcaption>{_esc(png.stem)}{_flag(png, unsealed)}</figcaption></figure>")


def _readers_section(run: Path, h: str, anchor: str) -> str:
    """The analyses made inside this run that read it (``debate bda|belief``, ``influence
    counterfactual``): each one's brief and figures, as its registered reader gives them, and where its
    own run stands against its record (``chorus.core.analyses.readers_in``: the report never opens
    another analysis's files by name)."""
    found = readers_in(run)
    if not found:
        return ""
    out = [f"<{h} id='{anchor}analyses'>Analyses of this run</{h}>"]
    for d, r, b in found:
        st = seal_state(d)
        mark = "".join(f" <span class='bad'>{_esc(ln.split(':', 1)[0])}</span>" for ln in seal_warnings(d, st))
        out.append(f"<details open><summary>{_esc(r.command)}: {_esc(d.name)}/{mark}</summary>"
                   + _render_value(d.name, b)
                   + "".join(_figure(p) for p in (sorted((d / "plots").glob("*.png")) if (d / "plots").is_dir() else []))
                   + "</details>")
    return "".join(out)


def _brief(run: Path, summary: dict[str, Any]) -> dict[str, Any] | None:
    """An analysis run's brief as flat headline numbers; a brief that fails is said, not raised (the rest
    of the report still renders)."""
    try:
        b = brief_for(run, summary)
    except Exception as e:  # noqa: BLE001 -- an old summary a newer brief cannot read
        return {"brief": f"{UNDEFINED}: the analysis's brief failed on this summary ({type(e).__name__}: {e})"}
    return None if b is None else {k: v for k, v in b.items() if _scalar(v)}


def _run_body(run: Path, title_level: int = 2, anchor: str = "", unsealed: frozenset[Path] = frozenset()) -> str:
    """Headline numbers, plots, tables and provenance of one run directory."""
    h = f"h{title_level}"
    out: list[str] = []
    summ = _read_json(run / "summary.json")
    prov = _read_json(run / "provenance.json")
    out.append(_version_note(prov) if title_level == 2 else "")
    if summ is None:
        why = ("the file is there but unreadable" if (run / "summary.json").is_file()
               else "this run did not finish: it was interrupted or failed")
        out.append(f"<p class='bad'>missing: summary.json ({why})</p>")
    else:
        part = (prov or {}).get("part")
        found = headline_rows(part, summ)
        scal = _scalars(summ)
        why = summ.get("undefined") or {}
        st = standing_line(run_standing(run, summ))
        if found:   # the part's lead comparison first; its bookkeeping below
            out.append(f"<{h} id='{anchor}headline'>Headline</{h}>{st}{headline_table(found)}")
            if scal:
                out.append(f"<{h} id='{anchor}details'>Run details</{h}>{_details_table(scal, why)}")
        elif (brief := _brief(run, summ)) is not None:   # an analysis: its registered brief, then its settings
            out.append(f"<{h} id='{anchor}headline'>Headline numbers</{h}>{st}{_details_table(brief, why)}")
            if scal:
                out.append(f"<{h} id='{anchor}details'>Run details</{h}>{_details_table(scal, why)}")
        else:
            out.append(f"<{h} id='{anchor}headline'>Headline numbers</{h}>{st}"
                       + (_details_table(scal, why) if scal else "<p>–</p>"))
        rest = {k: v for k, v in summ.items() if not _scalar(v) and k not in ("headline", "plots")}
        if rest:
            out.append("<details><summary>all numbers of this run</summary>"
                       + "".join(_render_value(k, v, why=why) for k, v in rest.items()) + "</details>")
    pngs = sorted((run / "plots").glob("*.png")) if (run / "plots").is_dir() else []
    out.append(f"<{h} id='{anchor}plots'>Plots</{h}>")
    if not pngs:
        out.append("<p>none</p>")
    out += [_figure(png, unsealed) for png in pngs]
    out.append(_readers_section(run, h, anchor))
    pqs = sorted((run / "tables").glob("*.parquet")) if (run / "tables").is_dir() else []
    out.append(f"<{h} id='{anchor}tables'>Tables</{h}>")
    if not pqs:
        out.append("<p>none</p>")
    for pq in pqs:
        try:
            df = pd.read_parquet(pq)
            out.append(f"<details><summary>{_esc(pq.stem)} ({len(df)} rows){_flag(pq, unsealed)}</summary>"
                       f"{_df_table(df)}</details>")
        except Exception as e:  # a half-written table must not stop the report
            out.append(f"<p class='bad'>{_esc(pq.name)}: unreadable ({_esc(type(e).__name__)})</p>")
    out.append(f"<{h} id='{anchor}provenance'>Provenance</{h}>")
    if prov is None:
        out.append("<p class='warn'>missing: provenance.json</p>")
    else:
        out.append(f"<details><summary>versions, model identities, seeds, times</summary>"
                   f"<pre>{_esc(json.dumps(prov, indent=1, default=str))}</pre></details>")
    cfg = run / "config.yaml"
    if cfg.is_file():
        out.append(f"<details><summary>config.yaml</summary><pre>{_esc(cfg.read_text())}</pre></details>")
    err = run / "error.txt"
    if err.is_file():
        out.append(f"<details open><summary class='failed'>error</summary><pre>{_esc(err.read_text()[-6000:])}</pre></details>")
    return "".join(out)


def _demo_stages(prov: dict[str, Any] | None, summ: dict[str, Any] | None) -> list[str]:
    """Stages to show: those the last invocation planned (it may have run only some, with --stage)
    plus those earlier invocations left in the summary, in the demo's order."""
    wanted = set((prov or {}).get("stages") or STAGES) | set((summ or {}).get("stages", {}))
    return [s for s in STAGES if s in wanted] + sorted(wanted - set(STAGES))


def _demo_body(run: Path, summ: dict[str, Any] | None, prov: dict[str, Any] | None,
               unsealed: frozenset[Path] = frozenset()) -> str:
    stages = (summ or {}).get("stages", {})
    timing = (_read_json(run / "timing.json") or {}).get("stages", {})
    # the last invocation may have run only some stages (--stage); earlier ones stay in the summary
    planned = _demo_stages(prov, summ)
    # each stage's own record: its cold time survives reruns that read everything back
    own = {name: _read_json(run / name / "demo_timing.json") or {} for name in planned}
    out = [_version_note(prov), "<section id='overview'><h2>Overview</h2>"]
    if summ is None:
        out.append("<p class='bad'>missing: summary.json (the demo was interrupted before its first stage ended)</p>")
    rows = []
    # each stage's part (its declared headline) and where its numbers come from, from its own files
    provs = {name: _read_json(run / name / "provenance.json") for name in planned}
    parts = {name: (p or {}).get("part") for name, p in provs.items()}
    stands = {name: run_standing(run / name) for name in planned if (run / name).is_dir()}
    for name in planned:
        rec = stages.get(name)
        status = rec["status"] if rec else "missing (not run, or interrupted)"
        cls = {"done": "ok", "failed": "failed"}.get(status, "other")
        title = rec.get("title") if rec else (REGISTRY[name].title if name in REGISTRY else name)
        wall = timing.get(name, {}).get("wall_s")
        cold = (own.get(name) or {}).get("cold_wall_s")
        n_inv = len((own.get(name) or {}).get("invocations", []))
        rows.append(f"<tr><td><a href='#stage-{_esc(name)}'>{_esc(name)}</a></td><td>{_esc(title)}</td>"
                    f"<td class='{cls}'>{_esc(status)}</td><td>{_key_numbers(name, rec, parts.get(name))}</td>"
                    f"<td>{_esc(stands[name].text) if name in stands else '–'}</td><td>{_esc(_fmt(cold))}</td>"
                    f"<td>{_esc(_fmt(wall))}</td><td>{_esc(_fmt(n_inv or None))}</td>"
                    f"<td>{_esc((rec or {}).get('error', ''))}</td></tr>")
    colds = [(own.get(n) or {}).get("cold_wall_s") for n in planned]
    total = (f"<p>Cold time of all stages: <b>{_esc(_fmt(round(sum(colds), 1)))} s</b> (each stage's wall time up to "
             f"the invocation that completed it, from its own <code>demo_timing.json</code>).</p>"
             if colds and all(c is not None for c in colds) else "")
    out.append("<table><tr><th>stage</th><th>what</th><th>status</th><th>headline</th><th>numbers from</th><th>cold s</th>"
               "<th>last invocation s</th><th>invocations</th><th>note</th></tr>" + "".join(rows) + "</table>" + total)
    prof = (summ or {}).get("profile")
    out.append(f"<p>Size <b>{_esc((summ or {}).get('size', '?'))}</b>, model <b>{_esc(prof)}</b>.</p>")
    if not stands:   # no stage left a directory: the model the demo was given is all there is to say
        out.append(standing_line(standing([prof])))
    out.append("</section>")
    for name in planned:
        rec = stages.get(name)
        sdir = run / name
        title = rec.get("title") if rec else (REGISTRY[name].title if name in REGISTRY else name)
        out.append(f"<section id='stage-{_esc(name)}'><h2>{_esc(title)}</h2>")
        if rec is None:
            out.append(f"<p class='warn'>missing: stage <b>{_esc(name)}</b> has no result (not run, or interrupted)."
                       f"{' Partial files follow.' if sdir.is_dir() else ''}</p>")
        elif rec["status"] != "done":
            out.append(f"<p class='{'bad' if rec['status'] == 'failed' else 'warn'}'>{_esc(rec['status'])}: "
                       f"{_esc(rec.get('error', ''))}</p>")
        if sdir.is_dir():
            out.append(_run_body(sdir, title_level=3, anchor=f"{name}-", unsealed=unsealed))
        out.append("</section>")
    return "".join(out)


def check_readable(run_dir: str | Path) -> None:
    """``chorus report`` refuses a run whose summary or provenance is present but unreadable (one
    ``ReportError`` naming the file); ``render_report`` itself still renders what it can."""
    for name in ("summary.json", "provenance.json"):
        f = Path(run_dir) / name
        if f.is_file():
            try:
                json.loads(f.read_text())
            except (OSError, ValueError) as err:
                raise ReportError(f"{f}: unreadable ({type(err).__name__}: {' '.join(str(err).split())[:120]}); "
                                  f"rerun the run's report command, or restore the file") from None


def render_report(run_dir: str | Path, out: str | Path | None = None, *, seal: SealState | None = None) -> Path:
    """Write ``RUN/report.html`` (or ``out``) for the run directory ``run_dir``; returns its path. The
    page opens with where the run stands against its record (``seal``, else checked now): sealed,
    UNVERIFIED (no record), NOT AS WRITTEN, NOT SEALED (files it does not list, marked where shown)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ReportError(f"{run}: no such run directory")
    summ = _read_json(run / "summary.json")
    prov = _read_json(run / "provenance.json")
    if summ is None and prov is None and not (run / "config.yaml").is_file():
        raise ReportError(f"{run}: not a chorus run directory (no summary.json, provenance.json or config.yaml)")
    is_demo = (prov or {}).get("part") == "demo" or (summ is not None and isinstance(summ.get("stages"), dict)
                                                      and all(isinstance(v, dict) and "status" in v
                                                              for v in summ["stages"].values()))
    part = (prov or {}).get("part", "run")
    st = seal if seal is not None else seal_state(run)
    unsealed = frozenset((run / u).resolve() for u in st.unsealed)
    body = _demo_body(run, summ, prov, unsealed) if is_demo else _run_body(run, unsealed=unsealed)
    nav = ("<nav><a href='#overview'>overview</a>" + "".join(
        f"<a href='#stage-{_esc(s)}'>{_esc(s)}</a>" for s in _demo_stages(prov, summ))
        + "<a href='#demo-provenance'>provenance</a></nav>") if is_demo else ""
    demo_prov = ""
    if is_demo and prov is not None:
        demo_prov = (f"<section id='demo-provenance'><h2>Provenance</h2><pre>{_esc(json.dumps(prov, indent=1, default=str))}"
                     "</pre></section>")
    path = Path(out) if out is not None else run / "report.html"
    viewer = transcripts_link(run, path)   # every message of the run, on a page of its own
    doc = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
           f"<meta name='viewport' content='width=device-width,initial-scale=1'>"
           f"<title>chorus {_esc(part)}: {_esc(run.resolve().name)}</title><style>{CSS}</style></head><body>"
           f"<h1>chorus {_esc(part)}: {_esc(run.resolve().name)}</h1>{_seal_banner(run, st)}{nav}{viewer}{body}{demo_prov}"
           f"<footer><p><small>rendered by chorus {_esc(__version__)} from the files in {_esc(run.resolve())}</small></p>"
           f"</footer></body></html>")
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")   # two renderings never share a temporary file
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
    return path
