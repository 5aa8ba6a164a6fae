"""One CLI grammar: ``-m/--model`` wherever a model is chosen, ``recompute`` for what recomputes a
summary (``report`` is only the HTML), ``--plots/--no-plots`` wherever figures are drawn, every group's
help naming every verb, ``chorus configs``, vLLM's own option names on ``generate`` and ``serve``, and
the old spellings working one release with a warning naming the new one."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from chorus.cli import app
from chorus.errors import run_command
from chorus.registry import REGISTRY

runner = CliRunner()
OLD_SPELLINGS = {"--profile", "--judge", "--classifier", "-c", "--K"}


def _leaves(cmd=None, path=()):
    """Every (path, click command) of the tree, hidden ones left out (what a user is shown)."""
    cmd = cmd or typer.main.get_command(app)
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield path, cmd
        return
    for name, sub in subs.items():
        if not getattr(sub, "hidden", False):
            yield from _leaves(sub, (*path, name))


def _visible_options(cmd) -> set[str]:
    return {o for p in cmd.params if getattr(p, "param_type_name", "") == "option" and not p.hidden
            for o in (*p.opts, *p.secondary_opts)}


def test_one_option_chooses_a_model_and_no_old_spelling_is_shown():
    """Every command that takes a model takes -m/--model; none shows --profile, --judge, -c or --K."""
    leaves = dict(_leaves())
    with_model = {p for p, c in leaves.items() if "--model" in _visible_options(c)}
    for p in with_model:
        assert "-m" in _visible_options(leaves[p]), p
    expected = {("generate",), ("serve",), ("demo",), ("rehearse",), ("debate", "judge"), ("council", "judge"),
                ("roleplay", "annotators")}
    for (group, name), v in REGISTRY.items():
        try:
            v.model_override("x")
            expected.add((*group.split(), name))
        except ValueError:
            pass
    assert expected <= with_model, expected - with_model
    for p, c in leaves.items():
        assert not (_visible_options(c) & OLD_SPELLINGS), (p, _visible_options(c) & OLD_SPELLINGS)
        # figures: the pair, never a lone --no-plots
        assert ("--no-plots" in _visible_options(c)) == ("--plots" in _visible_options(c)), p


def test_report_is_only_the_html_and_recompute_recomputes():
    leaves = dict(_leaves())
    reports = {p for p in leaves if p[-1] == "report"}
    assert reports == {("report",)}, reports
    assert {p for p in leaves if p[-1] in ("eval",)} == set()
    assert {("debate", "recompute"), ("council", "recompute"), ("belief", "recompute"),
            ("roleplay", "recompute")} <= set(leaves)


def test_every_group_help_names_every_verb():
    top = typer.main.get_command(app)
    for name, group in top.commands.items():
        subs = getattr(group, "commands", None)
        if subs is None:
            continue
        line = group.get_short_help_str(limit=10_000)
        for verb, sub in subs.items():
            if not getattr(sub, "hidden", False):
                assert verb in line, (name, verb, line)


def test_the_model_option_sets_the_field_each_verb_names():
    """-m goes where the config keeps its model: the debaters, every council seat, every role-play
    model, SFT's base (the help of --set names that field too)."""
    from chorus.core.cliutil import set_help

    cases = {("debate", "run"): ("smoke", lambda c: c.model.profile),
             ("council", "run"): ("tiny", lambda c: {s.profile for s in c.seats}),
             ("roleplay", "run"): ("smoke", lambda c: {m.profile for m in c.models}),
             ("sft", "train"): ("smoke", lambda c: c.base.profile),
             ("influence", "knockout"): ("internals_smoke", lambda c: c.model.profile)}
    for key, (config, read) in cases.items():
        v = REGISTRY[key]
        got = read(v.load_config(config, v.model_override("gemma3-270m")))
        assert got in ("gemma3-270m", {"gemma3-270m"}), (key, got)
    assert "base.profile=NAME" in set_help(REGISTRY[("sft", "train")])
    assert "seats.0.profile=NAME" in set_help(REGISTRY[("council", "run")])
    assert "model.profile" not in set_help(REGISTRY[("aggregate", "run")])   # no model there
    # the seats take -m; the LLM baselines' synthesizer is a role of its own (--set models.synthesizer...)
    res = runner.invoke(app, ["council", "run", "tiny", "-m", "gemma3-270m", "--check"], terminal_width=300)
    assert res.exit_code == 0 and "gemma3-270m/hf/float32 for A1, A2, A3," in res.output, res.output


def test_configs_lists_every_shipped_config_one_line_each():
    res = runner.invoke(app, ["configs"], terminal_width=300)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()[1:]
    shipped = {(g.split()[0], f.stem, f) for (g, _), v in REGISTRY.items() for f in v.shipped_configs()}
    assert len(lines) == len({(p, f) for p, _, f in shipped})   # one line per config file
    for part, stem, _ in shipped:
        assert any(line.split()[:2] == [part, stem] for line in lines), (part, stem)
    names = {stem for part, stem, _ in shipped if part == "debate"}
    assert {"smoke", "default", "long"} <= names
    only = runner.invoke(app, ["configs", "debate"], terminal_width=300)
    assert only.exit_code == 0 and all(line.startswith("debate") for line in only.output.splitlines()[1:])
    bad = runner.invoke(app, ["configs", "nosuch"])
    assert bad.exit_code == 2 and "no part 'nosuch'" in bad.output


