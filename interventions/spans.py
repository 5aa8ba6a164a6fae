"""Token spans of messages in the rendered chat template.

A message's span is found in character space on the text the engine actually renders
(``Engine.render``: the tokenizer's own chat template, or the documented plain template), then
mapped to tokens through the tokenizer's offset mapping of that same text. Nothing is searched
in decoded text: decoding is lossy (merges, byte-level pieces), offsets are exact.

A block target is either a message index (its whole content) or ``(index, start, end)``: the
character range ``content[start:end]`` of that message (e.g. one peer's response inside the
debate prompt, where every peer shares one user message).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from chorus.core.config import InputError


class SpanError(InputError):
    """A block target lies outside the conversation or cannot be located in the rendered text."""


@dataclass(frozen=True)
class Span:
    start: int  # first token (inclusive), in the rendered prompt's token ids
    end: int    # last token + 1
    char_start: int
    char_end: int

    @property
    def empty(self) -> bool:
        return self.end <= self.start

    def __len__(self) -> int:
        return max(0, self.end - self.start)


def offsets(tokenizer: Any, text: str, ids: Sequence[int]) -> list[tuple[int, int]]:
    """Character offsets of each token of ``text``; checks that the tokenisation is the one the
    engine uses (``ids``)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != list(ids):
        raise SpanError("the tokenizer's offset encoding differs from the engine's prompt ids "
                        f"({len(enc['input_ids'])} vs {len(ids)} tokens); cannot map message spans")
    return [tuple(o) for o in enc["offset_mapping"]]


def message_char_spans(text: str, conversation: Sequence[dict]) -> list[tuple[int, int]]:
    """(start, end) of each message's content in the rendered ``text``, searched in message
    order from the end of the previous one (templates may trim content: then the trimmed form)."""
    out, cursor = [], 0
    for j, m in enumerate(conversation):
        content = m.get("content") or ""
        if not content.strip():
            out.append((cursor, cursor))
            continue
        k = text.find(content, cursor)
        if k >= 0:
            out.append((k, k + len(content)))
        else:
            s = content.strip()
            k = text.find(s, cursor)
            if k < 0:
                raise SpanError(f"message {j} ({m.get('role')}) content not found in the rendered template "
                                f"(the chat template rewrites it?): {content[:60]!r}")
            lead = len(content) - len(content.lstrip())
            out.append((k - lead, k - lead + len(content)))  # content coordinates, trimmed edges clipped below
        cursor = max(cursor, out[-1][1])
    return out


def char_to_token_span(offs: Sequence[tuple[int, int]], cs: int, ce: int) -> tuple[int, int]:
    """Tokens overlapping [cs, ce) (a token that straddles the boundary is included)."""
    if ce <= cs:
        first = next((i for i, (a, b) in enumerate(offs) if b > cs), len(offs))
        return first, first
    idx = [i for i, (a, b) in enumerate(offs) if b > a and a < ce and b > cs]
    if not idx:
        first = next((i for i, (a, b) in enumerate(offs) if b > cs), len(offs))
        return first, first
    return idx[0], idx[-1] + 1


def parse_target(block: Any, conversation: Sequence[dict]) -> tuple[int, int | None, int | None]:
    if isinstance(block, bool):
        raise SpanError(f"block_message must be a message index or (index, start, end), got {block!r}")
    if isinstance(block, int):
        idx, cs, ce = block, None, None
    elif isinstance(block, (tuple, list)) and len(block) == 3 and all(isinstance(x, int) for x in block):
        idx, cs, ce = block
    else:
        raise SpanError(f"block_message must be a message index or (index, start, end), got {block!r}")
    n = len(conversation)
    if not 0 <= idx < n:
        raise SpanError(f"block_message={idx} is outside the conversation ({n} messages, valid 0..{n - 1})")
    if cs is not None:
        L = len(conversation[idx].get("content") or "")
        if not (0 <= cs <= ce <= L):
            raise SpanError(f"block range [{cs}, {ce}) is outside message {idx}'s content ({L} characters)")
    return idx, cs, ce


def message_token_span(tokenizer: Any, text: str, ids: Sequence[int], conversation: Sequence[dict],
                       block: Any, offs: Sequence[tuple[int, int]] | None = None) -> Span:
    """The token span of a block target in the rendered prompt (``text``, ``ids``). ``offs``: the
    prompt's token offsets where its render computed them in the same tokenizer call as ``ids``
    (``PreparedPrompt.offsets``); else the text is tokenised again with offsets and checked."""
    idx, cs, ce = parse_target(block, conversation)
    ms, me = message_char_spans(text, conversation)[idx]
    if cs is None:
        a, b = ms, me
    else:
        a, b = ms + cs, ms + ce
    a, b = max(a, 0), min(b, len(text))
    if offs is None or len(offs) != len(ids):
        offs = offsets(tokenizer, text, ids)
    ts, te = char_to_token_span(offs, a, b)
    return Span(ts, te, a, b)


def find_range(content: str, part: str) -> tuple[int, int]:
    """(start, end) of ``part`` inside a message's ``content`` (we built the message, so an
    exact substring is expected; a missing one is an error, never a guess)."""
    k = content.find(part)
    if k < 0:
        raise SpanError(f"text to block not found in the message content: {part[:60]!r}")
    return k, k + len(part)
