"""The MCP server: an in-process client calls every tool and resource; a real stdio subprocess answers too."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading

import anyio
import pytest
from mcp import Client, StdioServerParameters

from neuron_explorer import open_run
from neuron_explorer.agent.mcp_server import build_server
from neuron_explorer.agent.sandbox import VIEWS
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES
from .test_agent_tools import BASE, EVENTS, US, build_hand_run
from .test_sandbox import run_digest

TOOLS = {"list_runs", "summary", "findings", "explain_finding", "query", "hot_source_lines", "event_context", "compare",
         "critical_path", "utilisation", "memory_range"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcp")
    hand = build_hand_run(tmp)
    real = import_traces(TRACES / "cuda_train_68k_events.json.gz", tmp / "t68k").run_dir
    return hand, real


def call(server, script):
    """Run `script(client)` against the server in-process and return what it returns."""
    out = {}

    async def main():
        async with Client(server) as client:
            out["value"] = await script(client)

    anyio.run(main)
    return out["value"]


def data(result, failed: bool = False) -> dict:
    """The tool's JSON payload, from the structured content (and the text content must say the same);
    MCP's isError is set exactly when the envelope says `ok: false`."""
    assert result.is_error is failed, result
    text = json.loads(result.content[0].text)
    assert text == result.structured_content and text["ok"] is not failed
    return result.structured_content


def test_every_tool_and_resource_in_process(runs):
    hand, real = runs
    before = {p: run_digest(p) for p in runs}
    server = build_server([hand, real])

    async def script(c):
        tools = {t.name for t in (await c.list_tools()).tools}
        r = {"tools": tools}
        r["list_runs"] = data(await c.call_tool("list_runs", {}))
        r["summary"] = data(await c.call_tool("summary", {"run": "t68k"}))
        r["findings"] = data(await c.call_tool("findings", {"run": "t68k", "k": 3}))
        r["findings_high"] = data(await c.call_tool("findings", {"run": "t68k", "severity": "high"}))
        r["explain"] = data(await c.call_tool("explain_finding", {"run": "t68k", "finding": 0}))
        r["query"] = data(await c.call_tool("query", {"run": "hand", "sql": "SELECT name FROM events WHERE kind = 'kernel' ORDER BY ts_ns"}))
        r["refused"] = data(await c.call_tool("query", {"run": "hand", "sql": "COPY (SELECT 1) TO 'x.csv'"}), failed=True)
        r["slow"] = data(await c.call_tool("query", {"run": "hand", "timeout_s": 0.5,
                                                     "sql": "SELECT count(*) FROM range(1000000000000) t WHERE t.range % 7 = 3"}),
                         failed=True)
        r["hot"] = data(await c.call_tool("hot_source_lines", {"run": "hand"}))
        gemm = data(await c.call_tool("query", {"run": "hand", "sql": "SELECT event_id FROM events WHERE name = 'gemm'"}))["rows"][0][0]
        r["context"] = data(await c.call_tool("event_context", {"run": "hand", "event_id": gemm}))
        r["compare"] = data(await c.call_tool("compare", {"base": "hand", "test": "t68k", "k": 5}))
        r["compare_bad"] = data(await c.call_tool("compare", {"base": "hand", "test": "nope"}), failed=True)
        r["resources"] = {str(x.uri) for x in (await c.list_resources()).resources}
        r["templates"] = {x.uri_template for x in (await c.list_resource_templates()).resource_templates}
        r["schema"] = (await c.read_resource("neuron-explorer://schema")).contents[0].text
        r["report"] = json.loads((await c.read_resource("neuron-explorer://runs/t68k/report")).contents[0].text)
        r["bad_report"] = json.loads((await c.read_resource("neuron-explorer://runs/nope/report")).contents[0].text)
        return r

    r = call(server, script)
    server.run_set.close()
    assert r["tools"] == TOOLS
    assert [x["run"] for x in r["list_runs"]["runs"]] == ["hand", "t68k"]
    assert r["list_runs"]["runs"][0]["events"] == len([e for e in EVENTS if e["ph"] == "X"])
    assert r["summary"]["ok"] and r["summary"]["findings"] > 0

    from neuron_explorer.analyzers import analyze

    report = analyze(real, write=False).to_dict()
    assert [f["rule_id"] for f in r["findings"]["findings"]] == [f["rule_id"] for f in report["findings"]][:3]
    assert all(f["severity"] == "high" for f in r["findings_high"]["findings"])
    assert r["explain"]["detail"]["title"] == report["findings"][0]["title"]
    # evidence that reads RUN/analysis/ (the critical path) runs once `analyze` wrote it; the server writes nothing
    assert r["explain"]["evidence_result"]["ok"] or ("analysis" in report["findings"][0]["evidence"]["sql"]
                                                     and "neuron-explorer analyze" in r["explain"]["note"])
    assert r["query"]["rows"] == [["gemm"], ["bias"], ["mse"]]
    assert not r["refused"]["ok"] and "got COPY" in r["refused"]["error"]
    assert not r["slow"]["ok"] and "time limit of 0.5 s" in r["slow"]["error"]
    assert [(x["line"], x["device_ns"]) for x in r["hot"]["lines"]] == [(10, 25 * US), (20, 4 * US)]
    assert r["context"]["chain"]["launch"]["ts_ns"] == BASE + 7 * US and r["context"]["chain"]["source"]["line"] == 10
    from neuron_explorer.analyzers.diff import REASONS, compare

    diff = compare(hand, real).to_dict()
    assert r["compare"]["ok"] and r["compare"]["step_time"] == diff["step_time"]
    assert r["compare"]["reason"] == diff["reason"] and r["compare"]["reason"] in REASONS  # the decision table's reason code
    assert r["compare"]["deltas"] == diff["deltas"][:5] and r["compare"]["total_deltas"] == len(diff["deltas"]) > 5
    assert r["compare"]["truncated"]
    assert not r["compare_bad"]["ok"] and "unknown run 'nope'" in r["compare_bad"]["error"]
    assert r["resources"] == {"neuron-explorer://schema"}
    assert r["templates"] == {"neuron-explorer://runs/{run}/schema", "neuron-explorer://runs/{run}/report"}
    for view in VIEWS:
        assert f"\n{view}: " in r["schema"]
    assert [f["rule_id"] for f in r["report"]["report"]["findings"]] == [f["rule_id"] for f in report["findings"]]
    assert r["bad_report"]["ok"] is False and "unknown run 'nope'" in r["bad_report"]["error"]
    assert {p: run_digest(p) for p in runs} == before


