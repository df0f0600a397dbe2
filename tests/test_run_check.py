"""A run of the wrong shape is one line naming the file and what is wrong, exit 2 (issue 40.3, 40.4,
41's format_version), and `analyze` that cannot write analysis/ still prints its report (40.5).

Hand-edited manifests (valid JSON: a list where an object is expected, a string for a number,
`format_version` true, 0 or -1) and partitions rewritten with a column missing, of another type or
with times at the int64 edge made info, analyze, export, diff and schema end in a Python or DuckDB
traceback, exit 1. Every command that opens a run is run on each such run through the CLI.
"""

from __future__ import annotations

import errno
import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from neuron_explorer import run_check
from neuron_explorer.analyzers import outputs
from neuron_explorer.analyzers.engine import analyze
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.errors import InputError
from neuron_explorer.store import read_manifest

from .conftest import X, cli, write_trace


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("check")
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)] + [X("aten::mm", "cpu_op", 10 + 100 * i, 50) for i in range(5)]
    return import_traces(write_trace(root / "t.json", events), root / "good").run_dir


def _copy(good, tmp_path, name):
    out = tmp_path / name
    shutil.copytree(good, out)
    return out


def _edit_manifest(run, edit):
    m = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(edit(m)))


def _edit_events(run, edit):
    path = run / "rank=0" / "events.parquet"
    pq.write_table(edit(pq.read_table(path)), path)


def _set(t: pa.Table, name: str, array) -> pa.Table:
    return t.set_column(t.schema.get_field_index(name), name, array)


MANIFESTS = {
    "a list": (lambda m: [m], "the manifest is a list, not an object"),
    "format_version true": (lambda m: {**m, "format_version": True}, "format_version is true/false (True), not a whole number"),
    "format_version 0": (lambda m: {**m, "format_version": 0}, "format_version 0 is not a run format (they start at 1)"),
    "format_version -1": (lambda m: {**m, "format_version": -1}, "format_version -1 is not a run format (they start at 1)"),
    "format_version '2'": (lambda m: {**m, "format_version": "2"}, "format_version is text (2), not a whole number"),
    "no format_version": (lambda m: {k: v for k, v in m.items() if k != "format_version"}, "the manifest has no format_version"),
    "ranks a string": (lambda m: {**m, "ranks": "0"}, "'ranks' is text; the format has a list"),
    "a rank entry a list": (lambda m: {**m, "ranks": [[0]]}, "ranks[0] is a list, not an object"),
    "rank a string": (lambda m: {**m, "ranks": [{**m["ranks"][0], "rank": "0"}]},
                      "ranks[0].rank is text (0); the format has a whole number from 0 to 2147483647"),
    "rank past int32": (lambda m: {**m, "ranks": [{**m["ranks"][0], "rank": 2**31}]},
                        "ranks[0].rank is a number (2147483648); the format has a whole number from 0 to 2147483647"),
    "events a string": (lambda m: {**m, "ranks": [{**m["ranks"][0], "events": "6"}]},
                        "ranks[0].events is text; the format has a whole number"),
    "counts a list": (lambda m: {**m, "ranks": [{**m["ranks"][0], "counts": [1]}]}, "ranks[0].counts is a list; the format has an object"),
    "a count that is text": (lambda m: {**m, "ranks": [{**m["ranks"][0], "data_quality": {"x": "many"}}]},
                             "ranks[0].data_quality.x is text, not a count"),
    "device_properties of strings": (lambda m: {**m, "ranks": [{**m["ranks"][0], "device_properties": ["gpu"]}]},
                                     "ranks[0].device_properties[0] is text, not an object"),
    "warnings an object": (lambda m: {**m, "warnings": {"a": 1}}, "'warnings' is an object; the format has a list or null"),
}
PARTITIONS = {
    "a column missing": (lambda t: t.drop_columns(["dur_ns"]), "column 'dur_ns' of events is missing; import or record the run again"),
    "a column of another type": (lambda t: _set(t, "ts_ns", pc.cast(t["ts_ns"], pa.string())),
                                 "column 'ts_ns' of events is string; the format has int64"),
    "int32 where int64": (lambda t: _set(t, "dur_ns", pc.cast(t["dur_ns"], pa.int32())), "column 'dur_ns' of events is int32; the format has int64"),
    "times at the int64 edge": (lambda t: _set(t, "ts_ns", pa.array([2**63 - 1] * len(t), pa.int64())),
                                "column 'ts_ns' holds 9223372036854775807, outside the ±2^62 ns a run may hold"),
    "durations at the negative edge": (lambda t: _set(t, "dur_ns", pa.array([-(2**63)] * len(t), pa.int64())),
                                       "column 'dur_ns' holds -9223372036854775808, outside the ±2^62 ns"),
    "not Parquet": (None, "not a readable Parquet file"),
}


