"""``chorus view RUN`` (and ``chorus report RUN``): the transcript viewer, one self-contained HTML page
per run (``RUN/transcripts.html``) with every message the run stored, read in order.

What it shows, all read from the run's files (nothing typed here):

* debate runs (``chorus debate run``, and influence runs that generated their own turns): every turn
  of every question (``tables/turns.parquet``, numeric items from ``tables/numeric_turns.parquet``,
  the vote arm's samples from ``tables/votes.parquet``), with the question and its options
  (``bench.jsonl``). Each turn shows its parsed answer, whether the agent switched (its parsed answer
  differs from its own parsed answer one round earlier: ``switch_table``) and to whose answer (the
  peers whose previous-round answer it took; only agents that read peers can take one);
* where the run has them, the influence measurements on each turn: forced-choice readouts
  (``chorus influence readout``: ``tables/readouts.parquet``), knockout margins per (receiver, peer)
  (``chorus influence knockout``: ``tables/knockout.parquet``, the all-layer rows), ablation and cue
  margins (``tables/margins.parquet``) and counterfactual debates (``chorus influence counterfactual``:
  ``RUN/counterfactual-*/``, whose replayed and cut arms are shown as conditions of their own). They
  are taken from the run itself and from influence runs that declare this run as their source
  (``source.run`` in their config.yaml, or ``source_run`` in their provenance); those are looked for
  beside the run, in ``../influence/`` next to the run's folder, inside it, and in the folders named
  with ``--with`` (``links``);
* council runs (``chorus council run``): every typed move of every council in trace order
  (``traces/*.jsonl``), with the seat's raw reply of each attempt (``tables/turns.parquet``);
* role-play runs (``chorus roleplay run``): every message of every group, human and simulated
  (``tables/messages.parquet``), with its stance label where the classifier gave one;
* a demo directory: one section per stage that stored messages.

Size: the messages are split into chunks of about ``CHUNK_BYTES`` of JSON, each in its own
``<script type="application/json">`` element; past ``GZIP_ABOVE`` bytes in all they are gzip-compressed
and base64-encoded, and the page decodes only the chunk of the question it shows (the browser's
``DecompressionStream``). The question list is rendered a page at a time. No network request is made:
the script is inline and reads nothing but the page.

The sections are built in ``chorus.transcripts_debate`` (debates, switches, linked influence runs) and
``chorus.transcripts_groups`` (councils, role-play groups); the page's script and style are
``chorus/data/transcripts.js`` and ``chorus/data/transcripts.css``.
"""
from __future__ import annotations

import base64
import gzip
import html
import json
from pathlib import Path
from typing import Any, Sequence

from chorus import __version__
from chorus.transcripts_debate import (NO_PEERS, Link, ViewerError, _debate_section, _read_json, declared_source,
                                       links, standing, switch_table)
from chorus.transcripts_groups import _council_section, _roleplay_section

__all__ = ["VIEWER", "ViewerError", "write_viewer", "transcripts_link", "viewer_path", "sections", "render",
           "switch_table", "links", "Link", "declared_source", "standing", "NO_PEERS"]

VIEWER = "transcripts.html"
CHUNK_BYTES = 256_000      # JSON bytes per lazily decoded chunk
GZIP_ABOVE = 2_000_000     # total JSON bytes above which chunks are stored gzip + base64
ASSETS = Path(__file__).resolve().parent / "data"


# -- the page ------------------------------------------------------------------------------------
def sections(run_dir: str | Path, with_runs: Sequence[str | Path] = ()) -> list[dict[str, Any]]:
    """Every section of the page for ``run_dir``: the run's own (debate, council or role-play), or, for a
    demo directory, one per stage folder that stored messages."""
    run = Path(run_dir)
    extra = [Path(p) for p in with_runs]
    own = _sections_of(run, run.resolve().name, extra)
    if own:
        return own
    from chorus.stages import STAGES
    out = []
    rank = {name: k for k, name in enumerate(STAGES)}   # a demo's stages in the order it runs them
    for d in sorted((p for p in run.iterdir() if p.is_dir() and (p / "provenance.json").is_file()),
                    key=lambda p: (rank.get(p.name, len(rank)), p.name)):
        out += _sections_of(d, d.name, extra)
    return out


def _sections_of(run: Path, name: str, extra: Sequence[Path]) -> list[dict[str, Any]]:
    out = []
    for build in (lambda: _debate_section(run, name, extra), lambda: _council_section(run, name),
                  lambda: _roleplay_section(run, name)):
        s = build()
        if s is not None:
            out.append(s)
    return out


def _script_json(obj: Any) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``</`` or ``<!--`` can close or open anything)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("</", "<\\/") \
        .replace("<!--", "<\\u0021--")


def _chunks(units: list[dict[str, Any]]) -> list[tuple[list[str], str]]:
    """(unit ids, JSON text of the object id -> unit) per chunk of about ``CHUNK_BYTES``; each unit is
    serialised once."""
    out: list[tuple[list[str], str]] = []
    ids: list[str] = []
    parts: list[str] = []
    size = 0
    for u in units:
        part = _script_json(u["id"]) + ":" + _script_json(u)
        if parts and size + len(part) > CHUNK_BYTES:
            out.append((ids, "{" + ",".join(parts) + "}"))
            ids, parts, size = [], [], 0
        ids.append(u["id"])
        parts.append(part)
        size += len(part)
    if parts:
        out.append((ids, "{" + ",".join(parts) + "}"))
    return out


