"""engine_pool: one loaded model shared by several engines (each with its own store)."""
from __future__ import annotations

import pytest

from chorus.serving import engine_pool, load_engine

pytestmark = pytest.mark.slow


def test_pool_shares_the_backend_and_keeps_stores_apart(tmp_path):
    conv = [[{"role": "user", "content": "Say hi."}]]
    with engine_pool() as pool:
        a = load_engine("smollm2-135m-instruct", "hf", store=tmp_path / "a.sqlite")
        b = load_engine("smollm2-135m-instruct", "hf", store=tmp_path / "b.sqlite")
        assert a.backend is b.backend and len(pool) == 1
        ta = a.chat(conv, temperature=0.0, max_tokens=8)[0]
        a.close()  # a pooled backend survives its engine
        tb = b.chat(conv, temperature=0.0, max_tokens=8)[0]
        assert ta.text == tb.text and not tb.cached  # b's store is its own
        c = load_engine("smollm2-135m-instruct", "hf", store=tmp_path / "b.sqlite", batch_size=4)
        assert c.backend is not b.backend  # other options: another load
        b.close()
        c.close()
    outside = load_engine("smollm2-135m-instruct", "hf")
    assert outside.backend is not a.backend
    outside.close()
