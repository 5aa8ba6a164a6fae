"""The paired committed-at-read (chorus.interventions.readout.paired_committed_at_read; seed 002 §C.1, Table 9),
on hand-made readout rows whose shares are known."""
from __future__ import annotations

import pandas as pd
import pytest

from chorus.interventions.readout import committed_at_read, paired_committed_at_read


def _rows(qid, family, cond, hits, f=0.0, changed=True):
    """One readout row per entry of ``hits`` (True: the readout argmax is the eventual answer)."""
    return [{"qid": qid, "family": family, "condition": cond, "f": f, "changed": changed, "answer": "A",
             "argmax": "A" if h else "B"} for h in hits]


def test_paired_shares_by_question_on_questions_changed_in_both_conditions():
    rows = (_rows("q1", "fa", "debate", [True, True]) + _rows("q1", "fa", "reflection", [True, False])      # +0.5
            + _rows("q2", "fa", "debate", [False]) + _rows("q2", "fa", "reflection", [True])                 # -1
            + _rows("q3", "fb", "debate", [True]) + _rows("q3", "fb", "reflection", [True])                  # tie
            + _rows("q4", "fc", "debate", [True, False]) + _rows("q4", "fc", "reflection", [False])          # +0.5
            + _rows("q5", "fd", "debate", [True])                                     # reflection never changed
            + _rows("q6", "fe", "reflection", [True]) + _rows("q6", "fe", "debate", [False], changed=False)
            + _rows("q1", "fa", "debate", [False, False], f=0.5))                    # another readout point
    t = pd.DataFrame(rows)
    p = paired_committed_at_read(t, n_boot=200)
    assert p["n_questions"] == 4
    assert [r["qid"] for r in p["questions"]] == ["q1", "q2", "q3", "q4"]
    assert [r["difference"] for r in p["questions"]] == [0.5, -1.0, 0.0, 0.5]
    assert (p["favours_debate"], p["ties"], p["favours_reflection"]) == (0.5, 0.25, 0.25)
    assert p["mean_difference"] == pytest.approx(0.0)
    assert p["ci_low"] <= 0.0 <= p["ci_high"]
    assert p["sign_test_p"] == pytest.approx(1.0)   # 2 for, 1 against: binomial, two-sided
    # the pooled rate of the same rows at f = 0 is a different number: it weighs responses, not questions
    pooled = committed_at_read(t, n_boot=0)["by_condition"]["debate"]["0.0"]["share"]
    assert pooled == pytest.approx(5 / 7)
    assert paired_committed_at_read(t[t["condition"] == "debate"])["n_questions"] == 0
