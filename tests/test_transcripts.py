"""The transcript viewer (chorus/transcripts.py, ``chorus view``, beside ``chorus report``'s page):
switches and whose answer was taken on hand-made runs with known answers, the influence runs found
through what they declare, every message of a small debate, council and role-play run in a real
headless browser (Debian's chromium via Playwright) with a filter to one question and one agent and
a screenshot, no network request, the compressed and paged layout of a large run, and one real
embedded-model run."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from chorus.cli import app
from chorus.core.runs import RunDir, check_record
from chorus.simulate.debate.questions import Item, write_bench
from chorus.transcripts import ViewerError, links, sections, switch_table, write_viewer

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("CHORUS_TEST_ARTIFACTS", ROOT / "artifacts"))
runner = CliRunner()

# answers of one question: (condition, round) -> the three agents' answers (None: unparsed)
ANSWERS = {("debate", 0): ["A", "B", "A"], ("debate", 1): ["A", "A", "A"], ("debate", 2): ["B", "A", "A"],
           ("reflection", 0): ["A", "B", "A"], ("reflection", 1): ["A", "C", "A"], ("reflection", 2): ["A", "C", None]}
# a second pattern: one peer's answer taken, then a switch back to the agent's own earlier answer
ANSWERS2 = {("debate", 0): ["A", "B", "C"], ("debate", 1): ["B", "B", "C"], ("debate", 2): ["A", "B", "B"],
            ("reflection", 0): ["A", "B", "C"], ("reflection", 1): ["A", "B", "C"], ("reflection", 2): ["A", "B", "C"]}


def _items(n: int = 3) -> list[Item]:
    return [Item(id=f"q{i}", domain="knowledge", subdomain="strategy", family=f"fam{i}",
                 question=f"Question {i}: is <b>this</b> </script> safe?", options=["yes", "no", "maybe"],
                 labels=["A", "B", "C"], reference="A") for i in range(n)]


def _text(qid: str, c: str, r: int, a: int, x) -> str:
    return (f"{qid} round 0, agent {a}: <script>alert(1)</script> reasons.\nAnswer: {x}" if r == 0
            else f"{qid} {c} round {r}, agent {a}: having read the others, <i>I</i> say so.\n\nAnswer: {x}")


def debate_run(path: Path, items: list[Item] | None = None, patterns=(ANSWERS, ANSWERS2)) -> Path:
    """A finished debate run written by hand: question k follows ``patterns[k % 2]``."""
    items = items or _items()
    run = RunDir.create(path, part="debate")
    write_bench(items, run.path / "bench.jsonl")
    rows = []
    for k, it in enumerate(items):
        for (c, r), xs in patterns[k % len(patterns)].items():
            for a, x in enumerate(xs):
                rows.append({"qid": it.id, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                             "agent": a, "round": r, "condition": c, "shared": r == 0,
                             "response": _text(it.id, c, r, a, x), "answer": x, "parsed": x is not None,
                             "truncated": False, "reference": it.reference,
                             "correct": None if x is None else x == it.reference, "completion_tokens": 12})
    run.write_table("turns", pd.DataFrame(rows))
    run.write_summary({"n_questions": len(items)})
    run.finish()
    return run.path


def council_run(path: Path) -> tuple[Path, list[dict]]:
    run = RunDir.create(path, part="council")
    recs = []
    for q in ("c1", "c2"):
        recs.append({"task_id": f"{q}-s0", "question_id": q, "candidates": ["true", "false"], "gold": "false",
                     "dataset": "claims", "condition": "clean", "adversaries": [], "gen_seed": 0, "moves": [
                         {"agent": "A1", "round": 0, "force": "propose", "answer": "true", "confidence": 0.8,
                          "text": f"{q}: A1 thinks true"},
                         {"agent": "A2", "round": 0, "force": "propose", "answer": "false", "confidence": 0.6,
                          "text": f"{q}: A2 thinks false"},
                         {"agent": "A3", "round": 0, "force": "propose", "answer": "false", "text": f"{q}: A3 false too"},
                         {"agent": "A1", "round": 1, "force": "concede", "answer": "false", "target": 1,
                          "target_agent": "A2", "text": f"{q}: A1 concedes to A2"},
                         {"agent": "A2", "round": 1, "force": "challenge", "answer": "false", "target": 0,
                          "target_agent": "A1", "text": f"{q}: A2 challenges A1"},
                         {"agent": "A3", "round": 1, "force": "abstain", "abstain_reason": "malformed move",
                          "text": f"{q}: A3 abstains"}]})
    (run.path / "traces").mkdir()
    (run.path / "traces" / "claims__clean.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    run.write_table("turns", pd.DataFrame([
        {"trace_id": f"{q}-s0", "task_id": q, "dataset": "claims", "condition": "clean", "gen_seed": 0, "agent": "A1",
         "profile": "p", "persona": "analyst", "round": 1, "attempt": k, "text": f"{q} raw reply {k} of A1",
         "legal": k == 1, "reason": None if k == 1 else "illegal force: 'agree'"} for q in ("c1", "c2") for k in (0, 1)]))
    run.write_summary({"n": 2})
    run.finish()
    return run.path, recs


def roleplay_run(path: Path) -> tuple[Path, pd.DataFrame]:
    from chorus.simulate.roleplay.setups import COLUMNS
    run = RunDir.create(path, part="roleplay")
    rows = []
    for src, setup in (("human", "human"), ("base", "full_dynamics")):
        for p in ("p1", "p2"):
            rows.append({"source": src, "setup": setup, "group_id": "g1", "topic": "Cats are better than dogs",
                         "truth_framed": False, "participant": p, "kind": "initial", "round": 0, "k": -1,
                         "partner": None, "text": f"{src} {p} initial"})
        for p, q in (("p1", "p2"), ("p2", "p1")):
            rows.append({"source": src, "setup": setup, "group_id": "g1", "topic": "Cats are better than dogs",
                         "truth_framed": False, "participant": p, "kind": "tweet", "round": 1, "k": -1, "partner": q,
                         "text": f"{src} {p} tweet"})
        for k, p in enumerate(("p1", "p2", "p1")):
            rows.append({"source": src, "setup": setup, "group_id": "g1", "topic": "Cats are better than dogs",
                         "truth_framed": False, "participant": p, "kind": "chat", "round": 1, "k": k,
                         "partner": "p2" if p == "p1" else "p1", "text": f"{src} {p} chat {k}"})
        for p in ("p1", "p2"):
            rows.append({"source": src, "setup": setup, "group_id": "g1", "topic": "Cats are better than dogs",
                         "truth_framed": False, "participant": p, "kind": "final", "round": 2, "k": -1,
                         "partner": None, "text": f"{src} {p} final"})
    msgs = pd.DataFrame(rows).reindex(columns=COLUMNS)
    run.write_table("messages", msgs.sample(frac=1, random_state=0))   # stored order is not reading order
    run.write_table("labels", pd.DataFrame([{"topic": "Cats are better than dogs", "text": "base p1 final",
                                             "stance_raw": 5.0, "on_topic": True}]))
    run.write_summary({"n": 1})
    run.finish()
    return run.path, msgs


# -- switches, hand-computed --------------------------------------------------------------------
def test_switches_and_whose_answer_on_a_hand_made_run(tmp_path):
    t = pd.read_parquet(debate_run(tmp_path / "d") / "tables" / "turns.parquet")
    sw = switch_table(t).set_index(["qid", "condition", "round", "agent"])

    def at(q, c, r, a):
        row = sw.loc[(q, c, r, a)]
        return row["prev"], row["switched"], list(row["to_peers"])
    # q0 (ANSWERS): round 0 answers A B A
    assert at("q0", "debate", 0, 1) == (None, None, [])          # round 0: nothing to switch from
    assert at("q0", "debate", 1, 1) == ("B", True, [0, 2])        # B -> A: both peers held A at round 0
    assert at("q0", "debate", 1, 0) == ("A", False, [])
    assert at("q0", "debate", 2, 0) == ("A", True, [])            # A -> B: no peer held B at round 1
    assert at("q0", "reflection", 1, 1) == ("B", True, [])        # B -> C in the control: it read no peer
    assert at("q0", "reflection", 2, 2) == ("A", None, [])        # unparsed: neither a switch nor a stay
    # q1 (ANSWERS2): A B C -> B B C -> A B B
    assert at("q1", "debate", 1, 0) == ("A", True, [1])           # took agent 1's B
    assert at("q1", "debate", 2, 0) == ("B", True, [])            # back to A: nobody held A at round 1
    assert at("q1", "debate", 2, 2) == ("C", True, [0, 1])        # C -> B: agents 0 and 1 held B at round 1
    assert not sw.xs("reflection", level="condition")["switched"].loc[["q1"]].any()


def test_units_hold_every_message_once_per_condition(tmp_path):
    run = debate_run(tmp_path / "d")
    (sec,) = sections(run)
    t = pd.read_parquet(run / "tables" / "turns.parquet")
    got = sorted((u["id"], c, tr["r"], tr["a"], tr["t"]) for u in sec["units"] for tr in u["turns"]
                 for c in (tr["c"] if isinstance(tr["c"], list) else [tr["c"]]))
    want = sorted(zip(t["qid"], t["condition"], t["round"], t["agent"], t["response"]))
    assert got == want
    assert sec["n_messages"] == len(t) - 9    # the 3 x 3 shared round-0 turns are stored once, in both conditions
    assert sec["standing"]["models"] == [] and "no model" in sec["standing"]["text"]


def test_numeric_items_and_the_vote_arm_are_shown(tmp_path):
    run = RunDir.create(tmp_path / "d", part="debate")
    write_bench(_items(1), run.path / "bench.jsonl")
    run.write_table("turns", pd.DataFrame([{"qid": "q0", "agent": a, "round": 0, "condition": c, "shared": True,
                                            "response": f"r0 {a}", "answer": "A", "parsed": True}
                                           for c in ("debate", "reflection") for a in range(2)]))
    run.write_table("numeric_turns", pd.DataFrame([
        {"qid": "n1", "agent": a, "round": r, "condition": "debate", "shared": r == 0, "response": f"n1 r{r} a{a}",
         "value": v, "parsed": True, "reference": 4.0, "tolerance": None, "correct": v == 4.0}
        for r, vals in ((0, [3.0, 4.0]), (1, [4.0, 4.0])) for a, v in enumerate(vals)]))
    run.write_table("votes", pd.DataFrame([{"qid": "q0", "sample": k, "shared": k < 2, "response": f"vote {k}",
                                            "answer": "AB"[k % 2], "parsed": True, "truncated": False,
                                            "completion_tokens": 5} for k in range(4)]))
    run.finish()
    (sec,) = sections(run.path)
    u = {x["id"]: x for x in sec["units"]}
    n1 = {(t["r"], t["a"]): t for t in u["n1"]["turns"]}
    assert n1[(1, 0)]["ans"] == 4.0 and n1[(1, 0)]["sw"] is True and n1[(1, 0)]["to"] == [1] and n1[(1, 0)]["num"]
    votes = [t for t in u["q0"]["turns"] if t["c"] == "vote"]
    assert [t["t"] for t in votes] == [f"vote {k}" for k in range(4)] and "vote" in sec["conditions"]
    assert "vote" not in sec["peers_read"]


# -- influence runs found through what they declare --------------------------------------------
def _influence(path: Path, source: str, table: str, df: pd.DataFrame, part: str = "influence") -> Path:
    run = RunDir.create(path, part=part)
    (run.path / "config.yaml").write_text(yaml.safe_dump({"name": path.name, "source": {"run": source}}))
    run.write_table(table, df)
    run.finish()
    return run.path


def _linked_runs(tmp_path: Path) -> Path:
    """runs/debate/d1 with a readout run (relative source, from the folder above runs/), a knockout run
    (absolute source), a counterfactual inside it and an unrelated influence run."""
    base = tmp_path / "proj"
    run = debate_run(base / "runs" / "debate" / "d1")
    ro = [{"qid": "q0", "family": "fam0", "condition": cond, "round": 1, "agent": 1, "f": f, "labels": ["A", "B", "C"],
           "prev_answer": "B", "answer": "A", "peer_answer": "A", "changed": True, "logprobs": [-0.5, -1.2, -3.0],
           "argmax": "A", "margin": 0.7} for cond in ("debate", "debate@filler", "reflection") for f in (0.0, 1.0)]
    ro[-1] = {**ro[-1], "answer": "C"}   # one row that disagrees with the stored turn: counted, never hidden
    _influence(base / "runs" / "influence" / "ro1", "runs/debate/d1", "readouts", pd.DataFrame(ro))
    ko = [{"qid": "q0", "family": "fam0", "subdomain": "strategy", "receiver": 1, "peer": 0, "own_answer": "B",
           "peer_answer": "A", "kind": kind, "layer": layer, "queries": "after", "mixer": "attention",
           "margin_full": 1.0, "margin_no_message": -1.0, "margin_knockout": 0.0 if kind == "all" else 0.5}
          for kind, layer in (("all", -1), ("single", 3))]
    _influence(base / "runs" / "influence" / "ko1", str(run.resolve()), "knockout", pd.DataFrame(ko))
    _influence(base / "runs" / "influence" / "other", "runs/debate/elsewhere", "readouts", pd.DataFrame(ro))
    # a counterfactual inside the debate: agent 1's attention to agent 0 cut at round 1
    cf = RunDir.create(run / "counterfactual-a1-p0-r1", part="influence-counterfactual", source_run=str(run.resolve()))
    (cf.path / "config.yaml").write_text(yaml.safe_dump({"receiver": 1, "peer": 0, "round": 1, "layers": "all"}))
    t = pd.read_parquet(run / "tables" / "turns.parquet")
    deb = t[(t["condition"] == "debate") & (t["qid"] == "q0")]
    arms = [deb.assign(condition="factual"), deb.assign(condition="replay")]
    cut = deb.copy()
    sel = (cut["round"] >= 1) & (cut["agent"] == 1)
    cut.loc[sel, "response"] = "cut: I keep B.\nAnswer: B"
    cut.loc[sel, "answer"] = "B"
    arms.append(cut.assign(condition="cut"))
    cf.write_table("turns", pd.concat(arms, ignore_index=True))
    cf.write_table("questions", pd.DataFrame([
        {"arm": arm, "qid": "q0", "receiver_before": "B", "peer_answer_before": "A", "receiver_at_round": x,
         "receiver_final": x, "adopted_at_round": float(x == "A"), "adopted_final": float(x == "A")}
        for arm, x in (("factual", "A"), ("replay", "A"), ("cut", "B"))]))
    cf.write_summary({"receiver": 1, "peer": 0, "round": 1, "layers": "all"})
    cf.finish()
    return run


def test_influence_runs_are_found_by_their_declared_source(tmp_path, monkeypatch):
    run = _linked_runs(tmp_path)
    monkeypatch.chdir(tmp_path)    # not the folder the runs were made from: found through the run's parents
    kinds = sorted((l.kind, l.path.name) for l in links(run))
    assert kinds == [("counterfactual", "counterfactual-a1-p0-r1"), ("knockout", "ko1"), ("readout", "ro1")]
    (sec,) = sections(run)
    u = {x["id"]: x for x in sec["units"]}["q0"]
    turn = next(t for t in u["turns"] if t["c"] == "debate" and t["r"] == 1 and t["a"] == 1)
    assert sorted((r[1], r[2]) for r in turn["ro"]) == [("debate", 0.0), ("debate", 1.0), ("debate@filler", 0.0),
                                                        ("debate@filler", 1.0)]
    refl = next(t for t in u["turns"] if t["c"] == "reflection" and t["r"] == 1 and t["a"] == 1)
    assert len(refl["ro"]) == 2
    rinfo = next(l for l in sec["links"] if l["kind"] == "readout")
    assert rinfo["n_answer_mismatch"] == 1 and rinfo["n_rows"] == 6
    assert len(u["ko"]) == 1 and u["ko"][0][1:3] == [1, 0]      # the all-layer row only, receiver 1, peer 0
    assert sorted(x[1] for x in u["cf"]) == ["cut", "factual", "replay"]
    assert {"a1-p0-r1 · cut", "a1-p0-r1 · replay"} <= set(sec["conditions"])
    cut = [t for t in u["turns"] if t["c"] == "a1-p0-r1 · cut" and t["a"] == 1 and t["r"] == 1]
    assert cut[0]["t"].startswith("cut: I keep B") and cut[0]["sw"] is False   # B at round 0 too: kept
    assert not [t for t in u["turns"] if t["c"] == "a1-p0-r1 · cut" and t["r"] == 0]   # the debate's own round 0
    assert sec["cf_from"] == {"a1-p0-r1 · cut": 1, "a1-p0-r1 · replay": 1}
    with pytest.raises(ViewerError, match="does not declare"):
        links(run, [tmp_path / "proj" / "runs" / "influence" / "other"])
    assert sec["record"]["ok"] and all(l["state"].startswith("sealed") for l in sec["links"] if "state" in l)
    # a linked run whose files were edited after it was sealed: named, its numbers not shown
    ko = tmp_path / "proj" / "runs" / "influence" / "ko1" / "tables" / "knockout.parquet"
    pd.read_parquet(ko).assign(margin_knockout=9.0).to_parquet(ko)
    (sec,) = sections(run)
    bad = next(l for l in sec["links"] if l["name"] == "ko1")
    assert bad["kind"] == "not shown" and "NOT AS WRITTEN: changed: tables/knockout.parquet" in bad["state"]
    assert "ko" not in {x["id"]: x for x in sec["units"]}["q0"]


# -- the page in a real browser ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Debian's chromium is not installed: run `bash scripts/setup.sh --test` (it installs it)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


class Page:
    """A page opened from disk, with every console message and request recorded."""

    def __init__(self, browser, path: Path, width: int = 1300):
        self.messages: list[tuple[str, str]] = []
        self.requests: list[str] = []
        self.page = browser.new_page(viewport={"width": width, "height": 1000})
        self.page.on("console", lambda m: self.messages.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.messages.append(("pageerror", str(e))))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-ready='1']", timeout=60_000)

    def open(self, i: int) -> str:
        """Click the i-th question of the list; returns its id once it is shown."""
        li = self.page.locator("#list li").nth(i)
        qid = li.get_attribute("data-id")
        li.click()
        self.page.wait_for_function("id => document.querySelector('#view').getAttribute('data-unit') === id", arg=qid)
        return qid

    def cards(self) -> list[dict]:
        return self.page.evaluate("""() => Array.from(document.querySelectorAll('#view .turn')).map(c => ({
            c: c.getAttribute('data-c'), r: c.getAttribute('data-r'), a: c.getAttribute('data-a'),
            t: c.querySelector('.msg').textContent, head: c.querySelector('.head').textContent}))""")

    def clean(self) -> None:
        assert not [m for m in self.messages if m[0] in ("error", "pageerror", "warning")], self.messages
        assert self.requests and all(u.startswith("file:") for u in self.requests), self.requests  # the page only
        assert len(self.requests) == 1, self.requests


def test_every_message_of_a_debate_council_and_roleplay_run_is_on_the_page(tmp_path, browser):
    demo = tmp_path / "demo"
    drun = debate_run(demo / "debate")
    crun, traces = council_run(demo / "council")
    rrun, msgs = roleplay_run(demo / "roleplay")
    path, st = write_viewer(demo)
    assert st["sections"] == 3 and st["encoding"] == "json"
    p = Page(browser, path)
    # debate: every stored turn, under its condition, round and agent, text for text
    turns = pd.read_parquet(drun / "tables" / "turns.parquet")
    seen = []
    for i in range(p.page.locator("#list li").count()):
        qid = p.open(i)
        seen += [(qid, c["c"], int(c["r"]), int(c["a"]), c["t"]) for c in p.cards()]
    assert sorted(seen) == sorted(zip(turns["qid"], turns["condition"], turns["round"], turns["agent"], turns["response"]))
    # markup in a message or a question is text, never markup
    assert p.page.locator("#view script").count() == 0 and p.page.locator("#view i").count() == 0
    # council: every move, in the trace's order
    p.page.locator("nav#sections button", has_text="council").click()
    p.page.wait_for_selector("#view[data-unit='claims/c1']")
    for i, rec in enumerate(traces):
        qid = p.open(i)
        cards = p.cards()
        assert qid == f"claims/{rec['question_id']}"
        assert [(c["a"], int(c["r"]), c["t"]) for c in cards] == [(m["agent"], m["round"], m["text"]) for m in rec["moves"]]
        assert "concede → A2 (false)" in cards[3]["head"] and "switched true → false" in cards[3]["head"]
        assert "to A2's answer" in cards[3]["head"]
        raw = p.page.locator("#view .turn").nth(3).locator(".msg.raw").all_text_contents()
        assert raw == [f"{rec['question_id']} raw reply 0 of A1", f"{rec['question_id']} raw reply 1 of A1"]
    # role-play: every message of the group in reading order (round, then posts, chats, finals)
    p.page.locator("nav#sections button", has_text="roleplay").click()
    p.page.wait_for_selector("#view[data-unit='g1']")
    cards = p.cards()
    order = {"initial": 0, "tweet": 1, "chat": 2, "final": 3}
    for cond, src in (("human", "human"), ("base · full_dynamics", "base")):
        want = msgs[msgs["source"] == src].assign(o=msgs["kind"].map(order)).sort_values(["round", "o", "k", "participant"])
        assert [c["t"] for c in cards if c["c"] == cond] == list(want["text"])
    assert any("stance 5 (agreement 1–6, classifier)" in c["head"] for c in cards)
    p.clean()
    p.page.close()


def test_filter_to_one_question_and_one_agent_then_screenshot(tmp_path, browser):
    run = _linked_runs(tmp_path)
    path, _ = write_viewer(run)
    p = Page(browser, path)
    p.page.fill("#search", "q0")
    p.page.wait_for_function("() => document.querySelectorAll('#list li').length === 1")
    assert p.open(0) == "q0"
    p.page.select_option("#agent", "1")
    p.page.select_option("#cond", "debate")
    p.page.wait_for_function("() => document.querySelector('#view').getAttribute('data-filter') === 'debate||1'")
    cards = p.cards()
    texts = pd.read_parquet(run / "tables" / "turns.parquet").query("qid == 'q0' and agent == 1 and condition == 'debate'")
    assert [c["t"] for c in cards] == list(texts.sort_values("round")["response"])
    assert {c["a"] for c in cards} == {"1"} and {c["c"] for c in cards} == {"debate"}
    r1 = cards[1]["head"]
    assert "switched B → A" in r1 and "to Agent 1 and Agent 3's answer" in r1
    # the who-moved-whom picture: Agent 1 and Agent 3 moved Agent 2 at round 1
    edges = p.page.evaluate("""() => Array.from(document.querySelectorAll("svg.wmw[data-cond='debate'] path.edge"))
        .map(e => [e.getAttribute('data-from'), e.getAttribute('data-to'), e.getAttribute('data-round')])""")
    assert sorted(edges) == [["0", "1", "1"], ["2", "1", "1"]]
    # the measurements on that turn: readouts (with the filler control), knockout, counterfactual
    line = p.page.locator("#view .turn").nth(1).locator(".overlay.sum").inner_text()
    assert "readout [3] debate: f=0 → A · f=1 → A" in line and "readout [3] debate@filler" in line
    assert "knockout [2] of Agent 1's message (after): 50% of its effect removed" in line   # (1 - 0) / (1 - (-1))
    assert "counterfactual [1] a1-p0-r1: " in line and "cut → B here, B at the end" in line
    tables = p.page.locator("#view .round[data-round='1'] .measures")
    ro = tables.locator(".ro").inner_text()
    assert "debate@filler" in ro and "-0.5" in ro and "log p(C)" in ro
    pairs = tables.locator(".pairs").all_inner_texts()
    assert "50%" in pairs[0] and "a1-p0-r1" in pairs[1]
    shot = tmp_path / "viewer-q0-agent2.png"
    p.page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / shot.name)
    # the counterfactual arm is a condition of its own
    p.page.select_option("#cond", "a1-p0-r1 · cut")
    p.page.wait_for_function("() => document.querySelector('#view').getAttribute('data-filter') === 'a1-p0-r1 · cut||1'")
    assert [c["t"] for c in p.cards()] == ["cut: I keep B.\nAnswer: B"] * 2   # round 0 is the debate's own
    p.clean()
    p.page.close()


def test_a_large_run_is_compressed_decoded_per_chunk_and_paged(tmp_path, browser):
    import random
    rng = random.Random(0)
    words = ("the agent reads its peers and weighs the evidence before it answers because a careful reply "
             "considers every option in turn while the question asks which claim holds").split()
    items = [Item(id=f"q{i:04d}", domain="knowledge", subdomain="strategy", family=f"fam{i % 97}",
                  question=" ".join(rng.choices(words, k=30)) + "?", options=["yes", "no", "maybe"],
                  labels=["A", "B", "C"], reference="A") for i in range(450)]
    run = RunDir.create(tmp_path / "big", part="debate")
    write_bench(items, run.path / "bench.jsonl")
    rows = [{"qid": it.id, "agent": a, "round": r, "condition": c, "shared": r == 0,
             "response": " ".join(rng.choices(words, k=90)) + f" ({it.id}/{c}/{r}/{a})\nAnswer: {x}",
             "answer": x, "parsed": True} for it in items for (c, r), xs in ANSWERS2.items() for a, x in enumerate(xs)]
    run.write_table("turns", pd.DataFrame(rows))
    run.finish()
    path, st = write_viewer(run.path)
    assert st["encoding"] == "gzip" and st["json_bytes"] > 2_000_000 and st["html_bytes"] < st["json_bytes"]
    p = Page(browser, path)
    assert p.page.locator("#list li").count() == 200 and "page 1 of 3" in p.page.inner_text("#pager")
    p.page.click("#nextPage")
    p.page.click("#nextPage")
    assert p.page.locator("#list li").count() == 50
    qid = p.open(49)
    assert qid == "q0449"
    texts = sorted(c["t"] for c in p.cards())
    assert texts == sorted(r["response"] for r in rows if r["qid"] == "q0449")
    p.clean()
    p.page.close()


# -- the commands -----------------------------------------------------------------------------------
def test_view_and_report_write_the_page_and_keep_the_record(tmp_path):
    run = debate_run(tmp_path / "d")
    res = runner.invoke(app, ["view", str(run), "--out", str(tmp_path / "page.html")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "page.html").is_file() and "45 messages in 3 questions" in res.output
    res = runner.invoke(app, ["report", str(run)])
    assert res.exit_code == 0, res.output
    assert "href='transcripts.html'" in (run / "report.html").read_text() and (run / "transcripts.html").is_file()
    RunDir(run).seal()                     # a command that renews the record after the page was written
    (run / "transcripts.html").write_text("rewritten by a later report")
    assert check_record(run) == []         # the page is a rendering, like report.html: not part of the record
    other = debate_run(tmp_path / "other")
    res = runner.invoke(app, ["view", str(run), "--out", str(other / "page.html")])
    assert res.exit_code == 2 and "inside the run directory" in res.output and not (other / "page.html").exists()
    turns = other / "tables" / "turns.parquet"
    pd.read_parquet(turns).assign(response="edited").to_parquet(turns)
    res = runner.invoke(app, ["view", str(other)])
    assert res.exit_code == 2 and "not the ones it wrote" in res.output and not (other / "transcripts.html").exists()
    res = runner.invoke(app, ["view", str(tmp_path / "nothing")])
    assert res.exit_code != 0 and "no such run directory" in res.output
    empty = RunDir.create(tmp_path / "belief", part="belief")
    empty.write_summary({"x": 1})
    empty.finish()
    res = runner.invoke(app, ["view", str(empty.path)])
    assert res.exit_code != 0 and "no messages to show" in res.output
    res = runner.invoke(app, ["report", str(empty.path)])
    assert res.exit_code == 0 and "transcripts" not in (empty.path / "report.html").read_text().lower()


# -- a real run of the embedded model ---------------------------------------------------------------
@pytest.mark.slow
def test_a_real_embedded_model_run(roleplay_run, browser, tmp_path):
    """The session's real role-play run (tests/conftest.py): every message it stored is on the page,
    and the page says the embedded model wrote them."""
    out, _, _ = roleplay_run
    path, st = write_viewer(out, tmp_path / "rp.html")
    msgs = pd.read_parquet(out / "tables" / "messages.parquet")
    assert st["messages"] == len(msgs)
    p = Page(browser, path)
    assert "embedded demo models (smollm2-135m-instruct)" in p.page.inner_text("#standing")
    seen = []
    for i in range(p.page.locator("#list li").count()):
        p.open(i)
        seen += [c["t"] for c in p.cards()]
    assert sorted(seen) == sorted(msgs["text"].fillna(""))
    p.page.screenshot(path=str(tmp_path / "roleplay.png"), full_page=True)
    p.clean()
    p.page.close()
