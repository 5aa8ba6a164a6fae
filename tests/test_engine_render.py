"""The engine renders and tokenises a batch of prompts in one tokenizer call (issue 52): the ids, the
offsets the message spans map through and the option ids are exactly those of one call per text,
on the embedded tokenizer and on each paper architecture's chat template. The option ids come from
the prompt's tail (its text from its last added token on) with each option, not from the whole
prompt with each: the same ids as the joint tokenisation, options that merge across the cut included."""
from __future__ import annotations

import random

import pytest

from chorus.interventions.spans import message_token_span, offsets
from chorus.serving.dummy import write_config_and_tokenizer
from chorus.serving.engine import Engine

ARCHS = ["llama-3.1-8b-instruct", "gemma-4-e4b-it", "qwen3.5-9b"]
# labels that join the prompt's last token or not, multi-token ones, a leading space and a newline
OPTIONS = ["A", " B", "Paris", "\n", "ing", "not sure at all", "{\"x\": 1}"]


def convs() -> list[list[dict]]:
    peer = "My friend is certain that the answer is B. " * 3
    out = [[{"role": "user", "content": f"{peer}\nQuestion {k}: which?\nA. one\nB. two"}] for k in range(5)]
    out.append([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "The answer is"}])  # a prefill
    out.append([{"role": "user", "content": "x"}])
    return out


def engine_for(tok) -> Engine:
    e = Engine.__new__(Engine)
    e.tokenizer = tok
    return e


def old_render(tok, conv):
    """The per-text render as it was: the template, then one tokenizer call."""
    prefill = conv[-1]["role"] == "assistant"
    text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=not prefill,
                                   continue_final_message=prefill)
    return text, list(tok(text, add_special_tokens=False).input_ids)


def old_option_ids(tok, text, ids, option):
    full = tok(text + option, add_special_tokens=False).input_ids
    n = len(ids)
    return list(full[n:]) if list(full[:n]) == ids else list(tok(option, add_special_tokens=False).input_ids)


def tokenizers(tmp_path_factory):
    from transformers import AutoTokenizer
    out = {}
    for arch in ARCHS:
        d = tmp_path_factory.mktemp(arch)
        write_config_and_tokenizer(arch, d, layers=1, narrow_by=16)
        out[arch] = AutoTokenizer.from_pretrained(str(d))
    return out


@pytest.fixture(scope="module")
def toks(tmp_path_factory, tokenizer):
    return {"embedded": tokenizer, **tokenizers(tmp_path_factory)}


@pytest.mark.parametrize("name", ["embedded", *ARCHS])
def test_render_many_equals_one_call_per_text(toks, name):
    tok = toks[name]
    eng = engine_for(tok)
    cs = convs()
    got = eng.render_many(cs, offsets=True)
    merged = 0
    for c, p in zip(cs, got):
        text, ids = old_render(tok, c)
        assert (p.text, p.ids) == (text, ids)
        assert p.offsets == offsets(tok, text, ids)  # what the spans used to compute by a second call
        assert eng.render(c) == p
        assert eng.render(c).offsets is None
    opts = eng.option_ids_many(got, OPTIONS)
    for p, row in zip(got, opts):
        for o, ids in zip(OPTIONS, row):
            assert ids == old_option_ids(tok, p.text, p.ids, o)
            assert eng.option_token_ids(p, o) == ids
            full = tok(p.text + o, add_special_tokens=False).input_ids
            merged += list(full[:len(p.ids)]) != p.ids
    # the fallback (the option tokenised alone) is exercised somewhere in the set
    assert merged or name != "embedded"
    # prompts and joint texts in one call: the same prompts, offsets and option ids
    both, oids = eng.prepare(cs, OPTIONS, offsets=True)
    assert both == got and [p.offsets for p in both] == [p.offsets for p in got] and oids == opts
    assert eng.prepare(cs)[1] is None


def test_spans_from_the_render_offsets_equal_recomputed(toks):
    tok = toks["llama-3.1-8b-instruct"]
    eng = engine_for(tok)
    cs = convs()[:5]
    for c, p in zip(cs, eng.render_many(cs, offsets=True)):
        for blk in (0, (0, 0, 20), (0, 5, 40)):
            assert message_token_span(tok, p.text, p.ids, c, blk, p.offsets) == \
                message_token_span(tok, p.text, p.ids, c, blk)


