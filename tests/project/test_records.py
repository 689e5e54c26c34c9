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
README_NOT_FIGURES = ("GBC (Gradient-Based Connections, 2026)", "On SmolLM2 on 2 CPU cores", "within 4,096 tokens")


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
# test (TESTED), or named here with its words (a version, a default, a design constant, a seed, the data's size).
# A measured figure with no record is withdrawn to docs/history.md, not named here.
AUDITED_PAGES = {
    "docs/python.md": (),
    "docs/integrations.md": ("gepa 0.1.4", "(default 1.0)"),
    "docs/run-directory.md": ("at most 100 characters", "10 hex digits of its SHA-256", "(schema version 1)"),
    "docs/cli.md": ("a step every 3", "each of 184 real failures", "127.0.0.1", "not UTF-8", "(80 columns",
                    "within 4,096 tokens", "exit 2", "default 64", "Retries 429"),
    "docs/development.md": ("127.0.0.1", "injects 500/429 failures", "exit 0 or one line", "(8,000 steps",
                            "(exit 1 when one fails)", "for 20 steps only", "Targets on 2 cores", "within 480 s",
                            "within 90 s", "within 20 minutes", "at most 4 workers", "framework apps on 20 inputs",
                            "scores 8 held-out questions, not 48", "measures it on all 48", "over 3 s alone on 2 cores",
                            "every test over 3 s alone"),
    "docs/blame-set.md": ("shares sum to 1", "the 95% Wilson score interval", "it gave [1.00, 1.00]",
                          "each run live on its 20 inputs", "(2 CPU cores,", "(the 20 cities", "all 20 traces",
                          "the same 20 inputs", "20 live runs", "then gave [1.00, 1.00] on 2 traces that agree",
                          "Measured on 2 CPU cores", "(2,000 resamples"),
    "docs/importers.md": ("as node 0", "the question is node 0, history step i is node i+1", "at least 8 characters",
                          "(v1.26-1.36)", "logs A to B (1-based", "(95% CI)", "the paper's Table 1", "ICML 2025, arXiv:2505.00212, Table 1",
                          "within k = 1..5 steps", "the paper's Table 2", "a 10,000-span OpenInference export",
                          "medians of 3 on 2 cores", "(target 5 s;", "the paper's Table 3", "a window of 5 steps either side is 11 steps"),
    "docs/blame.md": ("exit 2 at the CLI", "invented = 5 nats, chosen on the planted faults in prose, development seed 10",
                      "(4 weights x the objectives x 9 rules", "(temperature 0.7, seeded)", "N x (1 + calls downstream",
                      "; 1: one chain)", "14:30 became 2:30 pm", "above ln 2)", "'s ln 2, fixed before",
                      "a development seed (10)", "above 5 nats: below p = 1/148", "the development seed (10)",
                      "from 3, 4, ..., 10 nats, and reported on seed 12", "At most 8 sub-walks", "the invention threshold, 5 nats",
                      "both report seeds (11 and 12)", "within 0.02*", "Seeds 11 and 12 had been read"),
    "docs/whowhen.md": ("(Zhang et al., ICML 2025)", "126 algorithm-generated logs and 58 hand-crafted ones",
                        "ties at the top earn 1/ties", "with 95% Wilson intervals", "F in 0, 0.25, 0.5, 0.75, 1",
                        "its 8,192-token context", "on 2 CPU cores", "the same paper, Table 1,", "Table 1 as summarised",
                        "arXiv 2509.10401", "arXiv 2606.00765", "arXiv 2509.03312", "(Zhang et al., ICML 2025, abstract)"),
    "docs/demo.md": ("12 training and 12 held-out questions", "the demo is seed 0 of", "A failing episode of step 1",
                     "Step 2's failure", "read on 48 held-out questions", "the gate's own 12 questions", "alone on 2 cores",
                     "target 3 minutes", "step 2 above", "on 5 seeds of its training sample", "0, the demo's own, to 4",
                     "the 12 training questions", "the gate's 12 and the 48 held-out ones", "SmolLM2 on 2 CPU cores"),
    "docs/injected-faults.md": ("Per question and system: 1. the **clean run**", "metric) are kept; 2. per **position**",
                                "generated again**; 3. an episode", "agent top-1, node top-1 and agent top-3 with 95% intervals",
                                "12 questions per system", "Agent top-1:", "on 2 questions per system",
                                "chosen on planted seed 10"),
    "docs/report.md": ("with its 95% interval", "(agent and node top-1 with 95% intervals, top-3", "2 CPU cores, nothing else running"),
    "docs/agentrx.md": ("29 tau-bench retail runs", "and 44 Magentic-One runs", "only task 2's record",
                        "counts the log's messages from 1 (tau-bench's system message is message 1; Magentic-One's task is message 1)",
                        "at offset 0 far fewer", "has always read all 44; every figure below is over 44", "(1/ties)",
                        "never from a label: 1. the first write", "the loss is on that call; 2. else", "on the last call; 3. else",
                        "reply to the user; 4. else", "positions 0, 2, 4, ... are half A", "1, 3, 5, ... half B", "its 95% bootstrap",
                        "(task 20)", "95% interval)", "includes 0 or favours it",
                        "as far back as 4,096 tokens", "with 95% intervals, wins", "when all 44 runs are scored",
                        "about a second on 2 cores", "--window 4096", "--window 0"),
    "docs/ablation.md": ("fixed seed): 40 train (the loop's samples), 50 validation (the gate), 100 screening",
                         "and 200 test questions", "in 3 to 6 wordings, 3 positions", "A noise floor**: 8 neutral",
                         "at least 5 times", "95% intervals from", "structured output), seed 0:", "200 test questions per case",
                         "| arm (seed 0) |", "test gain [95%]", "Wordings 3-5", "top-1 path",
                         "Defaults: 2 steps of 4 samples, validation gate on 50 questions", "seeds 1 and 2 are not run"),
    "docs/confidence.md": ("puts at the top): 1. **", "No parameter. 2. **", "with at least 10 disagreements",
                           "where none has 10 go to", "before any report part is read. 3. **", "(the levels 2 / fewer than 2). 4. **",
                           "earn 1/ties", "95% Wilson interval", "is 1.0. When exactly", "seed 11:", "seed 12:", "prose seed 13:",
                           "prose seed 12:", "all 169 propagated faults", "the first 44 logs by name", "logs 45-126",
                           "the 15 that fit", "(seed 10) holds no", "so seed 11 (and prose seed 13) serve",
                           "Signals 1 and 4 have no parameter", "so signal 1's report figures", "signal 2's choice of R",
                           "(seed 11's five copied families, prose seed 13;", "all three have 10 or more disagreements",
                           "signals 2 and 3 are not measured", "report seed (12)",
                           "the paired won / lost counts of seed 12, prose seed 12", "| 200 |", "| 20 |", "| 120 |",
                           "(the 12 questions of the", "Seed 20 has never been generated", "(seeds 10-18 have)",
                           "run on its 20 inputs", "2 CPU cores). Two", "with the 11-29", "top-1",
                           "seed 11 and prose seed 13 had been read", "seed 12, prose seed 12, the injected",
                           "Small counts: 19 injected disagreements (fresh and old), 15 hand-crafted logs"),
    "docs/planted-faults.md": ("(A -> B -> C -> D)", "(3-5 workers", "(12 h -> 24 h time", "top-1 (ties at the top earn 1/ties)",
                               "**development seed 10**", "**seeds 11 and 12**", "prose seeds 12 and 13, and token seeds 17 and 18",
                               "report seeds 11 / 12; 100 episodes per family and seed (25 per topology), misroutes 50 per seed",
                               "ties `last`, 0 won, 0 lost", "(50 per topology)", "Prose seeds 13 / 12, 200 episodes per family and seed (50 per topology)",
                               "(hit@1:", "chosen on seed 10 and reported on fresh seeds 17 and 18", "token hit@1, 200 episodes each",
                               "seed 17 |", "seed 18 |", "Designed on seed 10, reported on seeds 11 and 12",
                               "chosen on seed 10's episodes", "designed on seed 10 and run once on seed 11, then on seed 12",
                               "Its first figures on seed 11", "was then chosen on seed 10", "before seeds 11 and 12 were run again",
                               "each chosen on seed 10", "the same seeds 11 and 12 again", "the transformed values of seeds 11 and 12",
                               "(one episode changed on seed 11)", "seed 11 had been read", "and seed 12 with two",
                               "were seed 10's", "chosen on prose seed 10 and reported on prose seed 12",
                               "designed on prose seed 10 and reported on seeds 13 and 12, so prose seed 12",
                               "Prose seed 13 was read once more", "(12 per topology)", "chosen on seed 10 four times",
                               "(11-12, 13-14, 15-16, 17-18). Seeds 10 to 18", "at 25 per topology (100 per family and seed) are the first 25",
                               "the 50-per-cell runs", "are at 50"),
    "docs/models.md": ("SHA-256", "(429, 5xx)", "(default 60 s,", "on 2 cores reads", "is 600 s by default (the openai client's own; it was 120 s)",
                       "(a 500 naming", "longer than 256 characters", "on 2026-11-26 and 27", "(constrained within 1.3x of free at concurrency 1 and 8)",
                       "key/values, 256 MB", "on its 24 questions", "then 8 concurrent episodes", "(1 and 4 requests in flight)",
                       "2026-11-24 and 25 (tokens/s one episode at a time and 8 at once"),
    "docs/attribution.md": ("reads its 540 MB of weights", "1 GiB by default", "(about 100 lines)", "to 1e-4 relative",
                            "within 1e-4 relative", "captum 0.9", "at P = 4,000 (4,400 tokens), the median of 3 timed runs",
                            "each case in its own process, 2 CPU cores", "the same 4,400 tokens", "a pass of 4,096 tokens or more",
                            "the agent's 4,000-token prompt", "it differentiates 400 tokens", "4.6x, compared the cached engine with Captum at load average 8 to 10",
                            "outputs of 100 tokens each and a 100-token output", "**On 2 CPU cores**", "P = 4,000, median of 3",
                            "The fuller CPU table of 2026-11", "P = 1,000)", "median of 5 timed runs at P = 4,000 and of 3 at P = 8,000",
                            "| P = 4,000: time | peak extra memory | P = 8,000: time |", "of 4-8k tokens", "143,771 MiB", "At P = 8,000",
                            "a 2-core CPU", "about 800 tokens whose first 600", "(real 26-48 message conversations), SmolLM2 fp32 on 2 CPU cores",
                            "the first 3 runs", "Over the 29 runs", "runs 20 and 99 left out", "context of 8,192 tokens",
                            "a median of at most 2.0", "The first 14 runs by id", "calls of 4,096 differentiated", "the other 13 after",
                            "(runs 55, 59, 63, 71, 72)", "A call of 4,096 differentiated", "the model's 0.6 GB included", "run 2 (its long calls",
                            "run 12 (its calls", "(the target: 1.2)"),
    "docs/ablation-factorial.md": (
        "2 steps of 4 training samples, the validation gate on 50 questions, 200 test questions", "): 12, and",
        "every agent's prompt 13 to 15 lines", "about 1 time in 15, not 1 in 3", "on the 50 validation questions",
        "the three positions: 342 candidates", "noise floor: 8 neutral", "on the 100 screening questions is at least 5 times",
        "the sequential rule on the first 40", "**Seeds.** 0, 1, 2, run seed by seed: every kept case and cell for seed 0, then seed 1, then 2",
        "(at least seed 0)", "--seeds 3 \\ --model smollm2 --stop-after 60", "with a 95% interval", "(2000 resamples)",
        "decided at p < 0.05", "p >= 0.05", "all kept cases x 13 cells", "(pipeline 2, fanin 3, manager 4)",
        "two gate proposals of 50 questions", "scored on 200 test questions", "about 2.4 failures attributed: about **116 c CPU-s**",
        "about 300 c x 0.33 CPU-s per kept case, 40 c x 0.33 per dropped one; noise floor 1100 c x 0.33 per system; kept share 0.6 (short set: 67 of 106)",
        "| as registered: 342 candidates, 13 cells, seeds 0-2 | 342 | about 810 |", "| seed 0 only | 342 | about 280 |",
        "(second) | 114 | about 95 |", "| 23 | about 20 |", "| 12 | about 11 |", "Over 10 CPU-hours",
        "(1) seeds first: seed 2, then seed 1 (seed 0 always runs); (2) then cases", "12 cases make a weak test",
        "cut as registered: seed 0,", "(23 candidate cases, about 20 CPU-hours", "--seeds 1 --positions 1 \\ --wordings 1 --model smollm2 --stop-after 90",
        "Chunk 3 was stopped", "and chunk 4 was paused", "the run left from chunk 3", "chunk 3's wall time",
        "the last lines of chunk 3's log", "With 2 of 23 cases kept, the cut grid is 26 runs", "(seed 0,", "| seed 0,"),
    "docs/optimisation.md": ("0 scores the whole split", "(default 0, which also keeps ties)", "scores 0 before and after",
                             "6 cases of the ablation", "1 - score", "(default 0). Options"),
    "docs/scale.md": ("lets 64 requests per model", "to 1e-5 relative (a test", "(2 cores, fp32, the 120M model",
                      "8 calls with a 1,000-token prefix and about 400 variable tokens", "16 calls with a 1,000-token prefix",
                      "holds them within 1e-5", "(for example 8192)", "a local Ray, 2 workers", "answering after 300 ms",
                      "2 CPU cores):", "step of 32 pipeline episodes", "at 32 the step is one", "one step of 32 conversations",
                      "one step of 3 episodes (after a warm-up step, the median of 3 steps each)",
                      "at most (3E + 1) / (E + 1): 2.6 for tau-bench's scripted conversation (E = 4), 2.5 for the pipeline (E = 3)",
                      "in the same run (2 cores,", "'s targets (alone within 1.15x of PyTorch's defaults, beside the "
                      "neighbour within 1.6x of its own alone time)", "a fair share of 2 cores is about half, so about 2x",
                      "between 0 and 10,000", "run (8 planted chain episodes"),
    "docs/taubench.md": ("at most 30 agent steps", "scores 0", "training tasks (10)"),
    "docs/multiwoz.md": ("(PPTOD's PMUL3688 has 5 of 6)", "MultiWOZ 2.2's gold states", "(MultiWOZ 2.1 labels",
                         "checked on 2026-11-23 against the 16 prediction files", "(commit fe0c8e6, 2025-01-14)",
                         "100 test dialogues sampled with seed 42", "(all 1,000 test dialogues do)",
                         "MultiWOZ 2.1 dialogues with the 2.4 split lists", "**2.1 labels**", "the 2.4 `data.json`",
                         "`partial_ratio` >= 90", "fuzzywuzzy 0.18 + python-Levenshtein 0.27",
                         "reads MultiWOZ 2.2 states and the 2.2 delexicalisation", "this one 2.1 states",
                         "(the paper: 30, a step every 3)"),
}


