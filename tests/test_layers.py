"""The package layout follows the data flow: no import runs up the layers, and no library module
imports the test helpers.

Every module under ``src/agentgrad`` is parsed (not imported) and every ``import`` of an agentgrad
module is checked, at module level or inside a function (a lazy import is still a dependency).

The layers, lowest first (a module may import its own layer and the layers below it):

0. ``errors``, ``extras``: the error hierarchy and the optional-dependency guard.
1. ``core``: what a system is made of: text with provenance, the trace, agents, tools, systems, the
   model protocol an agent calls (``core/model.py``), configuration, file writes and redaction.
2. ``models``: the backends that implement the protocol (fake, Hugging Face, OpenAI-compatible,
   tiny), their registry, and the local OpenAI-compatible server.
3. ``attribution``: teacher-forced scoring of a trace and the attribution graph.
4. ``blame``: verbal losses, the backward walk, the blame registry, credit.
5. ``runs``: running a (declared) system over examples, the run directory, checkpoints.
   Attribution and blame are pure functions of a trace and never touch a run directory, so ``runs``
   sits above them; the optimisation loop drives runs and writes its checkpoints there, so it sits
   below ``optim``.
6. ``optim``: the prompt optimizer and the loop (trainer) that uses everything above.
7. ``agentgrad`` (``__init__``) and ``api``: the verbs of ``import agentgrad as ag``.
8. applications, apart from the pipeline and from each other (their imports among themselves
   must not form a cycle): ``report``, ``importers``, ``integrations``, ``benchmarks``,
   ``examples``.
9. ``cli``: the thin command-line wrapper over all of the above.
10. ``testing``: helpers for tests only (the CLI fuzzer); nothing outside it imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agentgrad

SRC = Path(agentgrad.__file__).parent

LAYERS: dict[str, int] = {
    "errors": 0, "extras": 0,
    "core": 1,
    "models": 2,
    "attribution": 3,
    "blame": 4,
    "runs": 5,
    "optim": 6,
    "__init__": 7, "api": 7,
    "report": 8, "importers": 8, "integrations": 8, "benchmarks": 8, "examples": 8,
    "cli": 9,
    "testing": 10,
}
PIPELINE = {"errors", "extras", "core", "models", "attribution", "blame", "runs", "optim"}

# (importing module, imported module): upward imports kept on purpose, each with its reason.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("agentgrad", "agentgrad.importers.blame_set"): "ag.blame_set, the one top-level verb that reads trace files: "
    "resolved by the package's __getattr__ on first use, so importing agentgrad loads no importer",
}


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


def test_no_loose_modules_at_the_top_level():
    loose = sorted(p.stem for p in SRC.glob("*.py"))
    assert loose == ["__init__", "api", "errors", "extras"], loose
