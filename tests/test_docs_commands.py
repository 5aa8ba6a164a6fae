"""The docs name only commands and options that exist.

Every line in a fenced shell block of README.md, docs/*.md and the part READMEs that runs ``chorus ...``
(after an optional ``$ ``, ``.venv/bin/`` or ``NAME=value`` assignments; also after ``&&``) is run
in-process with ``--help`` appended: click parses every option before it acts on ``--help``, so an
unknown option or command exits 2 while a line that exists exits 0. Each ``-x`` / ``--option`` on the
line must also be a visible parameter of the command it belongs to, so the docs never teach a hidden
(deprecated) spelling. A failure names the page and the line.

Shell placeholders stay as they are (``RUN``, ``DIR``, ``runs/debate/smoke-...``: arguments are not
validated before ``--help``); ``[...]`` around optional parts is dropped and its content kept;
``a|b|c`` where a command name stands is every one of them; ``--a/--b`` is both.
"""
from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 12 * 1024
SHELL_FENCES = {"", "bash", "sh", "shell", "console", "zsh"}   # ```text, ```python, ```yaml are not run
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")


def doc_pages(root: Path = ROOT) -> list[Path]:
    """README.md, docs/*.md and every README.md in the repository (git's list when there is one)."""
    pages = {root / "README.md", *(root / "docs").glob("*.md")}
    try:
        out = subprocess.run(["git", "ls-files", "*README.md"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.split()
        pages.update(root / p for p in out)
    except (OSError, subprocess.CalledProcessError):
        pages.update(p for p in root.rglob("README.md")
                     if not any(part.startswith(".") or part in ("runs", "build") for part in p.relative_to(root).parts))
    return sorted(p for p in pages if p.is_file())


@dataclass(frozen=True)
class DocLine:
    page: str      # relative to the repository root
    lineno: int    # where the (first physical) line starts
    text: str      # the logical line, continuations joined

    def __str__(self) -> str:
        return f"{self.page}:{self.lineno}"


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def shell_lines(text: str, page: str) -> list[DocLine]:
    """The logical lines (comments stripped, ``\\`` continuations joined) of the shell fences in a page."""
    out: list[DocLine] = []
    fence = None           # the opening marker while inside a fence
    run = False            # whether this fence is a shell one
    pending, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        m = _FENCE.match(raw)
        if fence is None and m:
            fence, run = m.group(1), m.group(2).lower() in SHELL_FENCES
            continue
        if fence is not None and raw.strip().startswith(fence[0] * 3) and raw.strip().strip(fence[0]) == "":
            fence, pending = None, ""
            continue
        if fence is None or not run:
            continue
        line = _strip_comment(raw).rstrip()
        if not pending:
            start = no
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.strip():
            out.append(DocLine(page, start, line.strip()))
    return out


def chorus_invocations(line: str) -> list[list[str]]:
    """The ``chorus`` commands on one shell line, each as its arguments after ``chorus`` (before any
    expansion of ``a|b``): ``[]`` when the line runs no chorus command."""
    try:
        tokens = shlex.split(line)
    except ValueError:
        return []
    found: list[list[str]] = []
    segment: list[str] = []
    for tok in tokens + ["&&"]:
        if tok in ("&&", "||", ";", "|"):
            while segment and (segment[0] == "$" or _ENV.match(segment[0])):
                segment = segment[1:]
            if segment and (segment[0] == "chorus" or segment[0].endswith("/chorus")):
                found.append(segment[1:])
            segment = []
        else:
            segment.append(tok)
    return found


def _clean(tokens: list[str]) -> list[str]:
    """Optional-part brackets dropped, a lone ``...`` dropped."""
    out = []
    for tok in tokens:
        t = tok.lstrip("[") if tok.startswith("[") else tok
        if t.endswith("]") and "[" not in t:
            t = t.rstrip("]")
        if t and t != "...":
            out.append(t)
    return out


def _is_option(tok: str) -> bool:
    return tok.startswith("-") and tok not in ("-", "--") and not re.match(r"^-\d", tok)


def _option_names(tok: str) -> list[str]:
    name = tok.split("=", 1)[0]
    return name.split("/") if name.startswith("--") and "/--" in name else [name]


def _params(cmd) -> dict:
    """option string -> parameter, for a click command's options (hidden ones included)."""
    return {o: p for p in cmd.params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)}


def _check_options(cmd, options: list[str], where: str) -> list[str]:
    problems = []
    params = _params(cmd)
    for tok in options:
        for name in _option_names(tok):
            if name == "--help":
                continue
            p = params.get(name)
            if p is None:
                problems.append(f"{name} is not an option of `{where}`")
            elif p.hidden:
                problems.append(f"{name} is a hidden (deprecated) option of `{where}`: teach the visible one")
    return problems


def expand(cmd, args: list[str], where: str = "chorus") -> list[tuple[list[str], list[str]]]:
    """Every concrete command line of ``args`` under the click command ``cmd`` (``a|b`` where a
    sub-command stands gives one per name), each with the problems found in its options."""
    subs = getattr(cmd, "commands", None)
    if subs is None:
        opts = [t for t in args if _is_option(t)]
        return [([_invocable(t) for t in args], _check_options(cmd, opts, where))]
    params = _params(cmd)
    head: list[str] = []
    problems: list[str] = []
    i = 0
    while i < len(args) and _is_option(args[i]):
        problems += _check_options(cmd, [args[i]], where)
        p = params.get(_option_names(args[i])[0])
        head.append(_invocable(args[i]))
        if p is not None and not (p.is_flag or p.count) and "=" not in args[i] and i + 1 < len(args):
            head.append(args[i + 1])
            i += 1
        i += 1
    if i == len(args):
        return [(head, problems)]
    out = []
    for name in args[i].split("|"):
        sub = subs.get(name)
        if sub is None:  # the invocation fails with "No such command"; say so here too
            out.append((head + [name] + args[i + 1:], problems + [f"no command `{where} {name}`"]))
            continue
        for rest, more in expand(sub, args[i + 1:], f"{where} {name}"):
            out.append((head + [name] + rest, problems + more))
    return out


def _invocable(tok: str) -> str:
    """``--a/--b`` as ``--a``; anything else as it is."""
    if _is_option(tok) and tok.startswith("--") and "/--" in tok.split("=", 1)[0]:
        return tok.split("/", 1)[0]
    return tok


def check_line(app: typer.Typer, line: str) -> list[str]:
    """Problems with the chorus commands on one shell line ([] when it is fine)."""
    root = typer.main.get_command(app)
    runner = CliRunner()
    problems = []
    for raw in chorus_invocations(line):
        for args, found in expand(root, _clean(raw)):
            problems += found
            res = runner.invoke(app, args + ["--help"])
            if res.exit_code != 0:
                tail = " ".join(re.sub("[\u2500-\u257f]", " ", res.output).split())[-300:]
                problems.append(f"`chorus {' '.join(args)} --help` exits {res.exit_code}: {tail}")
    return problems


def _all_lines() -> list[DocLine]:
    lines = []
    for page in doc_pages():
        rel = page.relative_to(ROOT).as_posix()
        lines += [d for d in shell_lines(page.read_text(), rel) if chorus_invocations(d.text)]
    return lines


DOC_LINES = _all_lines()


def test_the_docs_have_chorus_lines():
    pages = {d.page for d in DOC_LINES}
    assert "README.md" in pages and any(p.startswith("docs/") for p in pages), pages


@pytest.mark.parametrize("doc", DOC_LINES, ids=str)
def test_doc_line_is_a_real_command(doc):
    from chorus.cli import app
    problems = check_line(app, doc.text)
    assert not problems, f"{doc}: {doc.text}\n  " + "\n  ".join(problems)


def test_the_checker_catches_a_bad_line():
    """An unknown option fails even with --help after it; a hidden option is refused; a missing
    command is named; alternatives and optional brackets are each checked."""
    from chorus.cli import app
    assert check_line(app, "chorus debate run smoke --set rounds=1 --check") == []
    bad = check_line(app, "chorus debate run smoke --no-such-option 3")
    assert any("--no-such-option is not an option" in p for p in bad)
    assert any("exits 2" in p for p in bad)
    assert any("no command `chorus debate nosuchverb`" in p
               for p in check_line(app, "chorus debate run|nosuchverb smoke"))
    assert check_line(app, "chorus debate run smoke [--nope]")   # brackets dropped, content checked
    assert check_line(app, "ls && chorus nosuchgroup run") != []

    demo = typer.Typer()

    @demo.command()
    def go(new: str = typer.Option("", "--new", "-n"), old: str = typer.Option("", "--old", hidden=True)) -> None:
        """one command with a visible and a hidden option"""

    @demo.command()
    def other() -> None:
        """a second, so that `go` is a sub-command"""

    assert check_line(demo, "chorus go --new x") == []
    assert check_line(demo, "chorus go -n x") == []
    hidden = check_line(demo, "chorus go --old x")
    assert len(hidden) == 1 and "hidden" in hidden[0]   # it parses (exit 0) but is not taught


def test_line_parsing():
    page = "\n".join([
        "```bash",
        "$ HF_HUB_OFFLINE=1 .venv/bin/chorus debate run smoke \\",
        "    --set rounds=1   # a comment",
        "bash scripts/setup.sh && .venv/bin/chorus demo --size full",
        "hf download meta-llama/Llama-3.1-8B-Instruct",
        "```",
        "chorus outside a fence",
        "```text",
        "chorus          the application",
        "```",
        "```python",
        "chorus.run('debate')",
        "```",
    ])
    lines = shell_lines(page, "p.md")
    assert [(d.lineno, chorus_invocations(d.text)) for d in lines] == [
        (2, [["debate", "run", "smoke", "--set", "rounds=1"]]),
        (4, [["demo", "--size", "full"]]),
        (5, []),
    ]
    assert _clean(["judge", "RUN", "[--judge", "PROFILE]", "[--skip]", "[RUN", "...]", "--set", "a=[x, y]"]) == \
        ["judge", "RUN", "--judge", "PROFILE", "--skip", "RUN", "--set", "a=[x, y]"]


def test_readme_is_a_way_in():
    """A few screens: the README stays small, and its two set-up commands are the ones CI runs."""
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= README_MAX_BYTES, f"README.md is {len(readme)} bytes (at most {README_MAX_BYTES})"
    text = readme.decode()
    assert "bash scripts/setup.sh && .venv/bin/chorus demo --size full --out runs/demo" in text
    assert "bash scripts/setup.sh --test && .venv/bin/python -m pytest -q -n 2" in text
    assert "bash scripts/setup.sh --test && .venv/bin/python -m pytest -q" in (ROOT / ".ci" / "run").read_text()


def test_no_page_points_beside_the_repository():
    bad = [str(p.relative_to(ROOT)) for p in doc_pages()
           if any(s in p.read_text() for s in ("../shared", "shared/data", "shared/spec", "shared/seeds"))]
    assert not bad, f"references to ../shared: {bad}"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def test_relative_links_resolve():
    """Every relative link in README.md and docs/ names a file that exists, and an anchor a heading."""
    bad = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in _LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
            if not dest.exists():
                bad.append(f"{page.relative_to(ROOT)}: {rel} (no such file)")
                continue
            if anchor and dest.suffix == ".md":
                heads = {_slug(h) for h in re.findall(r"^#+\s+(.*)$", dest.read_text(), re.M)}
                if anchor not in heads:
                    bad.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not bad, "\n".join(bad)
