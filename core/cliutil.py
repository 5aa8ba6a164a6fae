"""What every part's CLI shares: the error exit, ``--set KEY=VALUE`` overrides (the progress bar
is ``chorus.core.progress``), and the commands built from the two registries: experiment verbs
(``add_verbs``, ``chorus.core.verbs``) and analyses over stored runs or trace files (``add_analyses``,
``chorus.core.analyses``)."""
from __future__ import annotations

from typing import Any, Callable, Optional

import typer

from chorus.core.analyses import analyses, is_csv
from chorus.core.config import ConfigError, bad_input_types
from chorus.core.progress import progress
from chorus.core.verbs import Option, resolve, verbs


def fail(err: object, code: int = 2) -> None:
    """Print a clear error on stderr and exit non-zero (2: bad input)."""
    from rich.console import Console
    from rich.markup import escape

    # escape: messages quote user values such as [0, 1]; soft_wrap: never break a path or line number
    Console(stderr=True).print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def parse_overrides(sets: Optional[list[str]]) -> dict:
    """``--set a.b=VALUE`` pairs into {"a.b": value}; values are read as YAML."""
    import yaml

    out = {}
    for s in sets or []:
        if "=" not in s:
            raise ConfigError(f"--set {s!r}: expected KEY=VALUE")
        k, v = s.split("=", 1)
        try:
            out[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError as err:
            why = " ".join(str(getattr(err, "problem", None) or err).split())
            raise ConfigError(f"--set {s!r}: the value is not valid YAML ({why})") from None
    return out


# -- renamed spellings, kept one release ------------------------------------------------------------------
def deprecated(old: str, new: str) -> None:
    """Say on stderr that ``old`` (a command or an option) is now ``new``; the old spelling still works
    for this release."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[yellow]warning:[/yellow] {escape(old)} is now {escape(new)}; the old spelling "
                               f"goes in the next release", highlight=False, soft_wrap=True)


def renamed_option(value: Any, old: str, new: str, current: Any = None) -> Any:
    """The value of an option given under its old spelling (a hidden option), with the warning; else
    ``current`` (the new option's value). Both given is bad input."""
    if value is None:
        return current
    if current is not None:
        raise typer.BadParameter(f"{old} and {new} name the same thing: give {new} only")
    deprecated(old, new)
    return value


def model_option(help: str = "The model: a profile, a model folder or a Hugging Face id from the local cache.",
                 default: Any = None) -> Any:
    """``-m/--model``: the one option that chooses a model, in every command that takes one."""
    return typer.Option(default, "--model", "-m", help=help)


def plots_option(help: str = "Draw the figures (--no-plots: skip them).") -> Any:
    return typer.Option(True, "--plots/--no-plots", help=help)


# -- commands built from the verb registry (chorus.core.verbs) -------------------------------------------
SET_HELP = "Override a config field: --set seed=1 --set {model}=NAME (YAML values; repeatable)."


def set_help(v) -> str:
    """The ``--set`` help of a verb: its own, else the shared one with the verb's own model field."""
    if v.set_help:
        return v.set_help
    if v.model is None:
        return "Override a config field: --set seed=1 (YAML values; repeatable)."
    return SET_HELP.format(model=v.model.replace(".*.", ".0."))


def add_verbs(app: typer.Typer, group: str) -> None:
    """Mount every registered verb of ``group`` on ``app``: ``NAME CONFIG [-m MODEL] [--out] [--set]
    [--plots/--no-plots] [--check] [own options]`` (``[CONFIG]`` for a verb with a ``default_config``;
    the verb's ``argument``, e.g. RUN_DIR, in place of CONFIG; a verb's own ``out`` option in place of
    ``--out``, none with ``no_out``), plus the group's ``recompute RUN [--plots/--no-plots]`` where a
    verb has a ``report`` (and its old name, hidden, with a warning). ``group`` may be two words
    (``belief correct``: the verbs of a nested app)."""
    mounted = {c.name for c in app.registered_commands}   # a part may mount its verbs in several places
    for v in verbs(group):
        if v.name in mounted:
            continue
        app.command(v.name, help=v.help)(_run_command(v))
        if v.recomputes:
            app.command("recompute", help=RECOMPUTE_HELP)(_recompute_command(v))
            if v.recompute_alias:
                app.command(v.recompute_alias, hidden=True, help=RECOMPUTE_HELP)(
                    _recompute_command(v, old=f"chorus {group} {v.recompute_alias}"))


RECOMPUTE_HELP = ("Recompute summary.json and the plots from a run directory's files alone (no model calls); "
                  "the HTML report is `chorus report RUN`.")


def config_value(val: Any) -> Any:
    """An option's value as a config override: typed as ``--set`` would read it (a path as its string,
    a repeatable option as a list, an enum as its value; numbers and booleans as they are)."""
    from enum import Enum
    from pathlib import PurePath
    if isinstance(val, (list, tuple)):
        return [config_value(x) for x in val]
    if isinstance(val, PurePath):
        return str(val)
    if isinstance(val, Enum):
        return val.value
    return val


def option_values(v, kw: dict, given: Callable[[str], bool]) -> tuple[dict, dict, dict]:
    """A verb's positional ``argument`` (where it has one) and own options by where they go: (config
    overrides, ``run`` keywords, progress-bar keywords). ``given(name)``: whether the option was on
    the command line; a ``config:`` option overrides its field only then (and not as None), so a
    config file's value stands otherwise (the argument, required, always does). An option with
    ``parse`` goes there parsed; one into ``config`` (the config itself) is ``config_name``'s."""
    over: dict = {}
    run_kw: dict = {}
    bar: dict = {}
    for o in ((v.argument,) if v.argument is not None else ()) + tuple(v.options):
        kind, _, target = o.into.partition(":")
        if not target:   # into "config": which config is loaded (config_name), not a value in it
            continue
        val = kw[o.name]
        if kind == "config":
            if val is None or not (o is v.argument or given(o.name)):
                continue
            if o.const is not None:   # a flag that sets its field to one value (--synthetic: mode=synthetic)
                if val:
                    over[target] = o.const
                continue
            over[target] = config_value(_parsed(o, (not val) if o.negate else val))
        else:   # run: a keyword of the verb's run; progress: of the progress bar
            (run_kw if kind == "run" else bar)[target] = _parsed(o, (not val) if o.negate else val)
    return over, run_kw, bar


def _parsed(o, val: Any) -> Any:
    """An option's value through its ``parse`` function (imported now), if it has one."""
    if o.parse is None or val is None:
        return val
    return resolve(o.parse)(val)


def config_name(v, kw: dict) -> Any:
    """The config a command loads: CONFIG as given; for a verb with an ``argument``, its option into
    ``config`` where given (``--config FILE``), else the verb's ``default_config``."""
    if v.argument is None:
        return kw["config"]
    for o in v.options:
        if o.into == "config" and kw[o.name] is not None:
            return str(kw[o.name])
    return v.default_config


def _given(ctx: typer.Context | None, name: str) -> bool:
    """Whether option ``name`` of the running command was given, not left at its default (its
    parameter source is the command line or the environment)."""
    src = ctx.get_parameter_source(name) if ctx is not None else None
    return src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")


def _out_option(v):
    """The run directory's option: the verb's own, else the shared ``--out`` (run's positional); None
    for a verb with ``no_out``."""
    from pathlib import Path

    if v.no_out:
        return None
    suffix = "-VERB" if v.run_args else ""
    return v.out or Option("out", "--out", Optional[Path], None,
                           f"Run directory (default runs/{v.group}/NAME{suffix}-TIME); rerun it to resume.", "")


def _run_command(v):
    import inspect
    from typing import List

    out_opt = _out_option(v)

    def command(**kw):
        from rich.console import Console

        con = Console()
        try:
            over = parse_overrides(kw["set_"])
            if v.model is not None and kw.get("model") is not None:
                over[v.model] = kw["model"]
            own, run_kw, bar = option_values(v, kw, lambda name: _given(kw["ctx"], name))
            over.update(own)
            config = config_name(v, kw)
            cfg = v.load_config(config, over)
            source = v.implementation().source
            if source is not None:
                run_kw["source"] = str(source(config))
            if kw["check"]:
                _print_check(v, cfg)
                return
            if v.announce:
                v.announce(con, cfg)
            name = getattr(cfg, "name", None) or v.name
            label = v.label(cfg) if v.label else f"{name} {v.run_args[0]}" if v.run_args else name
            if v.plots:
                run_kw["make_plots"] = kw["plots"]
            if not v.bar:
                bar["enabled"] = False
            with progress(label, v.unit, **bar) as update:
                rundir, summary = v.execute(cfg, kw[out_opt.name] if out_opt else None, progress=update, **run_kw)
        except bad_input_types() as err:   # not ValueError: one chorus did not raise as bad input is a bug
            fail(err)
        v.show(con, rundir.path, summary)

    P = inspect.Parameter
    if v.argument is not None:   # a verb over a stored run: RUN_DIR in place of CONFIG
        a = v.argument
        params = [P(a.name, P.POSITIONAL_OR_KEYWORD, annotation=a.type, default=typer.Argument(a.default, help=a.help))]
    else:
        config_arg = (typer.Argument(..., help=v.config_help) if v.default_config is None else
                      typer.Argument(v.default_config, help=v.config_help))
        params = [P("config", P.POSITIONAL_OR_KEYWORD, annotation=str, default=config_arg)]
    if v.model is not None:
        params.append(P("model", P.KEYWORD_ONLY, annotation=Optional[str], default=model_option(
            f"The model ({v.model}): a profile, a model folder or a Hugging Face id from the local cache.")))
    if out_opt is not None:
        params.append(P(out_opt.name, P.KEYWORD_ONLY, annotation=out_opt.type,
                        default=typer.Option(out_opt.default, out_opt.flag, help=out_opt.help)))
    params.append(P("set_", P.KEYWORD_ONLY, annotation=Optional[List[str]],
                    default=typer.Option(None, "--set", help=set_help(v))))
    if v.plots:
        params.append(P("plots", P.KEYWORD_ONLY, annotation=bool, default=plots_option(v.plots_help or
                                                                                        "Draw the figures (--no-plots: skip them).")))
    params += [P(o.name, P.KEYWORD_ONLY, annotation=o.type, default=typer.Option(
                   o.default, *o.flag.split(), help=o.help, **({} if o.min is None else {"min": o.min})))
               for o in v.options]
    params.append(P("check", P.KEYWORD_ONLY, annotation=bool, default=typer.Option(
        False, "--check", help="Validate the config and print what the run would hold (its device plan); "
                               "no model is loaded or called, no run directory made.")))
    params.append(P("ctx", P.KEYWORD_ONLY, annotation=typer.Context, default=None))   # filled in by typer

    def entry(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return command(**{"plots": True, **bound.arguments})

    sig = inspect.Signature(params)
    entry.__signature__ = sig
    entry.__annotations__ = {p.name: p.annotation for p in params}
    entry.__name__ = entry.__qualname__ = v.name.replace("-", "_")
    entry.__doc__ = v.help
    return entry


def _recompute_command(v, old: str | None = None):
    from pathlib import Path

    def recompute(run_dir: Path = typer.Argument(..., help=f"A {v.group} run directory."),
                  plots: bool = plots_option()) -> None:
        from rich.console import Console

        if old is not None:
            deprecated(old, f"chorus {v.group} recompute")
        try:
            summary = v.implementation().report(run_dir, make_plots=plots)
        except bad_input_types() as err:   # not ValueError: one chorus did not raise as bad input is a bug
            fail(err)
        v.show(Console(), run_dir, summary)
    recompute.__annotations__ = {"run_dir": Path, "plots": bool, "return": None}
    return recompute


def _print_check(v, cfg) -> None:
    """``--check``: the config is valid; the device plan (every phase, engine, role and size) and its reason."""
    from rich.console import Console

    con = Console()
    check = v.implementation().check
    plan = check(cfg, *v.run_args) if check is not None else None   # raises on a plan that cannot hold
    name = getattr(cfg, "name", None) or v.name
    con.print(f"config OK: {name} ({v.group} {v.name}); no model was loaded or called", highlight=False)
    if v.announce:
        v.announce(con, cfg)
    if plan is None:   # a verb that holds no model (an oracle run), or one without a plan yet
        return
    for ph in plan.phases:
        engines = "; ".join(f"{e.name} for {', '.join(e.roles)} (needs {e.need_gib:.2f} GiB)" for e in ph.engines)
        con.print(f"phase {ph.name} ({ph.mode}): {engines}", highlight=False, soft_wrap=True)
    con.print(f"plan: {plan.reason}", highlight=False, soft_wrap=True)


# -- commands built from the analysis registry (chorus.core.analyses) ----------------------------------
def add_analyses(app: typer.Typer, group: str, standing: Callable[[Path], str] | None = None) -> None:
    """Mount every registered analysis of ``group`` on ``app``: ``NAME SOURCES... [--field-name VALUE]...
    [--out RUN] [--plots/--no-plots]``, the options read from its config's fields. ``standing(run_dir)``
    (the group's, from ``chorus.serving.standing``, which ``core`` cannot import) is the sentence saying
    where the numbers come from, printed under the analysis's table."""
    mounted = {c.name: getattr(c.callback, "analysis", None) for c in app.registered_commands}
    for a in analyses(group):
        if a.name in mounted and mounted[a.name] is not a:   # a verb or another command of that name
            raise ValueError(f"analysis {' '.join(a.key)!r}: the group already has a command {a.name!r}")
        if a.name not in mounted:
            app.command(a.name, help=a.help)(_analysis_command(a, standing))


def _analysis_params(a) -> list:
    """The command's parameters from the config's fields: the first source field positional, the others
    ``--field-name`` (``--x/--no-x`` for a boolean; a ``Csv`` list as one comma-separated string), each
    with its default and its description as help."""
    import inspect
    import typing
    from pathlib import Path
    from typing import Annotated

    P = inspect.Parameter
    positional = a.reads[0][0]
    params = []
    for name, f in a.config.model_fields.items():
        default = ... if f.is_required() else f.default
        ann, help = f.annotation, f.description or ""
        if is_csv(a.config, name):   # the command line keeps "a,b,c"; the config validates it into a typed list
            ann = Optional[str] if default is None else str
            default = default if default in (None, ...) else ",".join(str(x) for x in default)
        flag = "--" + name.replace("_", "-")
        if name == positional:   # named as a user types it: RUN..., TRACES..., NAME=FILE...
            reads = dict(a.reads)[name]
            metavar = "NAME=FILE" if reads.named else ("RUN" if reads.kind == "runs" else "TRACES")
            many = typing.get_origin(typing.get_args(ann)[0] if typing.get_origin(ann) is Annotated else ann) is list
            params.insert(0, P(name, P.POSITIONAL_OR_KEYWORD, annotation=ann, default=typer.Argument(
                default, help=help, metavar=metavar + ("..." if many else ""))))
        elif ann is bool:
            params.append(P(name, P.KEYWORD_ONLY, annotation=bool,
                            default=typer.Option(default, f"{flag}/--no-{flag[2:]}", help=help)))
        else:
            params.append(P(name, P.KEYWORD_ONLY, annotation=ann, default=typer.Option(default, flag, help=help)))
    params.append(P("out", P.KEYWORD_ONLY, annotation=Optional[Path], default=typer.Option(
        None, "--out", help=f"Run directory (default runs/{a.group}/{a.name}-TIME): config, provenance with each "
                            f"source's fingerprint, tables/, summary.json{', plots/' if a.plots else ''}; sealed "
                            f"(chorus verify).")))
    if a.plots:
        params.append(P("plots", P.KEYWORD_ONLY, annotation=bool, default=plots_option()))
    return params


def show_analysis(a, result, standing: Callable[[Path], str] | None = None) -> None:
    """What an analysis command prints once its run is written: its table (``a.show``), where the numbers
    come from and the run directory (stderr: stdout stays what the analysis printed, JSON parseable),
    and exit 1 for a failed check (after its record is written)."""
    from rich.console import Console

    a.show(Console(), result)
    err = Console(stderr=True)
    if standing is not None and result.path is not None:
        err.print(f"numbers from: {standing(result.path)}", highlight=False, soft_wrap=True, markup=False)
    err.print(f"run directory: {result.path} ({', '.join(result.files())})",
              highlight=False, soft_wrap=True, markup=False)
    reason = a.fails(result.summary) if a.fails else None
    if reason:
        fail(f"FAILED: {reason}", code=1)


def _analysis_command(a, standing: Callable[[Path], str] | None = None):
    import inspect

    def entry(*args, **kwargs):
        from rich.console import Console

        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        out, plots = values.pop("out"), values.pop("plots", True)
        try:
            result = a.run(a.load(values), out, plots=plots)
        except bad_input_types() as err:   # not ValueError: one chorus did not raise as bad input is a bug
            fail(err)
        show_analysis(a, result, standing)

    params = _analysis_params(a)
    sig = inspect.Signature(params)
    entry.__signature__ = sig
    entry.__annotations__ = {p.name: p.annotation for p in params}
    entry.__name__ = entry.__qualname__ = a.name.replace("-", "_")
    entry.__doc__ = a.help
    entry.analysis = a   # what add_analyses recognises as already mounted
    return entry
