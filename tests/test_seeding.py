"""chorus.core.seeding.stable_int: the one id-to-integer function. Every call site passes the width and
hash that reproduce the expression it replaced, bit for bit (stored calls are keyed by the seeds
derived from these integers); the old expressions are written out here and compared."""
from __future__ import annotations

import hashlib
import zlib

import numpy as np
import pandas as pd
import pytest

from chorus.core.seeding import stable_int

IDS = ["", "q0", "mmlu-anatomy-3", "tqa-17", "pmqa-12345678", "émoji-✓ and ß", "A" * 500, "lda",
       "majority", "full_dynamics|g3|alice|2|message"] + [f"task-{i}" for i in range(200)]


# the expressions the call sites held before chorus.core.seeding.stable_int
def old_council_task_key(s: str) -> int:       # simulate/council/runner.py task_key
    return int(hashlib.sha256(s.encode()).hexdigest()[:7], 16)


def old_corrupt_task_key(s: str) -> int:       # aggregate/corrupt.py task_key
    return int(hashlib.sha256(s.encode("utf-8")).hexdigest()[:8], 16) >> 1


def old_digest_key(s: str) -> int:             # simulate/judge.py _key, simulate/debate/protocol.py qkey,
    return int.from_bytes(hashlib.sha256(s.encode()).digest()[:4], "big") >> 1   # simulate/debate/metrics.py _qkey


def old_crc32(s: str) -> int:                  # aggregate/selection.py name_key, simulate/roleplay/setups.py
    return zlib.crc32(s.encode())              # slot_seed, simulate/belief/cross.py subsample, serving/backends/synthetic.py _gen


@pytest.mark.parametrize("s", IDS)
def test_every_old_expression_is_reproduced(s):
    assert stable_int(s, bits=28) == old_council_task_key(s)
    assert stable_int(s, bits=31) == stable_int(s) == old_corrupt_task_key(s) == old_digest_key(s)
    assert stable_int(s, bits=32, algo="crc32") == old_crc32(s)


def test_literal_values():
    # hard-coded: a change of the function (not only of an old expression) fails here
    assert stable_int("q0", bits=28) == 54640803
    assert stable_int("q0") == 437126431
    assert stable_int("q0", bits=32, algo="crc32") == 1361341156
    assert stable_int("mmlu-anatomy-3", bits=28) == 204280932
    assert stable_int("mmlu-anatomy-3") == 1634247463
    assert stable_int("lda", bits=32, algo="crc32") == 2242384955


def test_call_sites_use_it():
    import chorus.aggregate.corrupt as corrupt
    import chorus.aggregate.selection as selection
    import chorus.simulate.council.runner as runner
    import chorus.simulate.debate.metrics as metrics
    import chorus.simulate.debate.protocol as protocol
    import chorus.simulate.judge as judge
    import chorus.simulate.roleplay.setups as setups
    from chorus.simulate.belief.cross import subsample

    for s in IDS[:40]:
        assert runner.task_key(s) == old_council_task_key(s)
        assert corrupt.task_key(s) == old_corrupt_task_key(s)
        assert judge._key(s) == protocol.qkey(s) == metrics._qkey(s) == old_digest_key(s)
        assert selection.name_key(s) == old_crc32(s)
    parts = (7, "full_dynamics", "g3", "alice", 2)
    key = old_crc32("|".join(map(str, parts[1:])))
    want = int(np.random.SeedSequence([7, key]).generate_state(1, dtype=np.uint64)[0] % (2**63))
    assert setups.slot_seed(*parts) == want
    from chorus.core.seeding import rng
    df = pd.DataFrame({"a": range(40)})
    want = np.sort(rng(3, 31, old_crc32("m-1")).choice(40, 9, replace=False)).tolist()
    assert subsample(df, 9, 3, "m-1")["a"].tolist() == want


def test_bad_parameters_fail():
    with pytest.raises(ValueError, match="bits"):
        stable_int("x", bits=33, algo="crc32")
    with pytest.raises(ValueError, match="bits"):
        stable_int("x", bits=0)
    with pytest.raises(ValueError, match="algo"):
        stable_int("x", algo="md5")
