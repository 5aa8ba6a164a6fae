"""Engine logs go to the run directory, not the terminal: vLLM's, transformers' and the other
model libraries' log lines are appended to ``RUN/logs/engines.log`` from the first run a process
creates (nested runs write to the same file), so the terminal shows chorus's own progress and
results. ``chorus -v`` (``CHORUS_VERBOSE=1``) keeps them on the terminal as the libraries print
them. Standard library only: every package may call it.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path

VERBOSE_ENV = "CHORUS_VERBOSE"
ENGINE_LOGGERS = ("vllm", "transformers", "torch", "nnsight", "accelerate", "peft", "trl", "datasets",
                  "huggingface_hub", "xgrammar", "flashinfer")
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_VLLM_CFG = "vllm-logging.json"
_current: Path | None = None
_handler: logging.Handler | None = None


def quiet_native_logs() -> None:
    """Before torch loads: its C++ warnings (c10 logging on stderr) only from ERROR up."""
    if not verbose():
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def _library_warnings_to_log(show):
    """Warnings raised inside installed libraries go to the log; chorus's own (an old config key)
    stay on the terminal, where the user who can act on them is."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if "site-packages" in str(filename) or "dist-packages" in str(filename):
            logging.getLogger("py.warnings").warning("%s:%s: %s: %s", filename, lineno, category.__name__, message)
        else:
            show(message, category, filename, lineno, file, line)
    showwarning._chorus = True  # type: ignore[attr-defined]
    return showwarning


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def engine_log() -> Path | None:
    """The file engine logs go to in this process (None: the terminal)."""
    return _current


def engine_logs_to(path: str | Path) -> Path | None:
    """Send the model libraries' logs to ``path`` from now on; the first call in a process decides
    (a demo's top-level run, not the stage runs inside it). Returns the file, or None when verbose."""
    global _current, _handler
    if verbose() or (_current is not None and _current.parent.is_dir()):
        return _current
    # (an earlier run's folder that is gone, a notebook's or a test's: this run takes the logs over)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    if _handler is not None:
        for name in (*ENGINE_LOGGERS, "py.warnings"):
            logging.getLogger(name).removeHandler(_handler)
        _handler.close()
    _handler = handler
    handler.setFormatter(logging.Formatter(_FORMAT))
    for name in ENGINE_LOGGERS:    # loggers already configured (a library imported before the run)
        lg = logging.getLogger(name)
        for h in list(lg.handlers):
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                lg.removeHandler(h)
        lg.addHandler(handler)
        lg.propagate = False
    # libraries imported later configure themselves from the environment: vLLM from a logging
    # config file (in every process it starts), transformers from its verbosity
    theirs = os.environ.get("VLLM_LOGGING_CONFIG_PATH", "")
    if os.environ.get("VLLM_CONFIGURE_LOGGING", "1") != "0" and (not theirs or theirs.endswith(_VLLM_CFG)):
        cfg = path.parent / _VLLM_CFG   # (a parent chorus's own file is replaced: this run's log)
        cfg.write_text(json.dumps({
            "version": 1, "disable_existing_loggers": False, "formatters": {"f": {"format": _FORMAT}},
            "handlers": {"file": {"class": "logging.FileHandler", "filename": str(path), "formatter": "f"}},
            "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}}}))
        os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(cfg)
    logging.getLogger("py.warnings").addHandler(handler)
    logging.getLogger("py.warnings").propagate = False
    if not getattr(warnings.showwarning, "_chorus", False):
        warnings.showwarning = _library_warnings_to_log(warnings.showwarning)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")   # weight-loading bars
    if "transformers" in sys.modules:
        from transformers.utils import logging as tlog
        tlog.set_verbosity_error()
        tlog.disable_progress_bar()
    _current = path
    return path


def vllm_logging_ready() -> None:
    """Before a vLLM engine starts: every process it starts reads ``VLLM_LOGGING_CONFIG_PATH``, and
    refuses to start when that file is gone. chorus's own file goes with its run's folder (a notebook
    or a test that removed an earlier run): then vLLM logs as it does by default."""
    theirs = os.environ.get("VLLM_LOGGING_CONFIG_PATH", "")
    if theirs.endswith(_VLLM_CFG) and not Path(theirs).is_file():
        del os.environ["VLLM_LOGGING_CONFIG_PATH"]
