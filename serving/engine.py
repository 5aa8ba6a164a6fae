"""The one engine every caller uses: chat templates, validation, the call store, dispatch."""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from chorus.core.config import ConfigError, InputError
from chorus.serving.backends import BACKENDS, Backend, BackendTraits, backend_class, trait
from chorus.serving.plan import EnginePlan, Need, needs_gib, plan_devices
from chorus.serving.profiles import DEFAULT_PROFILE, ModelError, Profile, get_profile, hub_snapshot_of
from chorus.serving.store import CallStore, request_key
from chorus.serving.structured import check_output, check_schema
from chorus.serving.types import (Completion, ContextLengthError, PreparedPrompt, RequestError, RequestSampling, broadcast_seeds,
                           validate_conversations)

# A base model has no chat template; this plain one is documented in docs/models.md.
PLAIN_TEMPLATE = {"system": "{content}\n\n", "user": "User: {content}\n\n", "assistant": "Assistant: {content}\n\n"}
PLAIN_GENERATION_PROMPT = "Assistant:"


@dataclass(eq=False)
class TokenizerFacts:
    """What an engine finds out about its tokenizer once and keeps (``Engine._known``): the
    ``tokenizers`` library object it may call directly (``Engine._rust_tokenizer``), the added
    tokens, the ids of short tails and of options alone, and the tail split's check (``"unchecked"``,
    ``"checked"``, or ``"off"`` for a tokenizer whose split was found wrong)."""
    tokenizer: Any
    rust: Any = None
    added: dict[int, str] = field(default_factory=dict)
    tail_ids: dict[str, list[int]] = field(default_factory=dict)
    alone_ids: dict[str, list[int]] = field(default_factory=dict)
    tail: str = "unchecked"

    @classmethod
    def of(cls, tok: Any) -> "TokenizerFacts":
        try:
            dec = {int(i): str(t) for i, t in tok.added_tokens_decoder.items()}
        except (AttributeError, TypeError):
            dec = {}
        return cls(tok, rust=_library_tokenizer(tok), added={i: t for i, t in dec.items() if t})


def _library_tokenizer(tok: Any) -> Any:
    """The ``tokenizers.Tokenizer`` of a transformers fast tokenizer whose call is transformers' own
    (a subclass that overrides ``__call__`` or ``_encode_plus``, transformers' own method names, is
    not assumed to call it the same way); else None."""
    try:
        from transformers import PreTrainedTokenizerFast
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        cls = type(tok)
        if (isinstance(tok, PreTrainedTokenizerFast) and cls._encode_plus is PreTrainedTokenizerFast._encode_plus
                and cls.__call__ is PreTrainedTokenizerBase.__call__):
            return tok.backend_tokenizer
    except (ImportError, AttributeError):
        pass
    return None


