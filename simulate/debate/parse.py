"""Candidate-restricted answer extraction (never "the last capital letter").

``parse_answer(text, options)`` returns the committed option label or ``None``. Only the given
labels can come out. In order of precedence:

1. an explicit final marker: "Final answer: X", "Answer: X" (the last one);
2. a bold candidate ``**X**`` / ``**(X)**`` / ``**X.**``... (the last one);
3. a commitment phrase: "the answer is X", "I choose X", "option X", "my answer: X" (the last);
4. a leading candidate: the reply begins "X.", "X)", "(X)", "X:" or, for word labels, "Yes," ...;
5. fallback: letter labels - the first standalone capital candidate that is not an article
   ("A dog ...") and not part of a name ("vitamin C", "Plan B"), unless the reply hedges
   ("B or C"); word labels - the label, if exactly one distinct label occurs in the reply.

A refusal or a reply with no candidate gives ``None``; callers count it as unparsed, never as
an option. Letter labels are matched upper-case (lower-case "a" is an article) except right
after an explicit marker; word labels case-insensitively at word boundaries.
"""
from __future__ import annotations

import re
from typing import Sequence

_NAME_BEFORE = re.compile(
    r"(?:vitamin|plan|type|hepatitis|grade|class|group|section|part|appendix|figure|fig\.|table|step|"
    r"model|series|phase|level|team|column|row|exhibit|article|schedule|category|point|player|person|"
    r"agent|country|city|company|patient|student|scenario|case|blood|rank|tier|size|key|note|chord|"
    r"in|of|to)\s*$", re.I)
_REFUSAL = re.compile(r"\b(?:I\s+(?:cannot|can't|can not|won't|will not|am unable to|'m unable to|am not able to)"
                      r"\s+(?:answer|help|provide|choose|assist|comply))", re.I)


def _cands(options: Sequence[str]) -> tuple[dict[str, str], bool]:
    """Lookup (matching form -> label) and whether labels are words."""
    labs = [str(o) for o in options]
    if not labs:
        raise ValueError("options must be a non-empty list of labels")
    words = any(len(lab) > 1 or not lab.isalpha() for lab in labs)
    return {lab.lower(): lab for lab in labs}, words


def _alt(labels: Sequence[str]) -> str:
    return "|".join(re.escape(x) for x in sorted(labels, key=len, reverse=True))


def parse_answer(text: str | None, options: Sequence[str]) -> str | None:
    """The option label ``text`` commits to, or ``None`` (see the module docstring)."""
    if not text or not text.strip():
        return None
    lookup, words = _cands(options)
    alt = _alt(list(lookup.values()))
    # a label as a whole token; letters must not run into other letters/digits
    tok = rf"(?<![A-Za-z0-9])\(?({alt})\)?(?![A-Za-z0-9])"
    flags = re.I if words else 0

    def pick(m: re.Match | None) -> str | None:
        return lookup.get(m.group(1).lower()) if m else None

    def last(pattern: str, fl: int) -> str | None:
        ms = list(re.finditer(pattern, text, fl))
        return pick(ms[-1]) if ms else None

    # 1. explicit final marker (lower-case letters accepted right after it)
    marker_tok = rf"[\s*_\"'`]*(?:option|choice)?\s*\(?({alt})\)?(?![A-Za-z0-9])"
    fl_marker = re.I
    r = last(rf"final\s+answer\s*(?:is|:|=|-)?{marker_tok}", fl_marker)
    if r:
        return r
    r = last(rf"\banswer\s*[*_]*\s*[:=]{marker_tok}", fl_marker)
    if r:
        return r
    # 2. bold candidate
    r = last(rf"\*\*\s*(?:option|choice|answer)?\s*:?\s*\(?({alt})\)?[.:)]?(?:\s*[-:][^*\n]{{0,80}})?\s*\*\*",
             re.I if words else 0)
    if r:
        return r
    # 3. commitment phrases
    r = last(rf"(?:answer|choice|option)\s+(?:is|would be|should be|will be|remains|stays|to be)\s*:?{marker_tok}", re.I)
    if r:
        return r
    r = last(rf"\bI\s+(?:choose|pick|select|go with|stick with|agree with option|will choose|'ll go with)"
             rf"\s+(?:option\s+|answer\s+)?{tok}", re.I if words else 0)
    if r:
        return r
    r = last(rf"\b(?:option|choice)\s+{tok}", re.I if words else 0)
    if r:
        return r
    # 4. leading candidate
    m = re.match(rf"\s*[*_\"'`]*\(?({alt})\)?(?:[.:),!]|\s*$|\s+[-\u2013\u2014])", text, flags)
    if m and (words or not _article(text, m.start(1))):
        return pick(m)
    if _REFUSAL.search(text):
        return None
    # 5. fallback
    if words:
        found = {lookup[m.group(1).lower()] for m in re.finditer(rf"(?<![A-Za-z0-9])({alt})(?![A-Za-z0-9])", text, re.I)}
        return found.pop() if len(found) == 1 else None
    hits = []
    for m in re.finditer(rf"(?<![A-Za-z0-9'&+/-])({alt})(?![A-Za-z0-9'&+/-])", text):
        if _article(text, m.start(1)) or _NAME_BEFORE.search(text[max(0, m.start(1) - 20):m.start(1)]):
            continue
        hits.append(m)
    if not hits:
        return None
    first = hits[0]
    # hedges: "B or C", "either B or C", "between B and C"
    hedge = re.search(rf"(?<![A-Za-z0-9])\(?({alt})\)?\s*(?:,|or|and|/)\s*(?:option\s+)?\(?({alt})\)?(?![A-Za-z0-9])", text)
    if hedge and hedge.group(1) != hedge.group(2) and len({h.group(1) for h in hits}) > 1:
        return None
    return pick(first)


