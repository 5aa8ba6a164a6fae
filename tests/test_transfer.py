"""Latent state transfer (issue 19 item 4): identity, the structural zero of the elsewhere control
at the last layer, the scrambled control against a hand computation, a fitted cross-family map
between tiny random models of different widths, errors naming both models, the share
arithmetic, and one small run on the embedded model (plumbing, not findings)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from chorus.interventions import state_transfer as tr
from chorus.serving.engine import engine_from_model

OPTS = [" A", " B"]


def conv(own: str = "I think it is A, Paris.",
         q: str = "What is the capital of France? A. Paris B. Rome") -> list[dict]:
    return [{"role": "user", "content": q}, {"role": "assistant", "content": own},
            {"role": "user", "content": "Review your previous response and give your final answer."},
            {"role": "assistant", "content": "Answer:"}]


# tokenizer, tiny: shared fixtures in conftest.py


@pytest.fixture(scope="module")
def wide_gemma(tokenizer):
    """A tiny random gemma3 of width 96 (the llama tiny model is 64 wide): two families, two widths."""
    import torch
    from transformers import AutoModelForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(vocab_size=len(tokenizer), hidden_size=96, intermediate_size=128, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=16,
                           layer_types=["sliding_attention", "full_attention", "full_attention"],
                           max_position_embeddings=2048)
    torch.manual_seed(1)
    return engine_from_model(AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval(), tokenizer,
                             name="tiny-gemma3-w96")


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_identity_own_state_same_place_same_layer(tiny, family):
    eng = tiny(family)
    n = tr.model_info(eng)["n_layers"]
    r = tr.transfer_layers(eng, eng, conv(), conv(), [(L, L) for L in range(n)], options=OPTS, site="readout")
    assert np.array_equal(r["transfer"], np.repeat(r["none"][None], n, axis=0))  # exactly the unpatched pass
    assert np.allclose(r["sender"], r["none"], atol=1e-6)                           # same state, same readout
    assert r["positions"]["written"] == r["positions"]["readout"] == r["positions"]["sender"]


def test_last_layer_structure_and_scrambled_by_hand(tiny):
    """At the last decoder layer a position's output reaches only its own logits: written at the
    readout the receiver reads exactly the sender's distribution; written elsewhere, nothing
    changes (exactly); scrambled, it reads the head applied to the permuted state."""
    import torch
    eng = tiny("llama")
    last = tr.model_info(eng)["n_layers"] - 1
    snd, rcv = conv(own="It is B, Rome, I am sure."), conv()
    r = tr.transfer(eng, eng, snd, rcv, layer_s=last, layer_r=last, site="readout", seed=(7,))
    assert np.abs(r["sender"] - r["none"]).max() > 1e-4                # the two contexts differ
    assert np.allclose(r["transfer"], r["sender"], atol=1e-5)
    assert np.array_equal(r["elsewhere"], r["none"])                  # structural zero
    assert r["positions"]["elsewhere"] < r["positions"]["anchor"] < r["positions"]["readout"]
    h, _ = tr.read_states(eng, eng.render(snd).ids, [last])
    v = tr.scramble(h[0], (7, last, last))
    assert np.isclose(np.linalg.norm(v), np.linalg.norm(h[0])) and not np.allclose(v, h[0])
    assert np.array_equal(v, tr.scramble(h[0], (7, last, last)))      # seeded
    m = eng.model
    with torch.no_grad():
        logits = m.lm_head(m.model.norm(torch.tensor(v)[None]))[0]
    ids = [eng.option_token_ids(eng.render(rcv), o)[0] for o in OPTS]
    want = torch.log_softmax(logits, -1)[ids].numpy()
    assert np.allclose(r["scrambled"], want, atol=1e-5)
    mid = tr.transfer(eng, eng, snd, rcv, layer_s=1, layer_r=1, site="anchor")  # earlier: all arms move something
    assert np.abs(mid["elsewhere"] - mid["none"]).max() > 0


def test_cross_family_map_fitted_and_written(tiny, wide_gemma, tmp_path):
    snd, rcv = tiny("llama"), wide_gemma
    qs = [f"Question {k}: which is larger? A. {k} B. {k + 3}" for k in range(8)]
    convs = [conv(own=o, q=q) for q in qs for o in ("It is A.", "Surely B, since it is larger.")]
    groups = [q for q in qs for _ in range(2)]
    maps = tr.fit_map(snd, rcv, convs, [(1, 2), (3, 0)], groups=groups, alphas=[1.0, 100.0], n_splits=4)
    m = maps[(1, 2)]
    assert m.W.shape == (96, 64) and m.b.shape == (96,) and m.n_fit == 16 and m.alpha in (1.0, 100.0)
    assert np.isfinite(m.r2_heldout) and m.r2_train > m.r2_heldout and m.info["folds"] == 4
    back = tr.LinearMap.load(m.save(tmp_path / "map.npz"))
    assert np.array_equal(back.W, m.W) and back.r2_heldout == m.r2_heldout and back.sha256 == m.sha256
    r = tr.transfer_layers(snd, rcv, convs[1], convs[0], [(1, 2), (3, 0)], options=OPTS, maps=maps)
    assert r["transfer"].shape == (2, 2) and np.isfinite(r["transfer"]).all()
    assert np.abs(r["transfer"][0] - r["none"]).max() > 0               # the mapped state was written
    h, _ = tr.read_states(snd, snd.render(convs[1]).ids, [1])
    assert np.allclose(m.apply(h[0]), h[0] @ m.W.T + m.b)


def test_errors_name_both_models(tiny, wide_gemma):
    snd, rcv = tiny("llama"), wide_gemma
    both = (r"sender tiny-llama \(llama, 4 layers 0..3, width 64\); "
            r"receiver tiny-gemma3-w96 \(gemma3_text, 3 layers 0..2")
    with pytest.raises(tr.TransferError, match=r"widths differ \(64 vs 96\) and no linear map.*" + both):
        tr.transfer(snd, rcv, conv(), conv(), layer_s=1, layer_r=1)
    with pytest.raises(tr.TransferError, match=r"layer_r=3 is out of range for tiny-gemma3-w96.*" + both):
        tr.transfer(snd, rcv, conv(), conv(), layer_s=1, layer_r=3)
    with pytest.raises(tr.TransferError, match=r"layer_s=4 is out of range for tiny-llama"):
        tr.transfer(snd, snd, conv(), conv(), layer_s=4, layer_r=0)
    bad = tr.LinearMap(np.zeros((64, 96)), np.zeros(64))
    with pytest.raises(tr.TransferError, match=r"W \(64, 96\).*must be W \(96, 64\).*" + both):
        tr.transfer(snd, rcv, conv(), conv(), layer_s=0, layer_r=0, map=bad)
    with pytest.raises(tr.TransferError, match="site must be one of readout, anchor"):
        tr.transfer(snd, snd, conv(), conv(), layer_s=0, layer_r=0, site="middle")


def test_share_and_summary_hand_computed():
    assert tr.share([1.0, 3.0, 2.0], [1.0, 1.0, 2.0], [3.0, 5.0, 2.0]).tolist()[:2] == [0.0, 0.5]
    assert np.isnan(tr.share(2.0, 2.0, 2.0))
    assert tr.margin([-0.5, -2.0], ["A", "B"], "B", "A") == -1.5
    assert tr.default_sender_layers(30, 18, [0, 17, 9]) == [0, 29, 15]
    rows = []
    for pair, (fam_, none, msg, tra) in enumerate([("f1", 0.0, 2.0, 1.0), ("f2", 1.0, 3.0, 1.0)]):
        for arm, m in (("none", none), ("message", msg), ("transfer", tra)):
            rows.append({"pair": pair, "family": fam_, "layer_s": 3, "layer_r": 3, "arm": arm, "margin": m,
                         "margin_none": none, "margin_message": msg, "sender_margin": 1.0 - pair * 2})
    s = tr.summarize(pd.DataFrame(rows), n_boot=0, seed=0, ci=0.95)
    cur = {c["arm"]: c for c in s["curve"]}
    assert cur["transfer"]["share"] == pytest.approx(1.0 / 4.0)  # mean shift 0.5 / mean message effect 2
    assert cur["message"]["share"] == 1.0 and cur["none"]["share"] == 0.0
    assert s["message_effect"]["mean"] == 2.0 and s["sender_commits_share"] == 0.5 and s["n_pairs"] == 2
    # Figure 8's split: pair 0's sender was right (its answer B is the reference), pair 1's was wrong
    t = pd.DataFrame(rows).assign(peer_answer="B", reference=lambda d: np.where(d["pair"] == 0, "B", "A"))
    by = {(b["sender_right"], b["arm"]): b for b in tr.summarize(t, n_boot=0, seed=0, ci=0.95)["by_sender"]}
    assert by[(True, "transfer")]["shift"] == 1.0 and by[(False, "transfer")]["shift"] == 0.0
    assert by[(True, "message")]["shift"] == 2.0 and by[(False, "message")]["shift"] == 2.0
    assert all(b["n"] == 1 for b in by.values()) and len(by) == 4


def test_config_errors_name_the_field():
    from chorus.core.config import ConfigError
    from chorus.interventions.internals.config import load
    with pytest.raises(ConfigError, match="transfer.sender_layers"):
        load("internals_smoke", {"transfer.sender_layers": [1]})
    with pytest.raises(ConfigError, match="transfer"):
        load("internals_smoke", {"transfer.site": "middle"})
    assert load("internals_smoke").transfer.layers == [0, 10, 20, 29]


@pytest.fixture()
def source_run(tmp_path):
    """A finished debate run directory with round-0 turns written by hand (no generation)."""
    from conftest import hand_debate_run

    from chorus.simulate.debate.questions import Item
    qs = [("q-cap", "geo", "Which city is the capital of France?", ["Paris", "Rome"]),
          ("q-num", "math", "Which number is even?", ["7", "12"])]
    return hand_debate_run(tmp_path, [Item(id=i, domain="knowledge", subdomain="test", family=f, question=q, options=o,
                                           labels=["A", "B"], reference="A") for i, f, q, o in qs])


@pytest.mark.slow
def test_embedded_transfer_run(hf_engine, source_run, tmp_path):
    """SmolLM2 into itself on 2 pairs at layers 0 and 29 (plumbing: a 135M model's numbers are not findings)."""
    from chorus.interventions.internals.config import load
    from chorus.interventions.internals.experiment import report, run_internals
    from chorus.serving.store import CallStore
    cfg = load("internals_smoke", {"source_run": str(source_run), "transfer.layers": [0, 29], "analysis.n_boot": 50})
    hf_engine.store = CallStore(tmp_path / "calls.sqlite")
    try:
        run, s = run_internals(cfg, "transfer", tmp_path / "tr", engine=hf_engine)
        t = pd.read_parquet(run.path / "tables" / "transfer.parquet")
        assert s["n_pairs"] == 2 and len(t) == 2 * 2 * 5 and set(t["arm"]) == set(tr.ARMS)
        assert {(c["arm"], c["layer_r"]) for c in s["curve"]} == {(a, L) for a in tr.ARMS for L in (0, 29)}
        last = t[(t["layer_r"] == 29)].set_index(["pair", "arm"])["margin"]
        for p in (0, 1):  # last layer at the readout: the receiver reads the sender's own margin
            assert last[(p, "transfer")] == pytest.approx(t[t["pair"] == p]["sender_margin"].iloc[0], abs=1e-3)
            assert last[(p, "elsewhere")] == pytest.approx(last[(p, "none")], abs=1e-5)  # another batch row
        assert (run.path / "plots" / "transfer_share.png").is_file()
        assert json.loads((run.path / "summary.json").read_text())["write"] == "replacement"
        assert report(run.path)["curve"] == s["curve"]  # rebuilt from the run files alone
        before = hf_engine.model_calls
        run_internals(cfg, "transfer", tmp_path / "tr", engine=hf_engine)  # resumable: from the store
        assert hf_engine.model_calls == before
    finally:
        hf_engine.store.close()
        hf_engine.store = None


def test_scrambled_control_carries_no_direction_toward_the_sender(tiny):
    """Issue 19: no effect from the scrambled control. Over 48 seeded random sender contexts into one
    receiver at the last layer, the transfer moves the margin toward each sender's own answer (by
    construction: the receiver reads the sender's state), while the scrambled state moves it toward
    the sender's answer no more than toward the other option: its mean shift is within 3 standard
    errors of zero, the transfer's more than 3 above it."""
    eng = tiny("llama")
    last = tr.model_info(eng)["n_layers"] - 1
    rng = np.random.default_rng(0)
    rcv = [int(x) for x in rng.integers(100, 5000, 24)]
    shifts = {"transfer": [], "scrambled": []}
    for i in range(48):
        snd = [int(x) for x in rng.integers(100, 5000, 24)]
        r = tr.transfer(eng, eng, snd, rcv, layer_s=last, layer_r=last, site="readout", options=OPTS, seed=(i,))
        to, away = (0, 1) if r["sender"][0] >= r["sender"][1] else (1, 0)  # the sender's answer
        m = lambda lp: float(lp[to] - lp[away])  # noqa: E731
        for arm in shifts:
            shifts[arm].append(m(r[arm]) - m(r["none"]))
    t, s = np.array(shifts["transfer"]), np.array(shifts["scrambled"])
    se = lambda x: x.std(ddof=1) / np.sqrt(len(x))  # noqa: E731
    assert t.mean() > 3 * se(t), (t.mean(), se(t))
    assert abs(s.mean()) <= 3 * se(s), (s.mean(), se(s))
