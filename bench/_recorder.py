"""Shared by the benchmarks: an engine wrapper that records every chat batch, so the same
batches can be replayed straight to the raw engine (the ">= 0.8x raw engine" checks)."""
from __future__ import annotations


class Recorder:
    """Wraps an engine; records every chat batch (conversations + sampling kwargs, progress dropped)."""

    def __init__(self, eng):
        self.eng, self.calls = eng, []

    def __getattr__(self, k):
        return getattr(self.eng, k)

    def chat(self, convs, **kw):
        self.calls.append((list(convs), {k: v for k, v in kw.items() if k != "progress"}))
        return self.eng.chat(convs, **kw)
