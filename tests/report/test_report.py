"""agentgrad report: the page's content from every kind of run directory, its escaping, and the page
itself in a real headless Chromium (skipped, with the reason shown, where no browser can be had)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from agentgrad import Agent, Tool, Trace
from agentgrad.attribution import Scorer
from agentgrad.attribution.io import attribution_record
from agentgrad.blame.backward import VerbalLoss, backward
from agentgrad.cli import main
from agentgrad.models.fake import FakeModel
from agentgrad.report.html import render_report, word_diff, write_report

PAYLOADS = [
    "<script>document.title='pwned-script'</script>",
    "<img src=x onerror=\"document.title='pwned-img'\">",
    "</script><script>document.title='pwned-close'</script>",
    "<a href=\"javascript:document.title='pwned-link'\">click me</a>",
]
HOSTILE = " ".join(PAYLOADS)


def _chromium() -> str | None:
    for name in (os.environ.get("AGENTGRAD_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _browser_skip_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "browser tests: playwright is not installed (pip install -e '.[browser]')"
    if _chromium() is None:
        return "browser tests: no Chromium found (apt-get install chromium, or set AGENTGRAD_CHROMIUM)"
    return None


browser = pytest.mark.skipif(_browser_skip_reason() is not None, reason=_browser_skip_reason() or "")


@pytest.fixture(scope="module")
def page():
    """A headless Chromium page that records console errors, page errors, dialogs and every request."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        pg = b.new_page(viewport={"width": 1280, "height": 900})
        pg.seen = {"console": [], "requests": [], "dialogs": []}
        pg.on("console", lambda m: pg.seen["console"].append((m.type, m.text)))
        pg.on("pageerror", lambda e: pg.seen["console"].append(("pageerror", str(e))))
        pg.on("request", lambda r: pg.seen["requests"].append(r.url))
        pg.on("dialog", lambda d: (pg.seen["dialogs"].append(d.message), d.dismiss()))
        yield pg
        b.close()


def _open(pg, path):
    for v in pg.seen.values():
        v.clear()
    pg.goto(path.resolve().as_uri())
    pg.wait_for_selector("body[data-ready='1']", timeout=10_000)


