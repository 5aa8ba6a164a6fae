"""Hub ids ORG/NAME[@REVISION] resolve from the local Hugging Face cache, offline: a cache of the
real layout (blobs, snapshots, refs) filled with the embedded model's files stands in for downloads."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import EMBEDDED, HAVE_VLLM, ROOT, build_hub_cache

from chorus.serving.profiles import ModelError, get_profile, hub_cache, hub_name

ID = "chorus-test/SmolLM2-135M-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_ENV = "CHORUS_MODEL_LLAMA_3_1_8B_INSTRUCT"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"   # the embedded default's upstream id
MAIN, OLD = "a" * 40, "b" * 40   # commits: main, and an older one tagged v1


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """(cache, src, {repo: {commit: snapshot}}): one cache under HF_HOME/hub for the module."""
    src = get_profile(EMBEDDED).require()
    home = tmp_path_factory.mktemp("hf_home")
    cache = home / "hub"
    snaps = {ID: build_hub_cache(cache, ID, {MAIN: ["main"], OLD: ["v1"]}, src),
             LLAMA: build_hub_cache(cache, LLAMA, {MAIN: ["main"]}, src),
             SMOL: build_hub_cache(cache, SMOL, {MAIN: ["main"]}, src)}
    return cache, src, snaps


@pytest.fixture(autouse=True)
def env(hub, monkeypatch, tmp_path):
    """HF_HUB_CACHE at the test cache (set after huggingface_hub was imported: chorus reads it per
    call), no user models.yaml and no path variable for the llama profile."""
    monkeypatch.setenv("HF_HUB_CACHE", str(hub[0]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CHORUS_MODELS_FILE", str(tmp_path / "none.yaml"))
    monkeypatch.delenv(LLAMA_ENV, raising=False)


def test_a_hub_id_resolves_to_its_cache_snapshot(hub):
    cache, _src, snaps = hub
    p = get_profile(ID)
    assert p.path == snaps[ID][MAIN] and p.status() == (True, "ready")
    assert (p.family, p.hf_id, p.hub_ref, p.source) == ("other", ID, ID, f"hub id {ID}")
    # the name is one path component and its env var a plain identifier
    assert p.name == "chorus-test--SmolLM2-135M-Instruct" and "/" not in p.name
    assert p.env_var.replace("_", "").isalnum()
    assert p.require() == snaps[ID][MAIN]


def test_a_revision_is_a_commit_or_a_ref_in_the_cache(hub):
    snaps = hub[2][ID]
    assert get_profile(f"{ID}@{OLD}").path == snaps[OLD]
    assert get_profile(f"{ID}@v1").path == snaps[OLD]
    assert get_profile(f"{ID}@main").path == snaps[MAIN]
    assert get_profile(f"{ID}@v1").name == "chorus-test--SmolLM2-135M-Instruct@v1"
    assert "/" not in hub_name("org/name", "refs/pr/1")


def test_the_cache_follows_the_environment_of_each_call(hub, monkeypatch, tmp_path):
    cache = hub[0]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(ModelError, match="elsewhere"):
        get_profile(ID)
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(cache.parent))   # HF_HOME/hub, as huggingface_hub's constants have it
    assert hub_cache() == cache and get_profile(ID).path == hub[2][ID][MAIN]


def test_a_paper_profile_finds_its_weights_by_hf_id_with_no_variable(hub):
    snap = hub[2][LLAMA][MAIN]
    p = get_profile("llama-3.1-8b-instruct")
    assert p.path == snap and p.status() == (True, "ready") and p.source == "HF cache"
    q = get_profile(LLAMA)   # asked for by hub id: the built-in profile, its weights in the cache
    assert (q.name, q.family, q.license, q.path) == ("llama-3.1-8b-instruct", "llama", p.license, snap)


def test_an_embedded_profiles_upstream_id_is_its_own_profile_of_that_family(hub):
    p = get_profile(SMOL)   # the hub's weights, not the embedded GGUF conversion: not that profile's name
    assert (p.name, p.family, p.license, p.package, p.path) == (
        "HuggingFaceTB--SmolLM2-135M-Instruct", "llama", "Apache-2.0", None, hub[2][SMOL][MAIN])


def test_a_path_variable_or_models_yaml_still_wins(hub, monkeypatch, tmp_path):
    _cache, src, snaps = hub
    monkeypatch.setenv(LLAMA_ENV, str(src))
    p = get_profile("llama-3.1-8b-instruct")
    assert p.path == src and p.source == LLAMA_ENV
    assert get_profile(LLAMA).path == snaps[LLAMA][MAIN]   # a hub id names those weights: pinned
    monkeypatch.delenv(LLAMA_ENV)
    (tmp_path / "none.yaml").write_text(f"llama-3.1-8b-instruct: {src}\n")
    assert get_profile("llama-3.1-8b-instruct").path == src


def test_a_profile_name_then_a_local_folder_come_before_a_hub_id(hub, monkeypatch, tmp_path):
    _cache, src, _snaps = hub
    folder = tmp_path / ID
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((src / "config.json").read_text())
    monkeypatch.chdir(tmp_path)
    p = get_profile(ID)
    assert p.path == folder.resolve() and p.hub_ref is None
    (tmp_path / "none.yaml").write_text(json.dumps({ID: str(src)}))
    assert get_profile(ID).path == src


def test_a_missing_model_or_revision_is_one_line_naming_the_id_the_cache_and_the_download(hub):
    cache = str(hub[0])
    with pytest.raises(ModelError) as err:
        get_profile("nobody/nothing")
    msg = str(err.value)
    assert "\n" not in msg and "nobody/nothing" in msg and cache in msg and "hf download nobody/nothing" in msg
    for rev in ("v9", "c" * 40):
        with pytest.raises(ModelError) as err:
            get_profile(f"{ID}@{rev}")
        msg = str(err.value)
        assert "\n" not in msg and cache in msg and f"hf download {ID} --revision {rev}" in msg
        assert "which holds main, v1" in msg
    with pytest.raises(ModelError, match="hf download Qwen/Qwen3.5-9B"):
        get_profile("qwen3.5-9b").require()


def test_models_list_shows_the_cache_as_where_a_paper_model_loads_from(hub, tmp_path):
    env = {**os.environ, "COLUMNS": "400", "HF_HUB_CACHE": str(hub[0]), "CHORUS_MODELS_FILE": str(tmp_path / "none.yaml")}
    env.pop(LLAMA_ENV, None)
    r = subprocess.run([sys.executable, "-m", "chorus.cli", "models", "list"], cwd=ROOT, capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("llama-3.1-8b-instruct"))
    assert "yes" in row and "HF cache" in row and str(hub[2][LLAMA][MAIN]) in row
    assert "hf download Qwen/Qwen3.5-9B" in r.stdout and str(hub[0]) in r.stdout


def _check_loaded(eng, hub) -> None:
    from chorus.serving.prepare import weights_hash

    out = eng.chat([[{"role": "user", "content": "hi"}]], temperature=0, max_tokens=4)[0]
    assert out.text and out.completion_tokens <= 4
    prov = eng.provenance()
    snap = hub[2][ID][MAIN]
    assert (prov["hub_id"], prov["revision"], prov["path"]) == (ID, MAIN, str(snap))
    assert prov["weights_sha256"] == weights_hash(hub[1])       # the same files as the embedded folder
    assert sorted(os.listdir(snap)) == sorted(f for f in os.listdir(hub[1]) if not f.startswith("."))  # nothing added


@pytest.mark.slow
def test_the_hf_backend_loads_and_generates_from_a_hub_id(hub):
    from chorus.serving import load_engine

    eng = load_engine(ID, "hf", dtype="float32")
    try:
        _check_loaded(eng, hub)
    finally:
        eng.close()


@pytest.mark.slow
def test_chorus_generate_takes_a_hub_id(hub, tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(hub[0]), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "chorus.cli", "generate", "hi", "-m", f"{ID}@v1", "--backend", "hf",
                        "--max-tokens", "4", "--json"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["text"]


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")
def test_the_vllm_backend_loads_and_generates_from_a_hub_id(hub):
    from chorus.serving import load_engine

    eng = load_engine(ID, "vllm", dtype="float32", enforce_eager=True)
    try:
        _check_loaded(eng, hub)
    finally:
        eng.close()
