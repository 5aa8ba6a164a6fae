"""Typed YAML configs: one loader so every part fails the same way on bad input."""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any, Sequence, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """The base of every config model: an unknown key is an error naming it, never ignored; NaN and
    infinity are refused in every float field (``learning_rate: .inf`` would pass ``gt=0`` and train a
    model of NaN; no config of chorus means infinity by a float)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class InputError(ValueError):
    """Bad input: a config, a data file, a run directory, an option's value. The one type the error
    boundary (``chorus.errors``) reports as bad input (exit 2, the message alone), so every part's own
    input errors derive from it; a bare ``ValueError`` reaching the boundary is a bug of chorus.
    (A ``ValueError`` still, so ``except ValueError`` around chorus calls keeps working.)"""


class ConfigError(InputError):
    """A config file or value is invalid; the message names the field and the value."""


_BAD_INPUT: list[type[BaseException]] = []


def bad_input(cls: type[BaseException]) -> type[BaseException]:
    """Mark an error class outside ``InputError``'s family as bad input too (a model that is not there,
    a store of another schema, a plan that cannot fit the device): the class decorator of the serving
    and intervention errors that are the user's choice but not a ``ValueError``."""
    if cls not in _BAD_INPUT:
        _BAD_INPUT.append(cls)
    return cls


