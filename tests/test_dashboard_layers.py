"""The dashboard's layers point down: no import cycle among its modules (lazy imports inside
functions included), views/ never imports ui/, Dash or plotly, and ui/ and app.py run no SQL."""

from __future__ import annotations

import ast
from pathlib import Path

import neuron_explorer.dashboard as dashboard

ROOT = Path(dashboard.__file__).parent
PKG = "neuron_explorer.dashboard"


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([PKG, *parts])] = (p, ast.parse(p.read_text()))
    return out


def _imports(name: str, path: Path, tree: ast.Module, modules) -> set[str]:
    """Dashboard modules `name` imports anywhere in its body (`from . import x` imports x)."""
    deps = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            deps |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[:len(base) - (n.level - 1)]
                mod = ".".join(base + ([n.module] if n.module else []))
            else:
                mod = n.module or ""
            subs = {f"{mod}.{a.name}" for a in n.names} & set(modules)
            deps |= subs or {mod}
    return {d for d in deps if d in modules and d != name}


def test_no_import_cycle_among_dashboard_modules():
    modules = _modules()
    graph = {m: _imports(m, p, t, modules) for m, (p, t) in modules.items()}
    cycles = []

    def walk(m, stack, done):
        if m in stack:
            cycles.append(" -> ".join(stack[stack.index(m):] + [m]))
            return
        if m in done:
            return
        for d in sorted(graph[m]):
            walk(d, stack + [m], done)
        done.add(m)

    done: set[str] = set()
    for m in sorted(graph):
        walk(m, [], done)
    assert len(graph) > 20 and not cycles, "\n".join(cycles)


def test_views_do_not_draw_and_ui_does_not_query():
    bad = []
    for _name, (path, tree) in _modules().items():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("views/"):
            for n in ast.walk(tree):
                mods = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                    [("." * n.level) + (n.module or "")] + [a.name for a in n.names] if isinstance(n, ast.ImportFrom) else []
                bad += [f"{rel}:{n.lineno} imports {m}" for m in mods
                        if m.split(".")[0] in ("dash", "plotly", "dash_ag_grid") or "ui" in m.strip(".").split(".")]
        if rel.startswith("ui/") or rel == "app.py":
            bad += [f"{rel}:{n.lineno} runs SQL (.{n.func.attr})" for n in ast.walk(tree)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr in ("sql", "query", "records", "arrow", "execute")]
    assert not bad, "\n".join(bad)