@pytest.mark.parametrize("case", list(MANIFESTS))
def test_manifest_of_the_wrong_shape_is_one_line_naming_it(good, tmp_path, case):
    edit, message = MANIFESTS[case]
    run = _copy(good, tmp_path, "run")
    _edit_manifest(run, edit)
    with pytest.raises(InputError) as e:
        read_manifest(run)
    assert str(e.value) == f"{run / 'manifest.json'}: {message}"


@pytest.mark.parametrize("case", list(PARTITIONS))
def test_partition_of_the_wrong_shape_is_one_line_naming_it(good, tmp_path, case):
    edit, message = PARTITIONS[case]
    run = _copy(good, tmp_path, "run")
    if edit is None:
        (run / "rank=0" / "events.parquet").write_bytes(b"PAR1 this is not parquet")
    else:
        _edit_events(run, edit)
    with pytest.raises(InputError) as e:
        read_manifest(run)
    assert str(e.value).startswith(f"{run / 'rank=0' / 'events.parquet'}: {message}"), str(e.value)


def test_a_good_run_and_format_v1_open(good, tmp_path):
    assert read_manifest(good)["format_version"] == 2
    v1 = _copy(good, tmp_path, "v1")
    _edit_manifest(v1, lambda m: {**m, "format_version": 1})
    _edit_events(v1, lambda t: t.drop_columns(["self_ns", "fwd_op_id", "pass", "source_frame_id", "python_ancestors"]))
    assert read_manifest(v1)["format_version"] == 1  # columns added since v1 are derived on read, not refused
    assert run_check.manifest_problem({"format_version": 3, "ranks": []}) is None  # the version's upper bound is read_manifest's


def test_a_rewritten_partition_is_checked_again(good, tmp_path):
    run = _copy(good, tmp_path, "run")
    read_manifest(run)  # checked and remembered
    _edit_events(run, PARTITIONS["a column missing"][0])
    with pytest.raises(InputError, match="dur_ns"):
        read_manifest(run)


COMMANDS = {
    "info": lambda run, tmp: ["info", run],
    "analyze": lambda run, tmp: ["analyze", run],
    "export": lambda run, tmp: ["export", run, "--chrome", tmp / "out.json"],
    "diff": lambda run, tmp: ["diff", run, run],
    "schema": lambda run, tmp: ["schema", run],
    "query": lambda run, tmp: ["query", run, "SELECT count(*) FROM events"],
}


@pytest.mark.parametrize("case", ["a list", "format_version true", "rank a string", "a column of another type", "times at the int64 edge"])
def test_every_command_says_one_line_and_exits_2(good, tmp_path, case):
    run = _copy(good, tmp_path, "run")
    if case in MANIFESTS:
        _edit_manifest(run, MANIFESTS[case][0])
        named, message = run / "manifest.json", MANIFESTS[case][1]
    else:
        _edit_events(run, PARTITIONS[case][0])
        named, message = run / "rank=0" / "events.parquet", PARTITIONS[case][1]
    for name, args in COMMANDS.items():
        p = cli(*args(run, tmp_path))
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, (name, p.stderr)
        assert lines[0].startswith(f"error: {named}: {message}"), (name, lines[0])


def test_analyze_that_cannot_save_prints_the_report_and_says_so(good, tmp_path):
    run = _copy(good, tmp_path, "run")
    shutil.rmtree(run / "analysis", ignore_errors=True)
    (run / "analysis").write_text("a file where analysis/ would go")  # as root, a read-only mode would not stop the write
    p = cli("analyze", run)
    assert p.returncode == 0, p.stderr
    assert "aten::mm" in p.stdout
    whole = cli("analyze", good)
    # the same report as where it can be saved (words compared: the title wraps at a width its path changes)
    assert p.stdout.split() == whole.stdout.replace(str(good), str(run)).split()
    note = [x for x in p.stderr.splitlines() if x.startswith("note:")]
    assert note == [f"note: {run / 'analysis'}: could not save the analysis (File exists); the report above is complete"]


