"""The main job end to end at the tiny size, on the embedded model: every stage, the report, a
real headless browser (Debian's chromium via Playwright), and a killed-and-resumed demo."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chorus.demo import STAGES

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
CHORUS = [sys.executable, "-m", "chorus.cli"]
ARTIFACTS = Path(os.environ.get("CHORUS_TEST_ARTIFACTS", ROOT / "artifacts"))


def _demo(out: Path, *extra: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(CHORUS + ["demo", "--size", "tiny", "--out", str(out), *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "run"
    p = _demo(out)
    log, _ = p.communicate(timeout=1800)
    assert p.returncode == 0, log[-4000:]
    (out.parent / "terminal.txt").write_text(log)   # what the user saw
    return out



def test_demo_runs_every_stage_and_writes_the_layout(demo_dir):
    summ = json.loads((demo_dir / "summary.json").read_text())
    status = {k: v["status"] for k, v in summ["stages"].items()}
    assert status == {s: "done" for s in STAGES}, {k: summ["stages"][k].get("error") for k in status}
    prov = json.loads((demo_dir / "provenance.json").read_text())
    for lib in ("chorus", "torch", "transformers", "nnsight"):
        assert prov["versions"].get(lib), lib
    for s in STAGES:  # every stage is a run directory of the shared layout
        d = demo_dir / s
        assert (d / "summary.json").is_file() and (d / "provenance.json").is_file() and (d / "config.yaml").is_file(), s
    assert list((demo_dir / "belief_oracle" / "plots").glob("*.png"))
    assert (demo_dir / "debate" / "tables" / "turns.parquet").is_file()
    timing = json.loads((demo_dir / "timing.json").read_text())
    assert set(timing["stages"]) == set(STAGES)
    # the council is aggregated by BDA, not only by plurality and the LLM baselines (with too few
    # labels per fold the BDA arms used to drop out of the tiny demo)
    arms = {(r["condition"], r["arm"]) for r in summ["stages"]["council"]["summary"]["results"]}
    for cond in ("clean", "attack-k1"):
        assert {(cond, a) for a in ("plurality", "bda_shared", "bda_per_agent", "bda_confusion")} <= arms, arms


def test_demo_terminal_shows_chorus_lines_only(demo_dir):
    """The engines' own log lines, warnings and loading bars go to RUN/logs/engines.log; the
    terminal keeps chorus's progress and results (``chorus -v`` would show them live)."""
    import re
    log = (demo_dir.parent / "terminal.txt").read_text()
    engine = [ln for ln in log.splitlines() if re.search(
        r"\bINFO\b|\bWARNING\b|\(MainProcess|\(EngineCore|Loading (weights|safetensors)|Warning:|\[W\d{4} ", ln)]
    assert not engine, engine[:10]
    assert "vLLM" in (demo_dir / "logs" / "engines.log").read_text() or "vllm" in (demo_dir / "logs" / "engines.log").read_text()


def test_report_has_every_section(demo_dir):
    html = (demo_dir / "report.html").read_text()
    assert "id='overview'" in html
    for s in STAGES:
        assert f"id='stage-{s}'" in html
    assert "missing:" not in html.split("id='stage-serving'")[0]  # the overview names nothing missing


def test_report_in_headless_chromium(demo_dir):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Debian's chromium is not installed: run `bash scripts/setup.sh --test` (it installs it)")
    from playwright.sync_api import sync_playwright
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    messages: list[tuple[str, str]] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("console", lambda m: messages.append((m.type, m.text)))
        page.on("pageerror", lambda e: messages.append(("pageerror", str(e))))
        page.on("request", lambda r: requests.append(r.url))
        page.goto((demo_dir / "report.html").as_uri())
        page.wait_for_load_state("load")
        for s in STAGES:
            assert page.locator(f"#stage-{s}").is_visible(), s
        assert page.locator("#overview table").is_visible()
        n_img = page.locator("img").count()
        broken = page.evaluate("Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).length")
        page.screenshot(path=str(ARTIFACTS / "demo-report.png"), full_page=True)
        browser.close()
    assert not [m for m in messages if m[0] in ("error", "pageerror", "warning")], messages
    assert n_img >= 5 and broken == 0
    assert all(u.startswith(("file:", "data:")) for u in requests), requests  # nothing from a network


