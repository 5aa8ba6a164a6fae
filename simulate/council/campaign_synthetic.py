"""A synthetic campaign store: the BDA paper's grid of datasets (three binary claim sets, a K = 3 and a
K = 4 set), conditions (clean, persistent stealth coalitions of k = 1 and 2 with systematic errors) and
three generation seeds, as count-level councils (``chorus.aggregate.synthetic_councils``) written in the live council's
trace layout (``traces/<dataset>__<condition>.jsonl.gz``, each trace carrying dataset, condition,
adversaries and gen_seed). The paper report is then checkable end to end with no model at all.

Beside the traces, ``provenance.json`` records the generator's settings, seed and versions and
``mode: synthetic`` (what ``chorus.serving.standing`` reads for every analysis of the store); it names
no ``part``: a store is not a run directory."""
from __future__ import annotations

from pathlib import Path
from chorus.aggregate.synthetic_councils import Adversary, CouncilSpec, generate_council
from chorus.aggregate.trace import Trace, dump_traces
from chorus.core.config import InputError
from chorus.core.runs import library_versions, write_json

# (dataset, K, seat reliabilities): the binary sets differ a little, the seats' order of merit does not
DATASETS = (("claims_a", 2, (0.78, 0.70, 0.66)), ("claims_b", 2, (0.74, 0.70, 0.62)),
            ("claims_c", 2, (0.80, 0.66, 0.64)), ("pubmed_like", 3, (0.66, 0.60, 0.56)),
            ("mmlu_like", 4, (0.78, 0.70, 0.64)))
CONDITIONS = (("clean", ()), ("attack-k1", ("A3",)), ("attack-k2", ("A2", "A3")))


def write_store(out: str | Path, *, n_questions: int = 200, seeds: int = 3, seed: int = 0, p_wrong: float = 0.9,
                datasets: tuple = DATASETS) -> list[Path]:
    """Write the store; returns its trace files. ``n_questions`` per dataset, each generated ``seeds`` times."""

    if n_questions < 10 or seeds < 1:
        raise InputError(f"a synthetic store needs n_questions >= 10 and seeds >= 1, got {n_questions}, {seeds}")
    root = Path(out)
    (root / "traces").mkdir(parents=True, exist_ok=True)
    files = []
    for d_i, (name, K, rel) in enumerate(datasets):
        spec = CouncilSpec(n_tasks=n_questions * seeds, K=K, reliabilities=rel, repeats=seeds)
        for cond, seats in CONDITIONS:
            # most but not all adversarial moves anti-correct, as the live coalition complied (87-100%)
            adv = Adversary("persistent", k=len(seats), seats=seats, target="fixed", p_wrong=p_wrong) if seats else None
            trs = generate_council(spec, adversary=adv, seed=seed + 101 * d_i, prefix=name)
            trs = [Trace(task_id=f"{name}-q{j // seeds:04d}-s{j % seeds}", candidates=t.candidates, moves=t.moves,
                         gold=t.gold, question_id=f"{name}-q{j // seeds:04d}",
                         extra={"dataset": name, "condition": cond, "adversaries": list(seats), "gen_seed": j % seeds})
                   for j, t in enumerate(trs)]
            files.append(dump_traces(trs, root / "traces" / f"{name}__{cond}.jsonl.gz"))
    write_json(root / "provenance.json", {
        "mode": "synthetic", "generator": "chorus.simulate.council.campaign_synthetic.write_store",
        "settings": {"n_questions": n_questions, "seeds": seeds, "p_wrong": p_wrong,
                     "datasets": [[n, k, list(r)] for n, k, r in datasets],
                     "conditions": [[c, list(a)] for c, a in CONDITIONS]},
        "seeds": {"seed": seed}, "versions": library_versions()})
    return files