# options that begin with a space, a letter or digit glued to the prompt's last character, punctuation,
# newlines, multi-token ones, non-ASCII and an added token's own text
TAIL_OPTIONS = ["A", " B", "B.", "s", "ing", "1", " 42", "\n", "\n\nA", "  two", "not sure at all", "é", "日本",
                "{\"x\": 1}", "A<|im_end|>"]


def tail_convs() -> list[list[dict]]:
    """Generation prompts and prefills whose last character is a letter, a space, a newline, a digit or
    punctuation (an option glued to it merges across the cut), a long debate turn among them."""
    out = convs()
    for end in ("The answer is", "The answer is ", "Answer:", "Answer:\n", "Answer:\n\n", "Option 4", "(", "I",
                "Hmm, it is B", "Paris is in Fran"):
        out.append([{"role": "user", "content": "Question: which? A. one B. two " * 20},
                    {"role": "assistant", "content": end}])
    return out


def split_counts(eng: Engine, prompts, opts) -> tuple[int, int]:
    """(prompts whose options the tail split served, options that merged with their prompt's tail)."""
    served = merged = 0
    for p in prompts:
        i = eng._cut(p)
        if i is None:
            continue
        tail = p.text[p.text.rfind(eng._added_tokens()[p.ids[i]]):]
        t = eng._short_ids([tail])[0]
        if t != list(p.ids[i:]):
            continue
        served += 1
        merged += sum(f[:len(t)] != t for f in eng._short_ids([tail + o for o in opts]))
    return served, merged


@pytest.mark.parametrize("name", ["embedded", *ARCHS])
def test_tail_split_gives_the_joint_ids(toks, name):
    tok = toks[name]
    eng = engine_for(tok)
    opts = list(TAIL_OPTIONS) + [tok.eos_token]
    cs = tail_convs()
    prompts, oids = eng.prepare(cs, opts)
    assert eng._tail_ok() and eng._known().tail == "checked"  # split, and checked once
    for c, p, row in zip(cs, prompts, oids):
        assert (p.text, p.ids) == old_render(tok, c)
        for o, ids in zip(opts, row):
            assert ids == old_option_ids(tok, p.text, p.ids, o), (p.text[-40:], o)
    assert eng.option_ids_many(prompts, opts) == oids
    assert [eng.option_token_ids(p, o) for o in opts] == oids[-1]
    with_offsets, oids2 = eng.prepare(cs, opts, offsets=True)
    assert oids2 == oids and [q.offsets for q in with_offsets] == [offsets(tok, q.text, q.ids) for q in prompts]
    served, merged = split_counts(eng, prompts, opts)
    assert served == len(prompts)  # every chat-template prompt is served by its tail, none the old way
    assert merged > 0  # options that merge across the cut are among them (tokenised alone, as the joint way)


@pytest.mark.parametrize("name", ["embedded", *ARCHS])
def test_tail_split_random_texts(toks, name):
    """Random prefills and options from pieces that tokenisers treat differently at a boundary."""
    tok = toks[name]
    eng = engine_for(tok)
    rng = random.Random(52)
    bits = ["a", "b", "The", " the", " ", "  ", "\n", "\n\n", "\t", "1", "23", ".", ",", ":", "?", "'s", "'", "\"",
            "é", "ß", "日", "🙂", "-", "(", ")", "<", ">", "|", "ing", "Answer", tok.eos_token]
    cs, opts = [], []
    for _ in range(40):
        user = "".join(rng.choice(bits) for _ in range(rng.randint(5, 60)))
        fill = "".join(rng.choice(bits) for _ in range(rng.randint(1, 8)))
        cs.append([{"role": "user", "content": user or "x"}] +
                  ([{"role": "assistant", "content": fill}] if rng.random() < 0.7 and fill.strip() else []))
    for _ in range(12):
        opts.append("".join(rng.choice(bits) for _ in range(rng.randint(1, 4))))
    opts = list(dict.fromkeys(o for o in opts if tok(o, add_special_tokens=False).input_ids))
    prompts, oids = eng.prepare(cs, opts)
    for p, row in zip(prompts, oids):
        for o, ids in zip(opts, row):
            assert ids == old_option_ids(tok, p.text, p.ids, o), (p.text[-30:], o)