# --- a hostile run, built by hand ----------------------------------------------------------------
def hostile_run(root, tiny_llama):
    """An optimisation-shaped run whose every text (input, prompt, outputs, tool result, sample id,
    prompts of two steps, config) carries the payloads, attributed by the tiny scorer."""
    model = FakeModel([
        {"text": "look " + HOSTILE, "tool_calls": [{"name": "lookup", "arguments": {"q": HOSTILE}}]},
        "worker says " + HOSTILE,
        "final " + HOSTILE,
    ])
    tool = Tool.from_function(lambda q: "tool result " + HOSTILE, name="lookup")
    with Trace(id="ep <b>1</b>") as tr:
        q = tr.input("user asks " + HOSTILE, name="user " + PAYLOADS[1])
        w = Agent("worker", "You are the worker. " + HOSTILE, model, tools=[tool])(q)
        Agent("boss" + PAYLOADS[0], "You answer. " + HOSTILE, model)(q, w)
    run = root / "hostile"
    (run / "traces").mkdir(parents=True)
    (run / "attribution").mkdir()
    (run / "prompts").mkdir()
    from agentgrad.core.files import safe_name

    name = safe_name(tr.id) + ".json"
    tr.save(run / "traces" / name)
    loss = VerbalLoss(text="wrong: " + HOSTILE, targets=[len(tr) - 1])
    sc = Scorer(str(tiny_llama))
    results, graph = sc.attribute(tr)
    rec = attribution_record(tr, results, graph, sc, "mean_l1", 1, 0, f"traces/{name}")
    rec["loss"] = loss.to_dict()
    rec["trajectories"] = [t.to_dict() for t in backward(graph, loss)]
    (run / "attribution" / name).write_text(json.dumps(rec))
    (run / "prompts" / "step-0000.json").write_text(json.dumps({"worker": "be nice"}))
    (run / "prompts" / "step-0001.json").write_text(json.dumps({"worker": "be nice " + HOSTILE}))
    (run / "config.yaml").write_text("task: " + json.dumps(HOSTILE) + "\n")
    events = [{"event": "sample", "sample": tr.id, "score": 0.0, "passed": False, "blamed": [HOSTILE]},
              {"event": "step", "step": 1, "train_score": 0.0, "failures": 1, "blamed": {HOSTILE: 1},
               "accepted": True, "updated": ["worker"], "val_before": 0.0, "val_after": 0.5}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def test_hostile_text_is_escaped_in_the_html(tmp_path, tiny_llama):
    run = hostile_run(tmp_path, tiny_llama)
    html, info = render_report(run)
    assert info["shown"] == 1
    for p in PAYLOADS:
        assert p not in html  # never verbatim: escaped in HTML, \u003c-escaped in the JSON data
    assert "<script>document.title" not in html and "</script><script>" not in html
    assert not re.search(r"href\s*=\s*[\"']?\s*javascript:", html, re.I)
    assert len(re.findall(r"<script\b", html)) == 2  # the episode's JSON data and the page's own script
    # the text is there, escaped: in the prompt diff, the verdicts and the loss
    assert "&lt;script&gt;document.title=&#39;pwned-script&#39;&lt;/script&gt;" in html
    # no network: no external address anywhere, and a policy that forbids any request
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", html)
    assert "default-src 'none'" in html


def test_word_diff_by_hand():
    assert word_diff("be nice to all", "be very nice to all") == [("same", "be"), ("ins", " very"),
                                                                  ("same", " nice to all")]
    d = word_diff("a b c", "a x c")
    assert "".join(t for op, t in d if op != "ins") == "a b c" and "".join(t for op, t in d if op != "del") == "a x c"
    assert ("del", "b") in d and ("ins", "x") in d
    assert word_diff("same text", "same text") == [("same", "same text")]


def test_report_of_the_demo_and_refusals(demo_run, tmp_path, capsys):
    run = demo_run
    assert (run / "report.html").exists()  # the demo ends with its report
    html = (run / "report.html").read_text()
    # every episode of the run is shown (9 < 20), each with its per-node data and a graph
    assert html.count('class="episode"') == 9 and html.count('id="ep-data-') == 9
    assert "Prompt history" in html and "<ins>" in html and "Training curve" in html
    # re-running replaces the old report; a file that is not a report is never replaced
    assert main(["report", str(run)]) == 0
    precious = tmp_path / "notes.html"
    precious.write_text("mine")
    assert main(["report", str(run), "--out", str(precious)]) != 0 and precious.read_text() == "mine"
    rc = main(["report", str(run), "--out", str(tmp_path / "x.json")])
    assert rc != 0 and not (tmp_path / "x.json").exists()
    assert main(["report", str(tmp_path / "nope")]) != 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) != 0
    err = capsys.readouterr().err
    assert "not an agentgrad report" in err and "does not exist" in err and "not a run directory" in err
    assert "Traceback" not in err
    # --episodes caps what is shown in full, the worst first
    res = write_report(run, tmp_path / "two.html", episodes=2)
    assert res.shown == 2 and res.episodes == 9
    assert (tmp_path / "two.html").read_text().count('class="episode"') == 2


def test_report_of_a_trace_file_with_its_attribution(tmp_path, tiny_llama):
    run = hostile_run(tmp_path, tiny_llama)
    trace = next((run / "traces").glob("*.json"))
    att = run / "attribution" / trace.name
    res = write_report(trace, tmp_path / "one.html", attribution=att)
    html = (tmp_path / "one.html").read_text()
    assert res.shown == 1 and "mean_l1" in html and "Trajectories" in html
    assert main(["report", str(trace), "--attribution", str(run / "attribution")]) != 0  # a folder for a file


@browser
def test_hostile_report_runs_nothing_in_chromium(tmp_path, tiny_llama, page):
    run = hostile_run(tmp_path, tiny_llama)
    res = write_report(run)
    _open(page, res.path)
    title = page.title()
    assert title == "agentgrad report: hostile"
    # open every node of the graph, every link, every details: nothing may run
    for node in page.locator("g.node").all():
        node.click()
        text = page.locator("#ep-0 .callview").inner_text()
        assert "n" in text
    for d in page.locator("details").all():
        d.locator("summary").click()
    page.locator("g.node[data-node='1']").click()  # the worker: its prompt, input and tool calls
    shown = page.locator("#ep-0 .callview").text_content()
    for p in PAYLOADS:
        assert p in shown  # shown literally, as text
    assert page.title() == title and page.seen["dialogs"] == []
    assert page.locator("img").count() == 0 and page.locator("a[href^='javascript']").count() == 0
    assert page.evaluate("document.querySelectorAll('script').length") == 2
    assert page.seen["requests"] == [res.path.resolve().as_uri()]
    assert not [c for c in page.seen["console"] if c[0] in ("error", "pageerror")]


@browser
def test_demo_report_in_chromium(demo_run, page):
    run = demo_run
    _open(page, run / "report.html")
    assert page.locator("section.episode:not([hidden])").count() == 1
    assert page.locator("#ep-0 g.node").count() >= 4 and page.locator("#ep-0 path.edge").count() >= 3
    assert page.locator("#ep-0 path.edge.kept").count() >= 1 and page.locator("#ep-0 g.node.traj").count() >= 1  # the default carry walk may stop at the last call
    # the call the loss attaches to opens first: its messages with the heat map
    assert page.locator("#ep-0 .callview span.tok").count() > 0
    # clicking another call shows its own tokens
    page.locator("#ep-0 g.node.call").first.click()
    head = page.locator("#ep-0 .callview h3").inner_text()
    assert "extractor" in head or "planner" in head
    toks = page.locator("#ep-0 .callview span.tok")
    assert toks.count() > 0 and "‖g‖₁ ≈" in toks.first.get_attribute("title")
    colours_l1 = toks.evaluate_all("ts => ts.map(t => t.style.background)")
    assert any("230, 85, 13" in c for c in colours_l1)
    page.select_option("#heat", "gxi")
    colours_gx = page.locator("#ep-0 .callview span.tok").evaluate_all("ts => ts.map(t => t.style.background)")
    assert colours_gx != colours_l1 and any("44, 160, 44" in c or "148, 103, 189" in c for c in colours_gx)
    # the edge weight switch changes edge widths
    widths = page.locator("#ep-0 path.edge").evaluate_all("ps => ps.map(p => p.style.strokeWidth)")
    page.select_option("#weight", "max_gxi")
    assert page.locator("#ep-0 path.edge").evaluate_all("ps => ps.map(p => p.style.strokeWidth)") != widths
    # picking another episode from the list
    page.locator("tr[data-ep='3']").click()
    assert page.locator("#ep-3").is_visible() and not page.locator("#ep-0").is_visible()
    # the prompt history shows word-level changes
    assert page.locator("#prompts ins").count() > 0
    assert page.seen["requests"] == [(run / "report.html").resolve().as_uri()]
    assert not [c for c in page.seen["console"] if c[0] in ("error", "pageerror")]


@browser
def test_the_report_opens_with_who_was_blamed_and_the_held_out_score(demo_run, tmp_path, page):
    """Read as a person reads it: the first sentence under the title says who was blamed, what changed
    and the held-out score before -> after; the chart's axes are named; the figures carry names, not keys."""
    run = tmp_path / "R"
    shutil.copytree(demo_run, run)
    final = json.loads((run / "final.json").read_text())
    final.update(test_before=0.25, test_after=0.75, test_size=4)  # what the trainer adds with a test split
    (run / "final.json").write_text(json.dumps(final))
    res = write_report(run)
    _open(page, res.path)
    lines = [ln for ln in page.locator("body").inner_text().splitlines() if ln.strip()]
    assert lines[0] == f"agentgrad report: {run}"
    first = lines[1]  # the sentence read first
    counts = {}
    for e in (json.loads(ln) for ln in (run / "events.jsonl").read_text().splitlines()):
        for a, n in (e.get("blamed") or {}).items() if e.get("event") == "step" else ():
            counts[a] = counts.get(a, 0) + n
    most = max(counts, key=counts.get)
    assert first.startswith(f"Blamed {most} (in {counts[most]} of ") and "rewrote the prompt" in first, first
    assert first.endswith("held-out test score 0.25 → 0.75 on 4 questions no step read."), first
    assert page.locator("svg.chart text.axis-title").all_text_contents() == ["training sample (in the order trained)",
                                                                           "score"]
    summary = page.locator("#summary").inner_text()
    for key in ("test_before", "test_after", "test_size", "val_score", "train_score"):
        assert key not in summary, key
    assert "held-out test score, starting prompts\t0.25" in summary and "held-out test score, final prompts\t0.75" in summary
    assert not [c for c in page.seen["console"] if c[0] in ("error", "pageerror")]


@pytest.mark.slow
@browser
def test_benchmark_report_in_chromium(tmp_path, tiny_llama, page):
    """A tiny-model MultiWOZ evaluation, attributed with agentgrad attribute: verdicts link to episodes."""
    pytest.importorskip("agentgrad.benchmarks.multiwoz")
    from agentgrad.benchmarks.data import data_dir

    if not (data_dir() / "multiwoz").is_dir():
        pytest.skip("MultiWOZ data not found (set AGENTGRAD_DATA_DIR)")
    run = tmp_path / "mw"
    assert main(["bench", "multiwoz", "evaluate", "--system", "multi", "--n", "2", "--model", "tiny",
                 "--out", str(run)]) == 0
    assert main(["attribute", str(run), "--scorer", str(tiny_llama), "--out", str(tmp_path / "att"),
                 "--on-too-long", "skip"]) == 0
    res = write_report(run, attribution=tmp_path / "att")
    _open(page, res.path)
    rows = page.locator("#verdicts tr.failed, #verdicts tr.passed")
    assert rows.count() == 2
    page.locator("#verdicts a.eplink").last.click()
    visible = page.locator("section.episode:not([hidden])")
    assert visible.count() == 1 and visible.locator("g.node.call").count() >= 3
    visible.locator("g.node.call").last.click()
    assert visible.locator(".callview span.tok").count() > 0
    assert page.seen["requests"] == [res.path.resolve().as_uri()]
    assert not [c for c in page.seen["console"] if c[0] in ("error", "pageerror")]


