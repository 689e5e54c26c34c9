"""Every figure the README and the reference pages state is recomputed from the committed records.

``records/index.json`` holds one entry per figure group: the record files, the command that made
them, the table commands that print the figures from them, the page and section that quote them,
and the figures as the page prints them. Here every table command runs on the committed records
and every quoted figure must be in its output (within one unit of the last digit the page prints),
every quote must be on its page, every path the index names must exist, and every record file
must be named by the index (nothing orphaned). Groups whose table commands take longest (many
paired bootstraps) are marked ``slow``: the fast subset leaves them out, the whole suite runs them.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import ROOT, run_script

INDEX = json.loads((ROOT / "records" / "index.json").read_text(encoding="utf-8"))
GROUPS = INDEX["groups"]
# a number as a page or a table prints it: 0.38, -0.089, +0.00, 1,167, 9200, 1e-28, p=9.4e-08; not the
# digits of a name (l1, s11, w3) nor the second number of a range (0.98-1.00 is 0.98 and 1.00); a ratio's 2.3x is 2.3
NUM = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?(?![^\Wx]|x\w)")
LOWER_RANGE = re.compile(r"(?<=\d)-(?=\d)")


def numbers(text: str) -> list[str]:
    return [m.group(0) for m in NUM.finditer(LOWER_RANGE.sub(" ", text))]


def value(s: str) -> float:
    return float(s.replace(",", ""))


def unit(s: str) -> float:
    """One unit of the last digit ``s`` prints (0 for a count: counts must be exact)."""
    mant, _, exp = s.replace(",", "").lower().partition("e")
    if "." not in mant and not exp:
        return 0.0
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    return 10.0 ** (int(exp or 0) - decimals)


def close(page: str, out: str) -> bool:
    """``out`` prints ``page``'s figure: within one unit of the page's last digit; a count only by a count."""
    if unit(page) == 0 and unit(out) != 0:
        return False
    return abs(value(page) - value(out)) <= unit(page) * (1 + 1e-6)


def in_order(wanted: list[str], line: str, cells: bool = True) -> bool:
    """``wanted`` (the page's numbers) printed on ``line`` in order. On a table row each cell that
    holds some of them must begin with the first of those (a figure, not its interval's bound or
    another column's value), the rest following in that cell, not necessarily next to each other
    (the page may leave out an interval); any other line, or with ``cells`` false (a page that quotes
    the counts of a cell but not its first figure), holds them in order anywhere."""
    row = cells and line.lstrip().startswith("|")
    cells = [numbers(c) for c in line.strip().strip("|").split(" | ")] if row else [numbers(line)]
    anchored = len(cells) > 1
    i = 0
    for cell in cells:
        if i == len(wanted):
            break
        if anchored and not (cell and close(wanted[i], cell[0])):
            continue
        for x in cell:
            if i < len(wanted) and close(wanted[i], x):
                i += 1
    return i == len(wanted)


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@lru_cache(maxsize=None)
def page_text(page: str) -> str:
    return flat((ROOT / page).read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def output(command: str) -> str:
    """The table command's stdout, run from the repository root on the committed records."""
    words = shlex.split(command)
    assert words[0] == "python" and words[1].startswith("benchmarks/"), f"not a table command: {command}"
    done = run_script(ROOT / words[1], *words[2:], cwd=ROOT)
    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stderr[-2000:]}"
    return done.stdout


def tracked(path: str) -> list[str]:
    """The files git tracks under ``path`` (a file or a folder)."""
    done = subprocess.run(["git", "ls-files", "--", path], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.split()


def record_files() -> list[str]:
    """Every committed record file: the record folders and measurement files the index keeps."""
    return sorted(f for root in INDEX["record_roots"] for f in tracked(root) if not f.endswith(".md"))


def named(path: str, entries: list[str]) -> bool:
    return any(path == e or path.startswith(e.rstrip("/") + "/") for e in entries)


# --- the index itself (fast)

def test_every_path_the_index_names_exists():
    missing = [p for r in INDEX["records"] for p in [r["path"]] if not (ROOT / p).exists()]
    missing += [p for g in GROUPS for p in g["records"] if not (ROOT / p).exists()]
    missing += [g["page"] for g in GROUPS if not (ROOT / g["page"]).is_file()]
    assert not missing, missing


def test_no_record_is_orphaned():
    files = record_files()
    assert len(files) > 1000  # the records are there: this test checks something
    listed = [r["path"] for r in INDEX["records"]]
    orphans = [f for f in files if not named(f, listed)]
    assert not orphans, f"{len(orphans)} committed records the index does not name, e.g. {orphans[:5]}"
    for g in GROUPS:  # a group's records are records of the index
        assert all(named(p, listed) for p in g["records"]), g["id"]


def test_every_group_names_its_section_and_every_quote_is_on_its_page():
    bad = []
    for g in GROUPS:
        raw = (ROOT / g["page"]).read_text(encoding="utf-8")
        if g["section"] and not re.search(rf"^#+ {re.escape(g['section'])}\s*$", raw, re.M):
            bad.append(f"{g['id']}: no heading {g['section']!r} on {g['page']}")
        for f in g["figures"]:
            if flat(f["quote"]) not in page_text(g["page"]):
                bad.append(f"{g['id']}: {g['page']} does not say {f['quote']!r}")
        if not g["command_on_page"]:
            continue
        for name, cmd in g["tables"].items():  # the page names the script and the records it reads
            if name in g.get("off_page_tables", ()):
                continue
            words = shlex.split(cmd)
            stems = [Path(w).name.removesuffix(".jsonl") for w in words[2:] if "/" in w and (ROOT / w).exists()]
            if words[1] not in raw or not all(re.search(rf"(?<![\w-]){re.escape(x)}(?![\w-])", raw) for x in stems):
                bad.append(f"{g['id']}: {g['page']} does not give the table command {cmd!r}")
    assert not bad, "\n".join(bad)


def test_every_number_of_a_quote_is_checked():
    """A quote's numbers are each a checked figure, or named as not one (a count of the design)."""
    bad = []
    for g in GROUPS:
        for f in g["figures"]:
            have = Counter(numbers(f["quote"]))
            checked = Counter(n for c in f["checks"] for n in numbers(c["values"]))
            extra = set(checked) - set(have)  # a figure stated once for two seeds is checked twice
            left = have - checked - Counter(numbers(f.get("not_figures", "")))
            if extra or left:
                bad.append(f"{g['id']}: {f['quote']!r}: checked but not quoted {sorted(extra)}, "
                           f"quoted but not checked {sorted(left)}")
            for c in f["checks"]:
                if c["table"] not in g["tables"]:
                    bad.append(f"{g['id']}: {f['quote']!r} reads table {c['table']!r}, not one of the group's")
    assert not bad, "\n".join(bad)


def test_the_number_matching_is_strict_enough():
    assert numbers("0.98-1.00 of `gbc:max_l1` s11, p 1e-28; 1,167 / 243 of 9,200 (4, 11)") == \
        ["0.98", "1.00", "1e-28", "1,167", "243", "9,200", "4", "11"]
    assert numbers("(2.3x), 0x1f, 16x16") == ["2.3"]
    assert close("-0.09", "-0.089") and close("0.84", "0.83") and not close("0.84", "0.82")
    assert close("12", "12") and not close("12", "13") and not close("0", "+0.00")
    assert close("1e-28", "2e-28") and not close("1e-28", "3e-28")
    assert in_order(["0.38", "0.28", "0.49", "0.18"], "| `x` | 0.38 [0.28, 0.49] | 0.18 |")
    assert in_order(["-0.07", "0", "1"], "| `x` | -0.067 [-0.20, +0.00] 0/1 p=1 |")
    assert not in_order(["0.49"], "| `x` | 0.38 [0.28, 0.49] |")  # an interval's bound is not the figure
    assert not in_order(["0.49", "0.28"], "0.38 [0.28, 0.49]") and in_order(["169", "237"], "- 169 of 237: 0.71")


# the README's numbers that are no measured figure, each with the words around it (the paper's year, the
# machine, a design size, an issue's number): every other number of the README is in a quote of the index
PHRASES = json.loads((Path(__file__).with_name("audited_phrases.json")).read_text(encoding="utf-8"))
README_NOT_FIGURES = tuple(PHRASES["readme"])


def untraced_numbers(page: str, allowed: tuple[str, ...]) -> list[str]:
    """The numbers ``page`` states outside code (fenced blocks, code spans, link targets) that no quote
    of the index on that page holds and no phrase of ``allowed`` names."""
    text = re.sub(r"```.*?```", " ", (ROOT / page).read_text(encoding="utf-8"), flags=re.S)
    text = flat(re.sub(r"\]\([^)]*\)", "]", text))
    for q in sorted((flat(f["quote"]) for g in GROUPS if g["page"] == page for f in g["figures"]), key=len,
                    reverse=True):
        text = text.replace(q, " ")
    for phrase in sorted(allowed, key=len, reverse=True):  # a phrase may hold a shorter one
        assert phrase in text, f"{page} no longer says {phrase!r}: take it out of the allowed phrases"
        text = text.replace(phrase, " ")
    text = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), text)
    text = NOT_A_FIGURE.sub(lambda m: " " * len(m.group(0)), text)
    text = AN_ISSUE.sub(lambda m: " " * len(m.group(0)), text)
    return [f"{n} in ...{text[max(0, i - 60):i + 20]}..." for n, i in ((m.group(0), m.start()) for m in NUM.finditer(text))]


