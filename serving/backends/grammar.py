"""Compiled grammars (xgrammar) for constrained decoding outside vLLM; cached per schema."""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from chorus.serving.structured import SchemaError


class GrammarCache:
    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]):
        import xgrammar as xgr

        self._xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
        self._compiler = xgr.GrammarCompiler(info)
        self._compile = lru_cache(maxsize=256)(self._compile_uncached)

    def _compile_uncached(self, kind: str, spec: str):
        try:
            if kind == "json":
                return self._compiler.compile_json_schema(spec, any_whitespace=False)
            return self._compiler.compile_grammar(spec)
        except Exception as err:  # xgrammar raises RuntimeError/ValueError on bad or empty grammars
            raise SchemaError(f"cannot compile the output constraint ({kind}): {err}") from None

    def for_schema(self, schema: dict):
        return self._compile("json", json.dumps(schema, sort_keys=True))

    def for_choices(self, choices: tuple[str, ...]):
        # EBNF string literals take JSON-style escapes
        rule = " | ".join(json.dumps(c) for c in choices)
        return self._compile("ebnf", f"root ::= {rule}")

    def processor(self, compiled_list: list):
        from xgrammar.contrib.hf import LogitsProcessor

        return LogitsProcessor(compiled_list)
