"""The parallel Parquet writer (parquet_native) writes the file pyarrow's writer writes.

A run's events file is written by Arrow's C++ writer with each row group's columns encoded on
several threads. Readers must not be able to tell: the same bytes, so the same types, values,
row groups, statistics and metadata as pyarrow.parquet.ParquetWriter with the store's properties.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from neuron_explorer import parquet_native, schema, store
from neuron_explorer.errors import InputError

from .conftest import TRACES

ROWS = 1000  # rows per row group here: several row groups from a small table


@pytest.fixture(scope="module")
def lib():
    lib = parquet_native.load()
    assert lib is not None, "the parallel Parquet writer did not build (a C++ compiler and pyarrow's headers are needed)"
    return lib


def _batches(n: int, seed: int = 0) -> list[pa.RecordBatch]:
    """Batches shaped like a run's events: dictionary strings, ints with nulls, long text, int32."""
    rng = np.random.default_rng(seed)
    names = pa.array(["aten::mm", "aten::add", "cudaLaunchKernel", "ProfilerStep#3"])
    out = []
    for start in range(0, n, ROWS):
        m = min(ROWS, n - start)
        codes = rng.integers(0, len(names), m).astype(np.int32)
        ext = rng.integers(0, 10**12, m)
        args = [None if i % 7 == 0 else '{"External id": %d, "grid": [%d, 1, 1]}' % (i, i % 97) for i in range(start, start + m)]
        out.append(pa.record_batch({
            "event_id": pa.array(np.arange(start, start + m, dtype=np.int64)),
            "name": pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes == 3), names),  # (nulls in the indices)
            "kind": pa.DictionaryArray.from_arrays(pa.array(codes % 2), pa.array(["cpu_op", "kernel"])),
            "external_id": pa.array(ext, mask=ext % 5 == 0),
            "depth": pa.array(rng.integers(0, 9, m).astype(np.int32)),
            "args": pa.array(args, pa.string()),
        }))
    return out


def _pyarrow_write(path, batches, metadata):
    writer = pq.ParquetWriter(path, batches[0].schema, compression="zstd", write_statistics=True,
                              use_dictionary=store._DICTIONARY_COLUMNS, store_schema=False,
                              column_encoding=store._column_encoding(batches[0].schema))
    writer.add_key_value_metadata(metadata)
    for b in batches:
        writer.write_batch(b, row_group_size=ROWS)
    writer.close()


def test_the_parallel_writer_writes_the_bytes_pyarrow_writes(lib, tmp_path):
    batches = _batches(3500)
    metadata = schema.EVENTS.arrow_schema().metadata
    ours, theirs = tmp_path / "native.parquet", tmp_path / "pyarrow.parquet"
    parquet_native.write(lib, ours, batches[0].schema, iter(batches), row_group_rows=ROWS,
                         dictionary_columns=store._DICTIONARY_COLUMNS, delta_columns=store._delta_columns(batches[0].schema),
                         metadata=metadata, threads=4)
    _pyarrow_write(theirs, batches, metadata)
    f = pq.ParquetFile(ours)
    assert f.metadata.num_row_groups == 4 and f.metadata.num_rows == 3500
    encodings = {f.metadata.row_group(0).column(i).path_in_schema: f.metadata.row_group(0).column(i).encodings
                 for i in range(f.metadata.num_columns)}
    assert "DELTA_BINARY_PACKED" in encodings["event_id"] and "DELTA_BINARY_PACKED" in encodings["depth"]
    assert "RLE_DICTIONARY" in encodings["name"] and "DELTA_BINARY_PACKED" not in encodings["name"]
    assert f.read().equals(pq.ParquetFile(theirs).read())
    assert f.metadata.metadata == pq.ParquetFile(theirs).metadata.metadata  # the format version travels
    assert ours.read_bytes() == theirs.read_bytes()


def test_a_run_imported_with_the_parallel_writer_reads_back_as_with_pyarrows(tmp_path):
    """The events of a real trace, imported with the parallel writer and with everything native off."""
    trace = TRACES / "cuda_train_68k_events.json.gz"
    runs = {}
    for name, native in (("native", "auto"), ("python", "0")):
        out = tmp_path / name
        r = subprocess.run([sys.executable, "-m", "neuron_explorer", "import", str(trace), "-o", str(out)],
                           capture_output=True, text=True, env={**os.environ, "NEURON_EXPLORER_NATIVE": native})
        assert r.returncode == 0, r.stderr
        runs[name] = pq.read_table(out / "rank=0" / "events.parquet")
    assert runs["native"].num_rows > 40_000
    assert runs["native"].equals(runs["python"])


