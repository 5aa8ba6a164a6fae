"""Every shipped belief config, run as a user runs it (oracle mode, 2 seeds, 6 rounds), writes engine
tables equal to the ones recorded before the scalar and multi-concept layers were folded into one
engine, on any CPU: non-float values, shapes and dtypes exactly, floats within a stated tolerance
(``bench/belief_fingerprint.py``: each float column's L2 norm and four signed sums within 1e-9 of the
norm; numpy's AVX-512 exp/log move them by about 3e-16 of the norm). A change that moves a stored number
fails here, naming the config, the table and the column. The bit-for-bit sha256 record
(``belief_tables_sha256.json``, ``--check``) stays a benchmark for a machine of the recording kind."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "data" / "belief_tables_summary.json"
sys.path.insert(0, str(ROOT / "bench"))
from belief_fingerprint import compare_summaries, table_summary  # noqa: E402


def test_shipped_belief_configs_write_the_recorded_tables():
    rec = json.loads(RECORDED.read_text())
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "belief_fingerprint.py"), "--check-summary",
                          str(RECORDED)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"of {len(rec['configs'])} configs" in out.stdout and "within 1e-09" in out.stdout


def test_the_summary_tolerates_last_bits_and_catches_a_moved_number():
    """Hand-made cases: a 1-ulp change anywhere passes; one value moved by 1e-8 of the column's norm, a
    changed integer, a new NaN or a reordered column fails, each named."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"agent": np.arange(500) % 7, "b": rng.uniform(0, 1, 500), "e": rng.normal(0, 3, 500)})
    want = table_summary(df)
    assert table_summary(df.copy()) == want                       # the same bits: the same summary

    ulp = df.copy()
    ulp["b"] = np.nextafter(ulp["b"].to_numpy(), 2.0)             # every value one ulp up
    assert compare_summaries(want, table_summary(ulp)) is None

    moved = df.copy()
    moved.loc[123, "e"] += 1e-8 * np.linalg.norm(df["e"])
    assert "column e moved by" in compare_summaries(want, table_summary(moved))
    for change in (lambda d: d.assign(agent=d["agent"].where(d.index != 5, 99)),
                   lambda d: d.assign(b=d["b"].where(d.index != 9, np.nan)),
                   lambda d: d[["agent", "e", "b"]]):
        assert "non-float values" in compare_summaries(want, table_summary(change(df.copy())))
