"""One experiment shape: every verb chorus runs over a config is one registered ``Verb`` with the
same few functions, returned by its lazy factory (``Impl``) and imported only when the command runs
(so ``chorus --help`` loads no part's heavy modules):

- ``load``: the config (a shipped name or a path; a verb with ``default_config`` may leave it out) with
  ``--set`` overrides, validated, no model call;
- ``check``: what the run would hold (its device plan) and the inputs it reads, still no model call;
- ``run``: the run into a run directory, returning ``(RunDir, summary)``;
- ``report``: the summary (and plots) recomputed from a run directory alone.

Parts register their verbs in their CLI modules; ``chorus.core.cliutil.add_verbs`` builds every typer
command from this registry with the shared options (CONFIG, ``-m/--model``, ``--set``, ``--out``,
``--plots/--no-plots``, ``--check``), so no command body is written twice.

A verb over a stored run directory (``chorus belief correct fit RUN_DIR``, ``chorus influence
counterfactual RUN_DIR``, ``chorus debate belief RUN_DIR``) has an ``argument`` in place of CONFIG:
its value goes where the argument's ``into`` says (``config:run``), and the config is the verb's
``default_config`` (a shipped default; the loader's own default where that is None) with its own
options and ``--set`` over it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from chorus.core.config import InputError


@dataclass(frozen=True)
class Option:
    """A verb's own option beyond the shared ones: ``into`` is ``config:FIELD`` (the value overrides
    the dotted FIELD, as ``--set FIELD=...`` would, typed: a number stays a number, a repeatable
    option a list, a path a string; only when the option is given, so a config file's value stands
    otherwise), ``run:KWARG`` (a keyword of ``run``) or ``progress:KWARG`` (of the progress bar, e.g.
    ``enabled``); ``negate`` for a flag whose value is its opposite (``--no-aggregate``:
    aggregate=False; ``--quiet``: enabled=False; ``--no-store``: store=False); ``const`` for a flag
    into a config field that takes this value when the flag is given (``--synthetic``:
    mode=synthetic). ``default`` ``...`` makes the option required. ``into`` ``config`` (no field), for
    a verb with an ``argument``: the option names the config itself (a path or a shipped name) in
    place of the verb's ``default_config`` (``chorus debate belief RUN --config FILE``).

    ``parse``: a "module:function" reference turning the option's value, as given, into what goes
    where ``into`` says (``--layers 3-7`` -> [3, ..., 7]), imported only when the command runs; its
    errors are the verb's bad input. ``min``: the command line's lower bound of a number (typer's
    ``min``: ``[x>=4]`` in the help, a usage error below it)."""
    name: str
    flag: str
    type: Any
    default: Any
    help: str
    into: str
    negate: bool = False
    const: Any = None
    parse: str | None = None
    min: float | None = None


@dataclass(frozen=True)
class Impl:
    """What a verb runs, as its lazy factory returns it (inspect_ai's ``@modelapi`` pattern: the factory
    imports the part's modules inside, so ``chorus --help`` imports none, and each name here is a real
    object go-to-definition reaches). ``load(config, overrides) -> cfg`` (a shipped name or a path);
    ``run(cfg, *run_args, out, progress=, make_plots=, **options) -> (RunDir, summary)``; ``check(cfg,
    *run_args) -> DevicePlan`` (no model call); ``report(run_dir, make_plots=) -> summary`` from the run
    directory alone; ``source(config) -> Path`` the config file's path, passed to ``run`` as ``source``."""
    load: Callable[[Any, dict[str, Any]], Any]
    run: Callable[..., Any]
    check: Callable[..., Any] | None = None
    report: Callable[..., Any] | None = None
    source: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Verb:
    group: str                       # the command group (``chorus GROUP NAME``)
    name: str
    help: str                        # the command's help text
    config_help: str                 # the CONFIG argument's help (which shipped names exist)
    impl: Callable[[], Impl]         # the lazy factory of what it runs (``Impl``), called when the command runs
    show: Callable[[Any, Any, dict], None]   # (console, run path, summary): what the terminal prints
    run_args: tuple[Any, ...] = ()   # e.g. the influence verb's name
    recomputes: bool = False         # ``chorus GROUP recompute RUN`` runs its ``report``
    recompute_alias: str | None = None  # the old name of the group's ``recompute`` command (which runs
                                        # ``report``), kept one release with a warning ("report", "eval")
    unit: str = "calls"              # what the progress bar counts
    plots: bool = True               # whether the verb draws figures (``--no-plots``)
    options: tuple[Option, ...] = ()
    default_config: str | None = None  # CONFIG may be left out ([CONFIG]): this shipped name is loaded
    out: Option | None = None        # the run directory's own option (flag, help, "run:KWARG"), passed to
                                     # ``run`` as that keyword, in place of the shared --out (run's positional)
    set_help: str | None = None      # the --set help, where the verb's own says more than the shared one
    label: Callable[[Any], str] | None = None   # (cfg) -> the progress bar's label (default: the config's name)
    announce: Callable[[Any, Any], None] | None = None  # (console, cfg): printed once the config is valid,
                                                        # before the run (and under --check)
    argument: Option | None = None   # the positional argument in place of CONFIG (a verb over a stored run:
                                     # RUN_DIR into config:run; its flag is the name the docs give it, the
                                     # help shows its parameter name); the config is then default_config
                                     # (or an option into "config") with the own options and --set over it
    no_out: bool = False             # no run-directory option at all: the verb writes where its argument
                                     # says (correct fit: into RUN_DIR and the store); run gets none
    bar: bool = True                 # whether the command draws a progress bar (False: a run that reports none)
    plots_help: str | None = None    # the --plots/--no-plots help, where the verb's own says more than the shared one
    configs: str | None = None       # its shipped configs, for ``chorus configs``: "module:ATTR" of their folder,
                                     # then "/" and comma-separated globs relative to it; "!GLOB" leaves files
                                     # out, "+KEY" keeps those with a top-level KEY
                                     # ("chorus.simulate.belief.config:CONFIGS_DIR/*.yaml,!multi_*.yaml,+sweep")
    model: str | None = None         # the config field ``-m/--model`` sets (dotted; ``*`` for every item of a
                                     # list: ``seats.*.profile``); None: the verb takes no model (or has its own)

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.name)

    def implementation(self) -> Impl:
        """``impl()``: the modules import once per process; the names are looked up on each call (so a
        test's replacement of a part's function is what runs)."""
        return self.impl()

    def load_config(self, config: str, overrides: dict[str, Any]) -> Any:
        return self.implementation().load(config, overrides)

    def execute(self, cfg: Any, run_dir: Any = None, /, **run_kw: Any) -> tuple[Any, dict[str, Any]]:
        """``run`` on a loaded config with the verb's fixed arguments (``run_kw`` adds keywords:
        ``progress``, ``make_plots``, an ``engine`` already loaded); ``run_dir`` goes where the verb takes
        it (its own option's keyword, else run's positional; a verb with ``no_out`` takes none)."""
        run = self.implementation().run
        if self.no_out:
            if run_dir is not None:
                raise InputError(f"verb {' '.join(self.key)!r} writes where its argument says: it takes no run "
                                 f"directory (got {run_dir})")
            return run(cfg, *self.run_args, **run_kw)
        if self.out is not None:
            run_kw[self.out.into.partition(":")[2]] = run_dir
            return run(cfg, *self.run_args, **run_kw)
        return run(cfg, *self.run_args, run_dir, **run_kw)

    def model_override(self, model: Any) -> dict[str, Any]:
        """The config override that ``-m/--model MODEL`` makes for this verb: into ``model`` (the shared
        option), else into the verb's own ``model`` option's field (a list field takes a list); a verb that
        takes no model refuses it."""
        if self.model is not None:
            return {self.model: model}
        for o in self.options:
            kind, _, target = o.into.partition(":")
            if o.name == "model" and kind == "config" and target:
                many = "List" in str(o.type) or "list" in str(o.type)
                return {target: list(model) if many and isinstance(model, (list, tuple)) else [model] if many else model}
        raise ValueError(f"verb {' '.join(self.key)!r} takes no model (it reads a stored run or calls none)")

    def shipped_configs(self) -> list[Any]:
        """The shipped config files this verb takes by name (``chorus configs``), sorted by name."""
        import fnmatch
        import re

        if self.configs is None:
            return []
        ref, _, patterns = self.configs.partition("/")
        parts = (patterns or "*.yaml").split(",")
        take = [p for p in parts if p[0] not in "!+"]
        drop = [p[1:] for p in parts if p[0] == "!"]
        keys = [p[1:] for p in parts if p[0] == "+"]
        found = {f for g in take for f in resolve(ref).glob(g)
                 if not any(fnmatch.fnmatch(f.name, d) for d in drop)
                 and all(re.search(rf"^{re.escape(k)}:", f.read_text(encoding="utf-8"), re.M) for k in keys)}
        return sorted(found, key=lambda p: p.stem)