class Engine:
    """Batch-first access to one model through one backend.

    ``chat`` and ``option_logprobs`` are the stable entry points; every reproducible call
    (greedy, or sampled with a seed) goes through the call store when one is attached.
    """

    def __init__(self, profile: Profile, backend: Backend, tokenizer: Any, *, dtype: str,
                 store: CallStore | None = None, weights_sha256: str | None = None):
        self.profile = profile
        self.backend = backend
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.store = store
        self.weights_sha256 = weights_sha256
        self.model_calls = 0  # requests that reached the backend (store hits excluded)

    # -- identity -----------------------------------------------------------------------
    @property
    def identity(self) -> dict[str, Any]:
        """What the store keys on: the model and dtype, not the backend (results agree across backends)."""
        return {"profile": self.profile.name, "weights_sha256": self.weights_sha256, "dtype": self.dtype}

    def provenance(self) -> dict[str, Any]:
        path = self.profile.path
        hub = hub_snapshot_of(path)   # weights from the Hugging Face cache: which repository, which commit
        return {**self.identity, "family": self.profile.family, "upstream": self.profile.hf_id,
                "license": self.profile.license, "path": str(path),
                "hub_id": hub[0] if hub else None, "revision": hub[1] if hub else None,
                "engine": self.backend.settings(), "store": str(self.store.path) if self.store is not None else None,
                **self._store_check()}

    def _store_check(self) -> dict[str, Any]:
        """What reading the store found, when anything: rows of an older chorus served without a hash
        to check them, rows whose output did not match their hash (not served; the calls made again)."""
        st = self.store
        if st is None or not (getattr(st, "unhashed_served", 0) or getattr(st, "edited", None)):
            return {}
        return {"store_check": {"unhashed_served": st.unhashed_served, "edited_not_served": list(st.edited[:50]),
                                "n_edited": len(st.edited)}}

    @property
    def model(self) -> Any:
        """The loaded transformers model (hf backend only), e.g. for nnsight."""
        m = getattr(self.backend, "model", None)
        if m is None:
            raise RequestError(f"backend '{self.backend.name}' does not expose a transformers model; use backend='hf'")
        return m

    @property
    def max_model_len(self) -> int:
        return self.backend.max_model_len

    # -- prompts --------------------------------------------------------------------------
    def render(self, conversation: list[dict[str, str]]) -> PreparedPrompt:
        """Apply the tokenizer's own chat template. A final assistant message is a prefill: the
        reply continues it (no new turn is opened)."""
        return self.render_many([conversation])[0]

    def _template(self, conversation: list[dict[str, str]]) -> str:
        tok = self.tokenizer
        prefill = conversation[-1]["role"] == "assistant"
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=not prefill,
                                           continue_final_message=prefill)
        text = (tok.bos_token or "") + "".join(PLAIN_TEMPLATE[m["role"]].format(content=m["content"])
                                               for m in conversation)
        return text[:-2] if prefill else text + PLAIN_GENERATION_PROMPT

    def _encode(self, texts: list[str], offsets: bool = False) -> tuple[list[list[int]], list | None]:
        """Token ids of ``texts`` (no special tokens added) in one batched tokenizer call: the ids one call
        per text gives (tests/test_engine_render.py), at under half its cost (a call per text was most of
        a readout's time beside a small model's forward; issue 52). ``offsets``: each token's character
        range too, from the same call (None where the tokenizer has no offset mapping)."""
        if not texts:
            return [], None
        rust = self._rust_tokenizer()
        if rust is not None:
            # the library the wrapper calls, called as the wrapper calls it (``_rust_tokenizer``): the
            # wrapper's BatchEncoding and per-row conversion were a fifth to a third of a prompt's
            # tokenising (issue 52)
            if offsets:
                enc = rust.encode_batch(texts, add_special_tokens=False)
                return [e.ids for e in enc], [e.offsets for e in enc]
            fast = getattr(rust, "encode_batch_fast", rust.encode_batch)  # no offsets computed (tokenizers>=0.21)
            return [e.ids for e in fast(texts, add_special_tokens=False)], None
        # a fast tokenizer is not asked for the attention masks and type ids nothing here reads
        kw = {"return_attention_mask": False, "return_token_type_ids": False} \
            if getattr(self.tokenizer, "is_fast", False) else {}
        if offsets:
            try:
                enc = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, **kw)
                return [list(x) for x in enc["input_ids"]], [[tuple(o) for o in x] for x in enc["offset_mapping"]]
            except NotImplementedError:  # a slow (python) tokenizer: no offsets
                pass
        return [list(x) for x in self.tokenizer(texts, add_special_tokens=False, **kw)["input_ids"]], None

    def _rust_tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` a transformers fast tokenizer wraps (its public ``backend_tokenizer``)
        where calling it is what the wrapper's ``tokenizer(texts, add_special_tokens=False)`` does: the
        wrapper's own call path (no subclass overrides it), no truncation or padding left set on the
        library's tokenizer (the wrapper would switch them off first), and special tokens split as the
        wrapper would split them. Else None: the wrapper is called."""
        tok, rust = self.tokenizer, self._known().rust
        if rust is None or rust.truncation is not None or rust.padding is not None \
                or rust.encode_special_tokens != bool(getattr(tok, "split_special_tokens", False)):
            return None
        return rust

    def _known(self) -> TokenizerFacts:
        """What this engine has found out about its tokenizer and kept (``TokenizerFacts``): one object
        per tokenizer, compared by identity, so a tokenizer swapped in starts afresh (an id, which a
        new object may reuse, could hand it another tokenizer's ids)."""
        got = self.__dict__.get("_facts")
        if got is None or got.tokenizer is not self.tokenizer:
            got = self.__dict__["_facts"] = TokenizerFacts.of(self.tokenizer)
        return got

    def render_many(self, conversations: Sequence[list[dict[str, str]]], offsets: bool = False) -> list[PreparedPrompt]:
        """``render`` of each conversation, tokenised in one call (``offsets``: with each token's
        character range, which ``interventions.spans`` maps message spans through)."""
        return self.prepare(conversations, offsets=offsets)[0]

    def prepare(self, conversations: Sequence[list[dict[str, str]]], options: Sequence[str] | None = None,
                offsets: bool = False) -> tuple[list[PreparedPrompt], list[list[list[int]]] | None]:
        """The rendered prompts and, given ``options``, ``option_ids_many`` of them. Each prompt is
        tokenised once; each option with the prompt's short tail (``_tail_option_ids``) where the
        tokenizer allows it, else the prompts and the joint prompt + option texts in one call."""
        texts = [self._template(c) for c in conversations]
        opts = list(options) if options is not None else []
        if options is not None and not self._tail_ok():
            ids, offs = self._encode(texts + [t + o for t in texts for o in opts], offsets)
            prompts = [PreparedPrompt(text=t, ids=ids[j], offsets=offs[j] if offs else None)
                       for j, t in enumerate(texts)]
            return prompts, self._option_ids(prompts, opts, ids[len(texts):])
        ids, offs = self._encode(texts, offsets)
        prompts = [PreparedPrompt(text=t, ids=ids[j], offsets=offs[j] if offs else None) for j, t in enumerate(texts)]
        if options is None:
            return prompts, None
        return prompts, self._tail_option_ids(prompts, opts)

    def _check_len(self, i: int, p: PreparedPrompt, new_tokens: int) -> None:
        if len(p.ids) + new_tokens > self.max_model_len:
            raise ContextLengthError(
                f"conversation {i}: prompt of {len(p.ids)} tokens + {new_tokens} new tokens exceeds the "
                f"context window of {self.max_model_len} tokens ({self.profile.name}); shorten the prompt or "
                f"lower max_tokens (chorus never truncates silently)")

    # -- chat -------------------------------------------------------------------------------
    def chat(self, conversations: Sequence[list[dict[str, str]]], *, temperature: float = 1.0,
             top_p: float = 1.0, max_tokens: int = 256, stop: str | Sequence[str] | None = None,
             seed: int | Sequence[int | None] | None = None, json_schema: dict | None = None,
             choices: Sequence[str] | None = None,
             progress: Callable[[int, int], None] | None = None) -> list[Completion]:
        """One completion per conversation. ``seed``: an int for every request, or one per request.

        Structured output (``json_schema`` or ``choices``) is enforced by guided decoding; each
        result says whether it ``conformed`` and carries ``parsed``. Greedy and seeded requests
        are reproducible and go through the store; unseeded sampled ones are never cached.
        """
        convs = validate_conversations(conversations)
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        if json_schema is not None:
            check_schema(json_schema)
        seeds = broadcast_seeds(seed, len(convs))
        samplings = [RequestSampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens, stop=stops, seed=s,
                              json_schema=json_schema, choices=tuple(choices) if choices is not None else None)
                     for s in seeds]
        keys = [request_key(self.identity, "chat", {"messages": c, **s.key_dict()}) if (s.greedy or s.seed is not None)
                else None for c, s in zip(convs, samplings)]
        results: list[Completion | None] = [None] * len(convs)
        if self.store is not None:
            hit = self.store.get_many([k for k in keys if k])
            for i, k in enumerate(keys):
                if k in hit:
                    results[i] = Completion.from_dict(hit[k], cached=True)
        # identical reproducible requests are computed once
        todo: dict[str, list[int]] = {}
        for i, r in enumerate(results):
            if r is None:
                todo.setdefault(keys[i] or f"nocache-{i}", []).append(i)
        firsts = [v[0] for v in todo.values()]
        prompts = dict(zip(firsts, self.render_many([convs[i] for i in firsts])))  # only what the model must compute
        for i, p in prompts.items():
            self._check_len(i, p, max_tokens)
        done = len(convs) - sum(len(v) for v in todo.values())
        if progress:  # the convention of chorus.core.progress.Progress: (total, 0) starts, (total, k) advances
            progress(len(convs), 0)
            if done:
                progress(len(convs), done)  # read back from the store
        if firsts:
            by_first = {v[0]: v for v in todo.values()}
            for group in self.backend.generate([prompts[i].ids for i in firsts], [samplings[i] for i in firsts]):
                rows, advanced = [], 0
                for j, out in group:
                    i = firsts[j]
                    s = samplings[i]
                    if s.constrained:
                        ok, parsed, err = check_output(out["text"], s)
                        out.update(conformed=ok, parsed=parsed, error=err)
                    c = Completion.from_dict(out)
                    for dup in by_first[i]:
                        results[dup] = c
                    if keys[i] and self.store is not None:
                        rows.append((keys[i], "chat", self.identity,
                                     {"messages": convs[i], **s.key_dict()}, c.to_dict(), self.backend.name))
                    done += len(by_first[i])
                    advanced += len(by_first[i])
                self.model_calls += len(group)
                if rows:
                    self.store.put_many(rows)  # committed before the next group runs
                if progress:
                    progress(len(convs), advanced)
        return results  # type: ignore[return-value]

    # -- readout ----------------------------------------------------------------------------
    def option_token_ids(self, prompt: PreparedPrompt, option: str) -> list[int]:
        """Token ids of ``option`` as the continuation of ``prompt``. Tokenised jointly with the
        prompt so a label is scored as the model would write it there; if the joint tokenisation
        changes the prompt's own last tokens (a merge across the boundary), the option is
        tokenised alone and appended."""
        return self.option_ids_many([prompt], [option])[0][0]

    def option_ids_many(self, prompts: Sequence[PreparedPrompt], options: Sequence[str]) -> list[list[list[int]]]:
        """``option_token_ids`` of every option after every prompt (``[prompt][option]``): each option
        tokenised after the prompt's tail (``_tail_option_ids``) where the tokenizer allows it, else the
        joint texts in one tokenizer call; an option tokenised alone (where a joint tokenisation merged
        across the boundary) is kept on the engine, computed once (``_option_alone``)."""
        opts = list(options)
        if self._tail_ok():
            return self._tail_option_ids(prompts, opts)
        full, _ = self._encode([p.text + o for p in prompts for o in opts])
        return self._option_ids(prompts, opts, full)

    # -- option ids from the prompt's tail ----------------------------------------------------
    # A Hugging Face fast tokenizer splits its text at its added tokens (the chat template's special
    # tokens) before anything else and tokenises the pieces between them independently, so the ids of
    # ``prompt + option`` are the prompt's ids up to its last added token followed by the ids of
    # ``tail + option``, where ``tail`` is the prompt's text from that token on (a few tokens: the
    # generation prompt). Tokenising each option after the tail, not after the whole prompt, is what a
    # readout's tokenisation cost was: the long prompt once per option (issue 52). An option whose
    # joint ids change the tail's own ids changes the prompt's: it is tokenised alone, as the joint way
    # does. Checked, not assumed: the tail alone must give the prompt's last ids, else that prompt's
    # options are tokenised with the whole prompt; and once per tokenizer one prompt's option ids are
    # compared with the joint way's (a tokenizer that disagrees is not split again). The ids are the
    # joint way's on every paper template (tests/test_engine_render.py).
    TAIL_CACHE = 4096  # tail and tail + option texts whose ids are kept on the engine
    TAIL_CACHED_CHARS = 512  # the longest kept (a tail with a long prefill is encoded each call)

    def _tail_ok(self) -> bool:
        """Whether the tail split applies: a Hugging Face fast tokenizer with added tokens."""
        return (bool(getattr(self.tokenizer, "is_fast", False)) and self._known().tail != "off"
                and bool(self._added_tokens()))

    def _added_tokens(self) -> dict[int, str]:
        """The tokenizer's added tokens, id to text, read once per tokenizer."""
        return self._known().added

    def _cut(self, p: PreparedPrompt) -> int | None:
        """Where ``p``'s tail starts, as a token index: its last added token (None: it has none)."""
        added = self._added_tokens()
        for i in range(len(p.ids) - 1, -1, -1):
            if p.ids[i] in added:
                return i
        return None

    def _short_ids(self, texts: list[str]) -> list[list[int]]:
        """Ids of tails and tail + option texts in one call; the short ones (most tails are the generation
        prompt's few tokens) are kept per tokenizer, each encoded once."""
        cache = self._known().tail_ids
        todo = list(dict.fromkeys(t for t in texts if t not in cache))
        new = dict(zip(todo, self._encode(todo)[0]))
        if len(cache) + len(todo) > self.TAIL_CACHE:
            cache.clear()
        cache.update((t, ids) for t, ids in new.items() if len(t) <= self.TAIL_CACHED_CHARS)
        return [new[t] if t in new else cache[t] for t in texts]

    def _check_tail_split(self, prompts: Sequence[PreparedPrompt], opts: list[str], got: list[list[Any]],
                          j: int) -> None:
        """Once per tokenizer, prompt ``j``'s option ids by the tail split against the joint way: a
        tokenizer whose pieces between added tokens are not independent is not split again (its later
        calls take the joint way) and this call's ids are the joint way's."""
        full, _ = self._encode([prompts[j].text + o for o in opts])
        if [self._joint_or_alone(prompts[j], o, f) for o, f in zip(opts, full)] == got[j]:
            self._known().tail = "checked"
            return
        self._known().tail = "off"
        full, _ = self._encode([p.text + o for p in prompts for o in opts])
        got[:] = self._option_ids(prompts, opts, full)

    def _tail_option_ids(self, prompts: Sequence[PreparedPrompt], opts: list[str]) -> list[list[list[int]]]:
        """``option_ids_many`` by the tail split (see above); what fails its check is done the old way."""
        added = self._added_tokens()
        tails: list[tuple[int, str] | None] = []
        for p in prompts:
            i = self._cut(p)
            at = p.text.rfind(added[p.ids[i]]) if i is not None else -1
            tails.append((i, p.text[at:]) if at >= 0 else None)
        short = [t[1] for t in tails if t] + [t[1] + o for t in tails if t for o in opts]
        got = dict(zip(short, self._short_ids(short)))
        out: list[list[list[int] | None]] = []
        redo: list[tuple[int, int]] = []
        split = None  # a prompt whose options were split at its tail
        for j, (p, t) in enumerate(zip(prompts, tails)):
            tail = list(p.ids[t[0]:]) if t else None
            if t is None or got[t[1]] != tail:  # the tail alone is not the prompt's last ids: the old way
                out.append([None] * len(opts))
                redo += [(j, k) for k in range(len(opts))]
                continue
            # the joint ids keep the tail's ids exactly when the whole prompt + option's keep the prompt's
            # (the pieces before the tail are the same): else the option alone, as the joint way does
            row: list[list[int] | None] = []
            for o in opts:
                f = got[t[1] + o]
                row.append(f[len(tail):] if f[:len(tail)] == tail else self._option_alone(o))
            out.append(row)
            split = j if split is None else split
        if redo:
            full, _ = self._encode([prompts[j].text + opts[k] for j, k in redo])
            for (j, k), f in zip(redo, full):
                out[j][k] = self._joint_or_alone(prompts[j], opts[k], f)
        if split is not None and self._known().tail != "checked":
            self._check_tail_split(prompts, opts, out, split)
        for row in out:
            for o, ids in zip(opts, row):
                if not ids:
                    raise RequestError(f"option {o!r} tokenises to nothing")
        return [[list(ids) for ids in row] for row in out]  # type: ignore[arg-type]

    def _option_alone(self, option: str) -> list[int]:
        """``option`` tokenised alone, cached per tokenizer (a pure function of the two)."""
        cache = self._known().alone_ids
        if option not in cache:
            cache[option] = list(self.tokenizer(option, add_special_tokens=False).input_ids)
        return cache[option]

    def _joint_or_alone(self, p: PreparedPrompt, option: str, full: list[int]) -> list[int]:
        """The option's ids from the joint ids ``full`` of ``p.text + option``: what follows the prompt's
        ids, or the option alone where the joint ids changed the prompt's own."""
        n = len(p.ids)
        return full[n:] if full[:n] == list(p.ids) else self._option_alone(option)

    def _option_ids(self, prompts: Sequence[PreparedPrompt], opts: list[str], full: list[list[int]]) -> list[list[list[int]]]:
        out = []
        for j, p in enumerate(prompts):
            row = []
            for k, o in enumerate(opts):
                ids = self._joint_or_alone(p, o, full[j * len(opts) + k])
                if not ids:
                    raise RequestError(f"option {o!r} tokenises to nothing")
                row.append(list(ids))
            out.append(row)
        return out

    OPTION_CHUNK = 64  # prompts per committed chunk of option_logprobs

    def option_logprobs(self, conversations: Sequence[list[dict[str, str]]],
                        options: Sequence[str]) -> list[dict[str, float]]:
        """For each conversation, log P(option | context) of each option string as the beginning
        of the assistant's reply (summed over the option's tokens). Computed by forward passes,
        never by sampling."""
        convs = validate_conversations(conversations)
        if isinstance(options, str) or not options or any(not isinstance(o, str) or not o for o in options):
            raise RequestError(f"options must be a non-empty list of non-empty strings, got {options!r}")
        if len(set(options)) != len(options):
            raise RequestError(f"options contain duplicates: {list(options)!r}")
        opts = list(options)
        keys = [request_key(self.identity, "options", {"messages": c, "options": opts}) for c in convs]
        results: list[dict[str, float] | None] = [None] * len(convs)
        if self.store is not None:
            hit = self.store.get_many(keys)
            for i, k in enumerate(keys):
                if k in hit:
                    results[i] = hit[k]["logprobs"]
        todo: dict[str, list[int]] = {}
        for i, r in enumerate(results):
            if r is None:
                todo.setdefault(keys[i], []).append(i)
        firsts_all = [v[0] for v in todo.values()]
        # committed chunk by chunk: a kill loses at most one chunk of forward passes
        for c0 in range(0, len(firsts_all), self.OPTION_CHUNK):
            firsts = firsts_all[c0:c0 + self.OPTION_CHUNK]
            prompts, option_ids = self.prepare([convs[i] for i in firsts], opts)
            for j, p in enumerate(prompts):
                self._check_len(firsts[j], p, max(len(x) for x in option_ids[j]))
            t0 = time.perf_counter()
            lps = self.backend.option_logprobs([p.ids for p in prompts], option_ids)
            dt = (time.perf_counter() - t0) / len(firsts)
            rows = []
            for j, i in enumerate(firsts):
                d = dict(zip(opts, lps[j]))
                for dup in todo[keys[i]]:
                    results[dup] = d
                rows.append((keys[i], "options", self.identity, {"messages": convs[i], "options": opts},
                             {"logprobs": d, "prompt_tokens": len(prompts[j].ids), "completion_tokens": 0,
                              "latency_s": dt, "option_token_ids": option_ids[j]}, self.backend.name))
            self.model_calls += len(firsts)
            if self.store is not None:
                self.store.put_many(rows)
        return results  # type: ignore[return-value]

    # -- other model work ---------------------------------------------------------------------
    def cached(self, kind: str, requests: list[dict[str, Any]],
               compute: Callable[[list[int]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Results of model work done outside ``chat`` / ``option_logprobs`` (knockout and patching
        readouts through nnsight), keyed like engine calls on this engine's identity and ``kind``:
        ``compute(indices)`` runs only for the requests the store lacks, and its results are
        committed before they are returned (a killed run recomputes nothing it stored)."""
        keys = [request_key(self.identity, kind, r) for r in requests]
        hit = self.store.get_many(keys) if self.store is not None else {}
        todo = [i for i, k in enumerate(keys) if k not in hit]
        if todo:
            res = compute(todo)
            if self.store is not None:
                self.store.put_many([(keys[i], kind, self.identity, requests[i], r, self.backend.name)
                                     for i, r in zip(todo, res)])
            for i, r in zip(todo, res):
                hit[keys[i]] = r
        return [hit[k] for k in keys]

    def with_store(self, path: str | Path) -> "Engine":
        """This engine with a call store at ``path`` (same backend and model), unless it has one."""
        if self.store is not None:
            return self
        return Engine(self.profile, self.backend, self.tokenizer, dtype=self.dtype, store=CallStore(path),
                      weights_sha256=self.weights_sha256)

    def release(self) -> None:
        """Give the model (and its device memory) back; the call store stays open (other roles share it)."""
        if not getattr(self.backend, "_pooled", False):  # a pooled backend outlives its engines
            self.backend.close()

    def close(self) -> None:
        self.release()
        if self.store is not None:
            self.store.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def engine_from_model(model: Any, tokenizer: Any, *, name: str = "custom", batch_size: int | None = None,
                      token_budget: int | None = None) -> Engine:
    """An hf ``Engine`` (no store) around a transformers model already in memory: the interface
    the knockout, patching and probe code sees for a profile loaded from disk."""
    from chorus.serving.backends.hf import HFBackend

    kw = {k: v for k, v in (("batch_size", batch_size), ("token_budget", token_budget)) if v is not None}
    be = HFBackend.from_model(model, tokenizer, **kw)  # None: the backend's defaults
    prof = Profile(name=name, family=getattr(model.config, "model_type", None) or "?", description="model object",
                   chat=bool(getattr(tokenizer, "chat_template", None)))
    return Engine(prof, be, tokenizer, dtype=be.dtype, store=None, weights_sha256=None)


def _have_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _installed(package: str | None) -> bool:
    """Whether the package a backend needs (its ``needs``) is installed; vLLM through ``_have_vllm``, the seam tests patch."""
    import importlib.util

    return package is None or (_have_vllm() if package == "vllm" else importlib.util.find_spec(package) is not None)


def default_dtype() -> str:
    """float32 on CPU (exact readouts, batch-invariant results); bfloat16 on a GPU."""
    try:
        import torch
        return "bfloat16" if torch.cuda.is_available() else "float32"
    except ImportError:  # pragma: no cover
        return "float32"


_POOL: dict[tuple, tuple[Any, Any, str | None]] | None = None
_PLANS: dict[str, PoolPlan] = {}  # profile -> its plan, for the pool's lifetime


@dataclass(frozen=True)
class PoolPlan:
    """What ``load_engine`` needs for one profile a pool holds on both vLLM and transformers."""
    mode: str               # "share": both at once; "swap": vLLM sleeps while the transformers copy is loaded
    vllm: EnginePlan        # its gpu_memory_utilization, sleep, and the sizes waking it takes back
    hf: EnginePlan
    reason: str             # the device plan's sizes and decision

    def to_dict(self) -> dict:
        return asdict(self)


def plan_pool(expect: list[tuple[str, str, str]], device: float | None = None) -> dict[str, PoolPlan]:
    """The device plan (``chorus.serving.plan.plan_devices``, all of ``expect`` held at once) for a pool on a
    CUDA device (``device`` GiB; by default device 0's size; none without CUDA), kept per profile
    loaded on both vLLM and transformers. A pool that cannot fit raises ``DevicePlanError`` naming
    the sizes, before any model is loaded."""
    from chorus.serving.memory import device_gib  # at call time: the seam tests patch

    device = device if device is not None else device_gib()
    paired = {p for p, b, _d in expect if b == "vllm"} & {p for p, b, _d in expect if b == "hf"}
    if device is None or not paired:  # nothing shares a device with its own copy: no plan, nothing sized
        return {}
    # each copy sized in its own dtype (the knockout stage's transformers copy is float32 on a GPU too)
    needs = [Need(f"{p}/{b}", p, b, d, needs_gib(p, d) if trait(b, "local_weights") else 0.0) for p, b, d in dict.fromkeys(expect)]
    (phase,) = plan_devices(needs, device).phases  # one phase: the pool holds everything at once
    first = {(e.profile, e.backend): e for e in reversed(phase.engines)}  # of several dtypes, the first
    return {name: PoolPlan(phase.mode, first[name, "vllm"], first[name, "hf"], phase.reason) for name in sorted(paired)}


@contextlib.contextmanager
def engine_pool(expect: list[tuple[str, str, str]] | None = None, device_gib: float | None = None):
    """Inside this block, ``load_engine`` loads each (profile, backend, dtype, options) once and
    hands later callers a new ``Engine`` (with their own store) around the same loaded model.
    ``chorus demo`` runs every stage in one pool so the model is not reloaded per stage.

    ``expect``: the (profile, backend, dtype) the block will load. On a GPU, a profile loaded on
    both vLLM and transformers gets a device plan (``plan_pool``): vLLM's share is set so the
    transformers copy fits beside it ("share"), or vLLM sleeps while the transformers copy is
    loaded and the copy is released when vLLM wakes ("swap")."""
    global _POOL, _PLANS
    outer, _POOL = _POOL, ({} if _POOL is None else _POOL)
    outer_plans = _PLANS
    if expect:
        _PLANS = {**_PLANS, **plan_pool(expect, device_gib)}
    try:
        yield _POOL
    finally:
        _PLANS = outer_plans
        if outer is None:
            for be, _tok, _wh in _POOL.values():
                be._pooled = False
                be.close()  # the same release path as release_pooled
        _POOL = outer


def pool_plans() -> dict[str, dict]:
    """The device plans of the current pool per profile (JSON-able), for provenance."""
    return {k: v.to_dict() for k, v in _PLANS.items()}


def _release_hf(profile: str) -> None:
    release_pooled(lambda key: key[0] == profile and key[2] == "hf")


def release_pooled(drop: Callable[[tuple], bool]) -> list[tuple]:
    """Close and forget the pooled backends whose key ``(profile, path, backend, dtype,
    max_model_len, options)`` satisfies ``drop`` (memory: a demo releases an engine no later stage
    needs). Engines already handed out keep working only until their backend is closed."""
    if _POOL is None:
        return []
    gone = [k for k in _POOL if drop(k)]
    for k in gone:
        be, _tok, _wh = _POOL.pop(k)
        be._pooled = False
        be.close()  # each backend frees its device memory (chorus.serving.device.free_device_memory)
    return gone


def resolve_backend(backend: str = "auto") -> str:
    """'auto' -> ``$CHORUS_BACKEND``, else vllm when installed, else hf; others are checked."""
    if backend == "auto":
        backend = os.environ.get("CHORUS_BACKEND") or ("vllm" if _have_vllm() else "hf")
    if backend not in BACKENDS:
        raise InputError(f"unknown backend '{backend}': choose one of {', '.join(BACKENDS)} or 'auto'")
    return backend


def backend_options(backend: str) -> frozenset[str] | None:
    """The option names ``backend`` takes (its class's keywords and the options every backend takes);
    None for a name that is no backend."""
    if backend not in BACKENDS:
        return None
    return BackendTraits.options.__func__(backend_class(backend))  # a stand-in class too


def check_options(backend: str, options: dict[str, Any] | None, where: str = "model.options") -> None:
    """Every backend option is a keyword its backend takes: a misspelt one (``max_num_seq``) is one
    error naming it before anything loads, not a ``TypeError`` from inside the backend after the load
    began. Options a backend passes through (vLLM's own engine arguments) are listed (for vLLM a slow
    import) only when an option is not one of chorus's."""
    known = backend_options(backend)
    unknown = sorted(set(options or {}) - (known or set()))
    if known is None or not unknown:
        return
    cls = backend_class(backend)
    also = trait(cls, "passthrough")
    if also:
        more = trait(cls, "passthrough_options")()
        if more is None:
            return   # what it passes through cannot be listed here (not installed): the load says so
        unknown = sorted(set(options or {}) - known - more)
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {', '.join(map(repr, unknown))} for backend {backend!r} "
                          f"(chorus's options for it: {', '.join(sorted(known))}{f'; and {also}' if also else ''})")


def check_load(backend: str, dtype: str | None, backend_kwargs: dict[str, Any], where: str = "options") -> None:
    """What ``load_engine`` checks of its arguments once the backend is known (``backend_kwargs`` is
    edited: a batch_invariant a backend has no mode for, and does not ask for, is dropped)."""
    check_options(backend, backend_kwargs, where)
    if not trait(backend, "batch_invariant") and backend_kwargs.get("batch_invariant"):
        raise ModelError(f"batch_invariant=True is an option of backend 'vllm' (vLLM's batch-invariant mode); "
                         f"backend '{backend}' cannot honour it")
    if not trait(backend, "batch_invariant") and "batch_invariant" in backend_kwargs:
        backend_kwargs.pop("batch_invariant")  # False / None: nothing to turn off elsewhere
    if dtype is not None and dtype not in ("float32", "bfloat16", "float16"):
        raise InputError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")


def load_engine(profile: str = DEFAULT_PROFILE, backend: str = "auto", *, store: str | Path | CallStore | None = None,
                dtype: str | None = None, max_model_len: int | None = None, **backend_kwargs: Any) -> Engine:
    """Load ``profile`` on ``backend`` ("hf", "vllm", "openai" or "auto").

    "auto" picks ``$CHORUS_BACKEND`` if set, else vllm when it is installed, else hf.
    ``store``: a path to a SQLite call store (or a CallStore) that makes reruns free and runs resumable.
    Backend options pass through: hf (``attn_implementation``, ``batch_size``, ``device``), vllm
    (``tensor_parallel_size``, ``enforce_eager``, ``gpu_memory_utilization``, ``batch_invariant``, ...),
    openai (``endpoints``). ``batch_invariant=True`` turns vLLM's batch-invariant mode on where the
    model and device have it (``chorus.serving.backends.vllm.batch_invariance``) and is one clear error
    where they do not; it is recorded in ``provenance()["engine"]``.
    """
    backend = resolve_backend(backend)
    check_load(backend, dtype, backend_kwargs)
    return open_engine(get_profile(profile), backend, store=store, dtype=dtype or default_dtype(),
                       max_model_len=max_model_len, **backend_kwargs)


def open_engine(prof: Profile, backend: str, *, store: str | Path | CallStore | None = None, dtype: str,
                max_model_len: int | None = None, **backend_kwargs: Any) -> Engine:
    """The one door every engine comes through: a resolved profile on a resolved backend, its
    arguments already checked (``check_load``). Inside an ``engine_pool`` a model loaded before is
    handed out again (a new ``Engine`` with its own store)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    st = store if isinstance(store, CallStore) or store is None else CallStore(store)
    key = (prof.name, str(prof.path), backend, dtype, max_model_len, repr(sorted(backend_kwargs.items())))
    if _POOL is not None and key in _POOL:
        be, tokenizer, wh = _POOL[key]
        return Engine(prof, be, tokenizer, dtype=dtype, store=st, weights_sha256=wh)
    from chorus.serving.prepare import weights_hash

    cls = backend_class(backend)
    plan = _PLANS.get(prof.name) if _POOL is not None else None
    kw = dict(backend_kwargs)
    if not trait(cls, "local_weights"):
        be = cls(prof, max_model_len=max_model_len, **kw)  # requires the local folder (its tokenizer)
        wh = weights_hash(prof.path)
    else:
        path = prof.require()
        wh = weights_hash(path)
        if not _installed(trait(cls, "needs")):
            raise ModelError(f"backend '{backend}' needs {trait(cls, 'needs_name')}: {trait(cls, 'install')}")
        if plan is not None:
            _pool_before_load(prof.name, backend, plan, kw)
        be = cls(str(path), dtype=dtype, max_model_len=max_model_len, **kw)
        if plan is not None and backend == "vllm":
            be.engine_plan = plan.vllm  # the sizes the free-memory check before wake_up() falls back on
            if plan.vllm.sleep:
                be.on_wake = lambda _b, name=prof.name: _release_hf(name)
    tokenizer = be.tokenizer
    if _POOL is not None:
        be._pooled = True
        _POOL[key] = (be, tokenizer, wh)
    return Engine(prof, be, tokenizer, dtype=dtype, store=st, weights_sha256=wh)


def _pool_before_load(profile: str, backend: str, plan: PoolPlan, kw: dict[str, Any]) -> None:
    """A pool's plan for one profile held on vLLM and on transformers (``PoolPlan``): the vLLM copy
    starts with its share of the device (the user's explicit options win) and, under a swap plan,
    sleeps while the transformers copy is loaded; the transformers copy is released when it wakes."""
    if backend == "hf" and plan.vllm.sleep:  # the device is vLLM's: put it to sleep first
        for k, (pbe, _t, _w) in list(_POOL.items()):
            if k[0] == profile and k[2] == "vllm":
                pbe.sleep()
    if backend == "vllm":
        kw.setdefault("gpu_memory_utilization", plan.vllm.gpu_memory_utilization)
        if plan.vllm.sleep:
            kw.setdefault("enable_sleep_mode", True)
            _release_hf(profile)  # one copy on the device at a time