# a date (2026-12-06) or a package's version (1.26.0, v0.7.5) is no figure
AN_ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)  # an issue's number is a name
NOT_A_FIGURE = re.compile(r"(?<![\w.])(?:\d{4}-\d{2}-\d{2}|v?\d+\.\d+\.\d+)(?![\w])")


# every page of docs/ but the history, read number by number: every number a figure of the index, asserted by a
# test, or named with its words in audited_phrases.json (what each table means is said there)
AUDITED_PAGES: dict[str, tuple[str, ...]] = {page: tuple(v) for page, v in PHRASES["named"].items()}
TESTED: dict[str, dict[str, str]] = PHRASES["tested"]


def source_of_test(test: str) -> str:
    """The source of the test function ``tests/FILE.py::name`` (its ``def`` to the next top-level line), or the
    whole text of a file named without ``::``."""
    path, _, name = test.partition("::")
    text = (ROOT / path).read_text(encoding="utf-8")
    if not name:
        return text
    m = re.search(rf"^def {re.escape(name)}\(.*?(?=^\S)", text + "\nEND", flags=re.S | re.M)
    assert m, f"{test}: no such test"
    return m.group(0)


@pytest.mark.parametrize("page", sorted(AUDITED_PAGES))
def test_every_number_an_audited_page_states_is_a_traced_figure_or_named(page):
    tested = TESTED.get(page, {})
    for phrase, test in tested.items():
        src = numbers(source_of_test(test))
        missing = [n for n in numbers(phrase) if not any(close(n, x) for x in src)]
        assert not missing, f"{page}: {phrase!r}: {test} does not state {missing}"
    left = untraced_numbers(page, AUDITED_PAGES[page] + tuple(tested))
    assert not left, f"numbers of {page} that no index quote holds:\n" + "\n".join(left)


