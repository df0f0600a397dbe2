"""The MCP server (`neuron-explorer mcp RUN...`): the agent tools and resources over stdio.

A thin layer over `tools.AgentRuns`: each MCP tool is one AgentRuns method (`tools.TOOLS`), registered
with the method's own signature and docstring, which tells an agent what it returns and how it is
bounded; a result with `ok: false` also sets MCP's `isError`. Resources: the schema (all views and
columns) and each run's report. Logging goes to stderr: stdout carries only the protocol.
`compare` calls the analyzers' run diff (analyzers/diff/), imported when first used.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import sys
from pathlib import Path
from typing import Any

from .._version import __version__
from .sandbox import DEFAULT_MEMORY_LIMIT_MB
from .tools import MAX_CHARS, MAX_ROWS, TOOLS, AgentRuns

INSTRUCTIONS = f"""Neuron Explorer: PyTorch profiler runs (events from the Python line to the device kernel) as SQL views.
Start with list_runs, then the schema resource (or the query tool on `schema_fields`), summary and findings.
Verify a finding with explain_finding; ask your own questions with query (one read-only SELECT, DuckDB SQL).
Times and durations are int64 nanoseconds. Results hold at most {MAX_ROWS} rows and about {MAX_CHARS} characters;
`truncated: true` says a result was cut."""


def _register(server: Any, method: Any) -> None:
    """One AgentRuns method as an MCP tool: its name, parameters and docstring as they are; the
    envelope is the structured result, and a failed call (`ok: false`) sets MCP's isError."""
    from mcp.types import CallToolResult, TextContent

    @functools.wraps(method)
    def tool(**kwargs: Any) -> CallToolResult:
        out = method(**kwargs)
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(out, default=str))], structured_content=out,
                              is_error=not out.get("ok", False))

    tool.__signature__ = inspect.signature(method).replace(return_annotation=CallToolResult)  # type: ignore[attr-defined]
    server.tool(name=method.__name__, description=inspect.getdoc(method))(tool)


def build_server(runs: list[Path | str], *, memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB) -> Any:
    """An MCPServer over the given run directories (not started). Raises InputError on a bad run."""
    from mcp.server.mcpserver import MCPServer

    rs = AgentRuns(runs, memory_limit_mb=memory_limit_mb)
    server = MCPServer(name="neuron-explorer", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    server.run_set = rs  # for tests and for closing

    for name in TOOLS:
        _register(server, getattr(rs, name))

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


def serve(runs: list[Path | str], *, memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB) -> None:
    """Serve over stdio until the client closes the stream; each run's sandbox gets `memory_limit_mb`."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="neuron-explorer mcp: %(message)s")
    server = build_server(runs, memory_limit_mb=memory_limit_mb)
    try:
        server.run("stdio")
    finally:
        server.run_set.close()
