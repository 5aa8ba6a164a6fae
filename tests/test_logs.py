"""Engine logs follow the run that is alive: a run folder removed in the same process (a notebook's
earlier run, a test's temporary one) neither stops the next vLLM engine nor keeps the logs."""
import logging
import os
import shutil
import warnings

import pytest

from chorus.core import logs


@pytest.fixture
def fresh_logs(monkeypatch):
    """The module's process-wide state as a new process has it, put back afterwards."""
    names = (*logs.ENGINE_LOGGERS, "py.warnings")
    saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).propagate) for n in names}
    monkeypatch.setattr(logs, "_current", None)
    monkeypatch.setattr(logs, "_handler", None)
    monkeypatch.delenv(logs.VERBOSE_ENV, raising=False)
    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH", raising=False)
    monkeypatch.delenv("VLLM_CONFIGURE_LOGGING", raising=False)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    yield
    for n, (handlers, prop) in saved.items():
        lg = logging.getLogger(n)
        for h in list(lg.handlers):
            if h not in handlers:
                lg.removeHandler(h)
                h.close()
        for h in handlers:
            if h not in lg.handlers:
                lg.addHandler(h)
        lg.propagate = prop


def test_a_removed_run_gives_the_logs_to_the_next(fresh_logs, tmp_path):
    first = tmp_path / "a" / "logs" / "engines.log"
    assert logs.engine_logs_to(first) == first
    cfg = os.environ["VLLM_LOGGING_CONFIG_PATH"]
    assert cfg == str(first.parent / "vllm-logging.json") and os.path.isfile(cfg)
    second = tmp_path / "b" / "logs" / "engines.log"
    assert logs.engine_logs_to(second) == first          # the first run of a process decides ...
    shutil.rmtree(tmp_path / "a")
    logs.vllm_logging_ready()                             # ... its folder gone, vLLM is not sent to a missing file
    assert "VLLM_LOGGING_CONFIG_PATH" not in os.environ
    assert logs.engine_logs_to(second) == second          # ... and the next run takes the logs over
    assert os.environ["VLLM_LOGGING_CONFIG_PATH"] == str(second.parent / "vllm-logging.json")
    logging.getLogger("vllm.test").warning("to the live run")
    assert "to the live run" in second.read_text()
    files = [h.baseFilename for h in logging.getLogger("vllm").handlers if isinstance(h, logging.FileHandler)]
    assert files.count(str(second)) == 1 and str(first) not in files   # the removed run's handler is gone


def test_a_users_own_vllm_logging_config_is_kept(fresh_logs, tmp_path, monkeypatch):
    theirs = tmp_path / "mine.json"
    monkeypatch.setenv("VLLM_LOGGING_CONFIG_PATH", str(theirs))   # missing, but theirs: vLLM says so itself
    logs.vllm_logging_ready()
    assert os.environ["VLLM_LOGGING_CONFIG_PATH"] == str(theirs)
