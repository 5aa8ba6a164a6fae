"""The one error boundary of the ``chorus`` command: whatever a command raises becomes one message
on stderr and a documented exit code, never a traceback (``--debug`` or ``CHORUS_DEBUG=1`` shows it).

Exit codes: 0 done; 1 the run failed (a server lost, a model that crashed, training that diverged) or
chorus has a bug; 2 bad input (a config, a data file, a model path or profile, a run directory, a value;
the message names it); 130 interrupted (Ctrl-C; rerun the same command to resume: completed calls are
in the run's store). Messages come from the errors themselves, which name the file, field and value
where they are raised; this module only decides the code and the shape.

Bad input is a type, not a guess: ``chorus.core.config.bad_input_types`` (``InputError``, from which
ConfigError and every part's own input error derive, and the few classes marked ``@bad_input``). A bare ``ValueError``,
``TypeError``, ``KeyError``... reaching this boundary is an unchecked case inside chorus: it is said
to be a bug (exit 1, the traceback one flag away), never blamed on the user. ``chorus -v CMD`` keeps the engines'
own log lines on the terminal (``chorus.core.logs``; otherwise they go to RUN/logs/engines.log).
"""
from __future__ import annotations

import json
import os
import sys
from typing import Callable
import chorus.interventions.knockout  # noqa: F401  (registers its @bad_input error)
import chorus.serving.plan  # noqa: F401  (registers the serving errors marked @bad_input)
from chorus.core.config import bad_input_types
from chorus.core.logs import quiet_native_logs
from chorus.core.runs import mark_failed

BAD_INPUT_EXIT, FAILED_EXIT = 2, 1
DEBUG_ENV = "CHORUS_DEBUG"


#: what an unchecked case inside chorus raises (Python's own errors of a wrong value, type, key or
#: index; not a lost server or a crashed model, which are failures of the run)
BUG_TYPES = (ValueError, TypeError, LookupError, AttributeError, NameError, AssertionError, ArithmeticError)


def describe(err: BaseException) -> str:
    """The error as one readable message (the last line of a chain is the useful one)."""
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text: byte {err.start} ({err.object[err.start:err.start + 1]!r}): {err.reason}"
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return f"{err.strerror}: {err.filename}"
    msg = str(err).strip()
    import yaml
    if isinstance(err, yaml.YAMLError):
        return "not valid YAML: " + " ".join(msg.split())
    if isinstance(err, json.JSONDecodeError):
        return f"not valid JSON: {msg}"
    return msg or type(err).__name__


def exit_code(err: BaseException) -> int:
    return BAD_INPUT_EXIT if isinstance(err, bad_input_types()) else FAILED_EXIT


def is_bug(err: BaseException) -> bool:
    """An error that is neither bad input nor a failure of the run: a case chorus did not check."""
    return isinstance(err, BUG_TYPES) and not isinstance(err, bad_input_types())


def run_command(app: Callable[..., object], argv: list[str] | None = None) -> int:
    """Run the typer ``app`` with ``argv`` (default ``sys.argv[1:]``) behind the boundary; returns
    the exit code. Typer keeps what it does well: usage errors (exit 2, its own message),
    ``typer.Exit`` codes, Ctrl-C (130)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0") or "--debug" in argv
    if "-v" in argv[:1] or "--verbose" in argv[:1]:   # `chorus -v CMD`: engine logs stay on the terminal
        from chorus.core.logs import VERBOSE_ENV
        os.environ[VERBOSE_ENV] = "1"
        argv = argv[1:]
    argv = [a for a in argv if a != "--debug"]
    quiet_native_logs()
    try:
        app(argv, prog_name="chorus")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            mark_failed(f"the command exited with code {code} (its message was printed)")
        return code
    except Exception as err:  # noqa: BLE001 - the boundary: every failure is one message
        mark_failed(f"{type(err).__name__}: {describe(err)}")   # a run it had started is a marked attempt
        if debug:
            raise
        code = exit_code(err)
        _print(err, code)
        return code
    return 0


def _print(err: BaseException, code: int) -> None:
    from rich.console import Console
    from rich.markup import escape

    if code == BAD_INPUT_EXIT:
        text = describe(err)
    elif is_bug(err):   # not the user's input: say so, and where the traceback is
        text = (f"a chorus bug: {type(err).__name__}: {describe(err)} (please report it; rerun with --debug or "
                f"{DEBUG_ENV}=1 for the traceback)")
    else:
        text = f"the run failed: {type(err).__name__}: {describe(err)} (--debug or {DEBUG_ENV}=1 for the traceback)"
    # escape: messages quote user values such as [0, 1]; soft_wrap: never break a path or line number
    Console(stderr=True).print(f"[red]error:[/red] {escape(text)}", highlight=False, soft_wrap=True)
