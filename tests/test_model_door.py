"""The model door crossed once: planning resolves each role into a ``Role`` that building opens
without looking anything up again; backend traits come from the classes behind one name table."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import chorus.serving.roles as roles
from chorus.serving.backends import BACKENDS, BackendTraits, backend_class, trait
from chorus.serving.spec import BACKEND_CHOICES, ModelSpec

EMBEDDED = "smollm2-135m-instruct"


ROOT = Path(__file__).resolve().parents[1]


def test_every_backend_name_is_one_class_with_its_traits():
    assert tuple(BACKENDS) == ("hf", "vllm", "openai")   # the order messages list them in; no grammar, no synthetic
    assert BACKEND_CHOICES == ("auto", *BACKENDS)
    for name in BACKENDS:
        cls = backend_class(name)
        assert issubclass(cls, BackendTraits) and cls.name == name
    assert trait("vllm", "device_share") and trait("vllm", "tensor_parallel") and not trait("hf", "device_share")
    assert not trait("openai", "local_weights") and trait("hf", "exposes_model")


def test_a_planned_role_is_opened_without_resolving_it_again(monkeypatch):
    spec = ModelSpec(profile=EMBEDDED, backend="hf", dtype="float32", options={"batch_size": 4})
    plan = roles.plan_roles({"model": spec}, device_gib=None)
    r = plan.roles["model"]
    assert (r.name, r.profile.name, r.backend, r.dtype, r.spec) == ("model", EMBEDDED, "hf", "float32", spec)
    assert r.size_gib > 0 and "roles" not in plan.to_dict()
    opened = []
    for name in ("get_profile", "resolve_backend"):
        monkeypatch.setattr(roles, name, lambda *a, **k: pytest.fail("looked up again"))
    monkeypatch.setattr(roles, "open_engine", lambda prof, backend, **kw: opened.append((prof, backend, kw)) or "engine")
    assert roles.build_engine(spec, store=None, plan=plan) == "engine"
    assert roles.build_engines({"a": spec, "b": spec}, plan=plan) == {"a": "engine", "b": "engine"}
    prof, backend, kw = opened[0]
    assert prof is r.profile and backend == "hf" and kw == {"store": None, "dtype": "float32", "max_model_len": None,
                                                           "batch_size": 4}
    assert len(opened) == 2   # a and b are one engine


def test_an_unplanned_role_still_names_itself_in_a_load_error():
    with pytest.raises(Exception, match="^judge: "):
        roles.build_engine({"profile": "no-such-profile-xyz", "backend": "hf"}, role="judge")


# a backend that is its module alone: it declares itself, and no other file names it
SCRATCH_BACKEND = """
from chorus.serving.backends import BackendTraits
from chorus.serving.backends.synthetic import CharTokenizer

BACKEND = "EchoBackend", 9  # this module is backend "echo", listed after the shipped ones


class EchoBackend(BackendTraits):
    name = "echo"
    max_model_len = 4096

    def __init__(self, path, dtype="float32", max_model_len=None, shout=False):
        self.tokenizer, self.shout = CharTokenizer(), shout

    def generate(self, prompts, samplings):
        text = "echo" + "!" * self.shout
        yield [(j, {"text": text, "prompt_tokens": len(ids), "completion_tokens": 4, "finish_reason": "stop",
                    "latency_s": 0.0}) for j, ids in enumerate(prompts)]

    def settings(self):
        return {"echo": True, "shout": self.shout}

    def close(self):
        pass
"""

SCRATCH_CHECK = """
import sys
from chorus.serving import ModelSpec, build_engine, load_engine
from chorus.serving.backends import BACKENDS
from chorus.serving.engine import resolve_backend
from chorus.serving.spec import BACKEND_CHOICES
assert "torch" not in sys.modules and "chorus.serving.backends.echo" not in sys.modules   # found, not imported
assert tuple(BACKENDS) == ("hf", "vllm", "openai", "echo") and BACKEND_CHOICES[-1] == "echo", BACKENDS
assert resolve_backend("echo") == "echo"
folder = sys.argv[1]
eng = load_engine(folder, "echo", shout=True)
assert eng.chat([[{"role": "user", "content": "hi"}]], temperature=0, max_tokens=8)[0].text == "echo!"
assert eng.provenance()["engine"] == {"echo": True, "shout": True}
eng = build_engine(ModelSpec(profile=folder, backend="echo", dtype="float32"), store=None)
assert eng.chat([[{"role": "user", "content": "hi"}]], temperature=0, max_tokens=8)[0].text == "echo"
try:
    ModelSpec(profile=folder, backend="echo", options={"whisper": 1}).model_dump()
    load_engine(folder, "echo", whisper=1)
except Exception as err:
    assert "whisper" in str(err) and "shout" in str(err), err
else:
    raise AssertionError("an option the backend does not take was accepted")
print("ok")
"""


def test_a_new_backend_is_its_module_alone(tmp_path):
    """A copy of the parts a backend needs (core/, serving/ and the import root), one module added to
    serving/backends/ and nothing else edited: the name table, ``resolve_backend``, ``ModelSpec``'s
    validation, ``load_engine`` and ``build_engine`` all take it."""
    tree = tmp_path / "tree"
    skip = shutil.ignore_patterns("__pycache__")
    for part in ("core", "serving"):
        shutil.copytree(ROOT / part, tree / part, ignore=skip)
    (tree / "chorus").mkdir()
    for rel in ("setup.py", "chorus/__init__.py"):
        shutil.copy2(ROOT / rel, tree / rel)
    (tree / "serving" / "backends" / "echo.py").write_text(SCRATCH_BACKEND)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")   # an empty safetensors file
    env = {**os.environ, "PYTHONPATH": str(tree), "CHORUS_BACKEND": ""}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRATCH_CHECK), str(folder)], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
