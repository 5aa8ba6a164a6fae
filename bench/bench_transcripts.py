"""The transcript viewer at paper size: a synthetic debate run written by hand (no model) with the
paper's shape (I = 3 agents, R = 3 rounds, debate and reflection, thousands of questions, replies of
about --chars characters in words drawn from the bench's own questions), optionally with forced-choice
readouts at five fractions of every receiver turn; then ``chorus.transcripts.write_viewer`` and the page
in Debian's chromium (Playwright), from disk: time to the first question shown, time to open a question
of the last chunk, time to filter the list, the page's size and the JS heap.

    .venv/bin/python bench/bench_transcripts.py --questions 3000 --readouts --out bench/results/transcripts.json
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from _recorder import machine, write_result  # noqa: E402  (bench/ is the script directory)


def synthetic_run(path: Path, n: int, *, agents: int = 3, rounds: int = 3, chars: int = 1500, readouts: bool = False,
                  seed: int = 0) -> dict:
    """A finished debate run of ``n`` real bench questions with hand-made replies; returns its counts."""
    import pandas as pd

    from chorus.core.runs import RunDir
    from chorus.simulate.debate.questions import build_bench, write_bench

    rng = random.Random(seed)
    items, _ = build_bench(seed=seed, counts={"disciplinary": None})
    items = [it for it in items if it.labels][:n]
    if len(items) < n:
        raise SystemExit(f"the shipped bench has {len(items)} questions with options; asked for {n}")
    vocab = [w for it in items[:2000] for w in it.question.split()]
    run = RunDir.create(path, part="debate")
    write_bench(items, run.path / "bench.jsonl")
    rows, ro = [], []
    for it in items:
        labs = it.labels
        prev = {c: [rng.choice(labs) for _ in range(agents)] for c in ("debate", "reflection")}
        prev["reflection"] = list(prev["debate"])   # round 0 is shared
        for r in range(rounds + 1):
            for c in (["debate"] if r == 0 else ["debate", "reflection"]):
                now = list(prev[c]) if r == 0 else [
                    (rng.choice([prev[c][j] for j in range(agents) if j != a]) if c == "debate" and rng.random() < 0.2
                     else rng.choice(labs) if rng.random() < 0.08 else prev[c][a]) for a in range(agents)]
                for a in range(agents):
                    k = max(20, int(rng.gauss(chars, chars / 3) / 6))
                    text = " ".join(rng.choices(vocab, k=k)) + f"\n\nAnswer: {now[a]}"
                    for cc in (["debate", "reflection"] if r == 0 else [c]):
                        rows.append({"qid": it.id, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                                     "agent": a, "round": r, "condition": cc, "shared": r == 0, "response": text,
                                     "answer": now[a], "parsed": True, "truncated": False, "reference": it.reference,
                                     "correct": None if it.reference is None else now[a] == it.reference, "completion_tokens": k * 4 // 3})
                        if readouts and r > 0:
                            for f in (0.0, 0.25, 0.5, 0.75, 1.0):
                                lps = [round(-rng.expovariate(1.0), 3) for _ in labs]
                                ro.append({"qid": it.id, "family": it.family, "condition": cc, "round": r, "agent": a,
                                           "f": f, "labels": list(labs), "prev_answer": prev[cc][a], "answer": now[a],
                                           "peer_answer": None, "changed": prev[cc][a] != now[a], "logprobs": lps,
                                           "argmax": labs[max(range(len(labs)), key=lps.__getitem__)], "margin": None})
                prev[c] = now
                if r == 0:
                    prev["reflection"] = list(now)
    run.write_table("turns", pd.DataFrame(rows))
    run.write_summary({"synthetic": True, "n_questions": len(items)})
    run.finish()
    if readouts:   # an influence run that declares this run as its source, beside it under ../influence/
        import yaml
        inf = RunDir.create(path.parent.parent / "influence" / f"{path.name}-readout", part="influence")
        (inf.path / "config.yaml").write_text(yaml.safe_dump({"name": "synthetic", "source": {"run": str(path)}}))
        inf.write_table("readouts", pd.DataFrame(ro))
        inf.finish()
    return {"questions": len(items), "agents": agents, "rounds": rounds, "turn_rows": len(rows),
            "readout_rows": len(ro), "mean_reply_chars": sum(len(r["response"]) for r in rows) / len(rows)}


def browse(page_path: Path, shot: Path) -> dict:
    from playwright.sync_api import sync_playwright
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    out: dict = {}
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        p = b.new_page(viewport={"width": 1300, "height": 1000})
        reqs, errs = [], []
        p.on("request", lambda r: reqs.append(r.url))
        p.on("pageerror", lambda e: errs.append(str(e)))
        t = time.perf_counter()
        p.goto(page_path.as_uri(), timeout=300_000)
        p.wait_for_selector("body[data-ready='1']", timeout=300_000)
        out["first_question_shown_s"] = time.perf_counter() - t
        out["script_ready_ms_after_parse"] = int(p.get_attribute("body", "data-ready-ms"))
        n_pages = p.inner_text("#pager")
        # the last question of the list: its chunk is decoded on demand
        last = p.evaluate("() => { const s = JSON.parse(document.getElementById('meta').textContent).sections[0]; "
                          "return s.index[s.index.length - 1][0]; }")
        t = time.perf_counter()
        p.fill("#search", last)
        p.wait_for_function("id => document.querySelectorAll('#list li').length >= 1 && "
                            "document.querySelector('#list li').getAttribute('data-id') === id", arg=last)
        out["filter_s"] = time.perf_counter() - t
        t = time.perf_counter()
        p.locator("#list li").first.click()
        p.wait_for_function("id => document.querySelector('#view').getAttribute('data-unit') === id", arg=last)
        out["open_last_question_s"] = time.perf_counter() - t
        t = time.perf_counter()
        p.select_option("#agent", "1")
        p.wait_for_function("() => document.querySelector('#view').getAttribute('data-filter') === '||1'")
        out["filter_agent_s"] = time.perf_counter() - t
        out["cards_shown_one_agent"] = p.locator("#view .turn").count()
        out["js_heap_mb"] = p.evaluate("() => performance.memory ? performance.memory.usedJSHeapSize / 1e6 : null")
        p.screenshot(path=str(shot), full_page=False)
        out["pager"] = n_pages
        out["requests"] = reqs
        out["page_errors"] = errs
        b.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=3000)
    ap.add_argument("--chars", type=int, default=1500, help="mean reply length in characters")
    ap.add_argument("--readouts", action="store_true", help="add readouts at 5 fractions of every receiver turn")
    ap.add_argument("--keep", type=Path, help="build the run here (kept) instead of a temporary folder")
    ap.add_argument("--shot", type=Path, default=Path("transcripts-large.png"))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    from chorus.transcripts import write_viewer

    base = a.keep or Path(tempfile.mkdtemp(prefix="chorus-transcripts-"))
    run = base / "runs" / "debate" / "synthetic"
    t = time.perf_counter()
    shape = synthetic_run(run, a.questions, chars=a.chars, readouts=a.readouts)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    path, st = write_viewer(run)
    write_s = time.perf_counter() - t
    res = {"machine": machine(), "run": shape, "build_run_s": build_s, "write_viewer_s": write_s, "page": st,
           "html_mb": st["html_bytes"] / 1e6, "json_mb": st["json_bytes"] / 1e6, "browser": browse(path, a.shot)}
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=1, default=str))
    if a.out:
        write_result(a.out, res)
    if a.keep is None:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