class _Shifty:
    """A fast tokenizer in name whose ids after its added token depend on more than the piece they are
    in (a digit from the 20th character on shifts): the tail alone matches, the joint ids do not."""
    is_fast = True
    chat_template = None
    bos_token = ""
    added_tokens_decoder = {1: "<s>"}

    def _one(self, text: str) -> list[int]:
        out, i = [], 0
        while i < len(text):
            if text.startswith("<s>", i):
                out.append(1)
                i += 3
                continue
            out.append(ord(text[i]) + (1000 if text[i].isdigit() and i >= 20 else 0))
            i += 1
        return out

    def __call__(self, text, add_special_tokens: bool = False, **_):
        from chorus.serving.backends.synthetic import _Encoding
        return _Encoding(input_ids=self._one(text) if isinstance(text, str) else [self._one(t) for t in text])


def test_a_tokenizer_the_split_does_not_fit_takes_the_joint_way():
    tok = _Shifty()
    eng = engine_for(tok)
    cs = [[{"role": "user", "content": "a question long enough<s>x"}], [{"role": "user", "content": "x"}]]
    opts = ["1", "no"]
    prompts, oids = eng.prepare(cs, opts)
    full = [[old_option_ids(tok, p.text, p.ids, o) for o in opts] for p in prompts]
    assert oids == full and oids[0][0] == [ord("1") + 1000]
    assert not eng._tail_ok()  # found once: not split again
    assert eng.prepare(cs, opts)[1] == full and eng.option_ids_many(prompts, opts) == full


def test_tokenizers_that_are_not_fast_take_the_joint_way():
    from chorus.serving.backends.synthetic import CharTokenizer
    eng = engine_for(CharTokenizer())
    prompts, oids = eng.prepare([[{"role": "user", "content": "hi"}]], ["A", " B"])
    assert not eng._tail_ok() and oids == [[[ord("A")], [ord(" "), ord("B")]]]


# -- the tokenizers library called directly -----------------------------------------------------
TEXTS = ["<|im_start|>user\nHello there, 123 héllo\n\n", "x", "  two  spaces\tand\na tab", ""]


@pytest.mark.parametrize("name", ["embedded", *ARCHS])
def test_the_library_called_directly_gives_the_wrappers_ids_and_offsets(toks, name):
    """A fast tokenizer's ``tokenizers.Tokenizer`` is called directly (its wrapper's BatchEncoding was a
    third of a short prompt's tokenising; issue 52): the ids and offsets the wrapper gives, one text or
    many."""
    tok = toks[name]
    eng = engine_for(tok)
    assert eng._rust_tokenizer() is tok.backend_tokenizer
    want = tok(TEXTS, add_special_tokens=False, return_offsets_mapping=True)
    ids, offs = eng._encode(TEXTS, offsets=True)
    assert ids == [list(x) for x in want["input_ids"]]
    assert offs == [[tuple(o) for o in x] for x in want["offset_mapping"]]
    assert eng._encode(TEXTS) == (ids, None)
    for t, i in zip(TEXTS, ids):
        assert eng._encode([t]) == ([i], None)
    other = toks["embedded" if name != "embedded" else ARCHS[0]]
    eng.tokenizer = other  # a tokenizer swapped in is called, not the one found before
    assert eng._rust_tokenizer() is other.backend_tokenizer
    assert eng._encode(TEXTS)[0] == [list(x) for x in other(TEXTS, add_special_tokens=False).input_ids]


def test_the_wrapper_is_called_where_the_library_alone_would_differ(tokenizer):
    """Truncation or padding left set on the library's tokenizer, special tokens split, or a subclass
    with its own call path: the wrapper is called, and the ids are the wrapper's."""
    import copy
    text = "<|im_start|>user\n" + "word " * 40
    want = list(tokenizer(text, add_special_tokens=False).input_ids)

    tok = copy.deepcopy(tokenizer)
    tok.backend_tokenizer.enable_truncation(max_length=5)
    eng = engine_for(tok)
    assert eng._rust_tokenizer() is None and eng._encode([text])[0] == [want]

    tok = copy.deepcopy(tokenizer)
    tok.split_special_tokens = True
    eng = engine_for(tok)
    assert eng._rust_tokenizer() is None
    assert eng._encode([text])[0] == [list(tok(text, add_special_tokens=False).input_ids)] != [want]

    class Own(type(tokenizer)):
        def _encode_plus(self, *a, **k):
            return super()._encode_plus(*a, **k)

    tok = copy.deepcopy(tokenizer)
    tok.__class__ = Own
    eng = engine_for(tok)
    assert eng._rust_tokenizer() is None and eng._encode([text])[0] == [want]
