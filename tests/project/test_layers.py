"""The package layout follows the data flow: no import runs up the layers, and no library module
imports the test helpers.

Every module under ``src/agentgrad`` is parsed (not imported) and every ``import`` of an agentgrad
module is checked, at module level or inside a function (a lazy import is still a dependency).

The layers, lowest first (a module may import its own layer and the layers below it):

0. ``errors``, ``extras``: the error hierarchy and the optional-dependency guard.
1. ``core``: what a system is made of: text with provenance, the trace, agents, tools, systems, the
   model protocol an agent calls (``core/model.py``), configuration, file writes and redaction.
2. ``models``: the backends that implement the protocol (fake, Hugging Face, OpenAI-compatible,
   tiny), their registry, and the local OpenAI-compatible server; ``importers``: foreign logs
   (spans, chat logs, Who&When) turned into traces, which import nothing but ``core`` and ``errors``.
3. ``attribution``: teacher-forced scoring of a trace and the attribution graph.
4. ``blame``: verbal losses, the backward walk, the blame registry, credit.
5. ``runs``: running a (declared) system over examples, the run directory, checkpoints, and the
   blame of trace files into a run directory (``runs.blame``, ``runs.blame_set``).
   Attribution and blame are pure functions of a trace and never touch a run directory, so ``runs``
   sits above them; the optimisation loop drives runs and writes its checkpoints there, so it sits
   below ``optim``.
6. ``optim``: the prompt optimizer and the loop (trainer) that uses everything above.
7. ``agentgrad`` (``__init__``) and ``api``: the verbs of ``import agentgrad as ag``.
8. applications, apart from the pipeline and from each other (their imports among themselves
   must not form a cycle): ``report``, ``integrations``, ``benchmarks``, ``examples``.
9. ``cli``: the thin command-line wrapper over all of the above.
10. ``testing``: helpers for tests only (the CLI fuzzer); nothing outside it imports it.

Across the whole package, modules do not import each other in a circle (directly or through
others, lazy imports included), and no module imports another module's private (``_name``) names,
nor reads them through an imported module.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

import agentgrad

SRC = Path(agentgrad.__file__).parent

LAYERS: dict[str, int] = {
    "errors": 0, "extras": 0,
    "core": 1,
    "models": 2, "importers": 2,
    "attribution": 3,
    "blame": 4,
    "runs": 5,
    "optim": 6,
    "__init__": 7, "api": 7,
    "report": 8, "integrations": 8, "benchmarks": 8, "examples": 8,
    "cli": 9,
    "testing": 10,
}
PIPELINE = {"errors", "extras", "core", "models", "importers", "attribution", "blame", "runs", "optim"}

# (importing module, imported module): upward imports kept on purpose, each with its reason.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def top(name: str) -> str:
    """The layer key of a dotted module name: its first package under agentgrad (``__init__`` for the
    package itself)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def agentgrad_imports(path: Path) -> list[tuple[str, int]]:
    """``(imported module, line)`` for every import of an agentgrad module in ``path``, relative
    imports resolved, wherever the import statement is (module level, function, ``if``)."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "agentgrad"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.split(".")[0] == "agentgrad":
                # ``from agentgrad import x`` imports the package, or its subpackage x
                names = [f"{name}.{a.name}" for a in node.names if (SRC / a.name).is_dir() or
                         (SRC / f"{a.name}.py").is_file()] if name == "agentgrad" else []
                out += [(n, node.lineno) for n in names or [name]]
    return out


def all_imports() -> list[tuple[str, str, int]]:
    """``(importing module, imported module, line)`` over every module of the package."""
    edges = []
    for path in sorted(SRC.rglob("*.py")):
        edges += [(module_name(path), name, line) for name, line in agentgrad_imports(path)]
    return edges


def test_every_package_has_a_layer():
    found = {top(module_name(p)) for p in SRC.rglob("*.py")}
    assert len(found) > 10
    assert found <= set(LAYERS), f"no layer declared for {sorted(found - set(LAYERS))} (add it to LAYERS)"


def test_the_parser_sees_lazy_and_relative_imports(tmp_path):
    # A check that finds nothing would pass on anything: prove it sees each kind of import.
    edges = all_imports()
    assert len(edges) > 300
    lazy = [(a, b) for a, b, _ in edges if a == "agentgrad.models.registry" and b == "agentgrad.models.tiny"]
    assert lazy, "the registry's lazy import of the tiny model was not seen"
    assert ("agentgrad", "agentgrad.api") in {(a, b) for a, b, _ in edges}


def test_nothing_outside_testing_imports_testing():
    bad = [f"{a}:{line} imports {b}" for a, b, line in all_imports()
           if top(b) == "testing" and top(a) != "testing"]
    assert not bad, "library code imports the test helpers:\n" + "\n".join(bad)


def test_no_import_runs_up_the_layers():
    bad = []
    for a, b, line in all_imports():
        la, lb = LAYERS[top(a)], LAYERS[top(b)]
        if lb > la and (a, b) not in EXCEPTIONS:
            bad.append(f"{a}:{line} ({top(a)}, layer {la}) imports {b} ({top(b)}, layer {lb})")
    assert not bad, "imports that run up the layers:\n" + "\n".join(bad)


def test_no_pipeline_layer_imports_an_application():
    apps = {k for k, v in LAYERS.items() if v >= LAYERS["__init__"]}
    bad = [f"{a}:{line} imports {b}" for a, b, line in all_imports()
           if top(a) in PIPELINE and top(b) in apps]
    assert not bad, "\n".join(bad)


def test_applications_do_not_import_each_other_in_a_cycle():
    apps = {k for k, v in LAYERS.items() if v == LAYERS["report"]}
    deps: dict[str, set[str]] = {a: set() for a in apps}
    for a, b, _ in all_imports():
        if top(a) in apps and top(b) in apps and top(a) != top(b):
            deps[top(a)].add(top(b))

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(d == goal or (d not in seen and reaches(d, goal, seen | {d})) for d in deps[start])

    cyclic = sorted(a for a in apps if reaches(a, a, {a}))
    assert not cyclic, f"application packages import each other in a cycle: {cyclic} ({deps})"


# Import circles and private-name imports tolerated for now, each entry naming its file and why (none
# at present); an entry is removed when its file is fixed (a stale entry fails).
KNOWN_CYCLES: dict[frozenset[str], str] = {}
KNOWN_PRIVATE: dict[tuple[str, str], str] = {}


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def module_of(name: str, known: dict[str, Path]) -> str:
    """The module a dotted name lies in: itself, or the nearest package or module above it."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def imports_in(mod: str, source: str, is_package: bool = False) -> list[tuple[str, str | None, int]]:
    """``(module, name imported from it or None, line)`` for every agentgrad import in ``source`` (the
    text of module ``mod``), wherever it is (a name that is itself a submodule is given as that
    module, name None)."""
    known = modules()
    package = mod if is_package else mod.rpartition(".")[0]
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(module_of(a.name, known), None, node.lineno) for a in node.names
                    if a.name.split(".")[0] == "agentgrad"]
        elif isinstance(node, ast.ImportFrom):
            base = (package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else [])
            name = ".".join(base + ([node.module] if node.module else []))
            if name.split(".")[0] != "agentgrad":
                continue
            for a in node.names:
                sub = f"{name}.{a.name}"
                out.append((sub, None, node.lineno) if sub in known else (module_of(name, known), a.name, node.lineno))
    return out