# numbers a page states that a test asserts, or that a stored table of published figures holds, rather than a
# record: page -> {phrase: "tests/FILE.py::test_name" or "PATH"}; the test must exist and its own source hold every
# number of the phrase (it asserts that figure), or the file (a paper's figures stored as data) must hold them
PUBLISHED_WHOWHEN = "src/agentgrad/benchmarks/whowhen/published/whowhen.json"  # the paper's tables, stored as data
PUBLISHED_RELATED = "src/agentgrad/benchmarks/whowhen/published/related.json"  # later papers' abstracts, as printed
TESTED: dict[str, dict[str, str]] = {
    "docs/taubench.md": {
        "the 16 tools with": "tests/benchmarks/test_taubench_env.py::test_tasks_load",
        "the 16 tools' schemas": "tests/benchmarks/test_taubench_env.py::test_tasks_load",
        "all 16 tools": "tests/benchmarks/test_taubench_env.py::test_tasks_load",
        "1.0 over all 635 tasks (train 500, dev 20, test 115)":
            "tests/benchmarks/test_taubench_env.py::test_every_gold_replay_earns_the_full_action_reward",
        "(44: for example": "tests/benchmarks/test_taubench_env.py::test_every_gold_replay_earns_the_full_action_reward",
    },
    "docs/blame-set.md": {
        "2 of 2 traces give [0.34, 1.00], 20 of 20 [0.84, 1.00]":
            "tests/blame/test_team_verdict.py::test_the_interval_is_wilsons_by_hand_and_wide_on_few_traces",
        "[0.34, 1.00] on these 2 traces, [0.84, 1.00] where 20 of 20 agree":
            "tests/blame/test_team_verdict.py::test_the_interval_is_wilsons_by_hand_and_wide_on_few_traces",
    },
    "docs/importers.md": {
        "the 184 Who&When logs": "tests/importers/test_importers.py::test_whowhen_import_all_logs_with_labels",
        "All 184 import.": "tests/importers/test_importers.py::test_whowhen_import_all_logs_with_labels",
        "In 6 of the 184 Who&When logs": "tests/importers/test_importers.py::test_whowhen_import_all_logs_with_labels",
        '| random | 0.291 / 0.120 | 0.191 / 0.042 | 0.291 / 0.120 | 0.191 / 0.042 |': PUBLISHED_WHOWHEN,
        '| all-at-once (`judge:all_at_once`) | 0.543 / 0.552 | 0.125 / 0.053 | 0.511 / 0.534 | 0.135 / 0.035 |': PUBLISHED_WHOWHEN,
        '| step-by-step (`judge:step_by_step`) | 0.352 / 0.345 | 0.255 / 0.070 | 0.260 / 0.328 | 0.153 / 0.088 |': PUBLISHED_WHOWHEN,
        '| binary search (`judge:binary_search`) | 0.441 / 0.517 | 0.240 / 0.069 | 0.301 / 0.362 | 0.166 / 0.069 |': PUBLISHED_WHOWHEN,
        "The abstract's 53.5% (agent) and 14.2% (step)": PUBLISHED_WHOWHEN,
        'all-at-once 0.121 / 0.198 / 0.302 / 0.371 / 0.431, step-by-step 0.147 / 0.164 / 0.181 / 0.319 / 0.336, binary search 0.138 / 0.190 / 0.224 / 0.319 / 0.362': PUBLISHED_WHOWHEN,
        'agent 0.570, step 0.123, against all-at-once 0.570 / 0.044 and step-by-step 0.360 / 0.079': PUBLISHED_WHOWHEN,
    },
    "docs/whowhen.md": {
        "| both | 0.535 | 0.142 |": PUBLISHED_WHOWHEN, "| algorithm | 0.543 | 0.125 |": PUBLISHED_WHOWHEN,
        "| algorithm / hand-crafted | - | 0.4746 / 0.2931 |": PUBLISHED_RELATED,
        "| algorithm / hand-crafted | - | 0.460 / 0.291 |": PUBLISHED_RELATED,
        "| hand-crafted | 0.6910 | 0.2068 |": PUBLISHED_RELATED,
    },
    "docs/agentrx.md": {
        "in 28 of 29 tau-bench runs and 43 of 44": "tests/benchmarks/test_agentrx.py::test_the_runs_are_labelled_as_fixed_and_split_in_halves",
    },
    "docs/optimisation.md": {
        "The answerer's prompt weighs 56.3 and its sources, the extractor and the planner, 70.4 and 65.7, so of a loss of 1 it keeps 56.3 / 192.4 = 0.293 and passes 0.366 to the extractor and 0.341 to the planner; the extractor's prompt weighs 108.3 against 97.0 for the question, so it keeps 0.366 x 0.527 = 0.193 and passes 0.173 to the question; the planner's weighs 59.2 against 40.8, so it keeps 0.341 x 0.592 = 0.202 and passes 0.139. Shares: answerer 0.293, planner 0.202, extractor 0.193, the question 0.312 (sum 1). Read: of what went wrong, 29% is the answerer's own doing, 20% and 19% the workers', and 31% came from the question itself (what no prompt can change). With `--top-k 1` the answerer's only kept source is the extractor, and the shares become answerer 0.444, extractor 0.293, planner 0 and the question 0.263.":
            "tests/blame/test_credit_and_targets.py::test_the_worked_example_of_the_docs",
    },
    "docs/multiwoz.md": {
        "gives JGA 100 and slot F1 100 on the sample": "tests/benchmarks/test_multiwoz.py::test_gold_system_scores_jga_and_f1_100",
        "On all 1,000 test dialogues (`--n 1000`) gold gives **Inform 93.8 and Success 90.9**; the standard evaluator's "
        "published figures for the corpus are 93.7 and 90.9":
            "tests/benchmarks/test_multiwoz.py::test_gold_on_all_1000_test_dialogues_is_the_standard_evaluators_figure_within_one_dialogue",
    },
}


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
