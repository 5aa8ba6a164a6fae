"""A self-contained HTML report of any run directory (no network, no external assets)."""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import pandas as pd

CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}pre{background:#f7f7f7;padding:.6em;overflow:auto;font-size:12px}img{max-width:100%}"""


def _table(df: pd.DataFrame, limit: int = 30) -> str:
    return df.head(limit).to_html(index=False, escape=True, float_format=lambda x: f"{x:.4g}", border=0)


def render_report(run_dir: str | Path) -> Path:
    run = Path(run_dir)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>chorus run {html.escape(run.name)}</title>"
             f"<style>{CSS}</style></head><body><h1>chorus run: {html.escape(run.name)}</h1>"]
    summ = run / "summary.json"
    parts.append("<section id='summary'><h2>Headline numbers</h2>")
    if summ.exists():
        parts.append(f"<pre>{html.escape(json.dumps(json.loads(summ.read_text()), indent=2))}</pre>")
    else:
        parts.append("<p><b>missing:</b> summary.json (the run did not finish)</p>")
    parts.append("</section><section id='plots'><h2>Plots</h2>")
    for png in sorted((run / "plots").glob("*.png")):
        b64 = base64.b64encode(png.read_bytes()).decode()
        parts.append(f"<figure><img alt='{html.escape(png.stem)}' src='data:image/png;base64,{b64}'>"
                     f"<figcaption>{html.escape(png.stem)}</figcaption></figure>")
    parts.append("</section><section id='tables'><h2>Tables</h2>")
    for pq in sorted((run / "tables").glob("*.parquet")):
        parts.append(f"<h3>{html.escape(pq.stem)}</h3>{_table(pd.read_parquet(pq))}")
    parts.append("</section><section id='provenance'><h2>Provenance</h2>")
    prov = run / "provenance.json"
    parts.append(f"<pre>{html.escape(prov.read_text()) if prov.exists() else 'missing: provenance.json'}</pre>")
    cfg = run / "config.yaml"
    if cfg.exists():
        parts.append(f"<h3>config.yaml</h3><pre>{html.escape(cfg.read_text())}</pre>")
    parts.append("</section></body></html>")
    out = run / "report.html"
    out.write_text("".join(parts))
    return out
