"""Bad input gets a clear error naming the problem."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import chats

from chorus.serving import ContextLengthError, ModelError, RequestError, SchemaError, load_engine
from chorus.serving.profiles import get_profile


def test_unknown_profile():
    with pytest.raises(ModelError, match="unknown model profile 'no-such-model'.*smollm2-135m-instruct"):
        load_engine("no-such-model", "hf")


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        load_engine("smollm2-135m-instruct", "tpu")


def test_paper_model_without_path_names_the_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("CHORUS_MODELS_FILE", str(tmp_path / "models.yaml"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))   # not this machine's cache, which may hold it
    monkeypatch.delenv("CHORUS_MODEL_LLAMA_3_1_8B_INSTRUCT", raising=False)
    with pytest.raises(ModelError, match="CHORUS_MODEL_LLAMA_3_1_8B_INSTRUCT"):
        load_engine("llama-3.1-8b-instruct", "hf")


def test_missing_and_incomplete_model_folders(monkeypatch, tmp_path):
    monkeypatch.setenv("CHORUS_MODEL_QWEN3_5_9B", str(tmp_path / "nowhere"))
    with pytest.raises(ModelError, match="model folder missing"):
        load_engine("qwen3.5-9b", "hf")
    src = get_profile("smollm2-135m-instruct").path
    part = tmp_path / "partial"
    part.mkdir()
    shutil.copy(src / "config.json", part / "config.json")
    monkeypatch.setenv("CHORUS_MODEL_QWEN3_5_9B", str(part))
    with pytest.raises(ModelError, match=r"incomplete.*tokenizer\.json.*weights"):
        load_engine("qwen3.5-9b", "hf")
    # a sharded model with a shard missing
    (part / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "model-00002.safetensors"}}))
    (part / "model-00001.safetensors").write_bytes(b"x")
    shutil.copy(src / "tokenizer.json", part / "tokenizer.json")
    with pytest.raises(ModelError, match="model-00002.safetensors"):
        load_engine("qwen3.5-9b", "hf")


def test_models_yaml_paths_are_used(monkeypatch, tmp_path):
    f = tmp_path / "models.yaml"
    f.write_text(f"gemma-4-e4b-it: {tmp_path / 'g4'}\nmy-model: {{path: {tmp_path / 'mine'}, family: llama}}\n")
    monkeypatch.setenv("CHORUS_MODELS_FILE", str(f))
    assert get_profile("gemma-4-e4b-it").path == tmp_path / "g4"
    assert get_profile("my-model").family == "llama"
    f.write_text("gemma-4-e4b-it: [1, 2]\n")
    with pytest.raises(ModelError, match="needs a path"):
        get_profile("gemma-4-e4b-it")


@pytest.mark.parametrize("kw, match", [
    ({"temperature": -1}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 2.5}, "max_tokens"), ({"seed": -3}, "seed"), ({"seed": [1, 2]}, "seed list has 2 entries"),
    ({"stop": [""]}, "stop"), ({"choices": []}, "choices"),
    ({"choices": ["a"], "json_schema": {"type": "string"}}, "either json_schema or choices"),
])
def test_invalid_sampling_parameters(hf_engine, kw, match):
    with pytest.raises(RequestError, match=match):
        hf_engine.chat(chats(1), **kw)


@pytest.mark.parametrize("conv, match", [
    ("hello", "list of chat message lists"), ([[]], "non-empty list"),
    ([[{"role": "user"}]], "message 0"), ([[{"role": "robot", "content": "x"}]], "unknown role"),
])
def test_invalid_conversations(hf_engine, conv, match):
    with pytest.raises(RequestError, match=match):
        hf_engine.chat(conv)


@pytest.mark.parametrize("schema, match", [
    ({"type": "integer", "minimum": 5, "maximum": 3}, "unsatisfiable.*minimum=5 > maximum=3"),
    ({"enum": []}, "invalid JSON schema|empty enum"),
    ({"type": "object", "properties": {"x": False}, "required": ["x"]}, "unsatisfiable"),
    ({"type": "not-a-type"}, "invalid JSON schema"),
    ([1, 2], "must be a JSON object"),
])
def test_bad_schemas(hf_engine, schema, match):
    with pytest.raises(SchemaError, match=match):
        hf_engine.chat(chats(1), json_schema=schema, max_tokens=8)


def test_prompt_longer_than_the_context_window(hf_engine):
    long = [[{"role": "user", "content": "word " * (hf_engine.max_model_len + 10)}]]
    with pytest.raises(ContextLengthError, match=r"conversation 0: prompt of \d+ tokens.*context window of 8192"):
        hf_engine.chat(long, max_tokens=8)
    with pytest.raises(ContextLengthError):
        hf_engine.option_logprobs(long, ["A"])
    near = [[{"role": "user", "content": "word " * (hf_engine.max_model_len - 200)}]]
    with pytest.raises(ContextLengthError, match="new tokens exceeds"):
        hf_engine.chat(near, max_tokens=1000)


@pytest.mark.parametrize("options, match", [([], "non-empty"), ("AB", "non-empty list"), (["A", "A"], "duplicates"),
                                            (["A", ""], "non-empty")])
def test_bad_options(hf_engine, options, match):
    with pytest.raises(RequestError, match=match):
        hf_engine.option_logprobs(chats(1), options)