def _article(text: str, i: int) -> bool:
    """Is the capital at ``i`` the word "A"/"I" used as an article/pronoun ("A dog", "I think")?"""
    ch = text[i]
    if ch not in "AI":
        return False
    rest = text[i + 1:i + 3]
    return bool(re.match(r"\s+[a-zA-Z]", rest)) and not re.match(r"\s+(?:is|was|seems|because|since|as)\b", text[i + 1:i + 12])


# -- numeric answers (items with no option set) -----------------------------------------------
# a number as written: sign, currency, thousands commas (groups of 3 only), decimals, a simple
# fraction. "3,5" is not a decimal comma: it reads as the list 3, 5 (prose lists use commas)
_NUM = (r"(?<![\w.])([-+\u2212]?)\s?[$\u20ac\u00a3]?\s?"
        r"((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:\s?/\s?(\d+))?(?![\d,]*\d)(?!\.\d)")
_NUMBER = re.compile(_NUM)
_WORDS = {w: float(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty".split())}
_MARKER = re.compile(r"(?:final\s+answer|\banswer)\s*(?:is|:|=|-)?\s*[*_\"'`]*\s*"
                     r"|\b(?:answer|result|total)\s+(?:is|would be|should be|will be|remains|comes to)\s*:?\s*[*_\"'`]*\s*",
                     re.I)


def _value(m: re.Match) -> float | None:
    sign = -1.0 if m.group(1) in ("-", "\u2212") else 1.0
    x = float(m.group(2).replace(",", ""))
    if m.group(3) is not None:
        if float(m.group(3)) == 0:
            return None  # "1/0" reads as nothing, never as infinity
        x /= float(m.group(3))
    return sign * x


def read_number(text: str | None) -> float | None:
    """``text`` as one number and nothing else ("1,200", "-3.5", "$40", "50%", "3/4"), or None.
    The bench's numeric references are read with it (strict: no prose around the number)."""
    if text is None:
        return None
    t = str(text).strip().rstrip("%").strip()
    m = _NUMBER.fullmatch(t)
    return _value(m) if m else None


def parse_numeric(text: str | None) -> float | None:
    """The number a reply commits to (numeric items; never used by label-scored metrics), or None.

    In order: the number right after the last explicit marker ("Final answer: 42", "the answer is
    $1,200", "Answer: **-3.5**", also a number word zero..twenty there: "the answer is four");
    else the last bold number ``**42**``; else the last number in the reply. Units and a percent
    sign after the number are ignored (50% reads 50: a question states its unit), thousands
    commas are dropped, "3/4" reads 0.75. No number -> None: callers count it as unreadable,
    never score it."""
    if not text or not text.strip():
        return None
    marks = list(_MARKER.finditer(text))
    for mk in reversed(marks):
        after = text[mk.end():mk.end() + 40]
        m = _NUMBER.match(after.lstrip("~\u2248 ").removeprefix("approximately ").removeprefix("about "))
        if m:
            return _value(m)
        w = re.match(r"([A-Za-z]+)\b", after)
        if w and w.group(1).lower() in _WORDS:
            return _WORDS[w.group(1).lower()]
    bold = [m for b in re.finditer(r"\*\*([^*\n]{1,40})\*\*", text) for m in _NUMBER.finditer(b.group(1))]
    if bold:
        return _value(bold[-1])
    ms = list(_NUMBER.finditer(text))
    return _value(ms[-1]) if ms else None
