"""The four paper reports in one shape (``chorus.papers``, issue 49): every paper's sections are
``chorus.core.paper.Section`` objects in the paper's order, laid out the one way (``render_sections``);
``chorus paper NAME`` is the command, and each old spelling still runs the same command with one
warning line naming the new one. The papers' numbers and pages are tested in their own files
(test_influence_paper, test_roleplay_paper, test_campaign*, test_belief_llm)."""
from __future__ import annotations

import importlib
import json

import pytest
from typer.testing import CliRunner

from chorus.cli import app
from chorus.core.paper import Section, Sections, render_sections
from chorus.papers import PAPERS
from chorus.papers.cli import ALIASES

runner = CliRunner()


def test_every_paper_is_sections_of_the_one_type():
    from chorus.simulate.council.campaign_sections import SECTIONS as CAMPAIGN
    for name, module in PAPERS.items():
        secs = importlib.import_module(module).SECTIONS
        assert isinstance(secs, Sections) and secs and all(isinstance(s, Section) for s in secs), name
        assert len(set(secs.keys())) == len(secs), name
    # the BDA paper's numbers are computed by the campaign with sections of the same type
    assert isinstance(CAMPAIGN, Sections) and all(s.export is not None and "needs" in s.spec for s in CAMPAIGN)
    # the command group lists every paper
    r = runner.invoke(app, ["paper", "--help"])
    assert r.exit_code == 0 and all(n in r.output for n in PAPERS)


def test_sections_keep_order_refuse_a_twice_added_key_and_render_the_one_way(tmp_path):
    secs = Sections()

    @secs.exports("a", "Section A", missing="make A", cols=("x",))
    def _a(ctx):
        return {"x": ctx}
    secs.add("b", "Section B", render=lambda e: f"B has {e['n']}")
    secs.add("c", "Section C")
    with pytest.raises(ValueError, match="section 'a' added twice"):
        secs.add("a", "again")
    assert secs.keys() == ["a", "b", "c"] and secs.get("a").export(3) == {"x": 3} and secs.get("a").spec["cols"] == ("x",)
    with pytest.raises(TypeError):
        secs.get("a").spec["cols"] = ()   # a section's details are read-only
    numbers = {"sections": {"a": {"missing": "no A"}, "b": {"n": 2}, "c": {"rows": []}}}
    parts = render_sections(secs, numbers, tmp_path, body=lambda s, e: "", missing=lambda s, e: f"missing: {e['missing']}")
    # a missing section says why under its heading; an empty body adds no empty line
    assert "\n".join(parts) == "\n## Section A\n\nmissing: no A\n\n## Section B\n\nB has 2\n\n## Section C\n"


def _influence_runs(root):
    from test_influence_paper import KNOCK, LONG, _run
    return [_run(root, "knock", "influence", KNOCK), _run(root, "long", "debate", LONG)]


def test_old_spellings_run_the_same_command_and_warn_once(tmp_path):
    runs = [str(p) for p in _influence_runs(tmp_path)]
    new = runner.invoke(app, ["paper", "influence", *runs, "--out", str(tmp_path / "new")])
    old = runner.invoke(app, ["influence", "paper", *runs, "--out", str(tmp_path / "old")])
    assert new.exit_code == old.exit_code == 0, old.output
    warning = "chorus influence paper is now chorus paper influence; the old spelling goes in the next release"
    assert old.stderr.count(warning) == 1 and "is now" not in new.stderr
    assert (tmp_path / "old" / "numbers.json").read_text() == (tmp_path / "new" / "numbers.json").read_text()
    assert (tmp_path / "old" / "paper.md").read_text() == (tmp_path / "new" / "paper.md").read_text()
    # every old spelling is mounted once, hidden, on its group, and answers --help
    groups = {g.name: g.typer_instance for g in app.registered_groups}
    for group, name, _, _ in ALIASES:
        mounted = [c for c in groups[group].registered_commands if c.name == name]
        assert len(mounted) == 1 and mounted[0].hidden, (group, name)
        assert runner.invoke(app, [group, name, "--help"]).exit_code == 0, (group, name)
    bad = runner.invoke(app, ["belief", "paper", str(tmp_path / "nope"), "--out", str(tmp_path / "b")])
    assert bad.exit_code == 2 and bad.stderr.count("is now chorus paper belief") == 1


