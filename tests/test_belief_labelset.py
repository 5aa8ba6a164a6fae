"""``chorus belief labelset`` (a calibration set drawn from a model's own generations, written for a
person to label) and ``chorus belief calibrate --labels`` (the labelled file read back)."""
import json
import time

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from chorus.core.config import ConfigError
from chorus.serving.store import CallStore
from chorus.simulate.belief import labelset as ls
from chorus.simulate.belief.calibration import calibrate, min_labelled
from chorus.simulate.belief.cli import app
from chorus.simulate.belief.topics import load_topic, stance_bin

runner = CliRunner()
TOPIC = load_topic("transit_priority")


def test_bins_are_the_topics_nine_bins_drawn_at_their_midpoints():
    from chorus.simulate.belief.cross import BIN_MID
    assert list(stance_bin(ls.BIN_TARGETS)) == list(range(len(TOPIC.stance_phrases)))
    np.testing.assert_allclose(ls.BIN_TARGETS, BIN_MID)


# -- a scripted generator: control flow only ------------------------------------------------------
class _Out:
    def __init__(self, text):
        self.text, self.prompt_tokens, self.completion_tokens = text, 10, 5


class Scripted:
    """Bin 0 always says the same (duplicates); in the first round bin 1's first draw is blank
    (failed) and bin 3's first draw repeats bin 2's in other case and spacing; the rest differ by seed."""

    def __init__(self):
        self.rounds = 0

    def chat(self, convs, *, seed, **_):
        self.rounds += 1
        outs, asked = [], set()
        for conv, sd in zip(convs, seed):
            k = next(i for i, ph in enumerate(TOPIC.stance_phrases) if f"you are {ph}." in conv[-1]["content"])
            first = self.rounds == 1 and k not in asked
            asked.add(k)
            outs.append(_Out("Same words." if k == 0 else "  " if k == 1 and first
                             else "Bin 3 says hello." if k == 2 and first else " bin 3   says HELLO. " if k == 3 and first
                             else f"bin {k} draw {sd}"))
        return outs


def test_draw_dedups_tops_up_shuffles_and_keeps_the_bins_apart(tmp_path):
    cfg = ls.LabelsetConfig(per_bin=2, seed=3)
    out = tmp_path / "set.csv"
    run, s = ls.run_labelset(cfg, out, engine=Scripted())
    draws = run.read_table("draws")
    by = {b["bin"]: (b["kept"], b["duplicate"], b["failed"], b["drawn"]) for b in s["per_bin"]}
    assert by[0] == (1, cfg.max_draws - 1, 0, cfg.max_draws) and s["short_bins"] == [0]
    assert by[1] == (2, 0, 1, 3) and by[2] == (2, 0, 0, 2) and by[3] == (2, 1, 0, 3)   # topped up
    assert all(by[k] == (2, 0, 0, 2) for k in range(4, 9)) and s["rows"] == 17
    assert s["rows"] == int((draws.status == "kept").sum()) and s["drawn"] == len(draws)
    kept = draws[draws.status == "kept"].text.map(ls.dedup_key)
    assert kept.is_unique and not draws[draws.status == "kept"].text.isna().any()
    sheet = pd.read_csv(out, dtype=str, keep_default_na=False)
    key = pd.read_csv(tmp_path / "set.key.csv")
    assert list(sheet.columns) == list(ls.COLUMNS) and (sheet.label == "").all()
    assert not {"bin", "target_belief", "stance_phrase"} & set(sheet.columns)   # blind
    assert list(key.id) == list(sheet.id) and not key.bin.is_monotonic_increasing   # shuffled
    assert "Position A: Aldenvale should expand" in (tmp_path / "set.instructions.txt").read_text()
    assert (tmp_path / "set.run" / "provenance.json").is_file()
    # seeded: the same again, byte for byte
    before = out.read_bytes()
    ls.run_labelset(cfg, out, engine=Scripted())
    assert out.read_bytes() == before


def test_a_started_labelling_is_never_overwritten(tmp_path):
    out = tmp_path / "set.csv"
    ls.run_labelset(ls.LabelsetConfig(per_bin=1), out, engine=Scripted())
    sheet = pd.read_csv(out, dtype=str, keep_default_na=False)
    sheet.loc[0, "label"] = "0.4"
    sheet.to_csv(out, index=False)
    r = runner.invoke(app, ["labelset", "--out", str(out), "--per-bin", "1"])
    assert r.exit_code == 2 and "1 filled-in label" in r.output