def test_old_spellings_work_one_release_with_a_warning(tmp_path, capsys):
    """Each old spelling does what it did and says its new name on stderr; old and new together are one
    line of bad input."""
    out = tmp_path / "t.jsonl"
    assert run_command(app, ["aggregate", "generate", "--out", str(out), "--n", "5", "--K", "3"]) == 0
    err = capsys.readouterr().err
    assert "--K is now --candidates" in err and out.is_file()
    assert {len(json.loads(x)["candidates"]) for x in out.read_text().splitlines()} == {3}
    assert run_command(app, ["aggregate", "generate", "--out", str(out), "--K", "3", "--candidates", "3"]) == 2
    for argv, old, new in [
            (["debate", "report", str(tmp_path / "none")], "chorus debate report", "chorus debate recompute"),
            (["council", "report", str(tmp_path / "none")], "chorus council report", "chorus council recompute"),
            (["belief", "report", str(tmp_path / "none")], "chorus belief report", "chorus belief recompute"),
            (["roleplay", "eval", str(tmp_path / "none")], "chorus roleplay eval", "chorus roleplay recompute"),
            (["debate", "judge", str(tmp_path / "none"), "--judge", "nosuch"], "--judge", "-m/--model"),
            (["roleplay", "annotators", str(tmp_path), "-c", "gemma3-270m"], "--classifier", "-m/--model"),
            (["generate", "hi", "--profile", "nosuch"], "--profile", "-m/--model")]:
        rc = run_command(app, argv)
        err = capsys.readouterr().err
        assert f"{old} is now {new}" in " ".join(err.split()), (argv, err)
        assert rc == 2, (argv, rc, err)   # the old spelling reached the command: its input is then refused


def test_generate_takes_vllms_option_names(monkeypatch):
    """--dtype, -tp, --gpu-memory-utilization, --max-model-len, --enforce-eager reach the one model
    spec (the engine build is the seam: a double records what it was given); a vLLM-only option on the
    hf backend is one line."""
    import chorus.serving as serving

    seen = {}

    class Stop(Exception):
        pass

    def fake(spec, store=None):
        seen["spec"] = spec
        raise Stop
    monkeypatch.setattr(serving, "build_engine", fake)
    with pytest.raises(Stop):
        runner.invoke(app, ["generate", "hi", "-m", "gemma3-270m", "-b", "vllm", "--dtype", "bfloat16", "-tp", "2",
                            "--gpu-memory-utilization", "0.5", "--max-model-len", "4096", "--enforce-eager"],
                      catch_exceptions=False)
    s = seen["spec"]
    assert (s.profile, s.backend, s.dtype, s.tensor_parallel_size) == ("gemma3-270m", "vllm", "bfloat16", 2)
    assert s.options == {"gpu_memory_utilization": 0.5, "max_model_len": 4096, "enforce_eager": True}
    res = runner.invoke(app, ["generate", "hi", "-b", "hf", "--gpu-memory-utilization", "0.5"])
    assert res.exit_code == 2 and "--gpu-memory-utilization is a vLLM engine option" in res.output


def test_serve_takes_the_model_as_vllm_does_and_its_memory_share(monkeypatch):
    """`chorus serve MODEL` or `-m MODEL`; --gpu-memory-utilization goes on the vllm serve line (the
    exec is the seam: a double records the line)."""
    import chorus.serving.cli as scli

    lines = []

    class Exec(Exception):
        pass

    def fake_exec(exe, argv):
        lines.append(argv)
        raise Exec
    monkeypatch.setattr(scli.os, "execv", fake_exec)
    for argv in (["serve", "gemma3-270m", "--gpu-memory-utilization", "0.4"],
                 ["serve", "-m", "gemma3-270m", "--gpu-memory-utilization", "0.4"]):
        with pytest.raises(Exec):
            runner.invoke(app, argv, catch_exceptions=False)
        line = lines[-1]
        assert line[line.index("--served-model-name") + 1] == "gemma3-270m"
        assert line[line.index("--gpu-memory-utilization") + 1] == "0.4"
    res = runner.invoke(app, ["serve", "gemma3-270m", "-m", "smollm2-135m-instruct"])
    assert res.exit_code == 2 and "name two models" in res.output


def test_generate_with_the_model_option_on_the_embedded_model(tmp_path):
    """The real model through the new spelling: -m, --dtype (vLLM's name) on the hf backend."""
    store = tmp_path / "calls.sqlite"
    res = runner.invoke(app, ["generate", "Say hi.", "-m", "smollm2-135m-instruct", "-b", "hf", "--dtype",
                              "float32", "--max-tokens", "4", "--store", str(store), "--json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output.strip().splitlines()[-1])
    assert row["text"] and row["completion_tokens"] <= 4
    from chorus.serving.store import CallStore
    (by_model,) = CallStore(store, read_only=True).stats()["by_model"]
    assert by_model["model"].startswith("smollm2-135m-instruct") and by_model["backend"] == "hf", by_model
