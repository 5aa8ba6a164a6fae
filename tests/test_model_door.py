"""The model door crossed once: planning resolves each role into a ``Role`` that building opens
without looking anything up again; backend traits come from the classes behind one name table."""
from __future__ import annotations

import pytest

import chorus.serving.roles as roles
from chorus.serving.backends import BACKENDS, BackendTraits, backend_class, trait
from chorus.serving.spec import BACKEND_CHOICES, ModelSpec

EMBEDDED = "smollm2-135m-instruct"


def test_every_backend_name_is_one_class_with_its_traits():
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
