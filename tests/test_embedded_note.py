"""The one embedded-model note (chorus.serving.profiles.embedded_note): given the profiles that produced
the numbers, it names the embedded demo models among them or is None; the council's summary,
results.md and the demo report carry it only then. No model is loaded."""
from __future__ import annotations

import pandas as pd
import pytest

from chorus.serving.profiles import BUILTIN, embedded_note

BIG = ["llama-3.1-8b-instruct", "qwen3.5-9b", "gemma-4-e4b-it"]


@pytest.fixture(autouse=True)
def _no_user_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("CHORUS_MODELS_FILE", str(tmp_path / "none.yaml"))


def test_note_only_when_an_embedded_model_produced_the_numbers(tmp_path, monkeypatch):
    assert embedded_note(BIG) is None
    assert embedded_note([]) is None
    # unknown names, None, empty strings and folders that are no model: not embedded, never raising
    assert embedded_note(["no-such-profile", None, "", str(tmp_path), "/no/such/dir"]) is None
    note = embedded_note(BIG + ["gemma3-270m"])
    assert note is not None and "gemma3-270m" in note and "smollm2-135m-instruct" not in note
    both = embedded_note(["smollm2-135m-instruct", "gemma3-270m", "smollm2-135m-instruct"])
    assert both.count("smollm2-135m-instruct") == 1 and "gemma3-270m" in both
    assert "plumbing" in both
    # an embedded model's own folder, named by path, is that embedded model
    folder = tmp_path / "g"
    folder.mkdir()
    monkeypatch.setenv(BUILTIN["gemma3-270m"].env_var, str(folder))
    assert "gemma3-270m" in embedded_note([str(folder)])


def _council(seats: list[str]):
    from chorus.simulate.council.config import CouncilConfig
    return CouncilConfig.model_validate({"seats": [{"profile": p, "persona": "analyst"} for p in seats],
                                         "conditions": [{"name": "clean"}], "baselines": {"methods": []}})


def test_council_of_big_models_gets_no_note(tmp_path):
    from chorus.simulate.council.experiment import _producers, render_markdown

    table = pd.DataFrame([{"dataset": "d", "condition": "clean", "arm": "plurality", "n": 2, "accuracy": 0.5}])
    cfg = _council(BIG[:2])
    note = embedded_note(_producers(cfg, tmp_path, None))
    assert note is None
    md = render_markdown(table, {}, cfg, {}, note=note)
    assert "plumbing" not in md and "embedded" not in md

    cfg = _council([BIG[0], "gemma3-270m"])
    note = embedded_note(_producers(cfg, tmp_path, None))
    assert note is not None and "gemma3-270m" in note
    assert note in render_markdown(table, {}, cfg, {}, note=note)
    # the judge pass's model produced numbers too: its ledger names it
    ledger = pd.DataFrame({"judge_profile": [None, "smollm2-135m-instruct"]})
    assert "smollm2-135m-instruct" in embedded_note(_producers(_council(BIG[:2]), tmp_path, ledger))


def test_demo_report_note_follows_the_stages_models(tmp_path):
    from chorus.report import render_report
    from chorus.core.runs import RunDir

    for profile, noted in ((BIG[0], False), ("gemma3-270m", True)):
        demo = RunDir.create(tmp_path / profile / "demo", part="demo", stages=["serving"])
        demo.write_summary({"size": "tiny", "profile": profile,
                            "stages": {"serving": {"status": "done", "title": "Serving", "summary": {}}}})
        stage = RunDir.create(demo.path / "serving", part="serving")
        stage.update_provenance(model={"profile": profile, "dtype": "float32"})
        stage.write_summary({"n": 1})
        stage.finish()
        demo.finish()
        html = render_report(demo.path).read_text()
        assert ("plumbing" in html) is noted, profile
