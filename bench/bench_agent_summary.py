"""Characters of the MCP `summary` result on every trace in tests/data/traces (or the folder given):
the JSON the MCP server sends (`json.dumps(result, default=str)`), and how many `null`s it holds.

    python bench/bench_agent_summary.py [TRACES_DIR]

Runs on any tree: on one whose `summary` has no `detail`, it measures that tree's only form.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import _cli

from neuron_explorer.agent.tools import AgentRuns
from neuron_explorer.store import open_run


def main(folder: Path) -> None:
    traces = sorted(folder.glob("*.json*")) + sorted(p for p in folder.iterdir() if p.is_dir())
    print("| trace | characters | `null`s | truncated |")
    print("| --- | ---: | ---: | --- |")
    for t in traces:
        with open_run(t) as r:  # imported into the cache once
            run_dir = r.path
        rs = AgentRuns([run_dir])
        try:
            out = rs.summary()
        finally:
            rs.close()
        text = json.dumps(out, default=str)
        print(f"| {t.name} | {len(text):,} | {text.count('null')} | {bool(out.get('truncated'))} |", flush=True)


if __name__ == "__main__":
    _cli.help_if_asked(__doc__)
    if len(sys.argv) > 1 and not Path(sys.argv[1]).is_dir():
        raise SystemExit(f"bench_agent_summary.py: {sys.argv[1]}: not a folder of traces (--help for usage)")
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "tests" / "data" / "traces")