@pytest.mark.parametrize("code, reason", [(errno.ENOSPC, "no space left on device"), (errno.EROFS, "Read-only file system")])
def test_analyze_on_a_full_disk_or_read_only_place_returns_the_report(good, tmp_path, monkeypatch, code, reason):
    run = _copy(good, tmp_path, "run")

    def fail(report, out_dir, run=None):
        raise OSError(code, __import__("os").strerror(code))

    monkeypatch.setattr(outputs, "write_outputs", fail)
    report = analyze(run)
    assert report.summary and report.not_saved == f"{run / 'analysis'}: could not save the analysis ({reason})"
    assert "not_saved" not in report.to_dict()


def test_a_later_process_reads_only_the_footers_of_files_changed_since_the_record(good, tmp_path, monkeypatch):
    """The files found good are recorded beside the run (derived/partitions_checked.json) once a run has
    RECORD_MIN_FILES files (1 here): a process that opens it later (its memory of checked footers empty) reads
    no footer; one rewritten since is read again, and its problem is still one line naming it."""
    monkeypatch.setattr(run_check, "RECORD_MIN_FILES", 1)
    run = _copy(good, tmp_path, "run")
    read = []
    check = run_check.partition_problem
    monkeypatch.setattr(run_check, "partition_problem", lambda path, table: read.append(path.name) or check(path, table))
    monkeypatch.setattr(run_check, "_CHECKED", {})
    read_manifest(run)
    assert sorted(read) == ["counters.parquet", "events.parquet", "flows.parquet", "frames.parquet", "memory.parquet"]
    assert (run / "derived" / run_check.CHECKED_RECORD).is_file()
    read.clear()
    monkeypatch.setattr(run_check, "_CHECKED", {})  # another process
    read_manifest(run)
    assert read == []
    _edit_events(run, PARTITIONS["a column missing"][0])
    monkeypatch.setattr(run_check, "_CHECKED", {})
    with pytest.raises(InputError, match="column 'dur_ns' of events is missing"):
        read_manifest(run)
    assert read == ["events.parquet"]


def test_a_record_of_another_check_version_or_unreadable_reads_every_footer(good, tmp_path, monkeypatch):
    monkeypatch.setattr(run_check, "RECORD_MIN_FILES", 1)
    run = _copy(good, tmp_path, "run")
    monkeypatch.setattr(run_check, "_CHECKED", {})
    read_manifest(run)
    record = run / "derived" / run_check.CHECKED_RECORD
    read = []
    check = run_check.partition_problem
    monkeypatch.setattr(run_check, "partition_problem", lambda path, table: read.append(path.name) or check(path, table))
    for text in (record.read_text().replace(f'"check": {run_check.CHECK_VERSION}', '"check": 0'), "{not json"):
        record.write_text(text)
        read.clear()
        monkeypatch.setattr(run_check, "_CHECKED", {})
        read_manifest(run)
        assert len(read) == 5


def test_a_small_run_gets_no_record(good, tmp_path, monkeypatch):
    run = _copy(good, tmp_path, "run")  # 5 files, fewer than RECORD_MIN_FILES
    monkeypatch.setattr(run_check, "_CHECKED", {})
    read_manifest(run)
    assert not (run / "derived").exists()


def test_the_importing_process_reads_no_footer_it_wrote_and_a_rewrite_is_checked(tmp_path, monkeypatch):
    """The summary `import` prints opens the run it just wrote: its partitions count as checked in that
    process (run_check.written_here), and no footer is read back; a partition rewritten after is read
    again, its problem one line naming it."""
    read = []
    check = run_check.partition_problem
    monkeypatch.setattr(run_check, "partition_problem", lambda path, table: read.append(path.name) or check(path, table))
    monkeypatch.setattr(run_check, "_CHECKED", {})
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)] + [X("aten::mm", "cpu_op", 10 + 100 * i, 50) for i in range(5)]
    run = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    read_manifest(run)
    assert read == []
    _edit_events(run, PARTITIONS["a column missing"][0])
    with pytest.raises(InputError, match="column 'dur_ns' of events is missing"):
        read_manifest(run)
    assert read == ["events.parquet"]
