"""The agent interface: a read-only SQL sandbox over a run, the schema an agent reads first, and an MCP server.

`query(run, sql)` is the entry point for agent frameworks (it returns the QueryResult envelope);
`Sandbox` keeps one locked connection open for many queries; `mcp_server.serve` is
`neuron-explorer mcp`. Nothing here writes to a run; Python users who want unrestricted DuckDB
use `neuron_explorer.open_run`.
"""

from .sandbox import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, QueryResult, Sandbox, query

__all__ = ["query", "QueryResult", "Sandbox", "DEFAULT_MAX_ROWS", "DEFAULT_TIMEOUT_S"]
