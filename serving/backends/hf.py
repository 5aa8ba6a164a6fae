"""transformers backend (CPU or GPU). Exposes ``model`` and ``tokenizer`` so nnsight can wrap them.

Sampling with a per-request seed is done by a logits processor that draws each row from its own
``torch.Generator``: a request's sample then depends on its seed and its logits only, not on the
other rows of the batch (transformers' own sampling draws the whole batch from one generator).
"""
from __future__ import annotations

import os
import time
from typing import Any, Iterator

from chorus.serving.backends import BackendTraits, Finished
from chorus.serving.profiles import ModelError
from chorus.serving.types import RequestSampling

BACKEND = "HFBackend", 1  # this module is backend "hf", listed first (serving.backends)


def eos_ids(model: Any, tok: Any) -> list[int]:
    """Every id that ends a turn: the generation config's eos ids and the tokenizer's eos token."""
    ids: set[int] = set()
    e = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(e, int):
        ids.add(e)
    elif e:
        ids.update(int(x) for x in e)
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    return sorted(ids)


# Micro-batches: 32 rows (the paper's debate batch: issue 52 measured 16 as two generate calls where
# raw transformers makes one, 2-3x raw's time at batch 32) and 32768 padded tokens (32 debate-length
# prompts). Every path keeps only the logits it reads (logits_to_keep), so the budget bounds
# activations and the KV cache, not a (tokens x vocabulary) logits tensor.
BATCH_SIZE = 32
TOKEN_BUDGET = 32768


