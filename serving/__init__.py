"""serving: one engine interface over vLLM (GPU and CPU), transformers and OpenAI-compatible
servers; model profiles; the SQLite call store.

    from serving import load_engine
    eng = load_engine("smollm2-135m-instruct", backend="auto", store="calls.sqlite")
    eng.chat([[{"role": "user", "content": "Hi"}]], temperature=0, max_tokens=32)
    eng.option_logprobs([[{"role": "user", "content": "A or B?"}]], ["A", "B"])
"""
from serving.engine import Engine, engine_pool, load_engine
from serving.profiles import DEFAULT_PROFILE, ModelError, Profile, all_profiles, get_profile
from serving.store import CallStore, StoreError
from serving.structured import SchemaError
from serving.types import Completion, ContextLengthError, RequestError

__all__ = ["Engine", "engine_pool", "load_engine", "Completion", "CallStore", "StoreError", "ModelError", "RequestError",
           "ContextLengthError", "SchemaError", "Profile", "get_profile", "all_profiles", "DEFAULT_PROFILE"]
