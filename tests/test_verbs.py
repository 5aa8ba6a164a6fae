"""The verb registry (core.verbs): every registered verb is a command of the same shape, built from
the registry, and ``--check`` validates a config and prints its device plan without a model call."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from chorus.cli import app
from core.cliutil import option_values
from core.config import ConfigError
from core.verbs import REGISTRY, Option, Verb, register, resolve, verbs

runner = CliRunner()

# every verb that runs a config into a run directory
EXPECTED = {("aggregate", "run"), ("aggregate", "sweep"), ("debate", "run"), ("council", "run"), ("roleplay", "run"), ("sft", "train"),
            ("belief", "run"), ("belief", "sweep"), ("belief", "multi"),
            ("belief", "calibrate"), ("belief", "labelset"), ("belief", "cross"),
            *(("influence", v) for v in ("readout", "ablate", "cues", "knockout", "patch", "probe", "transfer",
                                        "concepts"))}


def test_every_verb_is_registered_and_a_command_of_the_one_shape():
    assert EXPECTED <= set(REGISTRY)
    for v in verbs():
        res = runner.invoke(app, [v.group, v.name, "--help"], terminal_width=200)
        assert res.exit_code == 0, (v.key, res.output)
        for opt in ("--out", "--set", "--check", *(o.flag for o in v.options)):
            assert opt in res.output, (v.key, opt)
        assert ("--no-plots" in res.output) == v.plots, v.key
        for ref in (v.load, v.run, v.schema, v.check, v.report, *v.errors):  # every reference resolves
            if ref is not None:
                assert resolve(ref) is not None, (v.key, ref)
        if v.report_command:
            res = runner.invoke(app, [v.group, v.report_command, "--help"], terminal_width=200)
            assert res.exit_code == 0 and "--no-plots" in res.output, (v.key, res.output)


def test_optional_config_and_a_verbs_own_run_directory_option():
    """CONFIG is optional ([CONFIG]) exactly for a verb with a default_config; a verb's own run-directory
    option (labelset: --run-dir, its --out being the CSV) is in its help; the others keep the shared --out."""
    assert {v.name for v in verbs("belief") if v.default_config} == {"calibrate", "labelset", "cross"}
    for v in verbs():
        res = runner.invoke(app, [v.group, v.name, "--help"], terminal_width=200)
        assert ("[config]" in res.output.lower()) == (v.default_config is not None), (v.key, res.output)
        assert (v.out.flag if v.out else "--out") in res.output, v.key
    assert REGISTRY[("belief", "labelset")].out.flag == "--run-dir"


@pytest.mark.parametrize("args, phase", [
    (["debate", "run", "smoke"], "phase debate (cpu): smollm2-135m-instruct/hf/float32 for model"),
    (["influence", "knockout", "internals_smoke"], "phase knockout (cpu): smollm2-135m-instruct/hf/float32 for model"),
    (["council", "run", "tiny", "--set", "conditions=[{name: clean}]"], "gemma3-270m/hf/float32 for A2"),
    (["roleplay", "run", "smoke"], "phase classifier (cpu)"),
    (["belief", "run", "all_small", "--set", "mode=llm"], "for model"),
    (["belief", "sweep", "all_small", "--set", "mode=oracle"], "belief sweep); no model was loaded or called"),
    (["belief", "cross", "--synthetic"], "config OK: cross (belief cross); no model was loaded or called"),
    (["belief", "calibrate", "--backend", "hf", "--seed", "1"], "smollm2-135m-instruct/hf/float32 for appraiser"),
])
def test_check_prints_the_plan_and_makes_no_run_directory(tmp_path, args, phase):
    out = tmp_path / "run"
    res = runner.invoke(app, [*args, "--out", str(out), "--check"], terminal_width=400)
    assert res.exit_code == 0, res.output
    assert "config OK" in res.output and "no model was loaded or called" in res.output
    assert phase in res.output, res.output
    assert not out.exists()


def test_check_names_bad_input_with_exit_2(tmp_path):
    res = runner.invoke(app, ["debate", "run", "smoke", "--check", "--set", "model.profile=no-such-model"])
    assert res.exit_code == 2 and "unknown model profile 'no-such-model'" in res.output
    res = runner.invoke(app, ["influence", "probe", "no-such-config", "--check"])
    assert res.exit_code == 2 and "no-such-config" in res.output
    res = runner.invoke(app, ["council", "run", "tiny", "--check", "--set", "rounds"])
    assert res.exit_code == 2 and "expected KEY=VALUE" in res.output


def test_a_verb_registered_twice_is_refused():
    v = REGISTRY[("debate", "run")]
    assert register(v) is v   # the same object again is a no-op
    twin = Verb(v.group, v.name, help="x", config_help="x", load=v.load, run=v.run, show=v.show)
    with pytest.raises(ValueError, match="registered twice"):
        register(twin)
    with pytest.raises(ValueError, match="module:name"):
        resolve("no_colon")


# -- own options into the config: typed, and only when given ---------------------------------------
def test_own_options_map_typed_values_into_the_config():
    from pathlib import Path
    from typing import List, Optional
    v = Verb("g", "n", help="x", config_help="x", load="m:f", run="m:f", show=print, options=(
        Option("model", "--model", Optional[List[str]], None, "x", "config:models"),
        Option("run_", "--run", Optional[List[Path]], None, "x", "config:runs"),
        Option("synthetic", "--synthetic", bool, False, "x", "config:mode", const="synthetic"),
        Option("no_store", "--no-store", bool, False, "x", "config:store", negate=True),
        Option("seed", "--seed", int, 0, "x", "config:seed"),
        Option("data", "--data", Optional[Path], None, "x", "config:data_dir"),
        Option("csv", "--csv", Path, ..., "x", "run:out"),
        Option("quiet", "--quiet", bool, False, "x", "progress:enabled", negate=True)))
    kw = {"model": ["a", "b"], "run_": [Path("r/1"), Path("r/2")], "synthetic": True, "no_store": True, "seed": 3,
          "data": None, "csv": Path("s.csv"), "quiet": False}
    over, run_kw, bar = option_values(v, kw, given=lambda name: True)
    assert over == {"models": ["a", "b"], "runs": ["r/1", "r/2"], "mode": "synthetic", "store": False, "seed": 3}
    assert run_kw == {"out": Path("s.csv")} and bar == {"enabled": True}
    # left at their defaults: a config file's values stand (a flag not given, a repeatable option not given)
    over, _, _ = option_values(v, {**kw, "model": None, "synthetic": False, "no_store": False, "seed": 0},
                               given=lambda name: name == "run_")
    assert over == {"runs": ["r/1", "r/2"]}


def _capture(monkeypatch, ref):
    """Replace a verb's check function by one that keeps the config it gets (and plans nothing)."""
    module, _, name = ref.partition(":")
    got = []
    monkeypatch.setattr(f"{module}.{name}", lambda cfg, *a: got.append(cfg))
    return got


