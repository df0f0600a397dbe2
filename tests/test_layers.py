"""The package's layers point down: a module imports only modules of its own layer or below, and no
modules import each other in a cycle.

Read from the source (the AST of every .py under neuron_explorer/), so that imports made inside
functions (lazy imports) count as much as those at the top: a lazy import that points up is the
same knot, only found later. `from pkg import name` counts as an import of the module pkg.name
when there is one, else of pkg; a package's __init__ is a module like any other (the implicit
import of a package's __init__ by the import of one of its modules is not counted).

Every module must be placed in LAYERS: a new module fails the test until someone decides where it
belongs.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "neuron_explorer"
ROOT = "neuron_explorer"

# (layer, name, reason, module patterns). Patterns are dotted names without the leading
# "neuron_explorer." ("" is the package's own __init__); a module's exact name wins, else the first
# fnmatch pattern that matches.
LAYERS: list[tuple[int, str, str, tuple[str, ...]]] = [
    (0, "foundations", "definitions and helpers with no idea of a run: errors, the format, the vocabulary, formatting, "
                       "the native builds, Kineto's spellings, pyarrow without pandas",
     ("_version", "errors", "schema", "fmt", "vocab", "parquet_native", "native_build", "collectors.kineto_names", "no_pandas")),
    (1, "store", "writes and opens run directories; knows the format, nothing of how runs are made or read",
     ("store", "run_check")),
    (2, "collectors", "make runs (import, record, remote sources) and write them through store; ray_tasks fans per-rank "
                      "work out to Ray for the collectors and the analyzers",
     ("collectors", "collectors.*", "ray_tasks")),
    (3, "analyzer figures", "numbers about a run (metrics, line times, utilisation, ranks, the critical path, statistics) "
                            "and the finding contract (model): no judgement of what is a problem",
     ("analyzers.metrics", "analyzers.memory_range", "analyzers.lines", "analyzers.utilisation", "analyzers.flops", "analyzers.peaks",
      "analyzers.ranks", "analyzers.rank_rows",
      "analyzers.critical_path", "analyzers._path_index", "analyzers._path_lib", "analyzers._path_native", "analyzers.device_time", "analyzers.stats",
      "analyzers.job", "analyzers.model",
      "analyzers.report_schema", "analyzers.contents")),
    (4, "summary and report text", "the per-rank and job summary, built from the figures; what rules and reports start "
                                   "from; and the report as text (rich, Markdown): a pure rendering of the finding "
                                   "contract, which the engine writes as report.md",
     ("analyzers.summary", "analyzers.render")),
    (5, "rules and engine", "judgement: the rules, the engine that runs them, the report's files, the generated rule docs, "
                            "diff's comparison and its text (diff.render: the reasons the verdict gives are part of the Diff); "
                            "the analyzers package's front (analyze)",
     ("analyzers", "analyzers.rules", "analyzers.rules.*", "analyzers.engine", "analyzers.batch_processes", "analyzers.batch_child",
      "analyzers.advice", "analyzers.outputs", "analyzers.docs",
      "analyzers.diff", "analyzers.diff.*")),
    (6, "run descriptions", "info (run_info, render_info) describes a run for the CLI, the agent and notebooks; the read-only SQL "
                            "sandbox (agent.sandbox and its worker) that `query`, the MCP server and the dashboard's SQL page share",
     ("info", "agent.sandbox", "agent._sandbox_worker")),
    (7, "dashboard views", "the dashboard's data: each view's query function (views/), the open runs they read (runs), the "
                           "timeline's level of detail, the event chain, and queries, the table of views; no drawing",
     ("dashboard.views", "dashboard.views.*", "dashboard.runs", "dashboard.timeline", "dashboard.chain", "dashboard.queries")),
    (8, "dashboard", "the dashboard's drawing (ui/, figure), app, JSON API and server",
     ("dashboard", "dashboard.*")),
    (9, "agent", "the agent tools, their SQL sandbox and the MCP server",
     ("agent", "agent.*")),
    (10, "entry points", "what users call: the CLI, the package's front (import neuron_explorer), notebooks, demo, export, "
                         "framework integrations",
     ("", "__main__", "cli", "notebook", "demo", "export", "integrations", "integrations.*")),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> tuple[int, str] | None:
    rel = module[len(ROOT) + 1:] if module != ROOT else ""
    for exact in (True, False):  # a module named exactly wins over a wildcard (collectors.kineto_names over collectors.*)
        for layer, name, _, patterns in LAYERS:
            if any(rel == p if exact else fnmatch.fnmatchcase(rel, p) for p in patterns):
                return layer, name
    return None


def imports(module: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(imported module of the package, line) for every import in the file, at any depth."""
    is_pkg = path.name == "__init__.py"
    here = module.split(".") if is_pkg else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == ROOT]
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            target = ".".join(base + (node.module.split(".") if node.module else []))
            if target.split(".")[0] != ROOT:
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub if sub in known else target, node.lineno))
    return [(m, line) for m, line in out if m in known and m != module]


def graph() -> dict[str, list[tuple[str, int]]]:
    mods = modules()
    return {m: imports(m, p, set(mods)) for m, p in mods.items()}


def cycles(g: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w, _ in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    unplaced = [m for m in modules() if layer_of(m) is None]
    assert not unplaced, "modules in no layer (add them to LAYERS in tests/test_layers.py): " + ", ".join(unplaced)


def test_imports_point_down():
    bad: dict[tuple[str, str], list[int]] = {}
    for m, deps in graph().items():
        mine = layer_of(m)
        if mine is None:
            continue
        for d, line in deps:
            theirs = layer_of(d)
            if theirs is not None and theirs[0] > mine[0]:
                bad.setdefault((m, d), []).append(line)
    lines = [f"{m} ({layer_of(m)[0]} {layer_of(m)[1]}) imports {d} ({layer_of(d)[0]} {layer_of(d)[1]}), "
             f"line{'s' if len(ls) > 1 else ''} {', '.join(map(str, sorted(set(ls))))}" for (m, d), ls in sorted(bad.items())]
    assert not lines, f"{len(lines)} imports point up (module (its layer) imports module (a higher layer)):\n" + "\n".join(lines)


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, f"{len(found)} import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_scan_sees_lazy_and_relative_imports():
    assert layer_of("neuron_explorer.collectors.kineto_names")[0] == 0 and layer_of("neuron_explorer.collectors.build")[0] == 2
    assert layer_of("neuron_explorer")[0] == 10 and layer_of("neuron_explorer.dashboard.views.timeline")[0] == 7
    g = graph()
    targets = {d for d, _ in g["neuron_explorer.info"]}
    assert {"neuron_explorer.store", "neuron_explorer.fmt", "neuron_explorer.analyzers.ranks"} <= targets  # the last one lazy
    assert "neuron_explorer.collectors.trace_cache" in {d for d, _ in g["neuron_explorer"]}  # from a function of __init__
