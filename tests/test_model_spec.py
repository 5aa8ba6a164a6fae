"""One door for models: the typed role spec (chorus.serving.spec), the one engine-building place
(chorus.serving.roles), every shipped config through it, and the old config shape's translation."""
from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest

from chorus.core.config import ConfigError
from chorus.serving import DEFAULT_PROFILE, ModelSpec, build_engines, close_engines, spec_of
from chorus.serving.spec import BACKEND_CHOICES, DTYPE_CHOICES, fold_legacy

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "serving", "aggregate", "simulate", "interventions", "chorus")
BUILDERS = {"serving/engine.py", "serving/roles.py"}  # the definition and the one caller


def test_spec_shorthand_defaults_and_kwargs():
    assert ModelSpec.model_validate("gemma3-270m").profile == "gemma3-270m"
    s = ModelSpec()
    assert s.profile == DEFAULT_PROFILE and s.backend == "auto" and s.load_kwargs() == {}
    s = ModelSpec(profile="x", backend="vllm", dtype="bfloat16", tensor_parallel_size=2, options={"enforce_eager": True})
    assert s.load_kwargs() == {"enforce_eager": True, "dtype": "bfloat16", "tensor_parallel_size": 2}
    assert ModelSpec(backend="openai", endpoints=["http://h:1/v1"]).load_kwargs() == {"endpoints": ["http://h:1/v1"]}
    assert BACKEND_CHOICES == ("auto", "hf", "vllm", "openai") and DTYPE_CHOICES == ("float32", "bfloat16", "float16")


@pytest.mark.parametrize("bad, says", [
    ({"backend": "hf", "tensor_parallel_size": 2}, "tensor_parallel_size = 2 is a vLLM setting"),
    ({"backend": "vllm", "endpoints": ["http://h/v1"]}, "need backend: openai"),
    ({"tensor_parallel_size": 2, "backend": "vllm", "options": {"tensor_parallel_size": 2}}, "given twice"),
    ({"backend": "tpu"}, "backend = 'tpu'"),
    ({"dtype": "int4"}, "dtype = 'int4'"),
    ({"profil": "x"}, "profil"),
])
def test_bad_spec_is_one_error_naming_role_and_field(bad, says):
    with pytest.raises(ConfigError, match="role 'judge'") as err:
        spec_of(bad, "judge")
    assert says in str(err.value)


def test_old_place_of_endpoints_moves_with_a_warning():
    with pytest.warns(FutureWarning, match="options.endpoints is the old place"):
        s = ModelSpec.model_validate({"backend": "openai", "options": {"endpoints": ["http://h/v1"], "max_retries": 1}})
    assert s.endpoints == ["http://h/v1"] and s.options == {"max_retries": 1}


def test_spec_of_fills_only_unset_fields():
    s = spec_of(ModelSpec(profile="p", dtype="float32"), backend="hf", dtype="bfloat16")
    assert (s.profile, s.backend, s.dtype) == ("p", "hf", "float32")
    assert spec_of("p", backend="vllm").backend == "vllm"
    assert spec_of({"profile": "p", "backend": "hf"}, backend="vllm").backend == "hf"


