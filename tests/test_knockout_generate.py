"""Knockout through generation (interventions/knockout_generate.py): decoding with the KV cache
equals step-by-step recomputation without it under the same knockout, on every family and both routes;
no knockout is the plain greedy reply; a message cut in every layer stops mattering to the reply."""
import pytest

from chorus.interventions import families as fam
from chorus.interventions import knockout as ko
from chorus.interventions.knockout_generate import greedy

from test_knockout import PEER, conversation


def _conv(peer=PEER):
    return conversation(peer=peer)[:-1]  # a reply, not a readout prefill


def _target(c):
    body = c[2]["content"]
    s = body.index('"""\n') + 4
    return (2, s, body.index('\n"""', s))  # the peer's text inside its quoted block


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3", "qwen3_5"])
@pytest.mark.parametrize("queries", ["after", "decision"])
def test_cached_greedy_equals_recomputation_under_knockout(tiny, family, queries):
    eng = tiny(family)
    c = _conv()
    for route in ko.ROUTES:
        kw = dict(layers="all", queries=queries, max_new_tokens=8, route=route)
        with_cache = greedy(eng, c, _target(c), use_cache=True if family != "gemma3" else "auto", **kw)
        without = greedy(eng, c, _target(c), use_cache=False, **kw)
        assert with_cache.ids == without.ids and len(without.ids) > 0
        assert with_cache.logprobs == pytest.approx(without.logprobs, abs=1e-4)


def test_cache_forced_on_a_sliding_window_model_is_one_line(tiny):
    """Gemma-3's sliding layers cache only the window's keys: a knockout with use_cache=True is refused
    (it was a bare shape error); the plain reply with the cache, and "auto", still work."""
    from chorus.core.config import InputError
    eng = tiny("gemma3")
    c = _conv()
    with pytest.raises(InputError, match=r"use_cache=True with a knockout on gemma3.*use_cache='auto'"):
        greedy(eng, c, _target(c), use_cache=True, max_new_tokens=4)
    assert greedy(eng, c, None, use_cache=True, max_new_tokens=4).ids == greedy(eng, c, None, use_cache=False,
                                                                                max_new_tokens=4).ids
    assert not greedy(eng, c, _target(c), max_new_tokens=4).cached


def test_knockout_changes_the_reply_and_none_is_plain(tiny):
    eng = tiny("llama")
    c = _conv()
    plain = greedy(eng, c, None, max_new_tokens=8)
    assert greedy(eng, c, _target(c), layers=[], max_new_tokens=8).ids == plain.ids  # no layer: plain
    cut = greedy(eng, c, _target(c), layers="all", max_new_tokens=8)
    assert cut.logprobs != plain.logprobs
    # cut in every layer from every later position, the message's own tokens no longer matter
    other = _conv(peer=PEER.replace("Rome", "Oslo").replace("Paris", "Berne"))
    assert len(eng.render(other).ids) == len(eng.render(c).ids)
    assert greedy(eng, other, _target(other), layers="all", max_new_tokens=8).ids == cut.ids


def test_bad_input_is_one_line(tiny):
    eng = tiny("qwen3_5")
    c = _conv()
    with pytest.raises(fam.LayerError, match="recurrent"):
        greedy(eng, c, _target(c), layers=[0, 1], max_new_tokens=2)
    with pytest.raises(ValueError, match="queries"):
        greedy(eng, c, _target(c), queries="all", max_new_tokens=2)
    with pytest.raises(ko.LayerError):
        greedy(tiny("llama"), c, _target(c), layers=[99], max_new_tokens=2)


def test_embedded_model_reply_under_knockout(hf_engine):
    """The embedded model: the cached knockout reply equals its recomputation; the plain greedy reply is
    the engine's own temperature-0 reply."""
    c = _conv()
    plain = greedy(hf_engine, c, None, max_new_tokens=12)
    ref = hf_engine.chat([c], temperature=0.0, max_tokens=12)[0]
    assert plain.text.strip() == ref.text.strip()
    a = greedy(hf_engine, c, _target(c), max_new_tokens=12)
    b = greedy(hf_engine, c, _target(c), max_new_tokens=12, use_cache=False)
    assert a.ids == b.ids


def test_sampled_plain_reply_is_the_engines_reply(hf_engine):
    """Above temperature 0 the loop samples with the backend's own seeded processors: with no knockout it
    writes the engine's ``chat`` reply for the same seed (what a counterfactual replay's factual side needs)."""
    c = _conv()
    for seed in (1, 2):
        mine = greedy(hf_engine, c, None, max_new_tokens=16, temperature=0.7, seed=seed)
        ref = hf_engine.chat([c], temperature=0.7, max_tokens=16, seed=seed)[0]
        assert mine.text == ref.text