def _synthetic(path):
    from chorus.serving.backends.synthetic import synthetic_engine
    from chorus.simulate.belief.cross import stance_phrases
    return synthetic_engine("synth", 0.0, 0.0, noise=0.05, phrases=stance_phrases(), store=path)


def test_a_killed_run_resumes_from_the_store_and_a_rerun_computes_nothing(tmp_path):
    """The synthetic channel writes one text per bin: every draw after the first is a duplicate,
    so per_bin 2 with max_draws 3 takes two rounds (18, then 9 top-ups)."""
    cfg = ls.LabelsetConfig(per_bin=2, max_draws=3)
    out = tmp_path / "set.csv"
    store = tmp_path / "set.run" / "calls.sqlite"
    store.parent.mkdir()
    eng = _synthetic(store)
    gen, n = eng.backend.generate, {"calls": 0}

    def dies_in_round_two(prompts, samplings):
        n["calls"] += 1
        if n["calls"] == 2:
            raise KeyboardInterrupt("killed")
        yield from gen(prompts, samplings)
    eng.backend.generate = dies_in_round_two
    with pytest.raises(KeyboardInterrupt):
        ls.run_labelset(cfg, out, engine=eng)
    eng.close()
    assert len(CallStore(store)) == 18 and not out.exists()
    eng = _synthetic(store)
    _, s = ls.run_labelset(cfg, out, engine=eng)
    assert eng.model_calls == 9 and s["drawn"] == 27 and s["duplicates"] == 18 and s["rows"] == 9
    eng.close()
    eng = _synthetic(store)
    _, s2 = ls.run_labelset(cfg, out, engine=eng)
    assert eng.model_calls == 0 and s2["sha256"] == s["sha256"] and len(CallStore(store)) == 27
    eng.close()


def _fill(csv, label=lambda key: key.target_belief.round(3).astype(str)):
    sheet = pd.read_csv(csv, dtype=str, keep_default_na=False)
    key = pd.read_csv(ls.sibling(csv, ".key.csv")).set_index("id").loc[sheet.id]
    sheet["label"] = list(label(key))
    sheet.to_csv(csv, index=False)
    return sheet


def test_labelled_synthetic_set_calibrates(tmp_path):
    out = tmp_path / "set.csv"
    ls.run_labelset(ls.LabelsetConfig(per_bin=1), out, engine=_synthetic(None))
    _fill(out)
    labels = ls.read_labels_csv(out)
    assert len(labels) == 9 and labels.attrs["topic"] == "transit_priority" and labels.attrs["n_unlabelled"] == 0
    np.testing.assert_allclose(labels.y, labels.target_belief.round(3))   # the key joined on id
    fit, scores = calibrate(_synthetic(None), "synth", "transit_priority", store=False, labels=labels)
    assert fit["labels_source"] == str(out) and fit["n_items"] == 9 and np.isfinite(fit["tau"])
    assert fit["pearson_raw_vs_label"] > 0.9 and "bin" in scores


# -- bad input: one line, exit 2, before any model or directory --------------------------------------
def _sheet(tmp_path, n=10, label="0.5", drop=(), **cols):
    df = pd.DataFrame({"id": [f"s0-{i:03d}" for i in range(n)], "topic": "transit_priority",
                       "text": [f"comment {i}" for i in range(n)], "label": label, "rationale": ""})
    for k, v in cols.items():
        df[k] = v
    df = df.drop(columns=list(drop))
    p = tmp_path / "l.csv"
    df.to_csv(p, index=False)
    return p


@pytest.mark.parametrize("make,needle", [
    (lambda t: t / "absent.csv", "no such file"),
    (lambda t: _sheet(t, drop=("label", "topic")), "missing column(s) topic, label (has: id, text, rationale)"),
    (lambda t: _sheet(t, label=["0.5"] * 8 + ["", ""]), "2 of 10 rows have no label (first: row id 's0-008')"),
    (lambda t: _sheet(t, label=["0.5"] * 9 + ["1.3"]), "row id 's0-009': label '1.3' outside [0, 1]"),
    (lambda t: _sheet(t, label=["0.5"] * 9 + ["-0.1"]), "row id 's0-009': label '-0.1' outside [0, 1]"),
    (lambda t: _sheet(t, label=["0,7"] + ["0.5"] * 9), "row id 's0-000': label '0,7' is not a number"),
    (lambda t: _sheet(t, label=["nan"] + ["0.5"] * 9), "row id 's0-000': label 'nan' outside [0, 1]"),
    (lambda t: _sheet(t, n=min_labelled() - 1), f"the 80/20 split needs at least {min_labelled()}"),
    (lambda t: _sheet(t, topic="harbour_use"), "topic 'harbour_use', but --topic 'transit_priority'"),
    (lambda t: _sheet(t, id=["a"] * 10), "id 'a' appears more than once"),
    (lambda t: _sheet(t, topic="atlantis"), "topic = 'atlantis': no such topic file"),
])
def test_bad_labels_file_is_one_line_and_exit_2(tmp_path, make, needle):
    r = runner.invoke(app, ["calibrate", "--topic", "transit_priority", "--labels", str(make(tmp_path)),
                            "--out", str(tmp_path / "x")])
    assert r.exit_code == 2, r.output
    assert needle in " ".join(r.output.split()), r.output
    assert not (tmp_path / "x").exists()


