"""The MCP server (`neuron-explorer mcp RUN...`): the agent tools and resources over stdio.

A thin layer over `tools.RunSet`: each MCP tool is one RunSet method, with a description that
tells an agent what it returns and how it is bounded. Resources: the schema (all views and
columns) and each run's report. Logging goes to stderr: stdout carries only the protocol.
`compare` calls the analyzers' run diff (analyzers/diff.py), imported when first used.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from .. import __version__
from .tools import MAX_CHARS, MAX_ROWS, RunSet

INSTRUCTIONS = f"""Neuron Explorer: PyTorch profiler runs (events from the Python line to the device kernel) as SQL views.
Start with list_runs, then the schema resource (or the query tool on `schema_fields`), summary and findings.
Verify a finding with explain_finding; ask your own questions with query (one read-only SELECT, DuckDB SQL).
Times and durations are int64 nanoseconds. Results hold at most {MAX_ROWS} rows and about {MAX_CHARS} characters;
`truncated: true` says a result was cut."""


def build_server(runs: list[Path | str]) -> Any:
    """An MCPServer over the given run directories (not started). Raises InputError on a bad run."""
    from mcp.server.mcpserver import MCPServer

    rs = RunSet(runs)
    server = MCPServer(name="neuron-explorer", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    server.run_set = rs  # for tests and for closing

    @server.tool(description="The runs this server serves: name, path, ranks, event count. Pass `run` (a name) to the other tools.")
    def list_runs() -> dict[str, Any]:
        return rs.list_runs()

    @server.tool(description="A run's summary: ranks, devices, steps, event counts, data-quality warnings, and the analyzer's "
                 "summary numbers (step time, device busy/idle ...) when the analyzer is available.")
    def summary(run: str | None = None) -> dict[str, Any]:
        return rs.summary(run)

    @server.tool(description="The analyzer's findings ranked by impact: top `k`, optionally only one `category` or `severity` "
                 "at or above a level (high > medium > low > info). Each has a number `finding` for explain_finding.")
    def findings(run: str | None = None, k: int = 10, category: str | None = None, severity: str | None = None) -> dict[str, Any]:
        return rs.findings(run, k=k, category=category, severity=severity)

    @server.tool(description="One finding in full, with its evidence query run in the sandbox (its rows, up to `max_rows`) "
                 "and its sample events: check the claim against the data.")
    def explain_finding(finding: int, run: str | None = None, max_rows: int = 20) -> dict[str, Any]:
        return rs.explain_finding(run, finding=finding, max_rows=max_rows)

    @server.tool(description="Run ONE read-only SELECT (DuckDB SQL) on a run. Views: events, frames, flows, memory, counters, "
                 "steps, ranks, devices, schema_fields (read it to learn the columns). Returns {ok, error, columns, types, rows, "
                 f"row_count, truncated}}; at most max_rows (<= {MAX_ROWS}) rows; the query is stopped after timeout_s (<= 60).")
    def query(sql: str, run: str | None = None, max_rows: int = 50, timeout_s: float = 10.0) -> dict[str, Any]:
        return rs.query(run, sql=sql, max_rows=max_rows, timeout_s=timeout_s)

    @server.tool(description="Source lines ranked by device time (kernels, copies, memsets launched from the line), then by "
                 "time in outermost CPU operators. Empty when the trace has no Python stacks.")
    def hot_source_lines(run: str | None = None, k: int = 20, rank: int | None = None) -> dict[str, Any]:
        return rs.hot_source_lines(run, k=k, rank=rank)

    @server.tool(description="An event's chain: source line, module path, outermost and innermost CPU operator, the runtime "
                 "launch, the device events it led to; and its neighbours in time on the same track with the gaps between.")
    def event_context(event_id: int, run: str | None = None, neighbours: int = 3) -> dict[str, Any]:
        return rs.event_context(run, event_id=event_id, neighbours=neighbours)

    @server.tool(description="Compare two runs (base, test): step time per profiler step with Welch's t-test verdict "
                 "(slower, faster, no significant change), and the top `k` changes per step by source line, module, operator "
                 "and kernel, ranked by absolute change (definitions: docs/COMPARE.md).")
    def compare(base: str, test: str, k: int = 20, significant_only: bool = False) -> dict[str, Any]:
        return rs.compare(base, test, k=k, significant_only=significant_only)

    @server.resource("neuron-explorer://schema", name="schema", mime_type="text/plain",
                     description="Every view and column with type, unit and meaning (the first run's schema_fields).")
    def schema_resource() -> str:
        return rs.schema_text(rs.names[0])

    @server.resource("neuron-explorer://runs/{run}/schema", name="run_schema", mime_type="text/plain",
                     description="One run's views and columns.")
    def run_schema_resource(run: str) -> str:
        return rs.schema_text(run)

    @server.resource("neuron-explorer://runs/{run}/report", name="report", mime_type="application/json",
                     description="One run's analyzer report (docs/report.schema.json), as JSON.")
    def report_resource(run: str) -> str:
        return rs.report_json(run)

    return server


def serve(runs: list[Path | str]) -> None:
    """Serve over stdio until the client closes the stream."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="neuron-explorer mcp: %(message)s")
    server = build_server(runs)
    try:
        server.run("stdio")
    finally:
        server.run_set.close()
