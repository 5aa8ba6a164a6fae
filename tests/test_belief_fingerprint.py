"""Every shipped belief config, run as a user runs it (oracle mode, 2 seeds, 6 rounds), writes
engine tables identical to the ones recorded before the scalar and multi-concept layers were folded
into one engine (``bench/belief_fingerprint.py --write`` at that revision). A change that moves a
stored number fails here, naming the config and the table. Only the engine's tables are compared
here (their bits do not depend on the CPU); ``belief_fingerprint.py --check`` without ``--tables``
compares the analysis tables too, on the machine that recorded them."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "data" / "belief_tables_sha256.json"


def test_shipped_belief_configs_write_the_recorded_tables():
    rec = json.loads(RECORDED.read_text())
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "belief_fingerprint.py"), "--check", str(RECORDED),
                          "--seeds", str(rec["seeds"]), "--rounds", str(rec["rounds"]), "--tables", "engine"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "identical" in out.stdout and f"of {len(rec['configs'])} configs" in out.stdout