def test_tool_results_are_bounded(runs):
    server = build_server([runs[1]])

    async def script(c):
        big = data(await c.call_tool("query", {"sql": "SELECT * FROM events", "max_rows": 100000}))
        return big

    big = call(server, script)
    server.run_set.close()
    assert big["truncated"] and big["row_count"] <= 200
    assert len(json.dumps(big)) <= 20_000


def test_bad_run_fails_before_serving(tmp_path):
    from neuron_explorer.errors import InputError

    with pytest.raises(InputError, match="no such run directory"):
        build_server([tmp_path / "missing"])
    p = subprocess.run([sys.executable, "-m", "neuron_explorer", "mcp", str(tmp_path / "missing")],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.startswith("error: ") and "Traceback" not in p.stderr


@pytest.mark.slow  # a server process driven by the SDK's client
def test_stdio_subprocess_with_the_sdk_client(runs):
    hand = runs[0]
    params = StdioServerParameters(command=sys.executable, args=["-m", "neuron_explorer", "mcp", str(hand)])

    async def script():
        async with Client(params) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            res = data(await c.call_tool("query", {"sql": "SELECT count(*) AS n FROM events"}))
            return tools, res

    tools, res = anyio.run(script)
    assert tools == TOOLS
    with open_run(hand) as r:
        assert res["rows"] == [[r.sql("SELECT count(*) FROM events").fetchone()[0]]]


@pytest.mark.slow  # a server process over stdio
def test_stdio_stdout_carries_only_the_protocol(runs):
    """A client of the classic handshake (as Claude Desktop / Claude Code speak it): every stdout line is JSON-RPC."""
    real = runs[1]
    # Started through `python -c`: DuckDB draws a progress bar for slow queries when the main module
    # has no file (as in notebooks and embedding hosts); it must reach neither stdout nor the log.
    launcher = "import sys; from neuron_explorer.cli import main; sys.argv[0] = 'neuron-explorer'; main()"
    proc = subprocess.Popen([sys.executable, "-c", launcher, "mcp", str(real)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()

    def send(msg: dict) -> None:
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()

    def wait_for(id_: int) -> dict:
        while True:
            line = lines.get(timeout=120)
            msg = json.loads(line)  # anything but JSON on stdout fails here
            assert msg["jsonrpc"] == "2.0"
            if msg.get("id") == id_:
                return msg

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
        init = wait_for(1)
        assert init["result"]["serverInfo"]["name"] == "neuron-explorer"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "summary", "arguments": {}}})
        summary = wait_for(2)
        assert json.loads(summary["result"]["content"][0]["text"])["ok"]
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
              "params": {"name": "query", "arguments": {"sql": "SELECT count(*) FROM range(1000000000000) t WHERE t.range % 7 = 3",
                                                         "timeout_s": 3}}})  # long enough for DuckDB's progress bar
        slow_reply = wait_for(3)["result"]
        slow = json.loads(slow_reply["content"][0]["text"])
        assert slow["ok"] is False and "interrupted" in slow["error"] and slow_reply["isError"] is True
        proc.stdin.close()
        rest = ""
        proc.wait(timeout=60)
        while not lines.empty():
            rest += lines.get()
        for line in rest.splitlines():
            assert json.loads(line)["jsonrpc"] == "2.0"
        assert "remaining)" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
