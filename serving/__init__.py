"""serving: one engine interface over vLLM (GPU and CPU), transformers and vLLM's OpenAI-compatible
servers (``chorus serve``; docs/openai.md says what a server must offer); model profiles; the SQLite
call store.

    from chorus.serving import ModelSpec, build_engine
    eng = build_engine(ModelSpec(backend="auto"), store="calls.sqlite")  # the default profile
    eng.chat([[{"role": "user", "content": "Hi"}]], temperature=0, max_tokens=32)
    eng.option_logprobs([[{"role": "user", "content": "A or B?"}]], ["A", "B"])
"""
from chorus.serving.engine import Engine, engine_pool, load_engine
from chorus.serving.profiles import DEFAULT_PROFILE, ModelError, Profile, all_profiles, get_profile
from chorus.serving.roles import build_engine, build_engines, close_engines
from chorus.serving.spec import Backend, Dtype, MaxTokens, ModelSpec, Sampling, Temperature, TopP, spec_of
from chorus.serving.store import CallStore, StoreError
from chorus.serving.structured import SchemaError
from chorus.serving.types import Completion, ContextLengthError, RequestError

__all__ = ["Engine", "engine_pool", "load_engine", "Completion", "CallStore", "StoreError", "ModelError", "RequestError",
           "ContextLengthError", "SchemaError", "Profile", "get_profile", "all_profiles", "DEFAULT_PROFILE",
           "build_engine", "build_engines", "close_engines", "Backend", "Dtype", "ModelSpec", "spec_of",
           "Sampling", "Temperature", "TopP", "MaxTokens"]
