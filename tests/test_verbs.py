"""The verb registry (core.verbs): every registered verb is a command of the same shape, built from
the registry, and ``--check`` validates a config and prints its device plan without a model call."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from chorus.cli import app
from core.verbs import REGISTRY, Verb, register, resolve, verbs

runner = CliRunner()

# every verb that runs a config into a run directory
EXPECTED = {("aggregate", "run"), ("aggregate", "sweep"), ("debate", "run"), ("council", "run"), ("roleplay", "run"), ("sft", "train"),
            ("belief", "run"), ("belief", "sweep"), ("belief", "multi"),
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


@pytest.mark.parametrize("args, phase", [
    (["debate", "run", "smoke"], "phase debate (cpu): smollm2-135m-instruct/hf/float32 for model"),
    (["influence", "knockout", "internals_smoke"], "phase knockout (cpu): smollm2-135m-instruct/hf/float32 for model"),
    (["council", "run", "tiny", "--set", "conditions=[{name: clean}]"], "gemma3-270m/hf/float32 for A2"),
    (["roleplay", "run", "smoke"], "phase classifier (cpu)"),
    (["belief", "run", "all_small", "--set", "mode=llm"], "for model"),
    (["belief", "sweep", "all_small", "--set", "mode=oracle"], "belief sweep); no model was loaded or called"),
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
