"""The four papers' reports, one shape in one place (``chorus paper bda | influence | roleplay | belief``).

Each paper is a module here: how it reads its inputs, its sections (``chorus.core.paper.Section``, kept
in the paper's order by ``Sections``) and how it frames its page; ``numbers.json`` is written first and
``paper.md`` rendered from that file alone (``chorus.core.paper.write_paper``). The BDA paper renders a
campaign (``chorus.simulate.council.campaign``, which computes its numbers from stored traces with
sections of the same type); the others read their runs' summaries.

    bda         campaign numbers file -> paper.md (bda.py, with bda_more.py and bda_parts.py)
    influence   debate and influence runs (influence.py)
    roleplay    roleplay, SFT, annotators, stats and probes outputs (roleplay.py)
    belief      belief runs (belief.py)
"""
from __future__ import annotations

#: paper name -> its module (imported when that paper is asked for, so ``chorus --help`` stays fast)
PAPERS = {"bda": "chorus.papers.bda", "influence": "chorus.papers.influence", "roleplay": "chorus.papers.roleplay",
          "belief": "chorus.papers.belief"}