@lru_cache(maxsize=None)
def imported_names(path: Path) -> list[tuple[str, str | None, int]]:
    return imports_in(module_name(path), path.read_text(encoding="utf-8"), path.name == "__init__.py")


def private_uses(mod: str, source: str, is_package: bool = False) -> list[tuple[str, str]]:
    """``(imported module, what)`` for every use in module ``mod`` of another module's private
    name: imported from it, imported from a private module outside that module's package, or read
    as an attribute of a module imported under a name."""
    known = modules()
    out = []
    for b, name, line in imports_in(mod, source, is_package):
        if name is not None and name.startswith("_") and not name.startswith("__"):
            out.append((b, f"{mod}:{line} imports {name} from {b}"))
        last, parent = b.rpartition(".")[2], b.rpartition(".")[0]
        if last.startswith("_") and not last.startswith("__") and not (mod + ".").startswith(parent + "."):
            out.append((b, f"{mod}:{line} imports from the private module {b}, outside its package"))
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # a local name bound to an imported agentgrad module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in known})
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                            if f"{node.module}.{a.name}" in known})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            out.append((aliases[node.value.id], f"{mod}:{node.lineno} reads {node.attr} of {aliases[node.value.id]}"))
    return list(dict.fromkeys(out))


def import_graph() -> dict[str, set[str]]:
    """module -> the other agentgrad modules it imports."""
    known = modules()
    return {m: {b for b, _, _ in imported_names(p) if b and b != m} for m, p in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
    return found


def test_the_cycle_finder_finds_a_circle_through_others_and_nothing_in_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    # the parser resolves a submodule named in ``from package import module``, and lazy imports
    graph = import_graph()
    assert "agentgrad.attribution.scorer" in graph["agentgrad.attribution"]
    assert "agentgrad.models.tiny" in graph["agentgrad.models.registry"]


def test_no_modules_import_each_other_in_a_circle():
    found = cycles(import_graph())
    bad = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not bad, "modules that import each other (directly or through others):\n" + "\n".join(map(str, bad))
    stale = [KNOWN_CYCLES[c] for c in KNOWN_CYCLES if c not in found]
    assert not stale, f"fixed, so remove it from KNOWN_CYCLES: {stale}"


def test_the_private_check_sees_an_imported_name_a_private_module_and_an_attribute():
    source = ("from agentgrad.blame.walk import walk, _hidden\n"
              "from agentgrad.blame import facts as F\n"
              "def f():\n"
              "    from agentgrad.cli._common import thing\n"
              "    return F._is_json, F.detect_reader, thing\n")
    found = [what for _, what in private_uses("agentgrad.optim.run", source)]
    assert len(found) == 3, found
    assert "imports _hidden from agentgrad.blame.walk" in found[0] and "reads _is_json of agentgrad.blame.facts" in found[2]
    assert private_uses("agentgrad.blame.walk", "from . import facts\nfrom .facts import LINES\n") == []


def test_no_module_imports_another_modules_private_names():
    bad, seen = [], set()
    for mod, path in modules().items():
        for b, what in private_uses(mod, path.read_text(encoding="utf-8"), path.name == "__init__.py"):
            seen.add((mod, b))
            if (mod, b) not in KNOWN_PRIVATE:
                bad.append(what)
    assert not bad, "private names used across files:\n" + "\n".join(bad)
    stale = [KNOWN_PRIVATE[k] for k in KNOWN_PRIVATE if k not in seen]
    assert not stale, f"fixed, so remove it from KNOWN_PRIVATE: {stale}"


def test_importers_import_only_core_and_errors():
    """An importer turns a foreign log into a trace and nothing else: it reads no blame, run or model."""
    bad = [f"{a}:{line} imports {b}" for a, b, line in all_imports()
           if top(a) == "importers" and top(b) not in ("importers", "core", "errors")]
    assert not bad, "\n".join(bad)


def test_no_loose_modules_at_the_top_level():
    loose = sorted(p.stem for p in SRC.glob("*.py"))
    assert loose == ["__init__", "api", "errors", "extras"], loose


# --- private attributes of other modules' objects, and broad excepts ----------------------------------
BENCHMARKS = SRC.parent.parent / "benchmarks"
# private names of other libraries' objects that agentgrad must reach (each with its reason)
FOREIGN_PRIVATE = {
    "_get_logits_processor": "transformers' GenerationMixin: the one way to build its logits processors for "
                             "batched generation (models/batching.py)",
}


def defined_names(tree: ast.AST) -> set[str]:
    """Every name a module binds itself: functions, classes, attributes it assigns, variables, arguments."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def private_attribute_reads(source: str, where: str) -> list[str]:
    """``obj._name`` in ``source`` where ``_name`` is not bound by that module itself (not a dunder, not
    read through ``self`` or ``cls``): another module's private method or attribute."""
    tree = ast.parse(source)
    own = defined_names(tree)
    out = []
    for n in ast.walk(tree):
        if (isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
                and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))
                and n.attr not in own and n.attr not in FOREIGN_PRIVATE):
            out.append(f"{where}:{n.lineno} reads {ast.unparse(n)}")
    return out


def library_and_benchmark_files() -> list[Path]:
    return sorted(SRC.rglob("*.py")) + sorted(BENCHMARKS.glob("*.py"))


def test_the_private_attribute_check_sees_a_foreign_private_method_and_passes_an_own_one():
    found = private_attribute_reads("def f(scorer):\n    return scorer._gradients(1)\n", "x.py")
    assert found == ["x.py:2 reads scorer._gradients"]
    own = "class A:\n    def _g(self):\n        return 1\ndef f(a):\n    return a._g()\n"
    assert private_attribute_reads(own, "y.py") == []


def test_no_module_or_benchmark_script_reads_another_modules_private_attributes():
    assert BENCHMARKS.is_dir(), BENCHMARKS
    bad = [w for p in library_and_benchmark_files() for w in private_attribute_reads(p.read_text(encoding="utf-8"), str(p))]
    assert not bad, "private attributes read across modules (make them public or add a method):\n" + "\n".join(bad)


# What may be called inside a ``try`` whose ``except`` catches KeyError, TypeError or IndexError: reading
# and parsing stored or user data, whose malformed fields raise those. Around any other library call
# such an except would turn agentgrad's own bugs into "malformed input".
PARSING_CALLS = {
    "Path", "read_text", "loads", "dumps", "from_dict", "format", "int", "str", "dict", "tuple", "get", "isinstance",
    "split", "splitlines", "strip", "replace", "removeprefix", "startswith", "items", "append", "range",
    "ValueError", "ToolCall", "UserRules", "checkpoint_state", "pending_count", "read_records", "from_saved",
}
BROAD = {"KeyError", "TypeError", "IndexError"}


def broad_excepts_around_calls(source: str, where: str) -> list[str]:
    out = []
    for n in ast.walk(ast.parse(source)):
        if not isinstance(n, ast.Try):
            continue
        for h in n.handlers:
            caught = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type] if h.type is not None else []
            if not {ast.unparse(c).rpartition(".")[2] for c in caught} & BROAD:
                continue
            calls = {(c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "?"))
                     for s in n.body for c in ast.walk(s) if isinstance(c, ast.Call)}
            if calls - PARSING_CALLS:
                out.append(f"{where}:{h.lineno} catches {ast.unparse(h.type)} around {sorted(calls - PARSING_CALLS)}")
    return out


def test_the_broad_except_check_sees_a_library_call_and_passes_a_parser():
    bad = "try:\n    v = blame_trace(t)\nexcept (KeyError, ValueError):\n    pass\n"
    assert broad_excepts_around_calls(bad, "x.py") == ["x.py:3 catches (KeyError, ValueError) around ['blame_trace']"]
    ok = "try:\n    v = Verdict.from_dict(json.loads(line))\nexcept (KeyError, TypeError):\n    pass\n"
    assert broad_excepts_around_calls(ok, "y.py") == []


def test_no_except_catches_key_type_or_index_errors_around_library_calls():
    bad = [w for p in library_and_benchmark_files() for w in broad_excepts_around_calls(p.read_text(encoding="utf-8"), str(p))]
    assert not bad, "an except that would hide a bug as bad input (catch the library's own errors instead):\n" + "\n".join(bad)


TESTS = Path(__file__).resolve().parents[1]


def test_tests_are_grouped_by_package_and_name_no_issue():
    """Tests live in a folder per package (or project/ for the repository's own checks), and no test,
    library module or benchmark script names an issue: a file says what it checks, not why it was written."""
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not loose, f"tests outside a package folder: {loose}"
    folders = {p.parent.name for p in TESTS.rglob("test_*.py")}
    assert folders <= set(LAYERS) | {"project", "cli"}, folders
    pattern = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
    named = [f"{p}:{n}" for root in (TESTS, SRC, BENCHMARKS) for p in sorted(root.rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not named, "name the behaviour, not the issue:\n" + "\n".join(named)


def test_ci_fails_on_a_skip_for_missing_data_or_a_missing_extra():
    """Under AGENTGRAD_REQUIRE_DATA=1 only the browser and GPU tests may be skipped (conftest)."""
    from types import SimpleNamespace

    from conftest import required_skips

    reasons = ["Skipped: Captum comparison: captum is not installed", "Skipped: AgentRx data not found",
               "Skipped: browser tests: no Chromium found", "Skipped: needs a CUDA device"]
    rep = SimpleNamespace(stats={"skipped": [SimpleNamespace(longrepr=r) for r in reasons]})
    assert [r.longrepr for r in required_skips(rep)] == reasons[:2]