class HFBackend(BackendTraits):
    name = "hf"
    exposes_model = True   # the model is in this process (Engine.model, nnsight)

    def __init__(self, path: str, *, dtype: str = "float32", device: str | None = None,
                 attn_implementation: str | None = None, batch_size: int = BATCH_SIZE,
                 max_model_len: int | None = None, token_budget: int = TOKEN_BUDGET, threads: int | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        # fp32 with padding can hit denormals on CPU and slow down 30x (measured)
        torch.set_flush_denormal(True)
        # on a CPU shared with other jobs, fewer threads than cores avoids oversubscription (measured 20x)
        threads = threads or int(os.environ.get("CHORUS_TORCH_THREADS", "0")) or None
        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = dtype
        kw: dict[str, Any] = {"dtype": getattr(torch, dtype)}
        if attn_implementation:
            kw["attn_implementation"] = attn_implementation
        try:
            model = AutoModelForCausalLM.from_pretrained(path, **kw)
        except ValueError as err:   # transformers refusing an option's value (attn_implementation) or the folder
            how = f" with attn_implementation={attn_implementation!r}" if attn_implementation else ""
            raise ModelError(f"{path}: transformers cannot load it{how}: {' '.join(str(err).split())}") from None
        model = model.to(self.device).eval()
        self._adopt(model, AutoTokenizer.from_pretrained(path), max_model_len, batch_size, token_budget)

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, batch_size: int = BATCH_SIZE,
                   token_budget: int = TOKEN_BUDGET) -> "HFBackend":
        """A backend around a transformers model already in memory (no loading): tiny random
        models in tests, or a model a user built or edited."""
        import torch

        be = cls.__new__(cls)
        be.torch = torch
        be.device = str(next(model.parameters()).device)
        be.dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        be._adopt(model.eval(), tokenizer, None, batch_size, token_budget)
        return be

    def _adopt(self, model: Any, tokenizer: Any, max_model_len: int | None, batch_size: int, token_budget: int) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.eos_ids = eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        cfg_len = getattr(model.config, "max_position_embeddings", None) or 4096
        self.max_model_len = min(max_model_len or cfg_len, cfg_len)
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.attn_implementation = model.config._attn_implementation
        self._grammars = None

    def settings(self) -> dict[str, Any]:
        return {"backend": "hf", "dtype": self.dtype, "device": self.device,
                "attn_implementation": self.attn_implementation, "batch_size": self.batch_size,
                "max_model_len": self.max_model_len, "torch_threads": self.torch.get_num_threads(),
                "sampling": "per-request torch.Generator (batch-invariant)",
                "constrained_decoding": "xgrammar logits processor"}

    # -- helpers -------------------------------------------------------------------------
    def _pad(self, seqs: list[list[int]]):
        torch = self.torch
        T = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), T), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), T), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, T - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, T - len(s):] = 1
        return ids.to(self.device), mask.to(self.device)

    def _batches(self, order: list[int], lengths: list[int], extra: int = 0) -> Iterator[list[int]]:
        """Micro-batches of at most batch_size rows and about token_budget padded tokens."""
        cur: list[int] = []
        for i in order:
            rows = len(cur) + 1
            longest = max([lengths[j] for j in cur] + [lengths[i]]) + extra
            if cur and (rows > self.batch_size or rows * longest > self.token_budget):
                yield cur
                cur = []
            cur.append(i)
        if cur:
            yield cur

    def _grammar_cache(self):
        if self._grammars is None:
            from chorus.serving.backends.grammar import GrammarCache
            # a multimodal checkpoint (Gemma-4, Qwen3.5) keeps the vocabulary in its text config
            vocab = self.model.config.get_text_config().vocab_size
            self._grammars = GrammarCache(self.tokenizer, vocab, self.eos_ids)
        return self._grammars

    # -- generation ------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], samplings: list[RequestSampling]) -> Iterator[Finished]:
        groups: dict[Any, list[int]] = {}
        for i, s in enumerate(samplings):
            k = s.key_dict()
            k.pop("seed")
            groups.setdefault(repr(sorted(k.items())), []).append(i)
        lengths = [len(p) for p in prompts]
        for idx in groups.values():
            s0 = samplings[idx[0]]
            order = sorted(idx, key=lambda i: -lengths[i])  # similar lengths together: less padding
            for batch in self._batches(order, lengths, extra=s0.max_tokens):
                yield self._generate_batch([prompts[i] for i in batch], [samplings[i] for i in batch], batch)

    def _generate_batch(self, prompts: list[list[int]], samplings: list[RequestSampling], index: list[int]) -> Finished:
        torch = self.torch
        from transformers import GenerationConfig, LogitsProcessorList

        s = samplings[0]
        procs: list[Any] = []
        if s.constrained:
            g = self._grammar_cache()
            compiled = g.for_schema(s.json_schema) if s.json_schema is not None else g.for_choices(s.choices)
            procs.append(g.processor([compiled] * len(prompts)))
        if not s.greedy:
            procs.extend(sampling_processors(s.temperature, s.top_p, [x.seed for x in samplings]))
        ids, mask = self._pad(prompts)
        gen = GenerationConfig(max_new_tokens=s.max_tokens, do_sample=False, pad_token_id=self.pad_id,
                               eos_token_id=self.eos_ids, stop_strings=list(s.stop) or None)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=gen,
                                      logits_processor=LogitsProcessorList(procs),
                                      tokenizer=self.tokenizer if s.stop else None)
        dt = (time.perf_counter() - t0) / len(prompts)
        new = out[:, ids.shape[1]:].tolist()
        results: Finished = []
        for j, row in enumerate(new):
            n, finish = len(row), "length"
            for k, t in enumerate(row):
                if t in self.eos_ids:
                    n, finish = k + 1, "stop"
                    break
            toks = row[:n] if finish == "length" else row[:n - 1]
            text = self.tokenizer.decode(toks, skip_special_tokens=True)
            for st in s.stop:
                cut = text.find(st)
                if cut >= 0:
                    text, finish = text[:cut], "stop"
            results.append((index[j], {"text": text, "prompt_tokens": len(prompts[j]),
                                       "completion_tokens": n, "finish_reason": finish, "latency_s": dt}))
        return results

    # -- readout ---------------------------------------------------------------------------
    def option_logprobs(self, prompts: list[list[int]], options: list[list[list[int]]]) -> list[list[float]]:
        torch = self.torch
        out: list[list[float]] = [[0.0] * len(o) for o in options]
        if all(len(o) == 1 for opts in options for o in opts):
            # one forward per prompt: read the next-token distribution
            lengths = [len(p) for p in prompts]
            order = sorted(range(len(prompts)), key=lambda i: -lengths[i])
            for batch in self._batches(order, lengths):
                lp = self._last_logprobs([prompts[i] for i in batch])
                for r, i in enumerate(batch):
                    for k, o in enumerate(options[i]):
                        out[i][k] = float(lp[r, o[0]])
            return out
        pairs = [(i, k) for i, opts in enumerate(options) for k in range(len(opts))]
        seqs = [prompts[i] + options[i][k] for i, k in pairs]
        lengths = [len(s) for s in seqs]
        order = sorted(range(len(pairs)), key=lambda j: -lengths[j])
        for batch in self._batches(order, lengths):
            ids, mask = self._pad([seqs[j] for j in batch])
            # left padding ends every row at the last column: an option of n tokens is read from the
            # last n + 1 positions, so only those logits are computed (not tokens x vocabulary)
            keep = max(len(options[pairs[j][0]][pairs[j][1]]) for j in batch) + 1
            with torch.inference_mode():
                logits = self._forward(ids, mask, keep)
                logp = torch.log_softmax(logits.float(), dim=-1)
            for r, j in enumerate(batch):
                i, k = pairs[j]
                n = len(options[i][k])
                pos = torch.arange(keep - n - 1, keep - 1)
                tgt = torch.tensor(options[i][k])
                out[i][k] = float(logp[r, pos, tgt].double().sum())
        return out

    def _forward(self, ids, mask, keep: int = 0):
        """Logits of the last ``keep`` positions (0: all)."""
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding must not shift positions
        return self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                          logits_to_keep=keep).logits

    def _last_logprobs(self, prompts: list[list[int]]):
        torch = self.torch
        ids, mask = self._pad(prompts)
        with torch.inference_mode():
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                                logits_to_keep=1).logits[:, -1]
            return torch.log_softmax(logits.float(), dim=-1).cpu()

    def close(self) -> None:
        """Drop the model, the nnsight wrapper and layer map the interventions cache on it (the
        wrapper points back at the model: a cycle only the collector frees) and the grammar cache,
        then give the device memory back (``chorus.serving.device.free_device_memory``)."""
        from chorus.serving.device import free_device_memory  # at call time: the seam tests patch

        model, self.model, self._grammars = getattr(self, "model", None), None, None
        if model is not None:
            for attr in ("_chorus_nnsight", "_chorus_layer_map"):
                model.__dict__.pop(attr, None)
            del model
            free_device_memory()


