"""The Python front door (chorus/api.py) as a notebook uses it: the example in docs/python.md runs as
written, on the embedded model; bad input is one clear error naming the value."""
from __future__ import annotations

import re

import pytest
from conftest import ROOT

import chorus
from chorus.core.config import ConfigError

DOC = ROOT / "docs" / "python.md"


def test_the_documented_example_runs(tmp_path, monkeypatch):
    """Every line of the page's example, executed in a fresh folder (its runs land there)."""
    code, = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(code, str(DOC), "exec"), ns)
    run, belief = ns["run"], ns["belief"]
    assert run.path.resolve() == (tmp_path / "runs" / "api-debate").resolve() and (run.path / "report.html").is_file()
    turns = ns["turns"]
    assert len(turns) == 2 * 3 * 2 * 2 and set(turns["condition"]) == {"debate", "reflection"}   # 2 q x 3 agents x 2 rounds x 2
    assert run.config["rounds"] == 1 and run.provenance["part"] == "debate"
    assert belief.config["name"] == "api-belief" and belief.config["mode"] == "oracle" and not belief.plots
    assert ns["reply"].text


def test_run_takes_the_model_role_and_resumes_what_it_holds(tmp_path):
    """``model=`` is the config's model.profile; rerunning into the same folder resumes, as the CLI."""
    from chorus.simulate.belief.config import CONFIGS_DIR
    import yaml
    data = {**yaml.safe_load((CONFIGS_DIR / "degroot.yaml").read_text()), "mode": "oracle", "seeds": 1, "rounds": 3}
    a = chorus.run("belief run", data, out=tmp_path / "b", plots=False, progress=False)
    b = chorus.run("belief run", data, out=tmp_path / "b", plots=False, progress=False)
    assert a.summary == b.summary and a.table("beliefs").equals(b.table("beliefs"))
    with pytest.raises(ConfigError, match="gamma: 0.7 -> 0.5"):
        chorus.run("belief run", data, out=tmp_path / "b", set={"gamma": 0.5}, plots=False, progress=False)


def test_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no verb 'debate runn'; the verbs: aggregate run"):
        chorus.run("debate runn", "smoke")
    with pytest.raises(ConfigError, match="config not found: nope"):
        chorus.run("debate", "nope")
    with pytest.raises(ConfigError, match="not a chorus run directory"):
        chorus.open_run(tmp_path)
    assert {"debate run", "influence knockout", "belief correct fit"} <= set(chorus.verbs())
    from chorus.api import _verb
    assert _verb("belief correct fit").key == ("belief correct", "fit") and _verb("debate").key == ("debate", "run")
    with pytest.raises(ConfigError, match="no verb ''"):
        chorus.run("", "smoke")
    assert chorus.open_run
    # the front door is lazy: importing chorus.core alone loads neither it nor the parts' registry
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", "import sys, chorus.core.runs; "
                        "print(sorted(m for m in ('chorus.api', 'chorus.registry') if m in sys.modules))"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr
