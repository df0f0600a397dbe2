"""The import's memory plan (chrome_trace.import_need): a gzip is planned by what it expands to, not
by its trailer, and a trace whose plan exceeds the memory available is refused in one line before
anything is decoded (NEURON_EXPLORER_IGNORE_MEMORY=1 imports it anyway)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_explorer.collectors import chrome_trace
from neuron_explorer.errors import InputError

from .conftest import TRACES

PAD = 40_000_000  # bytes of blank space inside the trace: ~40 KB of gzip


def _two_member_gzip(path: Path) -> int:
    """A valid trace (no events) as two gzip members, the second 2 bytes long: its trailer says 2.
    Returns the JSON's true size."""
    head = b'{"traceEvents": [' + b" " * PAD
    path.write_bytes(gzip.compress(head, 1) + gzip.compress(b"]}", 1))
    assert int.from_bytes(path.read_bytes()[-4:], "little") == 2  # what the trailer alone would plan for
    return len(head) + 2


def test_a_gzip_is_planned_by_every_byte_it_expands_to(tmp_path: Path):
    path = tmp_path / "t.json.gz"
    size = _two_member_gzip(path)
    assert chrome_trace.json_bytes(path) == size == PAD + 19
    assert chrome_trace.import_need(path) == chrome_trace.WORKER_BASE_BYTES + int(chrome_trace.WORKER_BYTES_PER_JSON_BYTE * size)
    assert json.loads(gzip.decompress(path.read_bytes())) == {"traceEvents": []}  # what the decoder reads too


def test_counting_a_gzip_stops_past_the_cap(tmp_path: Path):
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (200 << 20) + b"]}", 9))  # 200 MiB from ~200 KB
    chrome_trace._GUNZIPPED.clear()
    counted = chrome_trace.json_bytes(path, cap=20 << 20)
    assert 20 << 20 < counted <= (20 << 20) + (16 << 20)  # one 16 MiB piece past the cap, not the 200 MiB
    assert chrome_trace.json_bytes(path) == (200 << 20) + 19  # without a cap: counted to the end


def test_a_trace_needing_more_than_available_is_refused_before_decoding(tmp_path: Path, monkeypatch):
    path = tmp_path / "t.json.gz"
    size = _two_member_gzip(path)
    need = chrome_trace.WORKER_BASE_BYTES + chrome_trace.WORKER_BYTES_PER_JSON_BYTE * size  # 350 MB
    monkeypatch.setattr(chrome_trace, "_available_memory", lambda: int(need) - 1_000_000)
    monkeypatch.setattr(chrome_trace, "decode_rank", lambda *a, **k: pytest.fail("decoded"))
    monkeypatch.delenv(chrome_trace.MEMORY_CHECK_ENV, raising=False)
    with pytest.raises(InputError) as e:
        chrome_trace.import_traces(path, tmp_path / "run")
    line = str(e.value)
    assert "\n" not in line and str(path) in line
    assert "needs at least about 350 MB of memory (210 MB + 3.5 x its at least 40 MB of JSON)" in line, line
    assert "more than the 349 MB available" in line and chrome_trace.MEMORY_CHECK_ENV in line, line
    assert not (tmp_path / "run").exists()


def test_the_memory_check_can_be_overridden_and_passes_when_it_fits(tmp_path: Path, monkeypatch):
    path = tmp_path / "t.json.gz"
    size = _two_member_gzip(path)
    need = chrome_trace.WORKER_BASE_BYTES + chrome_trace.WORKER_BYTES_PER_JSON_BYTE * size
    monkeypatch.setattr(chrome_trace, "_available_memory", lambda: int(need) - 1_000_000)
    monkeypatch.setenv(chrome_trace.MEMORY_CHECK_ENV, "1")
    assert chrome_trace.import_traces(path, tmp_path / "run").manifest["ranks"] is not None
    monkeypatch.delenv(chrome_trace.MEMORY_CHECK_ENV)
    monkeypatch.setattr(chrome_trace, "_available_memory", lambda: int(need) + 1_000_000)
    chrome_trace.import_traces(path, tmp_path / "run2")
    assert (tmp_path / "run2").is_dir()


