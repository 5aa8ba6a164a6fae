"""The verb registry (chorus.core.verbs): every registered verb is a command of the same shape, built from
the registry, and ``--check`` validates a config and prints its device plan without a model call."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from chorus.cli import app
from chorus.core.cliutil import option_values
from chorus.core.config import ConfigError
from chorus.core.verbs import REGISTRY, Option, Verb, register, resolve, verbs

runner = CliRunner()

# every verb that runs a config into a run directory
EXPECTED = {("aggregate", "run"), ("aggregate", "sweep"), ("debate", "run"), ("council", "run"), ("roleplay", "run"), ("sft", "train"),
            ("belief", "run"), ("belief", "sweep"), ("belief", "multi"),
            ("belief", "calibrate"), ("belief", "labelset"), ("belief", "cross"),
            *(("influence", v) for v in ("readout", "ablate", "cues", "knockout", "patch", "probe", "transfer",
                                        "concepts"))}
# every verb over a stored run directory (RUN_DIR in place of CONFIG)
OVER_A_RUN = {("belief correct", "fit"), ("influence", "counterfactual"), ("debate", "belief")}
EXPECTED |= OVER_A_RUN


def _help(v, command=None):
    """``chorus GROUP NAME --help`` (a group may be two words: ``belief correct``)."""
    return runner.invoke(app, [*v.group.split(), command or v.name, "--help"], terminal_width=200)


def test_every_verb_is_registered_and_a_command_of_the_one_shape():
    assert EXPECTED <= set(REGISTRY)
    for v in verbs():
        res = _help(v)
        assert res.exit_code == 0, (v.key, res.output)
        # --out for every verb but one that writes where its argument says (no_out: it has none)
        assert ("--out" in res.output) != v.no_out, v.key
        for opt in ("--set", "--check", *(f for o in v.options for f in o.flag.replace("/", " ").split())):
            assert opt in res.output, (v.key, opt)   # --store/--no-store; --model -m
        assert ("--no-plots" in res.output) == ("--plots" in res.output) == v.plots, v.key
        # -m/--model for every verb that takes a model (its own option or the shared one)
        try:
            v.model_override("x")
            takes_model = True
        except ValueError:
            takes_model = False
        assert ("--model" in res.output and "-m" in res.output) == takes_model, v.key
        impl = v.implementation()   # the lazy factory imports what the verb runs
        assert callable(impl.load) and callable(impl.run), v.key
        assert (impl.report is not None) == v.recomputes, v.key
        for ref in (o.parse for o in (v.argument, *v.options) if o is not None):   # every reference resolves
            if ref is not None:
                assert resolve(ref) is not None, (v.key, ref)
        if v.recomputes:
            res = _help(v, "recompute")
            assert res.exit_code == 0 and "--no-plots" in res.output, (v.key, res.output)


def test_optional_config_and_a_verbs_own_run_directory_option():
    """CONFIG is optional ([CONFIG]) exactly for a verb with a default_config; a verb over a stored run
    takes its argument (RUN_DIR) in place of CONFIG; a verb's own run-directory option (labelset:
    --run-dir, its --out being the CSV) is in its help; the others keep the shared --out, but for one
    that writes into its argument's directory (correct fit: no run-directory option)."""
    assert {v.name for v in verbs("belief") if v.default_config} == {"calibrate", "labelset", "cross"}
    assert {v.key for v in verbs() if v.argument is not None} == OVER_A_RUN
    assert {v.key for v in verbs() if v.no_out} == {("belief correct", "fit")}
    for v in verbs():
        res = _help(v)
        assert ("[config]" in res.output.lower()) == (v.default_config is not None and v.argument is None), \
            (v.key, res.output)
        usage = next(line for line in res.output.splitlines() if "Usage:" in line)
        positional = (f"{{{v.argument.name}}}" if v.argument is not None else   # required: {NAME}, optional: [NAME]
                      "{config}" if v.default_config is None else "[config]")
        assert usage.rstrip().endswith(f"{v.name} [OPTIONS] {positional}"), (v.key, usage)
        if not v.no_out:
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
    twin = Verb(v.group, v.name, help="x", config_help="x", impl=v.impl, show=v.show)
    with pytest.raises(ValueError, match="registered twice"):
        register(twin)
    with pytest.raises(ValueError, match="module:name"):
        resolve("no_colon")