REGISTRY: dict[tuple[str, str], Verb] = {}


def register(verb: Verb) -> Verb:
    """Add ``verb``; a second verb under the same group and name is a programming error."""
    if verb.key in REGISTRY and REGISTRY[verb.key] is not verb:
        raise ValueError(f"verb {' '.join(verb.key)!r} is registered twice")
    REGISTRY[verb.key] = verb
    return verb


def verbs(group: str | None = None) -> list[Verb]:
    """The registered verbs (of ``group``), in registration order."""
    return [v for v in REGISTRY.values() if group is None or v.group == group]


def resolve(ref: str) -> Any:
    """The object a "module:name" reference names (imported now)."""
    module, _, name = ref.partition(":")
    if not module or not name:
        raise ValueError(f"not a 'module:name' reference: {ref!r}")
    return getattr(importlib.import_module(module), name)


def run_verb(key: tuple[str, str], config: str | None = None, overrides: dict[str, Any] | None = None,
             run_dir: Any = None, /, **run_kw: Any) -> tuple[Any, dict[str, Any]]:
    """Run a registered verb as its command does (``chorus GROUP NAME CONFIG --set ... --out RUN_DIR``):
    the config loaded with ``overrides``, then the verb's ``run`` with its fixed arguments; ``run_kw``
    adds keywords (``progress``, ``make_plots``, an ``engine`` already loaded). The demo's stages and
    the rehearsal's paths run the parts this way; a verb with an ``argument`` takes its value where
    the argument goes (``overrides`` for ``config:FIELD``, ``run_kw`` for ``run:KWARG``). Returns
    ``(RunDir, summary)``."""
    if key not in REGISTRY:
        raise KeyError(f"no verb {' '.join(key)!r} is registered (import the part's cli module first)")
    v = REGISTRY[key]
    cfg = v.load_config(config if config is not None else v.default_config, dict(overrides or {}))
    return v.execute(cfg, run_dir, **run_kw)