def test_old_shape_folds_into_the_spec_with_one_warning():
    with pytest.warns(FutureWarning, match=r"llm\.backend is the old shape; write llm\.model\.backend"):
        out = fold_legacy({"model": "m", "backend": "hf", "generator": {}}, ("backend", "dtype"), "model", "llm")
    assert out == {"model": {"profile": "m", "backend": "hf"}, "generator": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fold_legacy({"model": {"profile": "m"}}, ("backend",), "model", "llm") == {"model": {"profile": "m"}}


def test_belief_old_keys_still_load():
    from chorus.simulate.belief.config import load_belief_config
    with pytest.warns(FutureWarning, match="llm.dtype"):
        cfg = load_belief_config("smoke_llm", {"llm.dtype": "float32"})
    assert (cfg.llm.model.profile, cfg.llm.model.backend, cfg.llm.model.dtype) == (DEFAULT_PROFILE, "hf", "float32")


def _shipped() -> list[tuple[str, Path]]:
    out = []
    S = ROOT / "simulate"   # each part's configs in its own folder (role-play and SFT: one subfolder each)
    for part, d in [("belief", S / "belief" / "configs"), ("council", S / "council" / "configs"),
                    ("debate", S / "debate" / "configs"), ("roleplay", S / "roleplay" / "configs" / "roleplay"),
                    ("sft", S / "roleplay" / "configs" / "sft")]:
        out += [(part, p) for p in sorted(d.glob("*.yaml"))]
    out += [("internals" if p.stem.startswith("internals") else "influence", p)
            for p in sorted((ROOT / "interventions" / "configs").glob("*.yaml"))]
    return out


def _load(part: str, path: Path):
    if part == "belief":
        from chorus.simulate.belief.config import load_belief_config
        from chorus.simulate.belief.config import load_multi_config
        return (load_multi_config if path.stem.startswith("multi_") else load_belief_config)(path)
    if part == "council":
        from chorus.simulate.council.config import load
        return load(path)
    if part == "debate":
        from chorus.simulate.debate.config import DebateConfig, load
        return load(path, DebateConfig)
    if part in ("roleplay", "sft"):
        from chorus.simulate.roleplay.config import RoleplayConfig, SftConfig, load
        return load(path, RoleplayConfig if part == "roleplay" else SftConfig, part=part)
    if part == "influence":
        from chorus.interventions.config import load
        return load(path)
    from chorus.interventions.internals.config import load
    return load(path)


def _model_roles(cfg) -> dict[str, ModelSpec]:
    """Every role a loaded config names, as the spec it hands the engine builder."""
    if hasattr(cfg, "roles"):
        return cfg.roles()
    if hasattr(cfg, "llm"):
        return {"model": cfg.llm.model}
    if hasattr(cfg, "models"):  # role-play
        return {**{m.label: m for m in cfg.models}, "classifier": cfg.classifier}
    if hasattr(cfg, "base"):  # SFT
        return {"base": cfg.base, "classifier": cfg.classifier}
    return {"model": cfg.model}


@pytest.mark.parametrize("part, path", _shipped(), ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_every_shipped_config_loads_into_model_specs(part, path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # shipped configs are migrated: no old shape
        cfg = _load(part, path)
    roles = _model_roles(cfg)
    assert roles and all(isinstance(s, ModelSpec) for s in roles.values()), (path, roles)


def test_no_load_engine_call_outside_the_builder():
    """Engines are built in serving/roles.py only; a part calling load_engine itself would pass
    its own subset of options, dtype and store again."""
    bad = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel in BUILDERS:
                continue
            for node in ast.walk(ast.parse(f.read_text(), rel)):
                if isinstance(node, ast.Call):
                    fn = node.func
                    name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
                    if name == "load_engine":
                        bad.append(f"{rel}:{node.lineno}")
    assert not bad, f"load_engine called outside serving/roles.py: {bad}"


def test_council_roles_name_every_model():
    from chorus.simulate.council.config import CouncilConfig
    cfg = CouncilConfig.model_validate({"models": {"backend": "hf", "dtype": "float32"},
                                        "judge": {"profile": "gemma3-270m", "backend": "vllm"}})
    r = cfg.roles()
    assert list(r) == ["A1", "A2", "A3", "synthesizer", "self_moa", "argllms_generator", "judge"]
    assert (r["A2"].profile, r["A2"].backend, r["A2"].dtype) == ("gemma3-270m", "hf", "float32")
    assert (r["judge"].profile, r["judge"].backend) == ("gemma3-270m", "vllm")
    assert cfg.profiles() == [DEFAULT_PROFILE, "gemma3-270m"]


@pytest.mark.slow
def test_roles_with_one_spec_share_one_real_engine(tmp_path):
    """Two roles with the same spec are one engine (one load, one device share); a third with
    another profile is its own. Real embedded models on transformers."""
    spec = {"profile": DEFAULT_PROFILE, "backend": "hf", "dtype": "float32"}
    engines = build_engines({"A1": spec, "judge": ModelSpec(**spec), "A2": {**spec, "profile": "gemma3-270m"}},
                            store=tmp_path / "calls.sqlite")
    try:
        assert engines["A1"] is engines["judge"] and engines["A2"] is not engines["A1"]
        assert engines["A2"].identity["profile"] == "gemma3-270m"
        out = engines["judge"].chat([[{"role": "user", "content": "Say yes."}]], temperature=0.0, max_tokens=4)
        assert out[0].text.strip()
    finally:
        close_engines(engines.values())


def test_sampling_spec_is_each_part_generation_block():
    """One sampling spec: every part's generation block is a Sampling with its own defaults, and
    the bounds are the spec's (temperature at most 2, a council move at least 16 tokens)."""
    from pydantic import ValidationError

    from chorus.serving.spec import Sampling
    from chorus.simulate.belief.config import GeneratorCfg
    from chorus.simulate.council.config import Generation as CouncilGen
    from chorus.simulate.debate.config import Generation as DebateGen
    from chorus.simulate.roleplay.config import Generation as RoleplayGen
    for cls, tokens in ((DebateGen, 2048), (RoleplayGen, 64), (CouncilGen, 160), (GeneratorCfg, 60)):
        assert issubclass(cls, Sampling) and cls().max_tokens == tokens, cls
        assert cls().chat_kwargs() == {"temperature": cls().temperature, "top_p": 1.0, "max_tokens": tokens}
        with pytest.raises(ValidationError, match="less than or equal to 2"):
            cls(temperature=5.0)
    with pytest.raises(ValidationError, match="greater than or equal to 16"):
        CouncilGen(max_tokens=8)
    assert "greedy" in Sampling.model_fields["temperature"].description


def test_council_seat_judge_and_baselines_are_full_specs():
    """A seat, the judge and the baselines' roles are ModelSpecs: fields they set win, the rest
    come from the models block (options merged key by key)."""
    from chorus.simulate.council.config import CouncilConfig
    cfg = CouncilConfig.model_validate({
        "models": {"backend": "hf", "options": {"batch_size": 4}},
        "seats": [{"profile": "gemma3-270m", "persona": "skeptic", "dtype": "bfloat16"}, "smollm2-135m-instruct",
                  {"persona": "analyst"}],
        "baselines": {"methods": ["self_moa"], "synthesizer": {"profile": "gemma3-270m", "dtype": "bfloat16"},
                      "self_moa_profile": {"profile": "gemma3-270m", "dtype": "bfloat16"}},
        "judge": {"profile": "smollm2-135m-instruct", "backend": "vllm", "max_tokens": 8}})
    r = cfg.roles()
    assert (r["A1"].profile, r["A1"].dtype, r["A1"].backend, r["A1"].options) == ("gemma3-270m", "bfloat16", "hf",
                                                                                  {"batch_size": 4})
    assert cfg.seats[0].persona == "skeptic" and r["A2"].profile == DEFAULT_PROFILE and r["A3"].dtype is None
    assert (r["self_moa"].profile, r["self_moa"].backend) == ("gemma3-270m", "hf")  # unset = the block's
    assert (r["judge"].backend, cfg.judge.max_tokens) == ("vllm", 8)
    assert sorted(cfg.engines()) == sorted([DEFAULT_PROFILE, "gemma3-270m"])


@pytest.mark.parametrize("data, says", [
    ({"baselines": {"methods": ["moa_lite"], "argllms_generator": "gemma3-270m"}},
     "baselines.argllms_generator is set but no baseline of this run reads it"),
    ({"baselines": {"methods": [], "self_moa_profile": "gemma3-270m"}}, "baselines.self_moa_profile is set"),
    ({"seats": [{"profile": "gemma3-270m", "dtype": "bfloat16"}, {"profile": "gemma3-270m"}, "gemma3-270m"]},
     "roles 'A1' and 'A2' would hold one engine of 'gemma3-270m' with different settings (dtype 'bfloat16' vs None)"),
    ({"baselines": {"synthesizer": {"options": {"batch_size": 2}}}},
     "roles 'A1' and 'synthesizer' would hold one engine of 'smollm2-135m-instruct'"),
])
def test_council_role_errors_name_the_roles_and_fields(data, says):
    from chorus.core.config import ConfigError
    from chorus.simulate.council.config import CouncilConfig, load
    with pytest.raises(Exception, match=re.escape(says)):
        CouncilConfig.model_validate(data)
    with pytest.raises(ConfigError, match=re.escape(says)):   # through a config load: one line
        load("tiny", {k: v for k, v in _flat(data)})


def _flat(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict) and k in ("baselines",):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def test_roles_on_one_engine_must_agree_in_every_part():
    """plan_roles / build_engines: two roles held together on one engine with different settings
    are one ConfigError naming both; in different phases they are two engines and fine."""
    from chorus.core.config import ConfigError
    from chorus.serving.roles import plan_roles
    a = {"profile": DEFAULT_PROFILE, "backend": "hf", "dtype": "float32"}
    b = {**a, "options": {"batch_size": 2}}
    with pytest.raises(ConfigError, match="roles 'base' and 'classifier' would hold one engine.*options"):
        plan_roles({"base": a, "classifier": b}, device_gib=None)
    with pytest.raises(ConfigError, match="roles 'x' and 'y'"):
        build_engines({"x": a, "y": b})
    plan = plan_roles({"base": a, "classifier": b}, device_gib=None, phase_of=lambda r: r)
    assert [p.name for p in plan.phases] == ["base", "classifier"]


def test_role_specs_reload_from_a_stored_config_to_the_same_engines():
    """A run writes its whole config (every field); reloading it must give the same roles: a
    role's null fields stay 'from the shared settings', never the dumped defaults."""
    from chorus.interventions.internals.config import InternalsConfig
    from chorus.simulate.council.config import CouncilConfig, load
    cfg = load("tiny", {"models.backend": "vllm", "models.dtype": "bfloat16",
                        "seats": [{"profile": "gemma3-270m", "backend": "hf"}, "smollm2-135m-instruct"],
                        "conditions": [{"name": "clean"}], "judge": {"profile": "gemma3-270m", "backend": "hf"}})
    again = CouncilConfig.model_validate(cfg.model_dump(mode="json"))
    assert again.roles() == cfg.roles()
    assert (cfg.roles()["A1"].backend, cfg.roles()["A2"].backend, cfg.roles()["A2"].dtype) == ("hf", "vllm", "bfloat16")
    ic = InternalsConfig.model_validate({"model": {"profile": DEFAULT_PROFILE, "dtype": "float32"},
                                         "transfer": {"sender": "gemma3-270m"}})
    assert ic.transfer.sender_spec(ic.model) == ModelSpec(profile="gemma3-270m", backend="hf", dtype="float32")
    ic2 = InternalsConfig.model_validate(ic.model_dump(mode="json"))
    assert ic2.transfer.sender_spec(ic2.model) == ic.transfer.sender_spec(ic.model)


def test_transfer_sender_is_a_role_spec():
    from chorus.interventions.internals.config import InternalsConfig
    same = InternalsConfig.model_validate({"transfer": {"sender": "same"}})
    assert same.transfer.sender_spec(same.model) is None
    own = InternalsConfig.model_validate({"transfer": {"sender": DEFAULT_PROFILE}})   # the receiver's own model
    assert own.transfer.sender_spec(own.model) is None
    full = InternalsConfig.model_validate({"transfer": {"sender": {"profile": "gemma3-270m", "dtype": "bfloat16",
                                                                   "options": {"batch_size": 2}}}})
    s = full.transfer.sender_spec(full.model)
    assert (s.backend, s.dtype, s.options) == ("hf", "bfloat16", {"batch_size": 2})
    with pytest.raises(Exception, match="transfer.sender.backend: .* must be hf, got 'vllm'"):
        InternalsConfig.model_validate({"transfer": {"sender": {"profile": "gemma3-270m", "backend": "vllm"}}})


def test_cross_appraisal_panel_is_role_specs():
    """The cross-appraisal panel: each model a role spec over the panel's backend / dtype, named
    by its profile; the stored config reloads to the same engines."""
    from chorus.simulate.belief.cross import CrossConfig
    cfg = CrossConfig(models=[DEFAULT_PROFILE, {"profile": "gemma3-270m", "dtype": "bfloat16"}], backend="hf")
    assert cfg.panel() == [DEFAULT_PROFILE, "gemma3-270m"]
    assert cfg.spec("gemma3-270m") == ModelSpec(profile="gemma3-270m", backend="hf", dtype="bfloat16")
    assert (cfg.spec(DEFAULT_PROFILE).backend, cfg.spec(DEFAULT_PROFILE).dtype) == ("hf", None)
    again = CrossConfig.model_validate(cfg.model_dump(mode="json"))
    assert [again.spec(m) for m in again.panel()] == [cfg.spec(m) for m in cfg.panel()]
    assert CrossConfig(mode="synthetic").panel() == ["synth-a", "synth-b", "synth-c"]
