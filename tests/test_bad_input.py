"""Bad input gets one line naming the file and the problem, exit code 2, no traceback; runs survive."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from .conftest import TRACES, X, cli, write_trace


def _bad_files(tmp: Path) -> dict[str, Path]:
    good = (TRACES / "cuda_simple_add.json.gz").read_bytes()
    files = {
        "not JSON": tmp / "notjson.json",
        "truncated gzip": tmp / "truncated.json.gz",
        "empty file": tmp / "empty.json",
        "no traceEvents": tmp / "noevents.json",
        "traceEvents not a list": tmp / "notlist.json",
        "wrong value type": tmp / "badts.json",
        "events not objects": tmp / "notobjects.json",
    }
    files["not JSON"].write_text("this is not json {")
    files["truncated gzip"].write_bytes(good[: len(good) // 2])
    files["empty file"].write_bytes(b"")
    files["no traceEvents"].write_text(json.dumps({"schemaVersion": 1, "events": []}))
    files["traceEvents not a list"].write_text(json.dumps({"traceEvents": {"a": 1}}))
    # a counter whose args are a list ("ts": "soon" would be dropped with a warning, not refused)
    write_trace(files["wrong value type"], [{"ph": "C", "name": "util", "pid": 1, "ts": 1, "args": [1, 2]}])
    files["events not objects"].write_text(json.dumps({"traceEvents": [1, 2, 3]}))
    return files


@pytest.mark.slow  # a CLI process per bad file
def test_each_bad_file_gets_a_one_line_error_and_exit_2(tmp_path: Path):
    for problem, path in _bad_files(tmp_path).items():
        res = cli("import", path, "-o", tmp_path / f"run-{path.stem}")
        assert res.returncode == 2, (problem, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, (problem, res.stderr)
        assert str(path) in lines[0] and "Traceback" not in res.stderr, (problem, res.stderr)
        assert not (tmp_path / f"run-{path.stem}").exists(), problem


def test_directory_without_traces(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    res = cli("import", tmp_path / "empty", "-o", tmp_path / "run")
    assert res.returncode == 2 and "no .json or .json.gz traces" in res.stderr and "Traceback" not in res.stderr


def test_existing_run_is_never_damaged_and_force_replaces_it(tmp_path: Path):
    run = tmp_path / "run"
    assert cli("import", TRACES / "cuda_simple_add.json.gz", "-o", run).returncode == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    res = cli("import", TRACES / "rocm_mi250_train.json.gz", "-o", run)
    assert res.returncode == 2 and "already exists" in res.stderr and str(run) in res.stderr
    # a failing import with --force leaves the old run as it was
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert cli("import", bad, "-o", run, "--force").returncode == 2
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run")], "temporary directories left behind"
    # --force replaces it with a whole new run
    assert cli("import", TRACES / "rocm_mi250_train.json.gz", "-o", run, "--force").returncode == 0
    info = json.loads(cli("info", run, "--json").stdout)
    assert info["ranks"][0]["devices"][0]["name"].startswith("AMD") or "MI250" in json.dumps(info)


def test_reading_a_missing_or_newer_run_is_a_clear_error(tmp_path: Path):
    res = cli("info", tmp_path / "nope")
    assert res.returncode == 2 and "no such run directory" in res.stderr
    run = tmp_path / "run"
    assert cli("import", TRACES / "cuda_simple_add.json.gz", "-o", run).returncode == 0
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["format_version"] = 99
    (run / "manifest.json").write_text(json.dumps(manifest))
    res = cli("info", run)
    assert res.returncode == 2 and "newer" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow  # a CLI process per damaged file
def test_a_damaged_run_file_is_one_line_naming_it(tmp_path: Path):
    """A run whose Parquet files were truncated or overwritten (a full disk, a bad copy): every
    command says which file in one line and exits 2, the first file of a table and any other."""
    traces = tmp_path / "traces"
    for r in (0, 1):
        write_trace(traces / f"rank{r}.json", [X("ProfilerStep#0", "user_annotation", 0, 100), X("aten::mm", "cpu_op", 10, 50)],
                    distributedInfo={"rank": r, "world_size": 2})
    run = tmp_path / "run"
    assert cli("import", traces, "-o", run).returncode == 0
    for damaged in ("rank=1/events.parquet", "rank=0/events.parquet"):
        good = (run / damaged).read_bytes()
        (run / damaged).write_bytes(good[: len(good) // 3])
        for cmd in (("info",), ("analyze",), ("query", "SELECT count(*) FROM events")):
            res = cli(*cmd[:1], run, *cmd[1:])
            lines = res.stderr.strip().splitlines()
            assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, (cmd, res.stderr[-800:])
            assert damaged in lines[0] and ("Parquet" in lines[0] or "parquet" in lines[0]), lines[0]
        (run / damaged).write_bytes(good)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_bare_array_and_both_encodings_import(tmp_path: Path, suffix: str):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}]
    path = tmp_path / f"t{suffix}"
    data = json.dumps(events).encode()
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    res = cli("import", path, "-o", tmp_path / "run")
    assert res.returncode == 0, res.stderr


def test_a_bad_event_decoded_by_a_worker_process_is_a_one_line_error(tmp_path: Path, monkeypatch):
    from neuron_explorer.collectors import _kineto_json
    from neuron_explorer.collectors.chrome_trace import import_traces
    from neuron_explorer.errors import InputError

    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(5000)]
    events[4000]["args"] = {"correlation": 2**63}
    path = write_trace(tmp_path / "big.json", events)
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", 0)
    with pytest.raises(InputError) as err:
        import_traces(path, tmp_path / "run")
    assert str(path) in str(err.value) and str(2**63) in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


# --- hostile input (issue 13, items 1-7) ---------------------------------------------------------
# Each case: `import` refuses it in one line naming the file and the field (what the CLI prints with
# exit 2), or writes a run that info, analyze and export all read.

BIG = 2**63


def _events(*extra: dict) -> list[dict]:
    """A step, an operator, its launch and its kernel; `extra` events after them."""
    return [X("ProfilerStep#1", "user_annotation", 0, 100), X("aten::mm", "cpu_op", 1, 10, **{"External id": 5}),
            X("cudaLaunchKernel", "cuda_runtime", 2, 3, correlation=7), X("k", "kernel", 6, 3, pid=0, tid=7, correlation=7, stream=7),
            *extra]


def _refused(tmp: Path, doc: dict | str, *expected: str, name: str = "trace.json") -> str:
    from neuron_explorer.collectors.chrome_trace import import_traces
    from neuron_explorer.errors import InputError

    path = tmp / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(InputError) as err:
        import_traces(path, tmp / "run")
    message = str(err.value)
    assert "\n" not in message and str(path) in message, message
    for text in expected:
        assert text in message, message
    assert not (tmp / "run").exists()
    return message


def _readable_run(tmp: Path, doc: dict | str) -> dict:
    """Import `doc`, then read the run as info, analyze and export do; export → import again. The manifest."""
    from neuron_explorer.analyzers.engine import analyze
    from neuron_explorer.analyzers.render import text
    from neuron_explorer.collectors.chrome_trace import import_traces
    from neuron_explorer.export import export_chrome
    from neuron_explorer.info import render_info, run_info

    path = tmp / "trace.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    manifest = import_traces(path, tmp / "run").manifest
    render_info(run_info(tmp / "run"))
    text(analyze(tmp / "run"))
    exported = export_chrome(tmp / "run", tmp / "exported.json.gz")
    import_traces(exported[0], tmp / "again")
    return manifest


@pytest.mark.parametrize("event, field", [
    (X("a", "cuda_runtime", 1, 1, correlation=BIG), "'correlation'"),
    (X("a", "cpu_op", 1, 1, **{"External id": BIG}), "'External id'"),
    (X("a", "kernel", 1, 1, pid=0, tid=7, stream=BIG), "'stream'"),
    ({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": BIG, "pid": 1, "tid": 1, "ts": 2}, "flow 'id'"),
    ({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "args": {"Bytes": BIG}}, "'Bytes'"),
    ({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "args": {"Bytes": 4, "Device Type": 2**31}}, "'Device Type'"),
    ({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "args": {"Bytes": 4, "Device Id": 2**31}}, "'Device Id'"),
])
def test_integers_beyond_their_column_are_refused_naming_the_field(tmp_path: Path, event: dict, field: str):
    _refused(tmp_path, {"traceEvents": _events(event)}, field, "does not fit")


def test_an_id_the_tool_does_not_read_is_kept_in_args_not_refused(tmp_path: Path):
    # Kineto's 'Python id' links python_function events; the build nests them by time instead
    import duckdb

    _readable_run(tmp_path, {"traceEvents": _events(X("f.py(1): f", "python_function", 1, 1, **{"Python id": BIG, "Python parent id": -BIG - 1}))})
    [(args,)] = duckdb.sql(f"SELECT args FROM '{tmp_path}/run/rank=0/events.parquet' WHERE name = 'f.py(1): f'").fetchall()
    assert json.loads(args) == {"Python id": BIG, "Python parent id": -BIG - 1}


def test_text_pids_of_a_few_events_among_many_are_kept_on_their_rows(tmp_path: Path):
    # a column of text ids that are mostly null is held as its few rows until the write
    import duckdb

    events = [X(f"op{i}", "cpu_op", 1 + i, 1, pid=1, tid=1) for i in range(300)]
    events[7]["pid"], events[250]["tid"] = "pid-seven", "tid of 250"
    _readable_run(tmp_path, {"traceEvents": events})
    rows = duckdb.sql(f"SELECT name, pid_text, tid_text FROM '{tmp_path}/run/rank=0/events.parquet' "
                      "WHERE pid_text IS NOT NULL OR tid_text IS NOT NULL ORDER BY ts_ns").fetchall()
    assert rows == [("op7", "pid-seven", None), ("op250", None, "tid of 250")]


def test_pids_and_tids_beyond_int64_are_kept_as_text(tmp_path: Path):
    import duckdb

    _readable_run(tmp_path, {"traceEvents": _events(X("a", "cpu_op", 1, 1, pid=BIG, tid=2**64))})
    rows = duckdb.sql(f"SELECT pid, pid_text, tid_text FROM '{tmp_path}/run/rank=0/events.parquet' WHERE name = 'a'").fetchall()
    assert rows == [(None, str(BIG), str(2**64))]


def test_a_frame_line_beyond_int32_is_no_source_location(tmp_path: Path):
    import duckdb

    _readable_run(tmp_path, {"traceEvents": _events(X(f"f.py({BIG}): f", "python_function", 1, 1),
                                                    X("g.py(7): g", "python_function", 1, 1))})
    assert duckdb.sql(f"SELECT file, line FROM '{tmp_path}/run/rank=0/frames.parquet'").fetchall() == [("g.py", 7)]


def test_ranks_and_clocks_a_run_cannot_hold_are_refused(tmp_path: Path):
    _refused(tmp_path, {"baseTimeNanoseconds": 2**70, "traceEvents": _events()}, "baseTimeNanoseconds", str(2**70))
    _refused(tmp_path, {"distributedInfo": {"rank": 2**31}, "traceEvents": _events()}, "distributedInfo", "rank 2147483648")
    _refused(tmp_path, {"distributedInfo": {"rank": -1}, "traceEvents": _events()}, "rank -1")
    _refused(tmp_path, {"traceEvents": _events()}, "rank 10000000", name="trace_rank-10000000.json")
    manifest = _readable_run(tmp_path, {"distributedInfo": {"rank": 9223371}, "traceEvents": _events()})
    assert [r["rank"] for r in manifest["ranks"]] == [9223371]  # the largest rank event ids hold


@pytest.mark.parametrize("events, base, expected", [
    ([X("a", "cpu_op", 9.3e15, 1)], 0, "ts 9300000000000000"),  # beyond int64 ns
    ([X("a", "cpu_op", 1, 9.3e15)], 0, "dur 9300000000000000"),
    ([X("a", "cpu_op", 9.2e15, 1)], 0, "starts at"),  # fits int64, but differences of times would not
    ([X("a", "cpu_op", -9.2e15, 1)], 0, "starts at"),
    ([X("a", "cpu_op", 4e15, 4e15)], 0, "ends at"),
    ([X("a", "cpu_op", 1, 4e15, tid=t) for t in range(3)], 0, "add up to"),  # 1.2e19 ns: no int64 sum holds it
    ([X("a", "cpu_op", 1, 1)], 2**62 + 1, "baseTimeNanoseconds"),
    ([X("a", "cpu_op", 4.6e15, 1)], 2**60, "after baseTimeNanoseconds"),
    ([{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 9.2e15}], 0, "flow event"),
    ([{"ph": "C", "name": "c", "pid": 1, "ts": -9.2e15, "args": {"v": 1}}], 0, "counter"),
    ([{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "args": {"Bytes": 2**62}} for _ in range(2)], 0, "Bytes"),
])
def test_times_and_sums_beyond_int64_arithmetic_are_refused(tmp_path: Path, events: list, base: int, expected: str):
    _refused(tmp_path, {"baseTimeNanoseconds": base, "traceEvents": _events(*events)}, expected)


def test_times_at_the_limit_import_and_every_command_reads_them(tmp_path: Path):
    """Starts and ends just inside ±2^62 ns: info, analyze and export must not overflow on them."""
    limit_us = 2**62 // 1000
    events = [X("early", "cpu_op", -limit_us, 1), X("late", "cpu_op", limit_us - 1000, 999),
              X("ProfilerStep#2", "user_annotation", 0, limit_us - 2000)]
    manifest = _readable_run(tmp_path, {"traceEvents": _events(*events)})
    assert manifest["ranks"][0]["data_quality"]["negative_timestamps"] == 1


@pytest.mark.parametrize("where", ["args", "metadata", "counter", "header"])
def test_deep_nesting_is_refused_in_one_line(tmp_path: Path, where: str):
    for depth in (101, 10_000):
        deep = "[" * depth + "1" + "]" * depth
        event = {"args": '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"x": DEEP}}',
                 "metadata": '{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": DEEP}}',
                 "counter": '{"ph": "C", "name": "c", "pid": 1, "ts": 1, "args": {"v": DEEP}}',
                 "header": None}[where]
        doc = ('{"traceName": DEEP, "traceEvents": []}' if event is None else '{"traceEvents": [' + event + "]}").replace("DEEP", deep)
        # a counter's value must be a number: one nested within the parser's reach is refused as such
        message = _refused(tmp_path, doc, "counter 'c'" if where == "counter" and depth < 1000 else "nested")
        assert len(message) < 300


def test_args_nested_within_the_limit_are_kept(tmp_path: Path):
    import duckdb

    deep = "[" * 60 + "1" + "]" * 60
    _readable_run(tmp_path, '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
                            '"args": {"Input Dims": ' + deep + "}}]}")
    [(args,)] = duckdb.sql(f"SELECT args FROM '{tmp_path}/run/rank=0/events.parquet'").fetchall()
    assert json.loads(args)["Input Dims"] == json.loads(deep)


@pytest.mark.parametrize("args, expected", [([1, 2], "[1, 2]"), ({"v": {"x": 1}}, '{"v": {"x": 1}}'), ({"v": "high"}, "'high'")])
def test_counters_that_are_not_objects_of_numbers_are_refused(tmp_path: Path, args, expected: str):
    _refused(tmp_path, {"traceEvents": _events({"ph": "C", "name": "util", "pid": 1, "ts": 1, "args": args})}, "counter 'util'", expected)


@pytest.mark.parametrize("doc", [{"traceEvents": []}, []])
def test_an_empty_trace_is_an_empty_run_that_every_command_reads(tmp_path: Path, doc):
    manifest = _readable_run(tmp_path, doc)
    assert manifest["ranks"][0]["events"] == 0


@pytest.mark.parametrize("header, warning", [
    ({"deviceProperties": "GPU"}, "deviceProperties is not a list"),
    ({"deviceProperties": {"id": 0, "name": "GPU"}}, "deviceProperties is not a list"),
    ({"deviceProperties": [{"id": "zero", "name": "A"}, {"id": 0.5}, {"id": 0, "name": 7}, {"id": 1, "name": "B"}, "x"]},
     "4 deviceProperties entries"),
    ({"computeProperties": [{"id": True}]}, "1 computeProperties entries"),
    ({"distributedInfo": {"rank": 0, "world_size": "two"}}, "world_size 'two'"),
    ({"distributedInfo": {"rank": 0, "world_size": 2.5}}, "world_size '2.5'"),
    ({"distributedInfo": {"rank": 0, "world_size": BIG}}, "world_size"),
    ({"distributedInfo": "rank 3"}, "distributedInfo is not an object"),
])
def test_malformed_metadata_is_dropped_with_a_warning_before_the_run_is_written(tmp_path: Path, header: dict, warning: str):
    manifest = _readable_run(tmp_path, {**header, "traceEvents": _events()})
    assert any(warning in w for w in manifest["warnings"]), manifest["warnings"]
    entry = manifest["ranks"][0]
    assert all(isinstance(p, dict) and type(p["id"]) is int for p in entry["device_properties"])
    assert entry["world_size"] is None


def test_bad_input_through_the_cli_is_one_line_and_exit_2(tmp_path: Path):
    cases = {
        "id.json": {"traceEvents": _events(X("a", "cpu_op", 1, 1, **{"External id": BIG}))},
        "ts.json": {"traceEvents": _events(X("a", "cpu_op", 9.2e15, 1))},
        "deep.json": '{"traceEvents": [{"ph": "M", "name": "n", "pid": 1, "args": ' + "[" * 10_000 + "]" * 10_000 + "}]}",
        "counter.json": {"traceEvents": _events({"ph": "C", "name": "c", "pid": 1, "ts": 1, "args": [1]})},
    }
    for name, doc in cases.items():
        path = tmp_path / name
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        res = cli("import", path, "-o", tmp_path / "run")
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and str(path) in res.stderr, (name, res.stderr)
        assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a CLI process per unwritable output
def test_outputs_that_cannot_be_written_are_one_line_and_exit_2(tmp_path: Path):
    trace = write_trace(tmp_path / "t.json", _events())
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "keep.txt").write_text("mine")
    for out, extra in [("/dev/null", []), ("/proc/x", []), (str(tmp_path / ("a" * 300)), []), (str(tmp_path / ("b" * 230)), []),
                       (str(tmp_path / "dangling"), []), (".", ["--force"])]:
        res = cli("import", trace, "-o", out, *extra, cwd=tmp_path / "cwd")
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (out, res.stderr)
        assert "Traceback" not in res.stderr
    assert (tmp_path / "cwd" / "keep.txt").read_text() == "mine"
    assert cli("import", trace, "-o", tmp_path / ("c" * 200)).returncode == 0  # long, but it fits


def _as_other_user() -> list[str] | None:
    """A command prefix that runs as a user who cannot read a mode-000 file, or None."""
    import os
    import shutil as sh

    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if sh.which("setpriv") else None


def test_unreadable_traces_are_one_line_and_exit_2():
    """A trace named directly, and one inside a directory of traces, that the user cannot read."""
    import os
    import tempfile

    prefix = _as_other_user()
    if prefix is None:
        pytest.skip("running as root without setpriv: no file is unreadable")
    top = Path(tempfile.mkdtemp())  # not under tmp_path: the other user cannot enter pytest's directories
    os.chmod(top, 0o777)  # the other user writes the run here
    try:
        _import_unreadable(prefix, top)
    finally:
        import shutil as sh

        sh.rmtree(top, ignore_errors=True)


def _import_unreadable(prefix: list[str], top: Path) -> None:
    import os
    import subprocess
    import sys

    traces = top / "traces"
    write_trace(traces / "rank-0.json", _events())
    write_trace(traces / "rank-1.json", _events())
    os.chmod(traces, 0o755)
    for p in traces.iterdir():
        os.chmod(p, 0o644)
    os.chmod(traces / "rank-1.json", 0)
    for source in (traces, traces / "rank-1.json"):
        res = subprocess.run([*prefix, sys.executable, "-m", "neuron_explorer", "import", str(source), "-o", str(top / "run")],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().splitlines() == [f"error: {traces / 'rank-1.json'}: cannot read the file (Permission denied)"]
    assert not (top / "run").exists()


@pytest.mark.parametrize("args, expected", [("[" * 5000 + "]" * 5000, "nested too deeply"), ("[" * 101 + "]" * 101, "nested more than"),
                                            ('{"correlation": 9223372036854775808}', "'correlation'")])
def test_hostile_events_decoded_by_worker_processes_are_one_line(tmp_path: Path, monkeypatch, args: str, expected: str):
    from neuron_explorer.collectors import _kineto_json

    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", 0)
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(5000)]
    text = json.dumps({"traceEvents": events}).replace('"name": "op4000"', '"name": "op4000", "args": ' + args)
    _refused(tmp_path, text, expected)


@pytest.mark.parametrize("api", ["execute", "relation"])
def test_ctrl_c_inside_a_query_is_one_line_and_exit_130(tmp_path: Path, monkeypatch, capsys, api: str):
    """Ctrl-C that lands while DuckDB runs a query stops the query, and DuckDB raises its own error
    (InterruptException; RuntimeError('Query interrupted') from its relational API), not
    KeyboardInterrupt: the CLI said so in a traceback. It is "interrupted" and exit 130, as a
    Ctrl-C anywhere else. Here a real query is interrupted as Ctrl-C does (`interrupt()`)."""
    import signal
    import sys
    import threading

    import duckdb

    from neuron_explorer import cli
    from neuron_explorer.analyzers import engine

    run = tmp_path / "run"
    write_trace(tmp_path / "t.json", [X("aten::mm", "cpu_op", 0, 10)])
    assert cli_run(tmp_path / "t.json", run) == 0

    def long_query(*_a, **_k):
        con = duckdb.connect()
        threading.Timer(0.3, con.interrupt).start()
        sql = "SELECT count(*) FROM range(100000000000) a WHERE a.range % 7 = 3"
        return con.execute(sql).fetchall() if api == "execute" else con.sql(sql).to_arrow_table()

    monkeypatch.setattr(engine, "analyze_run", long_query)
    monkeypatch.setattr(sys, "argv", ["neuron-explorer", "analyze", str(run)])
    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.main()
    finally:
        signal.signal(signal.SIGINT, previous)  # (main's Ctrl-C handler, installed for the command)
    assert exit_.value.code == 130
    err = capsys.readouterr().err
    assert err.strip() == "interrupted" and "Traceback" not in err


def cli_run(trace: Path, run: Path) -> int:
    return cli("import", trace, "-o", run).returncode


def test_ctrl_c_that_a_query_swallows_still_ends_the_command_as_interrupted(tmp_path: Path, monkeypatch, capsys):
    """A Ctrl-C that DuckDB turns into an error of its own inside a rule (its guard reports the rule
    as failed) let `analyze` go on and exit 0, as if nothing had come. The command now ends as
    interrupted, exit 130, in one line."""
    import os
    import signal
    import sys
    import time

    from neuron_explorer import cli
    from neuron_explorer.analyzers import engine

    run = tmp_path / "run"
    write_trace(tmp_path / "t.json", [X("aten::mm", "cpu_op", 0, 10)])
    assert cli_run(tmp_path / "t.json", run) == 0
    real = engine.analyze_run

    def swallowing(*a, **k):
        try:  # what a rule's guard does with the error DuckDB raises for the interrupt
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except (KeyboardInterrupt, Exception):
            pass
        return real(*a, **k)

    monkeypatch.setattr(engine, "analyze_run", swallowing)
    monkeypatch.setattr(sys, "argv", ["neuron-explorer", "analyze", str(run)])
    monkeypatch.setattr(cli, "_CTRL_C", False)
    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.main()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert exit_.value.code == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