def test_unlabelled_rows_skipped_on_request_and_counted(tmp_path):
    p = _sheet(tmp_path, n=12, label=["0.2"] * 9 + ["", " ", ""])
    with pytest.raises(ConfigError, match="3 of 12 rows have no label"):
        ls.read_labels_csv(p)
    df = ls.read_labels_csv(p, skip_unlabelled=True)
    assert len(df) == 9 and df.attrs["n_unlabelled"] == 3 and "label" not in df and (df.y == 0.2).all()
    p = _sheet(tmp_path, n=10, label=["0.2"] * 7 + ["", "", ""])
    with pytest.raises(ConfigError, match=f"7 labelled rows; the 80/20 split needs at least {min_labelled()}"):
        ls.read_labels_csv(p, skip_unlabelled=True)


# -- the embedded model end to end ------------------------------------------------------------------
@pytest.mark.slow
def test_real_model_labelset_then_calibrate_on_it(tmp_path, monkeypatch, hf_engine):
    """SmolLM2-135M writes one comment per bin through the CLI, a rerun computes nothing, labels
    are filled in (the generating bin's midpoint, a stand-in for a person) and calibrate --labels
    fits tau on them. Each command gets the session's loaded model on its own call store (no
    reload). Plumbing only: the model cannot judge stance, so no number here is a finding."""
    from chorus import serving
    engines = []

    def build(spec, *, store=None, **_):
        eng = hf_engine.with_store(store)
        eng.release = lambda: None          # the session's model outlives the command
        engines.append(eng)
        return eng
    monkeypatch.setattr(serving, "build_engine", build)
    monkeypatch.setenv("CHORUS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "set.csv"
    args = ["labelset", "--out", str(out), "--per-bin", "1", "--max-tokens", "12", "--backend", "hf", "--seed", "1"]
    t0 = time.perf_counter()
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "set.run" / "summary.json").read_text())
    assert s["model_calls_computed"] == s["drawn"] >= 9 and s["rows"] == len(pd.read_csv(out))
    assert s["rows"] >= min_labelled() and "chorus belief calibrate" in r.output
    prov = json.loads((tmp_path / "set.run" / "provenance.json").read_text())
    assert prov["command"] == "labelset" and prov["engine"]["profile"] == "smollm2-135m-instruct"
    n_store = len(CallStore(tmp_path / "set.run" / "calls.sqlite"))
    r = runner.invoke(app, args)   # the same command again: all from the store
    assert r.exit_code == 0, r.output
    s2 = json.loads((tmp_path / "set.run" / "summary.json").read_text())
    assert s2["model_calls_computed"] == 0 and s2["sha256"] == s["sha256"]
    assert len(CallStore(tmp_path / "set.run" / "calls.sqlite")) == n_store == s["drawn"]
    t_gen = time.perf_counter() - t0
    _fill(out)
    r = runner.invoke(app, ["calibrate", "--labels", str(out), "--backend", "hf", "--out", str(tmp_path / "cal")])
    assert r.exit_code == 0, r.output
    fit = json.loads((tmp_path / "cal" / "summary.json").read_text())
    assert fit["labels_source"] == str(out) and fit["n_items"] == s["rows"] and fit["topic"] == "transit_priority"
    stored = tmp_path / "cache" / "fits" / "transit_priority" / "smollm2-135m-instruct.json"
    assert json.loads(stored.read_text())["labels_sha256"] == fit["labels_sha256"]
    scores = pd.read_parquet(tmp_path / "cal" / "tables" / "calibration_scores.parquet")
    assert set(scores.id) == set(pd.read_csv(out).id) and scores.bin.notna().all()
    print(f"labelset x2 {t_gen:.1f} s, calibrate {time.perf_counter() - t0 - t_gen:.1f} s, "
          f"{s['rows']} rows of {s['drawn']} drawn")
