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
    """The base of every config model: an unknown key is an error naming it, never ignored."""
    model_config = ConfigDict(extra="forbid")


class ConfigError(ValueError):
    """A config file or value is invalid; the message names the field and the value."""


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
def load_prompt_file(name: str, prompts_dir: Path) -> dict[str, Any]:
    """A prompt YAML by name (in ``prompts_dir``) or path, with ``_name`` and ``_sha256`` (recorded
    in provenance, so a run names the exact prompts it used). Cached: callers must not mutate it."""
    p = resolve_config(name, prompts_dir, missing=f"prompts {name!r} not found")
    raw = p.read_bytes()
    d = yaml.safe_load(raw)
    d["_sha256"] = hashlib.sha256(raw).hexdigest()
    d["_name"] = p.stem
    return d