def render(secs: list[dict[str, Any]], *, title: str, run_path: str) -> tuple[str, dict[str, Any]]:
    """The page (HTML text) and what it holds (``stats``: sections, units, messages, bytes, compression)."""
    parts: list[str] = []
    meta_secs = []
    total_raw = 0
    chunked = []
    for si, s in enumerate(secs):
        ch = _chunks(s["units"])
        texts = [t for _, t in ch]
        total_raw += sum(len(t.encode()) for t in texts)
        chunked.append(texts)
        where = {uid: k for k, (ids, _) in enumerate(ch) for uid in ids}
        meta = {k: v for k, v in s.items() if k != "units"}
        meta["index"] = [row + [where[row[0]]] for row in s["index"]]
        meta["index_cols"] = s["index_cols"] + ["chunk"]
        meta["n_chunks"] = len(ch)
        meta_secs.append(meta)
    enc = "gzip" if total_raw > GZIP_ABOVE else "json"
    for si, texts in enumerate(chunked):
        for k, t in enumerate(texts):
            body = base64.b64encode(gzip.compress(t.encode(), 6, mtime=0)).decode() if enc == "gzip" else t
            parts.append(f'<script type="application/json" id="chunk-{si}-{k}" data-enc="{enc}">{body}</script>')
    n_units = sum(s["n_units"] for s in secs)
    n_msgs = sum(s["n_messages"] for s in secs)
    meta = {"title": title, "run": run_path, "version": __version__, "encoding": enc, "sections": meta_secs, "what": what(secs),
            "n_units": n_units, "n_messages": n_msgs}
    css = (ASSETS / "transcripts.css").read_text()
    js = (ASSETS / "transcripts.js").read_text()
    doc = ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
           "<meta name='viewport' content='width=device-width,initial-scale=1'>"
           "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; script-src 'unsafe-inline'; "
           "style-src 'unsafe-inline'; img-src data:\">"
           f"<title>{html.escape(title)}</title><style>{css}</style></head><body>"
           f"<noscript><p>This page renders the transcripts with its inline script; allow scripts for this file.</p></noscript>"
           f'<script type="application/json" id="meta">{_script_json(meta)}</script>'
           + "".join(parts) + f"<div id='app'></div><script>{js}</script></body></html>")
    stats = {"sections": len(secs), "units": n_units, "messages": n_msgs, "what": what(secs), "json_bytes": total_raw,
             "encoding": enc, "html_bytes": len(doc.encode())}
    return doc, stats


NOUNS = {"debate": ("question", "messages"), "council": ("council question", "moves"), "roleplay": ("group", "messages")}


def what(secs: list[dict[str, Any]]) -> str:
    """What a page holds, in words: "60 messages in 4 questions; 180 moves in 10 council questions"."""
    out = []
    for s in secs:
        unit, msgs = NOUNS[s["kind"]]
        out.append(f"{s['n_messages']} {msgs} in {s['n_units']} {unit}{'s' if s['n_units'] != 1 else ''}")
    return "; ".join(out)


def viewer_path(report: str | Path) -> Path:
    """Where the viewer goes beside a report file: ``RUN/transcripts.html`` beside ``RUN/report.html``,
    ``NAME-transcripts.html`` beside any other ``NAME.html``."""
    report = Path(report)
    return report.with_name(VIEWER if report.name == "report.html" else f"{report.stem}-transcripts.html")


def transcripts_link(run_dir: str | Path, report: str | Path) -> str:
    """For ``chorus report``: write the viewer beside the report (``viewer_path``) and return the
    report's paragraph linking to it; "" for a run with no messages. A viewer that cannot be written is
    said in the paragraph, never raised: the report still renders."""
    try:
        path, st = write_viewer(run_dir, viewer_path(report), required=False)
    except Exception as err:   # the report must not fail for its companion page
        return (f"<p class='warn'>transcripts: not written ({html.escape(type(err).__name__)}: "
                f"{html.escape(' '.join(str(err).split())[:200])})</p>")
    if path is None:
        return ""
    return (f"<p><b><a href='{html.escape(path.name)}'>Transcripts</a></b>: every message of this run "
            f"({st['what']}), by question, condition, round and agent, "
            f"with the switches between answers and the influence measurements made on them "
            f"(<code>{html.escape(path.name)}</code>, {st['html_bytes'] / 1e6:.1f} MB).</p>")


def write_viewer(run_dir: str | Path, out: str | Path | None = None, *, with_runs: Sequence[str | Path] = (),
                 required: bool = True) -> tuple[Path | None, dict[str, Any]]:
    """Write the viewer of ``run_dir`` to ``out`` (default ``RUN/transcripts.html``); returns (path, stats).
    A run that stored no messages: ``ViewerError`` when ``required``, else (None, {})."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ViewerError(f"{run}: no such run directory")
    secs = sections(run, with_runs)
    if not secs:
        if required:
            src = declared_source(run)
            raise ViewerError(f"{run}: no messages to show (no debate turns, council traces or role-play messages)"
                              + (f"; it measured the turns of {src}: chorus view {src} shows them with its "
                                 f"measurements" if src else ""))
        return None, {}
    part = (_read_json(run / "provenance.json") or {}).get("part", "run")
    doc, stats = render(secs, title=f"chorus {part}: {run.resolve().name}: transcripts", run_path=str(run.resolve()))
    path = Path(out) if out is not None else run / VIEWER
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
    return path, stats