def test_bda_renders_an_existing_campaign_without_out_and_refuses_many_inputs(tmp_path):
    r = runner.invoke(app, ["paper", "bda", str(tmp_path / "a"), str(tmp_path / "b")])
    assert r.exit_code == 2 and "give --out DIR to export a campaign from 2 inputs" in r.output
    r = runner.invoke(app, ["council", "paper", str(tmp_path)])
    assert r.exit_code == 2 and "no campaign numbers file" in r.output
    assert r.stderr.count("chorus council paper is now chorus paper bda CAMPAIGN") == 1
    r = runner.invoke(app, ["council", "campaign", str(tmp_path / "nope"), "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "not a directory" in r.output and not (tmp_path / "c").exists()
    assert r.stderr.count("chorus council campaign is now chorus paper bda RUN... --out CAMPAIGN") == 1


def test_a_paper_is_its_own_sealed_record_of_the_runs_it_read(tmp_path):
    """``chorus verify`` covers a paper report: its own files against its record, and each run it read
    against the fingerprint it recorded; rerunning into it resumes, other runs there are refused."""
    from chorus.core.runs import RunDir, write_json
    from test_influence_paper import KNOCK
    src = RunDir.create(tmp_path / "knock", part="influence", command="influence knockout")
    write_json(src.path / "summary.json", KNOCK)
    src.finish()
    out = tmp_path / "paper"
    assert runner.invoke(app, ["paper", "influence", str(src.path), "--out", str(out)]).exit_code == 0
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["part"] == "paper" and prov["paper"] == "influence" and prov["finished"]
    assert [s["path"] for s in prov["sources"]] == [str(src.path)] and prov["sources"][0]["fingerprint"] != "unsealed"
    ok = runner.invoke(app, ["verify", str(out)])
    assert ok.exit_code == 0 and "every source is the one it read" in ok.output
    # the same runs again: the same record; other runs into it: refused, nothing changed
    assert runner.invoke(app, ["paper", "influence", str(src.path), "--out", str(out)]).exit_code == 0
    before = (out / "numbers.json").read_bytes()
    r = runner.invoke(app, ["paper", "influence", str(src.path), str(tmp_path / "knock"), "--out", str(out)])
    assert r.exit_code == 2 and "holds a run with another config" in r.output and (out / "numbers.json").read_bytes() == before
    # an edited page, then a source changed after the paper read it: each named, exit 1
    md = (out / "paper.md").read_text()
    (out / "paper.md").write_text(md.replace("message effect", "message effekt"))
    r = runner.invoke(app, ["verify", str(out)])
    assert r.exit_code == 1 and "changed: paper.md" in r.output
    (out / "paper.md").write_text(md)
    write_json(src.path / "summary.json", {**KNOCK, "n_pairs": 5})
    r = runner.invoke(app, ["verify", str(out)])
    assert r.exit_code == 1 and f"source changed: {src.path}" in r.output and "changed: summary.json" in r.output


def test_the_bda_campaign_records_the_trace_files_it_read(tmp_path):
    """The campaign (the BDA paper's record) names every trace file with its sha256, so ``chorus verify``
    catches a store changed after the export."""
    from chorus.simulate.council.campaign import CampaignConfig, build_campaign
    from chorus.simulate.council.campaign_synthetic import write_store
    store = tmp_path / "store"
    write_store(store, n_questions=12, seeds=1, datasets=(("claims_a", 2, (0.8, 0.7, 0.65)),))
    out = tmp_path / "camp"
    build_campaign(CampaignConfig(inputs=[str(store)], sections=["inventory"], methods=["plurality"]), out)
    prov = json.loads((out / "provenance.json").read_text())
    files = sorted((store / "traces").glob("*.jsonl*"))
    assert prov["paper"] == "bda" and [s["path"] for s in prov["sources"]] == [str(f) for f in files]
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0
    # its drift guard is an analysis with a sealed record of its own (every difference it found)
    r = runner.invoke(app, ["council", "campaign-verify", str(out), "--out", str(tmp_path / "cv")])
    assert r.exit_code == 0 and "OK" in r.output, r.output
    assert json.loads((tmp_path / "cv" / "summary.json").read_text())["differences"] == []
    import gzip
    lines = gzip.decompress(files[0].read_bytes()).splitlines(keepends=True)
    files[0].write_bytes(gzip.compress(b"".join(lines[:-1])))   # one trace fewer: still a valid store
    r = runner.invoke(app, ["verify", str(out)])
    assert r.exit_code == 1 and f"source changed: {files[0]}" in r.output
    r = runner.invoke(app, ["council", "campaign-verify", str(out), "--out", str(tmp_path / "cv2")])
    assert r.exit_code == 1 and "differs" in r.output and "FAILED" in r.output
    assert json.loads((tmp_path / "cv2" / "summary.json").read_text())["differences"]
