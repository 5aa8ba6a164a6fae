"""The ablation summary's Table-10 pieces (seed 002 §C.1): the incoming reasoning share by domain and the
answer-reasoning additivity, on hand-made margins whose values are known."""
from __future__ import annotations

import pandas as pd
import pytest

from chorus.interventions.ablations import effects, summarize_effects

# per pair: margins (no_message, full, answer_only, reasoning_only)
PAIRS = {("q1", "fa", "knowledge"): (0.0, 3.0, 1.0, 1.0), ("q2", "fb", "knowledge"): (1.0, 4.0, 2.0, 2.0),
         ("q3", "fc", "values"): (0.0, 2.0, 0.5, 1.5), ("q4", "fd", "safety"): (0.0, 1.0, 0.0, 1.0)}


def test_reasoning_share_by_domain_and_additivity():
    rows = [{"qid": q, "family": f, "domain": d, "subdomain": "toy", "intervention": iv, "margin": m}
            for (q, f, d), ms in PAIRS.items() for iv, m in zip(("no_message", "full", "answer_only", "reasoning_only"), ms)]
    s = summarize_effects(effects(pd.DataFrame(rows)), n_boot=100)
    by = s["reasoning_share_by_domain"]
    assert set(by) == {"knowledge", "safety", "values"}
    # knowledge: reasoning-only effects 1, 1; answer-only 1, 1 -> 1 / (1 + 1)
    assert by["knowledge"]["estimate"] == pytest.approx(0.5) and by["knowledge"]["n"] == 2
    assert by["values"]["estimate"] == pytest.approx(1.5 / 2.0) and by["safety"]["estimate"] == pytest.approx(1.0)
    a = s["additivity"]
    # full effects 3, 3, 2, 1 (mean 2.25); answer + reasoning effects 2, 2, 2, 1 (mean 1.75)
    assert a["full"] == pytest.approx(2.25) and a["answer_plus_reasoning"] == pytest.approx(1.75)
    assert a["full_minus_parts"]["mean"] == pytest.approx(0.5)
    assert a["full_over_parts"]["estimate"] == pytest.approx(2.25 / 1.75)
    assert s["reasoning_share"]["estimate"] == pytest.approx(1.125 / (1.125 + 0.625))  # pooled over domains