def test_cross_options_and_a_config_file_reach_the_typed_config(tmp_path, monkeypatch):
    got = _capture(monkeypatch, "simulate.belief.cross:plan_engines")
    res = runner.invoke(app, ["belief", "cross", "--model", "synth-a", "--model", "synth-b", "--run", "r/1",
                              "--run", "r/2", "--synthetic", "--backend", "hf", "--check"])
    assert res.exit_code == 0, res.output
    cfg = got.pop()
    assert (cfg.mode, cfg.panel(), cfg.runs, cfg.backend) == ("synthetic", ["synth-a", "synth-b"], ["r/1", "r/2"], "hf")
    conf = tmp_path / "c.yaml"
    conf.write_text("mode: synthetic\nbackend: hf\nmodels: [synth-a, synth-c]\nmax_utterances: 7\n")
    assert runner.invoke(app, ["belief", "cross", str(conf), "--check"]).exit_code == 0
    cfg = got.pop()   # no option given: the file's values stand
    assert (cfg.mode, cfg.backend, cfg.panel(), cfg.max_utterances) == ("synthetic", "hf", ["synth-a", "synth-c"], 7)
    res = runner.invoke(app, ["belief", "cross", str(conf), "--backend", "auto", "--model", "synth-b",
                              "--model", "synth-c", "--set", "max_utterances=9", "--check"])
    assert res.exit_code == 0, res.output
    cfg = got.pop()   # given, even at its default value, an option overrides the file
    assert (cfg.backend, cfg.panel(), cfg.max_utterances) == ("auto", ["synth-b", "synth-c"], 9)