def test_an_error_in_the_batches_is_raised_as_itself(lib, tmp_path):
    batches = _batches(2500)

    def broken():
        yield batches[0]
        raise ValueError("a bug in the batches")

    with pytest.raises(ValueError, match="a bug in the batches"):
        parquet_native.write(lib, tmp_path / "x.parquet", batches[0].schema, broken(), row_group_rows=ROWS,
                             dictionary_columns=[], delta_columns=[], metadata={}, threads=2)


class _Sorted:  # what build.SortedTable offers the store
    def __init__(self, rows):
        self.rows = rows
        self.schema = rows[0].schema
        self.num_rows = sum(r.num_rows for r in rows)

    def batches(self, size, dictionaries=False, pieces=1):
        return iter(self.rows)


def test_a_full_disk_under_the_parallel_writer_is_the_one_line_error(lib, tmp_path):
    """The events file on a full device (/dev/full: every write fails with ENOSPC, as a full disk's
    do): the store's one-line error, worded as for pyarrow's writer."""
    part = tmp_path / "part"
    part.mkdir()
    (part / "events.parquet").symlink_to("/dev/full")
    with pytest.raises(InputError) as e:
        store.write_partition(part, {"events": _Sorted(_batches(2500))})
    assert str(e.value) == f"{part}: cannot write the run (no space left on device)"


def test_a_file_that_cannot_be_opened_is_a_one_line_error(lib, tmp_path):
    part = tmp_path / "part"
    part.mkdir()
    (part / "events.parquet").mkdir()  # a directory where the file goes
    with pytest.raises(InputError) as e:
        store.write_partition(part, {"events": _Sorted(_batches(10))})
    assert "cannot write the run" in str(e.value) and "events.parquet" in str(e.value) and "\n" not in str(e.value)


def test_a_row_group_handed_over_in_pieces_is_the_row_group_written_whole(lib, tmp_path, monkeypatch):
    """The store hands the parallel writer each row group of a large table in pieces (only a piece
    is held at once) that share the group's dictionaries: the file holds the row groups, and each
    column chunk the encodings, sizes and statistics, that pyarrow writes from whole row groups
    (none fell back from its dictionary). Only the args' pages may be cut where a piece ends."""
    from neuron_explorer.collectors.build import build_rank
    from neuron_explorer.collectors.trace_rank import decode_rank

    monkeypatch.setattr(store, "ROW_GROUP_ROWS", 15_000)
    monkeypatch.setattr(store, "ROW_GROUP_PIECES", 4)  # (pieces of 3,750 rows)
    files = {}
    for name, native in (("pieces", lib), ("whole", None)):
        monkeypatch.setattr(parquet_native, "load", lambda build=True, native=native: native)
        events = build_rank(decode_rank(TRACES / "cuda_train_68k_events.json.gz")[0]).tables["events"]
        out = tmp_path / name
        out.mkdir()
        store.write_partition(out, {"events": events})
        files[name] = pq.ParquetFile(out / "events.parquet")
    pieces, whole = files["pieces"].metadata, files["whole"].metadata
    assert pieces.num_rows == 45_422  # (the trace's events, and the profiler steps' rows)
    assert [pieces.row_group(i).num_rows for i in range(pieces.num_row_groups)] == [15_000] * 3 + [422]
    assert files["pieces"].read().equals(files["whole"].read())
    offsets = ("file_offset", "data_page_offset", "dictionary_page_offset")
    for g in range(pieces.num_row_groups):
        for i in range(pieces.num_columns):
            ours, theirs = ({k: v for k, v in m.row_group(g).column(i).to_dict().items() if k not in offsets} for m in (pieces, whole))
            if ours["path_in_schema"] == "args":  # (its data pages may end where a piece does: sizes within 1%)
                assert ours["encodings"] == theirs["encodings"]
                assert abs(ours["total_compressed_size"] - theirs["total_compressed_size"]) < theirs["total_compressed_size"] / 100
            else:  # the same column chunk: encodings (the dictionary kept), sizes, statistics
                assert ours == theirs, (g, ours["path_in_schema"])