# -- own options into the config: typed, and only when given ---------------------------------------
def test_own_options_map_typed_values_into_the_config():
    from pathlib import Path
    from typing import List, Optional
    v = Verb("g", "n", help="x", config_help="x", impl=lambda: None, show=print, options=(
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
    got = _capture(monkeypatch, "chorus.simulate.belief.cross:plan_engines")
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
    got = _capture(monkeypatch, "chorus.simulate.belief.calibrate_run:plan_engines")
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
    monkeypatch.setattr("chorus.simulate.belief.labelset.run_labelset", fake_run)
    res = runner.invoke(app, ["belief", "labelset", "--out", str(tmp_path / "s.csv"), "--run-dir", str(tmp_path / "r"),
                              "--per-bin", "2", "--temperature", "0.5", "--model", "gemma3-270m"])
    assert res.exit_code == 2 and "error: stop here" in res.output, res.output
    assert seen["out"] == tmp_path / "s.csv" and seen["run_dir"] == tmp_path / "r"
    cfg = seen["cfg"]
    assert (cfg.per_bin, cfg.max_draws, cfg.generator.temperature, cfg.model.profile) == (2, 6, 0.5, "gemma3-270m")


def test_shipped_default_configs_hold_every_field_at_its_default():
    import yaml

    from chorus.simulate.belief.calibrate_run import CalibrateConfig, load_calibrate_config
    from chorus.simulate.belief.config import CONFIGS_DIR
    from chorus.simulate.belief.labelset import LabelsetConfig, load_labelset_config
    for command in ("calibrate", "labelset", "cross"):
        assert yaml.safe_load((CONFIGS_DIR / command / "default.yaml").read_text()) == {}
    assert load_calibrate_config("default").model_dump() == CalibrateConfig().model_dump()
    assert load_labelset_config("default") == LabelsetConfig()
    with pytest.raises(ConfigError, match="(?s)invalid chorus belief cross:.*at least two models"):
        resolve("chorus.simulate.belief.cross_config:load_cross_config")("default")


def test_run_verb_runs_a_registered_verb_as_its_command_does(monkeypatch, tmp_path):
    # the demo's stages and the rehearsal's paths run parts this way: the verb's loader, its own
    # run-directory keyword (labelset's --run-dir), extra keywords passed through
    from chorus.core.verbs import run_verb
    seen = []
    monkeypatch.setattr("chorus.simulate.belief.labelset.run_labelset", lambda cfg, **kw: seen.append((cfg, kw)) or ("r", {}))
    assert run_verb(("belief", "labelset"), None, {"per_bin": 2}, tmp_path / "r", out=tmp_path / "s.csv") == ("r", {})
    cfg, kw = seen.pop()
    assert (cfg.per_bin, cfg.topic, kw["run_dir"], kw["out"]) == (2, "transit_priority", tmp_path / "r", tmp_path / "s.csv")
    with pytest.raises(KeyError, match="no verb 'x y' is registered"):
        run_verb(("x", "y"), "c")


# -- verbs over a stored run directory: RUN_DIR in place of CONFIG ---------------------------------
def test_a_positional_argument_and_a_parsed_option_map_into_the_config():
    from pathlib import Path
    v = Verb("g", "n", help="x", config_help="x", impl=lambda: None, show=print,
             argument=Option("run_dir", "RUN_DIR", Path, ..., "x", "config:run"), options=(
                 Option("n", "--n", str, "1", "x", "config:n", parse="builtins:int"),
                 Option("letters", "--letters", str, "ba", "x", "run:letters", parse="builtins:sorted"),
                 Option("config", "--config", str, None, "x", "config")))
    kw = {"run_dir": Path("r/1"), "n": "3", "letters": "cab", "config": "c.yaml"}
    over, run_kw, bar = option_values(v, kw, given=lambda name: True)
    # the argument as --set run=... would give it (a path as its string); --n parsed, then typed;
    # --config names the config, no field of it
    assert over == {"run": "r/1", "n": 3} and run_kw == {"letters": ["a", "b", "c"]} and bar == {}
    # nothing given on the line: the argument (required) still goes in, a run keyword is parsed at its default
    over, run_kw, _ = option_values(v, {**kw, "config": None}, given=lambda name: False)
    assert over == {"run": "r/1"} and run_kw == {"letters": ["a", "b", "c"]}
    from chorus.core.cliutil import config_name
    v = REGISTRY[("debate", "belief")]
    assert config_name(v, {"run_dir": Path("r"), "config": None}) is None   # the loader's shipped default
    assert config_name(v, {"run_dir": Path("r"), "config": Path("b.yaml")}) == "b.yaml"
    assert config_name(REGISTRY[("influence", "counterfactual")], {"run_dir": Path("r")}) == "default"


def test_counterfactual_run_dir_and_layers_reach_the_typed_config(tmp_path, monkeypatch):
    got = _capture(monkeypatch, "chorus.interventions.counterfactual:plan_counterfactual")
    src = tmp_path / "debate"
    res = runner.invoke(app, ["influence", "counterfactual", str(src), "--layers", "3-5", "--receiver", "2",
                              "--peer", "0", "--set", "n_boot=7", "--check"])
    assert res.exit_code == 0, res.output
    cfg = got.pop()
    assert (cfg.run, cfg.layers, cfg.receiver, cfg.peer, cfg.round, cfg.queries, cfg.n_boot) == \
        (str(src), [3, 4, 5], 2, 0, 1, "after", 7)
    assert "run" not in cfg.model_dump()   # the run's config record is as before (provenance names the source)
    assert runner.invoke(app, ["influence", "counterfactual", str(src), "--layers", "3,4,7", "--check"]).exit_code == 0
    assert got.pop().layers == [3, 4, 7]
    assert runner.invoke(app, ["influence", "counterfactual", str(src), "--check"]).exit_code == 0
    assert got.pop().layers == "all"
    res = runner.invoke(app, ["influence", "counterfactual", str(src), "--layers", "x-y", "--check"])
    assert res.exit_code == 2 and "error: --layers 'x-y'" in res.output, res.output
    res = runner.invoke(app, ["influence", "counterfactual", str(src), "--queries", "never", "--check"])
    assert res.exit_code == 2 and "queries = 'never'" in res.output, res.output


def test_correct_fit_maps_its_options_and_takes_no_run_directory(tmp_path, monkeypatch):
    got = _capture(monkeypatch, "chorus.simulate.belief.correction:check_fit")
    res = runner.invoke(app, ["belief", "correct", "fit", str(tmp_path / "cal"), "--topic", "t", "--min-events", "60",
                              "--no-store", "--set", "n_folds=3", "--check"])
    assert res.exit_code == 0 and "config OK: fit (belief correct fit); no model was loaded or called" in res.output
    cfg = got.pop()
    assert (cfg.run, cfg.model, cfg.topic, cfg.min_events, cfg.seed, cfg.store, cfg.n_folds) == \
        (str(tmp_path / "cal"), None, "t", 60, 0, False, 3)
    res = runner.invoke(app, ["belief", "correct", "fit", str(tmp_path / "cal"), "--min-events", "3"])
    assert res.exit_code == 2 and "Invalid value for '--min-events'" in res.output   # the command line's bound, as before
    res = runner.invoke(app, ["belief", "correct", "fit", str(tmp_path / "cal"), "--set", "min_events=3", "--check"])
    assert res.exit_code == 2 and "invalid chorus belief correct fit:" in res.output and "min_events = 3" in res.output
    with pytest.raises(ValueError, match="takes no run directory"):
        REGISTRY[("belief correct", "fit")].execute(cfg, tmp_path / "elsewhere")


def test_debate_belief_check_reads_the_run_and_makes_no_run_directory(tmp_path, monkeypatch):
    from chorus.simulate.debate.stubbornness import synthetic_belief_debate
    run = synthetic_belief_debate(tmp_path / "debate", [1.0, 2.0], n=4, rounds=1)
    out = tmp_path / "out"
    res = runner.invoke(app, ["debate", "belief", str(run), "--set", "reading=planted", "--set", "appraiser=oracle",
                              "--out", str(out), "--check"], terminal_width=400)
    assert res.exit_code == 0, res.output
    assert "config OK: debate-belief (debate belief); no model was loaded or called" in res.output
    assert not out.exists() and not (run / "belief").exists()
    # read as the run reads it: probe readings need the debate's model (a synthetic run has no config.yaml)
    res = runner.invoke(app, ["debate", "belief", str(run), "--check"])
    assert res.exit_code == 2 and "no config.yaml" in res.output and not (run / "belief").exists(), res.output
    # --config names the config; --set and RUN_DIR over it
    conf = tmp_path / "b.yaml"
    conf.write_text("reading: planted\nappraiser: oracle\ntau: 1.5\n")
    got = _capture(monkeypatch, "chorus.simulate.debate.stubbornness:plan_belief")
    res = runner.invoke(app, ["debate", "belief", str(run), "--config", str(conf), "--set", "gamma=0.5", "--check"])
    assert res.exit_code == 0, res.output
    cfg = got.pop()
    assert (cfg.run, cfg.reading, cfg.tau, cfg.gamma) == (str(run), "planted", 1.5, 0.5)