def test_workers_are_sized_by_what_a_gzip_expands_to(tmp_path: Path, monkeypatch):
    files = []
    for i in range(4):
        files.append(tmp_path / f"rank{i}.json.gz")
        _two_member_gzip(files[-1])
    need = chrome_trace.import_need(files[0])
    assert need > 300_000_000  # the trailer's 2 bytes would plan 210 MB a worker
    monkeypatch.setattr(chrome_trace.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(chrome_trace, "_available_memory", lambda: int(2.5 * need / 0.8))
    assert chrome_trace.import_workers(files) == 2  # (by the trailer alone: 4, one per file)


def test_a_real_gzip_trace_is_planned_by_its_json():
    path = TRACES / "cuda_train_68k_events.json.gz"  # `zcat ... | wc -c`: 15377659
    assert chrome_trace.json_bytes(path) == 15_377_659 == len(gzip.decompress(path.read_bytes()))
    assert chrome_trace.import_need(path) == (200 << 20) + int(3.5 * 15_377_659)  # 263.5 MB


_TRIM_CHILD = """
import sys, time
import numpy as np
from neuron_explorer.collectors._malloc import set_mmap_threshold, trimming

def anon_mib():
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon:'):
            return int(line.split()[1]) / 1024

set_mmap_threshold(64 << 20)  # as the build: 1 MiB arrays come from the heap
arrays = [np.ones(1 << 17) for _ in range(301)]  # 301 MiB, touched
top = arrays.pop()  # the last one stays: the heap cannot give its freed pages back from its top
del arrays  # 300 MiB of free heap, still resident
held = anon_mib()
time.sleep(0.3)
idle = anon_mib()
above = None if sys.argv[1] == "none" else int((held + float(sys.argv[1])) * 2**20)  # MiB over what is held now
with trimming(0.02, above=above):
    time.sleep(0.3)
print(held, idle, anon_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux only (a no-op elsewhere)")
def test_trimming_hands_the_freed_heap_back_while_the_build_runs():
    """Arrays the build frees in the middle of the heap stay resident until a trim; inside
    `_malloc.trimming` (what a batch import's build and write run in) they go back within its
    interval. In a child process: the allocator's settings are process-wide."""
    out = subprocess.run([sys.executable, "-c", _TRIM_CHILD, "none"], capture_output=True, text=True, check=True).stdout
    held, idle, trimmed = map(float, out.split())
    assert idle > held - 50  # without a trim, the 300 MiB freed stay
    assert trimmed < idle - 250  # trimmed, they go back


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux only (a no-op elsewhere)")
def test_trimming_with_a_budget_trims_only_above_it():
    """A batch import trims only while it holds more than its budget (chrome_trace._trim_budget:
    TRIM_ABOVE_JSON of the trace's JSON): under it the freed heap stays to be reused without a page
    fault; over it, it goes back as before."""
    def run(over_mib: str) -> tuple[float, float, float]:
        out = subprocess.run([sys.executable, "-c", _TRIM_CHILD, over_mib], capture_output=True, text=True, check=True).stdout
        return tuple(map(float, out.split()))

    held, idle, kept = run("200")  # the budget 200 MiB above what the process holds: nothing trimmed
    assert kept > idle - 50
    held, idle, trimmed = run("-100")  # the budget under it: trimmed
    assert trimmed < idle - 250


def test_the_trim_budget_is_under_the_traces_json(tmp_path: Path):
    """A plain trace's budget is TRIM_ABOVE_JSON of its size; a gzip's, of the JSON the memory check
    counted (none before it counted: trimmed all along, as without a budget)."""
    gz = TRACES / "cuda_simple_add.json.gz"
    chrome_trace._GUNZIPPED.clear()
    assert chrome_trace._trim_budget(gz) is None
    chrome_trace.json_bytes(gz)  # (counted, as check_memory does before an import)
    assert chrome_trace._trim_budget(gz) == int(chrome_trace.TRIM_ABOVE_JSON * len(gzip.decompress(gz.read_bytes())))
    js = tmp_path / "t.json"
    js.write_bytes(gzip.decompress(gz.read_bytes()))
    assert chrome_trace._trim_budget(js) == int(0.9 * js.stat().st_size) < js.stat().st_size
    assert chrome_trace._trim_budget(tmp_path / "gone.json") is None


_HUGE_CHILD = """
import ctypes, sys
import numpy as np
from neuron_explorer.collectors.chrome_trace import import_traces

prctl = ctypes.CDLL('libc.so.6').prctl

def huge_kib():
    for line in open('/proc/self/smaps_rollup'):
        if line.startswith('AnonHugePages:'):
            return int(line.split()[1])

prctl(41, 0, 0, 0, 0)  # huge pages allowed, as in a fresh process (the setting is inherited: a test may have run the CLI in this worker)
before = prctl(42, 0, 0, 0, 0)  # PR_GET_THP_DISABLE
import_traces(sys.argv[1], sys.argv[2], tune_allocator=True)
at = huge_kib()
a = np.ones(16 << 20)  # 128 MiB that numpy asks huge pages for
print(before, prctl(42, 0, 0, 0, 0), huge_kib() - at)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages: Linux only (a no-op elsewhere)")
def test_a_batch_import_runs_on_small_pages(tmp_path: Path):
    """numpy asks for transparent huge pages for its large arrays, and each first touch of one, again
    after every trim, zeroes 2 MiB: the build of a 1.45M-event trace spent 1.5-2.5 s in the kernel
    instead of 0.6 s. A batch import (the CLI's) turns them off for its process; after it a 128 MiB
    array holds none. In a child process: the setting is process-wide."""
    out = subprocess.run([sys.executable, "-c", _HUGE_CHILD, str(TRACES / "cuda_simple_add.json.gz"), str(tmp_path / "run")],
                         capture_output=True, text=True, check=True).stdout
    before, after, huge = map(int, out.split())
    assert (before, after) == (0, 1)
    assert huge == 0


def test_the_write_lets_each_table_go_once_written(tmp_path, monkeypatch):
    """With `release`, write_partition writes the in-memory tables (frames, memory, counters) first
    and lets each go as it is written, then the flows and the events (made row group by row group
    from the build's columns, smaller first): the raw flows of a large trace (41 MiB for 743k) are
    free before the events' encoders are made. The files are the same either way."""
    import pyarrow.parquet as pq

    from neuron_explorer import parquet_native, store
    from neuron_explorer.collectors.build import build_rank
    from neuron_explorer.collectors.trace_rank import decode_rank

    written = []
    real_write, real_table = parquet_native.write, store._write_table
    monkeypatch.setattr(parquet_native, "write", lambda lib, path, *a, **k: written.append(path.name) or real_write(lib, path, *a, **k))
    monkeypatch.setattr(store, "_write_table", lambda table, path: written.append(path.name) or real_table(table, path))
    trace = TRACES / "cuda_train_68k_events.json.gz"
    outs = {}
    for release in (False, True):
        raw, *_ = decode_rank(trace)
        tables = build_rank(raw).tables
        out = tmp_path / f"release-{release}"
        out.mkdir()
        written.clear()
        store.write_partition(out, tables, release=release)
        assert written[-2:] == ["flows.parquet", "events.parquet"]  # (the two built row group by row group, the larger last)
        assert (not tables) == release and (release or set(tables) == {"events", "frames", "flows", "memory", "counters"})
        outs[release] = out
    for name in ("events", "flows", "frames", "memory", "counters"):
        assert pq.read_table(outs[False] / f"{name}.parquet").equals(pq.read_table(outs[True] / f"{name}.parquet")), name


_NO_PANDAS_CHILD = """
import sys
from neuron_explorer.collectors.chrome_trace import import_traces
import_traces(sys.argv[1], sys.argv[2], tune_allocator=True)
print("PANDAS_AFTER_IMPORT", "pandas" in sys.modules)
import pandas as pd, pyarrow as pa
print("NULLS_FROM_SERIES", pa.array(pd.Series([1.0, float("nan")])).null_count)
"""


def test_a_batch_import_leaves_pandas_unimported_on_every_thread(tmp_path: Path):
    """pyarrow imports pandas at its first conversion from numpy, on whichever thread makes it (the
    decode's, the build's helper, the writer's), and pandas is 50 MiB of the process: a batch import
    (the CLI's) hides it on every thread while it runs. pandas imported afterwards works with pyarrow
    as before (a Series' NaN is a null, as pyarrow makes it for pandas objects only)."""
    out = subprocess.run([sys.executable, "-c", _NO_PANDAS_CHILD, str(TRACES / "cuda_train_68k_events.json.gz"), str(tmp_path / "run")],
                         capture_output=True, text=True, check=True).stdout
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines == {"PANDAS_AFTER_IMPORT": "False", "NULLS_FROM_SERIES": "1"}
    assert (tmp_path / "run" / "rank=0" / "events.parquet").is_file()