def sampling_processors(temperature: float, top_p: float, seeds: list[int | None]) -> list[Any]:
    """The logits processors of seeded sampling, one row per seed: temperature, nucleus, then each row's
    own draw as logits that greedy decoding picks. Any decoding loop that applies them to each step's
    last-position float32 logits samples exactly as this backend's ``generate`` does."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper
    procs: list[Any] = [TemperatureLogitsWarper(temperature)]
    if top_p < 1:
        procs.append(TopPLogitsWarper(top_p))
    procs.append(_SeededSampler(seeds))
    return procs


class _SeededSampler:
    """Draw one token per row from that row's own generator; return logits that make greedy
    decoding pick it. Rows without a seed get fresh OS entropy."""

    def __init__(self, seeds: list[int | None]):
        import torch

        self.torch = torch
        self.gens = []
        for s in seeds:
            g = torch.Generator()
            g.manual_seed(s if s is not None else int.from_bytes(os.urandom(8), "little") >> 1)
            self.gens.append(g)

    def __call__(self, input_ids, scores):
        # torch.multinomial(p, 1, generator=g) is argmax(p / q) with q ~ Exp(1) drawn by
        # ``exponential_`` from g over p's shape (ATen's one-sample path). Drawing each row's q from
        # its own generator and dividing and reducing the batch at once is the same draw, token
        # for token (tests/test_seeding.py), without a per-row multinomial and its checks.
        torch = self.torch
        probs = torch.softmax(scores.float(), dim=-1).cpu()
        q = torch.empty_like(probs)
        for i, g in enumerate(self.gens):
            q[i].exponential_(1, generator=g)
        tok = (probs / q).argmax(dim=-1, keepdim=True).to(scores.device)
        return torch.full_like(scores, float("-inf")).scatter_(1, tok, 0.0)
