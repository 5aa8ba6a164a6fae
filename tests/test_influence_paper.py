"""``chorus.interventions.paper`` on hand-made run directories: each section reads its runs' summary numbers
as written, knows a long debate from a short one, and refuses what is not a run. The real-model path:
tests/test_debate_e2e.py::test_influence_paper_from_real_runs."""
from __future__ import annotations

import json

import pytest

from chorus.interventions.paper import PaperError, SECTIONS, build_paper, export


def _run(root, name, part, summary):
    d = root / name
    (d / "plots").mkdir(parents=True)
    (d / "provenance.json").write_text(json.dumps({"part": part}))
    (d / "summary.json").write_text(json.dumps(summary))
    return d


KNOCK = {"verb": "knockout", "model": "m1", "n_pairs": 4, "message_effect": {"mean": 2.0, "ci_low": 1.0, "ci_high": 3.0},
         "curves": [{"kind": "all", "layer": -1, "queries": "decision", "mixer": "attention", "share_removed": 0.8,
                     "ci_low": 0.5, "ci_high": 1.1, "n": 4},
                    {"kind": "single", "layer": 3, "queries": "decision", "mixer": "attention", "share_removed": 0.1,
                     "ci_low": 0.0, "ci_high": 0.2, "n": 4},
                    {"kind": "single", "layer": 5, "queries": "decision", "mixer": "attention", "share_removed": 0.3,
                     "ci_low": 0.1, "ci_high": 0.4, "n": 4}]}
TRANSFER = {"verb": "transfer", "model": "m1", "curve": [], "by_sender": [
    {"sender_right": False, "arm": "transfer", "layer_s": 2, "layer_r": 2, "shift": 0.4, "ci_low": 0.1, "ci_high": 0.7,
     "n": 6}]}
LONG = {"model": "m2", "rounds": 12, "conditions": {}, "c2": {"final_round": 12, "final_round_curves": [
    {"condition": "debate", "round": 12, "unanimity": 0.99}]}, "stance_dynamics": {}}


def test_sections_read_the_numbers_as_written(tmp_path):
    k = _run(tmp_path, "knock", "influence", KNOCK)
    t = _run(tmp_path, "transfer", "influence", TRANSFER)
    lg = _run(tmp_path, "long", "debate", LONG)
    (k / "plots" / "knockout_curves.png").write_bytes(b"png")
    nb = export([k, t, lg])
    assert list(nb["sections"]) == [s.key for s in SECTIONS] and nb["models"] == ["m1", "m2"]
    # no embedded model made these numbers: the page says whose they are, never "plumbing"
    assert "numbers from m1, m2" in nb["note"] and "plumbing" not in nb["note"]
    rows = nb["sections"]["s44_knockout"]["rows"]
    assert [(r["condition"], r["value"]) for r in rows] == [
        ("message effect (logits)", 2.0), ("all / decision / attention", 0.8),
        ("best single layer / decision / attention (unadjusted: as if chosen in advance; resume the run with "
         "`chorus influence knockout` for the family-wise interval)", 0.3)]
    assert rows[2]["layer"] == 5 and all(r["run"] == "knock" for r in rows)
    assert rows[2]["interval"] == "percentile bootstrap (run made before Fieller intervals)"
    tr = nb["sections"]["fig8_transfer"]["rows"]
    assert tr == [{"run": "transfer", "model": "m1", "arm": "transfer", "sender": "wrong", "layers": "2->2",
                   "share": None, "shift": 0.4, "ci_low": 0.1, "ci_high": 0.7, "n": 6}]
    assert nb["sections"]["table14_long"]["rows"][0] == {"run": "long", "model": "m2", "round": 12,
                                                        "condition": "debate", "unanimity": 0.99}
    assert "chorus debate run default" in nb["sections"]["s5_outcomes"]["missing"]   # no 3-round debate given
    # a given run that holds none of a section says so, with the command
    assert nb["sections"]["numeric"]["missing"].startswith("the runs given (long) hold none of it")
    p, _ = build_paper([k, t, lg], tmp_path / "out")
    md = p.read_text()
    assert "![knock__knockout_curves.png](figures/knock__knockout_curves.png)" in md
    assert (tmp_path / "out" / "figures" / "knock__knockout_curves.png").read_bytes() == b"png"
    assert md.index("§4.4") < md.index("Figure 8") < md.index("Table 14")


def test_bad_inputs_name_the_directory(tmp_path):
    with pytest.raises(PaperError, match="no run directory given"):
        export([])
    with pytest.raises(PaperError, match=r"nope: not a run directory \(no provenance.json\)"):
        export([tmp_path / "nope"])
    b = _run(tmp_path, "belief", "belief", {"model": "x"})
    with pytest.raises(PaperError, match="belief: neither a debate run nor an influence run .*'belief'"):
        export([b])
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "provenance.json").write_text("{}")
    with pytest.raises(PaperError, match="half: no summary.json"):
        export([tmp_path / "half"])


def test_knockout_rows_show_the_family_wise_best_layer_and_unbounded_shares(tmp_path):
    """A summary with ``best_single_layer`` gives two rows (family-wise with its p-value, then the
    unadjusted one, labelled); an unbounded share prints UNBOUNDED, never a finite interval."""
    from chorus.core.stats import UNBOUNDED
    why = UNBOUNDED + ": the denominator's 95% interval is [-0.2, 1.1]"
    best = {"mixer": "attention", "queries": "decision", "layer": 5, "share_removed": 0.3, "ci_low": -0.05,
            "ci_high": 0.65, "p_value": 0.2, "unbounded": None, "interval": "family-wise over 2 layers", "n": 4,
            "unadjusted": {"ci_low": 0.1, "ci_high": 0.4, "interval": "fieller", "unbounded": None}}
    s = {**KNOCK, "curves": [{**KNOCK["curves"][0], "ci_low": None, "ci_high": None, "unbounded": why,
                              "interval": "fieller"}] + KNOCK["curves"][1:], "best_single_layer": [best]}
    k = _run(tmp_path, "knock", "influence", s)
    rows = export([k])["sections"]["s44_knockout"]["rows"]
    assert [r["condition"] for r in rows] == [
        "message effect (logits)", "all / decision / attention", "best single layer / decision / attention",
        "best single layer / decision / attention (unadjusted: as if chosen in advance)"]
    assert (rows[1]["ci_low"], rows[1]["ci_high"], rows[1]["interval"]) == (UNBOUNDED, UNBOUNDED, why)
    assert (rows[2]["ci_low"], rows[2]["ci_high"], rows[2]["p_value"]) == (-0.05, 0.65, 0.2)
    assert (rows[3]["ci_low"], rows[3]["ci_high"], rows[3]["interval"]) == (0.1, 0.4, "fieller")
    p, _ = build_paper([k], tmp_path / "out")
    assert f"| {UNBOUNDED} | {UNBOUNDED} |" in p.read_text()