def test_every_reference_page_is_audited():
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} - {"docs/history.md"}
    assert pages <= set(AUDITED_PAGES), f"pages no test reads number by number: {sorted(pages - set(AUDITED_PAGES))}"


def test_a_tested_phrase_must_name_a_test_that_states_its_numbers():
    src = source_of_test("tests/project/test_records.py::test_the_number_matching_is_strict_enough")
    assert "9,200" in numbers(src) and "9,201" not in numbers(src)
    assert close("0.34", "0.3424") and not close("20", "20.4")  # a figure to its printed digit, a count exactly
    with pytest.raises(AssertionError, match="no such test"):
        source_of_test("tests/project/test_records.py::test_that_does_not_exist")


def test_every_number_the_readme_states_is_a_traced_figure():
    """The README's first screen quotes nothing that is not recomputed from a committed record."""
    assert len(numbers((ROOT / "README.md").read_text(encoding="utf-8"))) > 30  # it does state figures
    left = untraced_numbers("README.md", README_NOT_FIGURES)
    assert not left, "numbers of the README that no index quote holds:\n" + "\n".join(left)


# --- the figures, recomputed (one test per group; the groups whose tables take long are slow)

def _check(g: dict) -> list[str]:
    bad = []
    for f in g["figures"]:
        for c in f["checks"]:
            lines = output(g["tables"][c["table"]]).splitlines()
            start = 0
            if c.get("after"):
                start = next((i for i, line in enumerate(lines) if c["after"] in line), None)
                if start is None:
                    bad.append(f"{f['quote']!r}: no line {c['after']!r} in the output of {c['table']}")
                    continue
            line = next((x for x in lines[start:] if c["line"] in x), None)
            if line is None:
                bad.append(f"{f['quote']!r}: no line with {c['line']!r} in the output of {c['table']}")
            elif not in_order(numbers(c["values"]), line, c.get("cells", True)):
                bad.append(f"{f['quote']!r}: {c['values']!r} not in {c['table']}'s line: {line.strip()}")
    return bad


