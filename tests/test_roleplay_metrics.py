"""Every role-play metric on hand-built groups, against hand-computed values."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from chorus.simulate.roleplay import metrics as M


def test_spread_measures():
    x = [1, 2, 3, 6]   # mean 3; squared deviations 4, 1, 0, 9
    assert M.spread(x, "sd") == pytest.approx(math.sqrt(14 / 4))
    assert M.spread(x, "pairwise") == pytest.approx(16 / 6)   # 1+2+5+1+4+3
    assert M.spread(x, "range") == 5
    y = [2, 2, 3, 5]
    assert M.spread(y, "sd") == pytest.approx(math.sqrt(6 / 4))
    assert M.spread(y, "pairwise") == pytest.approx(10 / 6)
    assert math.isnan(M.spread([1, np.nan, 2, 3], "sd"))
    with pytest.raises(ValueError):
        M.spread(x, "iqr")


def test_bins_distribution_transitions():
    assert M.to_bin([2.5, 3.49, 3.5, 0.2, 6.7]).tolist() == [3, 3, 4, 1, 6]
    assert M.endpoint_distribution([2, 2, 3, 5]).tolist() == [0, 0.5, 0.25, 0, 0.25, 0]
    tm = M.transition_matrix([1, 2, 3, 6, 6], [2, 2, 3, 5, 6])
    assert tm[0].tolist() == [0, 1, 0, 0, 0, 0] and tm[5].tolist() == [0, 0, 0, 0, 0.5, 0.5]
    assert np.isnan(tm[3]).all()                    # nobody started at 4
    assert M.transition_matrix([1, 2], [2, 2], normalise=False).sum() == 2


def test_text_metrics():
    # LCS 3; precision 3/3, recall 3/6 -> F = 2/3
    assert M.rouge_l("the cat sat", "the cat sat on the mat") == pytest.approx(2 / 3)
    assert M.rouge_l("", "x") == 0.0
    assert M.length_deviation("a b c", "a b c d e") == 2 and M.length_deviation("", "one") == 1
    assert M.cosine_rows(np.array([[1.0, 0], [1, 1]]), np.array([[0, 2.0], [2, 2]])).tolist() == pytest.approx([0, 1])


def test_sign_wilcoxon_bootstrap_spearman():
    s = M.sign_test([0.1] * 8)
    assert (s["k"], s["n"]) == (8, 8) and s["p"] == pytest.approx(0.5 ** 8)   # 0.0039, the seed's 8/8
    s = M.sign_test([1, 1, 0, -1])
    assert (s["k"], s["n"], s["ties"]) == (2, 3, 1) and s["p"] == pytest.approx(0.5)
    w = M.wilcoxon_paired([1, 2, 3, 4, 5], [2, 4, 6, 8, 11])
    assert w["n"] == 5 and w["statistic"] == 0 and w["p"] == pytest.approx(2 / 32)   # exact: all 5 one way
    assert math.isnan(M.wilcoxon_paired([1, 2], [1, 2])["p"])
    b = M.bootstrap_ci([1.0, 2.0, 3.0, 4.0], n_boot=2000, seed=0)
    assert b["mean"] == 2.5 and 1.0 <= b["lo"] < 2.5 < b["hi"] <= 4.0 and b["n"] == 4
    assert M.bootstrap_ci([2.0, 2.0]) == {"mean": 2.0, "lo": 2.0, "hi": 2.0, "n": 2, "resampled": "unit", "n_units": 2}
    assert M.spearman([1, 2, 3, 4], [10, 20, 30, 45])["rho"] == pytest.approx(1.0)
    assert math.isnan(M.spearman([1, 1, 1], [1, 2, 3])["rho"])


def test_degroot_rollout_and_fit():
    x0 = {"a": 1.0, "b": 5.0, "c": 2.0, "d": 6.0}
    partners = [{"a": "b", "b": "a", "c": "d", "d": "c"}, {"a": "c", "c": "a", "b": "d", "d": "b"}]
    xs = M.degroot_rollout(x0, partners, 0.25)
    assert xs[1] == {"a": 2.0, "b": 4.0, "c": 3.0, "d": 5.0}
    assert xs[2] == {"a": 2.25, "b": 4.25, "c": 2.75, "d": 4.75}
    pred = M.degroot_predictions(x0, partners, 0.25)
    assert pred["tweet1"] == x0 and pred["tweet2"] == xs[1] and pred["final"] == xs[2]
    # recover alpha from noiseless observations
    obs = M.degroot_predictions(x0, partners, 0.3)
    fit = M.fit_degroot([(x0, partners, obs)])
    assert fit["alpha"] == pytest.approx(0.3, abs=1e-4) and fit["sse"] == pytest.approx(0, abs=1e-8)
    assert fit["n_obs"] == 12 and fit["n_groups"] == 1 and fit["identified"]
    flat = {pt: x0 for pt in obs}   # nobody moves: alpha = 0 fits exactly
    assert M.fit_degroot([(x0, partners, flat)])["alpha"] == pytest.approx(0, abs=1e-4)
    same = {"a": 3.0, "b": 3.0, "c": 3.0, "d": 3.0}
    assert not M.fit_degroot([(same, partners, {pt: same for pt in obs})])["identified"]


# -- a hand-built labelled table: one group of four, human and one simulated source ---------------
def _rows(source, setup, stances, partners1=("p2", "p1", "p4", "p3"), texts=None, group="g1", topic="T"):
    """stances: pid -> [initial, tweet1, tweet2, tweet3, final]"""
    rows = []
    for i, (pid, s) in enumerate(stances.items()):
        kinds = [("initial", 0), ("tweet", 1), ("tweet", 2), ("tweet", 3), ("final", 4)]
        for j, ((kind, r), v) in enumerate(zip(kinds, s)):
            rows.append({"source": source, "setup": setup, "group_id": group, "topic": topic, "truth_framed": False,
                         "participant": pid, "kind": kind, "round": r, "k": -1,
                         "partner": partners1[i] if (kind, r) == ("tweet", 1) else None,
                         "text": (texts or {}).get((pid, j), f"{pid} {j} words here"), "stance": float(v),
                         "on_topic": True})
    return rows


HUMAN = {"p1": [1, 1, 2, 2, 2], "p2": [2, 2, 2, 2, 2], "p3": [3, 3, 3, 3, 3], "p4": [6, 6, 5, 5, 5]}
SIM = {"p1": [1, 2, 3, 3, 3], "p2": [2, 3, 3, 3, 3], "p3": [3, 3, 3, 3, 3], "p4": [6, 4, 3, 3, 4]}


def _table():
    t = {("p1", 1): "the cat sat", ("p1", 3): "a b c d e f"}
    sim_t = {("p1", 1): "the cat sat on the mat", ("p1", 3): "a b"}
    return pd.DataFrame(_rows("human", "human", HUMAN, texts=t) + _rows("base", "full_dynamics", SIM, texts=sim_t))


def test_wide_and_individual_errors():
    w = M.wide(_table())
    assert len(w) == 8 and M.n_rounds_of(w) == 3
    h, s = w[w.source == "human"], w[w.source == "base"]
    pub = M.individual_errors(h, s, "public", 3).set_index("participant")
    # public: start tweet1, end tweet3. p1: h 1->2, s 2->3: single |3-2| = 1, update |1-1| = 0
    assert pub.loc["p1", "single_error"] == 1 and pub.loc["p1", "update_error"] == 0
    # p4: h 6->5, s 4->3: single 2, update |(-1) - (-1)| = 0
    assert pub.loc["p4", "single_error"] == 2 and pub.loc["p4", "update_error"] == 0
    priv = M.individual_errors(h, s, "private", 3).set_index("participant")
    # private: initial -> final. p4: h 6->5, s 6->4: single 1, update |(-2) - (-1)| = 1
    assert priv.loc["p4", "single_error"] == 1 and priv.loc["p4", "update_error"] == 1
    assert priv["single_error"].tolist() == [1, 1, 0, 1]


def test_convergence_and_partner_gap():
    w = M.wide(_table())
    h = w[w.source == "human"]
    g = M.group_convergence(h, "private", 3).iloc[0]
    # human initial [1,2,3,6] -> final [2,2,3,5]
    assert g["delta_sd"] == pytest.approx(math.sqrt(1.5) - math.sqrt(3.5))
    assert g["delta_pairwise"] == pytest.approx(10 / 6 - 16 / 6) and g["delta_range"] == 3 - 5
    assert g["mean_shift"] == 0
    pg = M.partner_gap(h, "private", 3).set_index("participant")
    # p1's first partner p2: gap 2 - 1 = 1, change 2 - 1 = 1; p4 (partner p3): gap 3 - 6 = -3, change -1
    assert pg.loc["p1"].tolist()[1:] == [1, 1] and pg.loc["p4"].tolist()[1:] == [-3, -1]
    assert pg["gap"].tolist() == [1, -1, 3, -3] and pg["change"].tolist() == [1, 0, 0, -1]
    rho = M.spearman(pg["gap"], pg["change"])["rho"]
    assert rho == pytest.approx(stats_rho([1, -1, 3, -3], [1, 0, 0, -1]))
    traj = M.sd_trajectory(h, 3)
    assert traj[0] == pytest.approx(math.sqrt(3.5)) and traj[-1] == pytest.approx(math.sqrt(1.5))


def stats_rho(x, y):
    from scipy.stats import spearmanr
    return spearmanr(x, y).statistic


def test_evaluate_end_to_end_on_hand_built_table():
    s, tables = M.evaluate(_table(), embed=None, n_boot=100, seed=0)
    cell = s["cells"]["base/full_dynamics/private"]
    assert cell["single_error"]["mean"] == pytest.approx(3 / 4)
    assert cell["update_error"]["mean"] == pytest.approx(3 / 4)
    # sim private: [1,2,3,6] -> [3,3,3,4]
    dsd_sim = M.spread([3, 3, 3, 4], "sd") - math.sqrt(3.5)
    assert cell["delta_sd"]["mean"] == pytest.approx(dsd_sim)
    assert cell["convergence_error"]["mean"] == pytest.approx(abs(dsd_sim - (math.sqrt(1.5) - math.sqrt(3.5))))
    pub = s["cells"]["base/full_dynamics/public"]
    # texts: p1 round-1 post: rouge 2/3, length |6-3| = 3; p1 round-3 post "a b" vs 6 words: 4
    tm = tables["text_metrics"].set_index(["participant", "kind", "round"])
    assert tm.loc[("p1", "tweet", 1), "rouge_l"] == pytest.approx(2 / 3)
    assert tm.loc[("p1", "tweet", 1), "length_deviation"] == 3
    assert tm.loc[("p1", "tweet", 3), "length_deviation"] == 4
    assert tm.loc[("p1", "final", 4), "length_deviation"] == 0 and tm.loc[("p1", "final", 4), "rouge_l"] == 1.0
    assert pub["on_topic_rate"] == 1.0 and np.isnan(pub["semantic_similarity"]["mean"])
    assert s["human"]["private"]["delta_range"]["mean"] == -2
    assert s["endpoint_distribution"]["base/full_dynamics/private"] == [0, 0, 0.75, 0.25, 0, 0]
    tr = tables["transitions"].query("cell == 'human/human' and channel == 'private' and `from` == 6")
    assert tr.set_index("to")["p"].to_dict()[5] == 1.0
    assert len(s["sd_trajectory"]["human/human"]) == 5


def test_sign_tests_between_sources_over_cells():
    sft = {"p1": [1, 1, 2, 2, 2], "p2": [2, 2, 2, 2, 2], "p3": [3, 3, 3, 3, 3], "p4": [6, 6, 5, 5, 4]}
    df = pd.concat([_table(), pd.DataFrame(_rows("sft", "full_dynamics", sft)),
                    pd.DataFrame(_rows("base", "next_message", SIM)), pd.DataFrame(_rows("sft", "next_message", sft))])
    s, _ = M.evaluate(df, embed=None, n_boot=0)
    t = s["tests"]["sft_better_than_base"]["single_error"]
    # sft beats base on single-opinion error in all 4 cells (2 setups x 2 channels)
    assert (t["k"], t["n"]) == (4, 4) and t["p"] == pytest.approx(1 / 16)
    assert s["tests"]["base_better_than_sft"]["single_error"]["k"] == 0


def test_wilcoxon_over_topics_in_evaluate():
    parts = []
    for i, topic in enumerate(["T1", "T2", "T3", "T4", "T5", "T6"]):
        parts += _rows("human", "human", HUMAN, group=f"g{i}", topic=topic)
        parts += _rows("base", "full_dynamics", SIM, group=f"g{i}", topic=topic)
    s, _ = M.evaluate(pd.DataFrame(parts), n_boot=0)
    w = s["cells"]["base/full_dynamics/private"]["wilcoxon_topics_delta_sd"]
    assert w["n"] == 6 and w["p"] == pytest.approx(2 / 64)   # all six topics differ the same way
