"""Shared fixtures: real engines on the embedded model, loaded once per test session."""
from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from typing import Any
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _share_cores_between_workers() -> None:
    """Under pytest-xdist each worker gets its own cores, set before torch or vLLM is imported:
    two workers with every core each oversubscribe the CPU, which costs far more than it gains."""
    n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if n < 2 or not worker.startswith("gw"):
        return
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // n)
    i = int(worker[2:]) % max(1, len(cores) // per)
    mine = cores[i * per:(i + 1) * per]
    for key, value in {"OMP_NUM_THREADS": str(per), "CHORUS_TORCH_THREADS": str(per),
                       "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, mine))}.items():
        os.environ.setdefault(key, value)


_share_cores_between_workers()

# The heaviest files first (seconds per file in a two-worker run, 2-core VM, 2026-12-03), so that
# pytest-xdist (``--dist loadfile --no-loadscope-reorder``, pyproject.toml) never ends on one long file
# while the other worker idles; every other file keeps its place after them.
HEAVY_FILES = ("test_demo.py", "test_serving_openai.py", "test_resume.py", "test_rehearse.py", "test_council_llm.py",
               "test_serving_engine.py", "test_sft.py", "test_gpu_check.py", "test_roleplay_e2e.py",
               "test_debate_e2e.py", "test_dummy.py", "test_serving_store.py", "test_belief_llm.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: k for k, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FILES)))  # stable: in-file order kept

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED = "smollm2-135m-instruct"


def clone_working_tree(dest: Path) -> None:
    """The repository as a fresh clone would have it: tracked and new, non-ignored files only
    (a copy rather than ``git clone`` so that uncommitted work is what gets tested)."""
    import shutil
    import subprocess

    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
HAVE_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.fixture(scope="session")
def hf_engine():
    from chorus.serving import load_engine

    eng = load_engine(EMBEDDED, "hf", dtype="float32")
    yield eng
    eng.close()


def roleplay_e2e_cfg():
    """The tiny real roleplay run's config: one test group, the embedded model as "base", both setups."""
    from chorus.simulate.roleplay.config import Analysis, ClassifierSpec, DataSpec, Generation, LabelledModel, RoleplayConfig
    return RoleplayConfig(name="e2e", seed=0, data=DataSpec(split="group", part="test", limit=1, train_limit=1),
                          models=[LabelledModel(label="base", profile="smollm2-135m-instruct", backend="hf")],
                          generation=Generation(temperature=0.7, max_tokens=8, max_utterances=1),
                          classifier=ClassifierSpec(stance_readout="expected"), analysis=Analysis(n_boot=50))


@pytest.fixture(scope="session")
def roleplay_run(hf_engine, tmp_path_factory):
    """(path, RunDir, summary) of that run, made once per session (test_roleplay_e2e checks it, and
    test_roleplay_stats reads it): real generations are expensive on CPU."""
    from chorus.simulate.roleplay.experiment import run_roleplay
    out = tmp_path_factory.mktemp("roleplay_e2e") / "run"
    run, s = run_roleplay(roleplay_e2e_cfg(), out, engines={"base": hf_engine})
    return out, run, s


@pytest.fixture(scope="session")
def vllm_engine():
    if not HAVE_VLLM:
        pytest.skip("vLLM is not installed (pip install 'chorus-llm[cpu]')")
    from chorus.serving import load_engine

    eng = load_engine(EMBEDDED, "vllm", dtype="float32", enforce_eager=True)
    yield eng
    eng.close()


@pytest.fixture(params=["hf", "vllm"])
def engine(request):
    """Both local backends, for tests that must hold on each."""
    return request.getfixturevalue(f"{request.param}_engine")


QUESTIONS = [
    "What is the capital of France?",
    "Name a primary colour.",
    "Write one sentence about rivers.",
    "What is 2 + 2?",
    "Give me a synonym for happy.",
    "Which animal says moo?",
    "Is the earth round? Answer Yes or No.",
    "Tell me a fact about the moon.",
]


def chats(n: int = len(QUESTIONS)) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": q}] for q in QUESTIONS[:n]]


ROUND0 = [("A", "The first option is right. Answer: A"), ("B", "I believe the second option fits best here. Answer: B"),
          ("A", "Option A. Answer: A")]


def hand_debate_run(tmp_path: Path, items: list, responses=lambda item: ROUND0) -> Path:
    """A finished debate run directory whose round-0 turns are written by hand (no generation):
    ``responses(item)`` gives each agent's (answer or None, text). The interventions tests read it."""
    import pandas as pd

    from chorus.core.runs import RunDir
    from chorus.simulate.debate.questions import write_bench
    run = RunDir.create(tmp_path / "debate", part="debate")
    write_bench(items, run.path / "bench.jsonl")
    rows = [{"qid": it.id, "family": it.family, "domain": it.domain, "subdomain": it.subdomain, "agent": a, "round": 0,
             "condition": "debate", "shared": True, "response": txt, "answer": ans, "parsed": ans is not None}
            for it in items for a, (ans, txt) in enumerate(responses(it))]
    run.write_table("turns", pd.DataFrame(rows))
    return run.path


@pytest.fixture(scope="module")
def tokenizer():
    """The embedded model's tokenizer (tiny random models share it)."""
    from transformers import AutoTokenizer

    from chorus.serving.profiles import get_profile
    return AutoTokenizer.from_pretrained(str(get_profile(EMBEDDED).require()))


@pytest.fixture(scope="module")
def tiny(tokenizer):
    """tiny(family) -> an engine over a random tiny model of that family (cached per module)."""
    from chorus.interventions import families as fam
    from chorus.serving.engine import engine_from_model
    cache = {}

    def get(family: str):
        if family not in cache:
            cache[family] = engine_from_model(fam.tiny_model(family, len(tokenizer)), tokenizer, name=f"tiny-{family}")
        return cache[family]
    return get


# -- a scripted council engine (control flow only: no model) -------------------------------------
@dataclass
class Out:
    text: str
    parsed: Any
    conformed: bool = True
    prompt_tokens: int = 10
    completion_tokens: int = 5
    cached: bool = False
    finish_reason: str = "stop"


class Scripted:
    """An engine whose replies come from ``policy(me, round_or_kind, conversation, schema)``;
    it records every conversation and every call (for batching and leak checks)."""

    def __init__(self, policy):
        self.policy = policy
        self.calls: list[dict] = []
        self.seen: list[list[dict]] = []

    def chat(self, convs, *, temperature=1.0, top_p=1.0, max_tokens=256, seed=None, json_schema=None, **_):
        self.calls.append({"n": len(convs), "schema": json_schema})
        outs = []
        for conv in convs:
            self.seen.append(conv)
            user = conv[-1]["content"]
            me = re.search(r"You are (A\d+)\.", user)
            kind = "text" if json_schema is None else ("move" if "move" in json_schema["properties"] else "envelope")
            d = self.policy(me.group(1) if me else None, kind, conv, json_schema)
            if d is None:
                outs.append(Out(text="{bad", parsed=None, conformed=False))
            elif isinstance(d, str):
                outs.append(Out(text=d, parsed=None, conformed=None))
            else:
                outs.append(Out(text=json.dumps(d), parsed=d))
        return outs

    def option_logprobs(self, convs, options):
        self.seen.extend(convs)
        return [{o: -abs(int(o) - 6) for o in options} for _ in convs]


# -- a Hugging Face hub cache of the real layout, filled with the embedded model's files ------------
def build_hub_cache(cache: Path, repo_id: str, revisions: dict[str, list[str]], src: Path) -> dict[str, Path]:
    """``cache/models--ORG--NAME`` as huggingface_hub writes it: each file once in ``blobs/``
    (hard-linked to ``src``'s file where the file system allows, else a link to it: the 0.5 GB
    weights are never copied), ``snapshots/COMMIT/<file>`` relative links into ``blobs/``, and
    ``refs/<name>`` holding the commit (no newline, as huggingface_hub writes it).
    ``revisions``: commit -> the ref names pointing at it. Returns commit -> snapshot folder."""
    import hashlib

    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    files = [f for f in src.iterdir() if f.is_file() and not f.name.startswith(".")]
    blobs = {}
    for f in files:
        blob = repo / "blobs" / hashlib.sha256(f"{f.name}:{f.stat().st_size}".encode()).hexdigest()
        if not blob.exists():
            try:
                os.link(f, blob)
            except OSError:
                blob.symlink_to(f.resolve())
        blobs[f.name] = blob
    out = {}
    for commit, refs in revisions.items():
        snap = repo / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        for name, blob in blobs.items():
            if not (snap / name).exists():
                (snap / name).symlink_to(Path("..", "..", "blobs", blob.name))
        for ref in refs:
            (repo / "refs" / ref).write_text(commit)
        out[commit] = snap
    return out


# -- issue 51 item 5: every interval a paper report prints names its level -----------------------------
_BOUNDS = re.compile(r"\[([-+]?\d[\d.eE+-]*|nan), ([-+]?\d[\d.eE+-]*|nan)\]")
_LEVEL = re.compile(r" \(\d+%, [^)]*(resampled|Wilson|Fieller|level not recorded)[^)]*\)")


def assert_intervals_name_levels(md: str) -> int:
    """Walk a rendered report: every printed interval "[lo, hi]" is followed by its level ("(95%, 40
    question families resampled)", "(95%, Wilson, 120 tasks)", or says the level is not recorded), and
    every markdown table with bound columns (ci_low) has a level column. Returns the intervals seen."""
    seen = 0
    for m in _BOUNDS.finditer(md):
        assert _LEVEL.match(md, m.end()), f"an interval without its level: ...{md[max(0, m.start() - 100):m.end() + 60]!r}"
        seen += 1
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if "ci_low" in cells:
            assert "level" in cells, f"a table with bounds and no level column: {line!r}"
            seen += 1
    return seen