# the bootstrap draws each resample set once and sums in numpy (agentgrad.benchmarks.stats): the slow
# groups, minutes of pure-Python bootstrap before, now take seconds and run in every whole suite
@pytest.mark.parametrize("group", [pytest.param(g, id=g["id"], marks=[pytest.mark.slow] if g.get("slow") else [])
                                   for g in GROUPS])
def test_every_quoted_figure_is_recomputed_from_the_records(group):
    bad = _check(group)
    assert not bad, f"{group['page']}, {group['section']}:\n" + "\n".join(bad)


# --- the table scripts' ways of reading committed records: bad input is one line

def _script(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return run_script(args[0], *args[1:], cwd=cwd)


def test_the_records_scripts_refuse_bad_input_in_one_line(tmp_path):
    bogus = tmp_path / "bogus.jsonl"
    bogus.write_text('{"a": 1}\n', encoding="utf-8")
    inj = str(ROOT / "benchmarks" / "inject_table.py")
    for args, says in [((inj, str(bogus)), "not a records file of bench inject"),
                       ((inj, str(tmp_path / "none.jsonl")), "not a readable records file"),
                       ((str(ROOT / "benchmarks" / "ablation_table.py"), str(bogus), "--cases", str(bogus)),
                        "--cases and --noise go together"),
                       ((str(ROOT / "benchmarks" / "agentrx_lengths.py"), "--table", str(bogus)),
                        "not a record of this script")]:
        done = _script(*args)
        assert done.returncode != 0 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    saved = next(r["path"] for r in INDEX["records"] if r["path"].endswith("blame-results-cpu-2core.json"))
    done = _script(str(ROOT / "benchmarks" / "blame_table.py"), saved, "--pair", "random,temporal")
    assert done.returncode == 1 and "saved copy" in done.stderr and "Traceback" not in done.stderr


def test_inject_table_joins_only_records_of_the_same_injections(tmp_path):
    first = ROOT / next(g for g in GROUPS if g["id"] == "injected")["records"][0]
    recs = [json.loads(x) for x in first.read_text(encoding="utf-8").splitlines()]
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({**r, "truth": {"agent": "nobody"}}) + "\n" for r in recs), encoding="utf-8")
    done = _script(str(ROOT / "benchmarks" / "inject_table.py"), str(first), "--join", str(other))
    assert done.returncode == 1 and "another truth or status" in done.stderr and "Traceback" not in done.stderr