def _stored(db: Path) -> int:
    """Committed rows of a call store (read-only; the WAL is read too)."""
    import sqlite3
    if not db.is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            return c.execute("select count(*) from calls").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_killed_demo_resumes_to_the_same_summary(demo_dir, tmp_path):
    """Kill a demo during its LLM belief stage, rerun it: the summary equals the uninterrupted one
    and the rerun reads back the calls the killed process had completed. (The belief stage is the
    shortest one with many committed calls; tests/test_resume.py kills debates and councils.)"""
    out = tmp_path / "killed"
    stages = ["--stage", "belief_llm"]
    p = _demo(out, *stages, start_new_session=True)
    deadline = time.time() + 900
    killed = False
    while time.time() < deadline and p.poll() is None:
        if _stored(out / "belief_llm" / "calls.sqlite") >= 20:  # some belief calls are committed
            os.killpg(p.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.5)
    p.communicate(timeout=60)
    assert killed, "the demo finished before it could be killed; make the belief stage longer"
    if (out / "summary.json").exists():  # written once a stage has finished; none has when killed in the first
        assert "belief_llm" not in json.loads((out / "summary.json").read_text())["stages"]
    p = _demo(out, *stages)
    log, _ = p.communicate(timeout=1200)
    assert p.returncode == 0, log[-3000:]
    resumed = json.loads((out / "summary.json").read_text())["stages"]
    ref = json.loads((demo_dir / "summary.json").read_text())["stages"]
    assert resumed["belief_llm"] == ref["belief_llm"]
    timing = json.loads((out / "timing.json").read_text())["stages"]
    assert timing["belief_llm"]["stored_calls_before"] > 0


def test_demo_profile_reaches_knockout(tmp_path):
    """``chorus demo --profile gemma3-270m``: the knockout stage (run alone, about a minute on 2 CPU
    cores) records gemma, and its layers come from gemma's own 18 layers (first, ~1/3, ~2/3, last),
    not SmolLM2's [0, 10, 20, 29]. (The role-play stage's wiring: the test below; a real role-play
    run on gemma took three CPU minutes of suite time.)"""
    import yaml

    from chorus.interventions.internals.demo import demo_layers, model_layers
    out = tmp_path / "gemma"
    p = _demo(out, "-m", "gemma3-270m", "--backend", "hf", "--stage", "knockout")
    log, _ = p.communicate(timeout=900)
    assert p.returncode == 0, log[-3000:]
    summ = json.loads((out / "summary.json").read_text())
    assert {k: v["status"] for k, v in summ["stages"].items()} == {"knockout": "done"}, \
        {k: v.get("error") for k, v in summ["stages"].items()}
    assert summ["profile"] == "gemma3-270m"
    prov = json.loads((out / "knockout" / "provenance.json").read_text())
    assert prov["model"]["profile"] == "gemma3-270m"
    assert "gemma3-270m" in json.loads((out / "knockout" / "summary.json").read_text())["note"]
    assert model_layers("gemma3-270m") == 18
    layers = demo_layers(18, "thirds")
    assert layers == [0, 6, 12, 17] and demo_layers(30, "thirds") == [0, 10, 20, 29]
    kcfg = yaml.safe_load((out / "knockout" / "config.yaml").read_text())
    assert kcfg["model"]["profile"] == "gemma3-270m"
    assert kcfg["knockout"]["layers"] == kcfg["patch"]["layers"] == kcfg["probe"]["layers"] == layers
    ko = json.loads((out / "knockout" / "summary.json").read_text())
    assert ko["model"] == "gemma3-270m" and ko["knockout"]["n_layers"] == 18


def test_demo_profile_reaches_roleplay(tmp_path, monkeypatch):
    """The role-play stage hands the demo's profile and backend to every role it plans (the
    role-play models and the stance classifier); the run itself is stubbed (control flow only:
    tests/test_roleplay_e2e.py runs role-play on a real model)."""
    import chorus.simulate.roleplay.experiment as rx
    from chorus.stages import REGISTRY, SIZES, DemoConfig

    seen = {}

    def fake_run(cfg, out, progress=None, engines=None):
        plan = rx.plan_engines(cfg)
        seen["roles"] = {r: (e.profile, e.backend) for ph in plan.phases for e in ph.engines for r in e.roles}
        return None, {"ok": True}

    monkeypatch.setattr(rx, "run_roleplay", fake_run)
    cfg = DemoConfig(size="tiny", profile="gemma3-270m", backend="hf", sizes=SIZES["tiny"])
    assert REGISTRY["roleplay"].run(tmp_path / "roleplay", cfg, None) == {"ok": True}
    assert seen["roles"] == {"base": ("gemma3-270m", "hf"), "classifier": ("gemma3-270m", "hf")}
