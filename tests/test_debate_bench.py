"""Bench builder (the evaluation sets shipped with chorus) and loader validation; prompt isolation."""
import json

import pytest

from chorus.simulate.debate.prompts import load_prompts, turn_messages
from chorus.simulate.debate.questions import BenchError, build_bench, load_bench, validate_item, write_bench

GOOD = {"id": "q1", "domain": "knowledge", "subdomain": "x", "family": "f1", "question": "2+2?",
        "options": ["3", "4"], "reference": "B"}


def _write(tmp_path, lines):
    p = tmp_path / "b.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


def test_build_small_bench_roundtrip(tmp_path):
    counts = {"misconceptions": 5, "disciplinary": 5, "strategy": 5, "biomedical": 3, "moral_scenarios": 4,
              "moral_disputes": 3, "contested": None}
    items, man = build_bench(seed=0, counts=counts)
    again, _ = build_bench(seed=0, counts=counts)
    assert [i.id for i in items] == [i.id for i in again]  # deterministic
    assert man["counts"]["values/contested"] == 48 and man["n_items"] == len(items) == 25 + 48
    assert all(it.reference is None for it in items if it.subdomain == "contested")
    assert all(it.provenance.get("source_file") for it in items)
    assert all(it.reference in it.labels for it in items if it.reference is not None)
    # variants of a constructed scenario share a family
    fams = {it.family for it in items if it.subdomain == "contested"}
    assert len(fams) == 16
    p = tmp_path / "bench.jsonl"
    write_bench(items, p)
    loaded = load_bench(p)
    assert [i.to_dict() for i in loaded] == [i.to_dict() for i in items]


@pytest.mark.parametrize("bad,msg", [
    ({**GOOD, "options": ["4", "4"]}, "duplicated option"),
    ({**GOOD, "options": ["4"]}, "'options'"),
    ({**GOOD, "options": ["3", ""]}, "options[1]"),
    ({**GOOD, "reference": "C"}, "'reference'"),
    ({**GOOD, "question": ""}, "'question'"),
    ({k: v for k, v in GOOD.items() if k != "family"}, "'family'"),
    ({**GOOD, "labels": ["A"]}, "'labels'"),
    ({**GOOD, "labels": ["yes", "YES"]}, "duplicated label"),
    ({**GOOD, "extra": 1}, "unknown field"),
])
def test_loader_names_line_and_field(tmp_path, bad, msg):
    p = _write(tmp_path, [GOOD | {"id": "q0"}, bad])
    with pytest.raises(BenchError) as e:
        load_bench(p)
    assert "line 2" in str(e.value) and msg in str(e.value)


def test_loader_bad_json_and_duplicate_ids(tmp_path):
    with pytest.raises(BenchError, match="line 2: not valid JSON"):
        load_bench(_write(tmp_path, [GOOD, "{nope"]))
    with pytest.raises(BenchError, match="line 2: field 'id'.*duplicates line 1"):
        load_bench(_write(tmp_path, [GOOD, GOOD]))


def test_numeric_item_loads():
    it = validate_item({**GOOD, "options": None, "reference": 4})
    assert it.numeric and it.labels is None and it.reference == "4"


def test_reflection_prompts_never_contain_other_agents_text():
    P = load_prompts()
    it = validate_item(GOOD)
    prev = ["OWN-0 text Answer: A", "PEER-1 secret Answer: B", "PEER-2 other Answer: A"]
    for agent in range(3):
        refl = json.dumps(turn_messages(it, agent, 1, "reflection", prev, P))
        deb = json.dumps(turn_messages(it, agent, 1, "debate", prev, P))
        for j, t in enumerate(prev):
            key = t.split()[0]
            assert (key in refl) == (j == agent)
            assert key in deb
    assert turn_messages(it, 0, 0, "reflection", [], P) == turn_messages(it, 0, 0, "debate", [], P)