def test_token_encoding_round_trip():
    from agentgrad.report.episode import decode_tokens, encode_tokens

    toks = [(1, 0, 3, 10.0, -0.5), (1, 3, 5, 2.5, 0.25), (1, 9, 12, 0.0, 0.0), (0, 4, 6, 7.0, 0.1)]
    enc = encode_tokens(toks)
    # adjacent tokens of one message share a run; a gap or another message starts a new one
    assert [r[:3] for r in enc["runs"]] == [[0, 4, [2]], [1, 0, [3, 2]], [1, 9, [3]]]
    back = decode_tokens(enc)
    assert [t[:3] for t in back] == sorted(t[:3] for t in toks)
    for (m, a, b, v1, v2), t in zip(back, sorted(toks)):
        assert abs(v1 - t[3]) <= 10.0 / 1000 / 2 + 1e-12 and abs(v2 - t[4]) <= 0.5 / 1000 / 2 + 1e-12


# --- a blamed set (agentgrad blame FOLDER --expected FILE) -------------------------------------------
def blamed_set(root, n=8):
    """``n`` chat traces; in every odd one the agent named by a hostile payload invents the figure
    that the writer repeats; the even ones give the expected answer."""
    from agentgrad.runs.blame_set import blame_set

    src, exp = root / "chats.jsonl", root / "expected.jsonl"
    bad = PAYLOADS[0]
    lines, answers = [], []
    for i in range(n):
        fig = f"{500 + i}" if i % 2 == 0 else f"{900 + i}"
        lines.append(json.dumps({"id": f"t{i}", "messages": [
            {"role": "user", "content": f"How many in {i}?"},
            {"role": "assistant", "name": bad, "content": f"There are {fig}."},
            {"role": "assistant", "name": "writer", "content": f"Answer: {fig}."}]}))
        answers.append(json.dumps({"trace": f"t{i}", "expected": f"{500 + i}"}))
    src.write_text("\n".join(lines))
    exp.write_text("\n".join(answers + [json.dumps({"trace": "ghost", "expected": HOSTILE})]))
    return blame_set(src, expected=exp, methods=["provenance", "last"], out=root / "R")


def test_the_report_of_a_blamed_set_charts_the_shares_and_lists_every_failure(tmp_path):
    res = blamed_set(tmp_path)
    html, info = render_report(tmp_path / "R")
    assert info["episodes"] == 4 and info["shown"] == 4
    assert html.count('class="sharebar"') == 2  # one bar per (agent, method) that blames it
    assert "provenance blames" in html and "for 1.00 [0.51, 1.00]" in html  # the headline (Wilson, 4 traces)
    for t in res.by_status("blamed"):
        assert f">{t.trace}</a>" in html  # every failure, a link to its episode
    assert "succeeded: 4 trace(s), skipped" in html and "ghost" in html
    for p in PAYLOADS:
        assert p not in html  # the agent's name, escaped
    # a run stopped before blame.json: the team verdict from verdicts.jsonl, said so
    (tmp_path / "R" / "blame.json").unlink()
    html, info = render_report(tmp_path / "R")
    assert html.count('class="sharebar"') == 2 and "computed from verdicts.jsonl" in html


@browser
def test_a_blamed_sets_report_in_chromium(tmp_path, page):
    blamed_set(tmp_path)
    res = write_report(tmp_path / "R")
    _open(page, res.path)
    assert page.locator("svg.teamchart g.sharebar").count() == 2
    page.locator("svg.teamchart a.agentlink").first.click()  # an agent's name: the failures blamed on it
    assert page.evaluate("location.hash") == "#fail-0" and page.locator("#fail-0").is_visible()
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("table.failures a.eplink").nth(2).click()  # a failure: its episode
    idx = page.locator("table.failures a.eplink").nth(2).get_attribute("data-target")
    assert page.locator(f"#ep-{idx}").is_visible() and page.locator("section.episode:not([hidden])").count() == 1
    assert page.title() == "agentgrad report: R" and page.seen["dialogs"] == []
    assert not [c for c in page.seen["console"] if c[0] in ("error", "pageerror")]