def bad_input_types() -> tuple[type[BaseException], ...]:
    """What counts as bad input (exit 2, the message alone), in one place for every command and the
    error boundary: ``InputError`` (ConfigError and every part's own input error), the classes marked
    ``@bad_input``, YAML or JSON that does not parse (chorus writes only valid files: one that is not was
    edited or damaged), a file that is not UTF-8 text, and a path that is missing or of the wrong kind.
    Not ``ValueError`` as such: one chorus did not raise as bad input is a bug."""
    import json

    import yaml

    return (InputError, *_BAD_INPUT, yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError, FileNotFoundError,
            FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


def format_validation_error(err: ValidationError, source: str = "config") -> str:
    lines = [f"invalid {source}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        # a cross-field check names its fields itself: the whole mapping as its "value" is noise
        lines.append(f"  {loc} = {e.get('input')!r}: {e['msg']}" if loc else f"  {e['msg']}")
    return "\n".join(lines)


def validate(model: type[M], data: dict[str, Any], source: str = "config") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise ConfigError(f"{path} line {line}: not UTF-8 text (byte {raw[err.start:err.start + 1]!r}); "
                          f"is it a config file?") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:   # an empty file is a mistake far more often than a wish for every default
        raise ConfigError(f"{path}: the config file is empty; write the fields to set (or '{{}}' for every default)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def load_config(path: str | Path, model: type[M]) -> M:
    """Read a YAML file and validate it into ``model`` (extra keys are an error if the model forbids them)."""
    return validate(model, load_yaml(path), source=str(path))


def dump_config(cfg: BaseModel, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


def resolve_config(config: str | Path, configs_dir: Path | Sequence[Path], *, missing: str | None = None) -> Path:
    """A config path, or the name of a shipped config in ``configs_dir`` (with or without .yaml; a
    sequence of folders is searched in order). The one name-or-path lookup of a YAML file (configs,
    prompts, topics, lexicons); an unknown name is an error naming it and listing what is shipped,
    opened by ``missing`` (default ``config not found: NAME``)."""
    p = Path(config)
    if p.is_file():
        return p
    dirs = [Path(configs_dir)] if isinstance(configs_dir, (str, Path)) else [Path(d) for d in configs_dir]
    for d in dirs:
        cand = d / (p.name if p.suffix == ".yaml" else f"{p.name}.yaml")
        if cand.is_file():
            return cand
    shipped = ", ".join(sorted({x.stem for d in dirs for x in d.glob("*.yaml")})) or "none"
    where = " or ".join(str(d) for d in dirs)
    raise ConfigError(f"{missing or f'config not found: {config}'} (neither a file nor a shipped name in {where}; "
                      f"shipped: {shipped})")


def config_description(path: str | Path, width: int = 110) -> str:
    """A shipped config's one line for ``chorus configs``: its leading comment up to the first sentence
    end, without the command line some begin with ("# chorus council run tiny --out ...")."""
    import re

    words: list[str] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not words and text.startswith("chorus "):
            head, sep, rest = text.partition(": ")
            if not sep or "(" in head:   # a command line alone: what follows describes it
                continue
            text = rest
        words += text.split()
        if len(" ".join(words)) > width:
            break
    line = " ".join(words)
    # the first sentence; "App. J" and "Fig. 2" end none
    line = re.split(r"(?<!App)(?<!Fig)(?<!e\.g)(?<!i\.e)\.\s(?=[A-Z(])", line, maxsplit=1)[0].rstrip(".;:, ")
    return line if len(line) <= width else line[:width - 3].rstrip(" ,;:") + "..."


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Apply one ``--set a.b=v`` override; a numeric part indexes a list (``data.0.n=20``) and ``*``
    stands for every item of a list (``seats.*.profile=X``: what ``-m`` sets in a config that lists
    several models)."""
    _set_parts(data, dotted.split("."), dotted, value)


def _set_parts(cur: Any, parts: list[str], dotted: str, value: Any) -> None:
    import copy
    for k, p in enumerate(parts):
        last = k == len(parts) - 1
        if isinstance(cur, list):
            if p == "*":
                for i in range(len(cur)):
                    if last:
                        cur[i] = copy.deepcopy(value)
                    else:
                        _set_parts(cur[i], parts[k + 1:], dotted, value)
                return
            if not p.isdigit() or int(p) >= len(cur):
                raise ConfigError(f"--set {dotted}: {p!r} is not an index of a list of {len(cur)}")
            if last:
                cur[int(p)] = copy.deepcopy(value)
            else:
                cur = cur[int(p)]
        elif isinstance(cur, dict):
            if last:
                cur[p] = copy.deepcopy(value)
            else:
                nxt = cur.get(p)
                cur = cur.setdefault(p, {}) if nxt is None else nxt
        else:
            raise ConfigError(f"--set {dotted}: {p!r} is inside a value that is neither a mapping nor a list")


def load_named(config: str | Path, model: type[M], configs_dir: Path,
               overrides: dict[str, Any] | None = None, *, default_source: str | None = None) -> M:
    """Load a shipped or user config, apply ``--set`` overrides, validate it as ``model``. With
    ``default_source``, an error in the shipped ``default.yaml`` of ``configs_dir`` (the config of a
    command that may be left out) is named by it (the command, or where the values came from) rather
    than by the file's path."""
    path = resolve_config(config, configs_dir)
    data = load_yaml(path)
    for k, v in (overrides or {}).items():
        set_dotted(data, k, v)
    shipped_default = default_source is not None and path.resolve() == (Path(configs_dir) / "default.yaml").resolve()
    return validate(model, data, source=default_source if shipped_default else str(path))


@functools.lru_cache(maxsize=16)
def load_prompt_file(name: str, prompts_dir: Path, like: str | None = None, open_keys: tuple[str, ...] = ()
                     ) -> dict[str, Any]:
    """A prompt YAML by name (in ``prompts_dir``) or path, with ``_name`` and ``_sha256`` (recorded
    in provenance, so a run names the exact prompts it used). Cached: callers must not mutate it.

    ``like``: the shipped prompts (a name in ``prompts_dir``) a user's file stands in for. It must
    hold every template that one holds, each using no placeholder that one lacks, so a missing or
    misspelt template is one error naming the file and key here, before any model loads (not a
    ``KeyError`` mid-run). ``open_keys``: mappings whose keys are the user's to choose (a council's
    personas): any names, each text using only placeholders the shipped ones use."""
    p = resolve_config(name, prompts_dir, missing=f"prompts {name!r} not found")
    d = load_yaml(p)   # a mapping of valid UTF-8 YAML, or a ConfigError naming the file
    if like is not None and p.resolve() != (Path(prompts_dir) / f"{like}.yaml").resolve():
        _check_templates(d, load_yaml(Path(prompts_dir) / f"{like}.yaml"), p, like, open_keys=open_keys)
    d["_sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
    d["_name"] = p.stem
    return d


def _placeholders(text: str) -> set[str]:
    """The ``{name}`` fields of a ``str.format`` template (a malformed one raises ValueError)."""
    import string
    return {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(text) if f is not None}


def _check_templates(got: Any, ref: Any, path: Path, like: str, key: str = "", open_keys: tuple[str, ...] = ()) -> None:
    """``got`` (a user's prompts) against ``ref`` (the shipped ``like``): every template of ``ref``
    (a text, a list or a mapping of them; a number such as ``version`` is not one) present with the
    same kind of value; every template's placeholders among those of ``ref``'s."""
    where = f"{path}: {key or 'the file'}"
    if isinstance(ref, dict):
        if not isinstance(got, dict):
            raise ConfigError(f"{where} must be a mapping (as in the shipped {like!r}), got {type(got).__name__}")
        if key in open_keys:   # names of the user's choosing: each value against every shipped one's placeholders
            texts = [v for v in ref.values() if isinstance(v, str)]
            union = "".join("{" + x + "}" for t in texts for x in _placeholders(t))
            for k, v in got.items():
                _check_templates(v, union, path, like, f"{key}.{k}")
            return
        missing = [k for k, v in ref.items() if isinstance(v, (str, list, dict)) and k not in got]
        if missing:
            raise ConfigError(f"{path}: lacks template(s) {', '.join(f'{key}.{k}' if key else str(k) for k in missing)} "
                              f"(every template of the shipped prompts {like!r} is needed)")
        for k, v in ref.items():
            if k in got:
                _check_templates(got[k], v, path, like, f"{key}.{k}" if key else str(k), open_keys)
    elif isinstance(ref, str):
        if not isinstance(got, str):
            raise ConfigError(f"{where} must be a text template, got {type(got).__name__} {got!r}")
        try:
            extra = sorted(_placeholders(got) - _placeholders(ref))
        except ValueError as err:
            raise ConfigError(f"{where}: not a valid template ({err}); write a literal brace as {{{{ or }}}}") from None
        if extra:
            known = ", ".join("{" + x + "}" for x in sorted(_placeholders(ref))) or "none"
            raise ConfigError(f"{where}: unknown placeholder(s) {', '.join('{' + x + '}' for x in extra)} "
                              f"(this template takes: {known})")
    elif isinstance(ref, list):
        if not isinstance(got, list) or not got:
            raise ConfigError(f"{where} must be a non-empty list (as in the shipped {like!r}), got {got!r}")
        if ref and all(isinstance(x, str) for x in ref) and not all(isinstance(x, str) for x in got):
            raise ConfigError(f"{where} must be a list of texts, got {got!r}")