def test_calibrate_and_labelset_options_reach_the_typed_config(tmp_path, monkeypatch):
    got = _capture(monkeypatch, "simulate.belief.calibrate_run:plan_engines")
    res = runner.invoke(app, ["belief", "calibrate", "--model", "gemma3-270m", "--backend", "hf", "--seed", "3",
                              "--no-store", "--check"])
    assert res.exit_code == 0, res.output
    cfg = got.pop()
    assert (cfg.model.profile, cfg.model.backend, cfg.seed, cfg.store, cfg.labels) == ("gemma3-270m", "hf", 3, False, None)
    assert runner.invoke(app, ["belief", "calibrate", "--check"]).exit_code == 0
    cfg = got.pop()
    assert cfg.store is True and cfg.skip_unlabelled is False and cfg.inputs() == ("transit_priority", None)
    # labelset: --out is its CSV (a keyword of run), --run-dir the run directory
    seen = {}

    def fake_run(cfg, **kw):
        seen.update(kw, cfg=cfg)
        raise ConfigError("stop here")
    monkeypatch.setattr("simulate.belief.labelset.run_labelset", fake_run)
    res = runner.invoke(app, ["belief", "labelset", "--out", str(tmp_path / "s.csv"), "--run-dir", str(tmp_path / "r"),
                              "--per-bin", "2", "--temperature", "0.5", "--model", "gemma3-270m"])
    assert res.exit_code == 2 and "error: stop here" in res.output, res.output
    assert seen["out"] == tmp_path / "s.csv" and seen["run_dir"] == tmp_path / "r"
    cfg = seen["cfg"]
    assert (cfg.per_bin, cfg.max_draws, cfg.generator.temperature, cfg.model.profile) == (2, 6, 0.5, "gemma3-270m")


def test_shipped_default_configs_hold_every_field_at_its_default():
    import yaml

    from simulate.belief.calibrate_run import CalibrateConfig, load_calibrate_config
    from simulate.belief.config import CONFIGS_DIR
    from simulate.belief.labelset import LabelsetConfig, load_labelset_config
    for command in ("calibrate", "labelset", "cross"):
        assert yaml.safe_load((CONFIGS_DIR / command / "default.yaml").read_text()) == {}
    assert load_calibrate_config("default").model_dump() == CalibrateConfig().model_dump()
    assert load_labelset_config("default") == LabelsetConfig()
    with pytest.raises(ConfigError, match="(?s)invalid chorus belief cross:.*at least two models"):
        resolve("simulate.belief.cross_config:load_cross_config")("default")


def test_run_verb_runs_a_registered_verb_as_its_command_does(monkeypatch, tmp_path):
    # the demo's stages and the rehearsal's paths run parts this way: the verb's loader, its own
    # run-directory keyword (labelset's --run-dir), extra keywords passed through
    from core.verbs import run_verb
    seen = []
    monkeypatch.setattr("simulate.belief.labelset.run_labelset", lambda cfg, **kw: seen.append((cfg, kw)) or ("r", {}))
    assert run_verb(("belief", "labelset"), None, {"per_bin": 2}, tmp_path / "r", out=tmp_path / "s.csv") == ("r", {})
    cfg, kw = seen.pop()
    assert (cfg.per_bin, cfg.topic, kw["run_dir"], kw["out"]) == (2, "transit_priority", tmp_path / "r", tmp_path / "s.csv")
    with pytest.raises(KeyError, match="no verb 'x y' is registered"):
        run_verb(("x", "y"), "c")
