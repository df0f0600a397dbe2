"""A large table's Parquet file written with its columns encoded on several threads.

pyarrow's ParquetWriter encodes a row group's columns one after another on one thread: for the
events of a large rank that is most of the write (1.7 s of 2.0 s for 1.45M events). Arrow's C++
writer can encode them in parallel, which pyarrow does not expose, so native/parquet_write.cpp
calls it: built on first use against the headers and libraries of the pyarrow this runs with
(`native_build`; the build's name changes with the source and the pyarrow version), and handed
the batches through the Arrow C stream interface. The file is the one pyarrow's writer writes with
the same properties (tests/test_parquet_native.py reads both back and compares them).

Without a compiler, without pyarrow's headers, or with `NEURON_EXPLORER_NATIVE=0`, `load` gives
None and the caller writes with pyarrow, on one thread.

Must not: decide what is written (store.py does; this only encodes faster).
"""

from __future__ import annotations

import ctypes
import hashlib
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa

from .native_build import build_dir, compile_library, enabled

SOURCE = Path(__file__).parent / "native" / "parquet_write.cpp"
_lock = threading.Lock()
_state: dict = {}


def _pyarrow_libs() -> tuple[Path, list[str]]:
    """The folder of pyarrow's arrow and parquet libraries (its package folder for a pip wheel, the
    environment's lib folder for conda), and their file names."""
    for libdir in map(Path, pa.get_library_dirs()):
        names = []
        for stem in ("libarrow.so", "libparquet.so"):
            found = sorted(p.name for p in libdir.glob(f"{stem}*") if p.name == stem or p.name[len(stem)] == ".")
            if found:
                names.append(found[0])  # the shortest name: libarrow.so or libarrow.so.<version>
        if len(names) == 2:
            return libdir, names
    raise RuntimeError(f"pyarrow's libarrow.so and libparquet.so are not in {', '.join(pa.get_library_dirs())}")


def library_path() -> Path:
    key = hashlib.sha256(SOURCE.read_bytes() + f"|{pa.__version__}|{Path(pa.__file__).parent}".encode()).hexdigest()[:16]
    return build_dir() / f"nx_parquet_{key}" / "nx_parquet.so"


def load(build: bool = True):
    """The loaded library, built first when `build` (else only when already built); None when it is
    off or cannot be had (with `build`, one line on stderr says why; a failed build is not retried
    until its build-failed.txt is deleted)."""
    if not enabled():
        return None
    with _lock:
        if "lib" not in _state:
            so = library_path()
            if not so.is_file() and not build:
                return None
            try:
                _state["lib"] = _load(so)
            except (OSError, subprocess.SubprocessError, RuntimeError) as e:
                if build:
                    print(f"neuron-explorer: the parallel Parquet writer is not available ({' '.join(str(e).split())[:200]}); "
                          "pyarrow writes the same files, on one thread", file=sys.stderr, flush=True)
                _state["lib"] = None
        return _state["lib"]


def _load(so: Path):
    if not so.is_file():
        include = Path(pa.get_include())
        if not (include / "parquet" / "arrow" / "writer.h").is_file():
            raise RuntimeError(f"pyarrow's C++ headers are not in {include}")
        libdir, libs = _pyarrow_libs()
        compile_library(so, ["-O2", "-std=c++20", "-shared", "-fPIC", f"-I{include}", str(SOURCE), f"-L{libdir}",
                             *(f"-l:{name}" for name in libs), f"-Wl,-rpath,{libdir}"], "the parallel Parquet writer",
                         "about 10 s on 2 cores")  # 8.6 s measured under a load of 4
    lib = ctypes.CDLL(str(so))
    lib.nxw_write.restype = ctypes.c_int32
    lib.nxw_write.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64,
                              ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int32,
                              ctypes.c_char_p, ctypes.c_int64]
    return lib


class _ArrowArrayStream(ctypes.Structure):  # the Arrow C stream interface's struct
    _fields_ = [("get_schema", ctypes.c_void_p), ("get_next", ctypes.c_void_p), ("get_last_error", ctypes.c_void_p),
                ("release", ctypes.c_void_p), ("private_data", ctypes.c_void_p)]


def write(lib, path: Path, schema: pa.Schema, batches, *, row_group_rows: int, dictionary_columns: list[str],
          delta_columns: list[str], metadata: dict[bytes, bytes], threads: int) -> None:
    """Write `batches` (an iterable of record batches of `schema`) to `path` in row groups of
    `row_group_rows` rows (the last one fewer), each made of the batches in turn, so that a row group
    can be handed over in pieces: zstd, statistics, dictionary pages for
    `dictionary_columns` only, DELTA_BINARY_PACKED for the integer `delta_columns`, no Arrow schema
    stored, `metadata` added. Raises OSError naming the problem when the file cannot be written."""
    failed: list[BaseException] = []

    def pulled():
        try:
            yield from _ahead(batches)
        except Exception as e:  # raised again below as itself, not as the writer's message
            failed.append(e)
            raise

    stream = _ArrowArrayStream()
    pa.RecordBatchReader.from_batches(schema, pulled())._export_to_c(ctypes.addressof(stream))
    dict_bytes = b"".join(n.encode() + b"\0" for n in dictionary_columns)  # (a name not in the schema is ignored, as by pyarrow)
    delta_bytes = b"".join(n.encode() + b"\0" for n in delta_columns)
    kv_bytes = b"".join(k + b"\0" + v + b"\0" for k, v in metadata.items())
    err = ctypes.create_string_buffer(2048)
    # (ctypes releases the GIL for the call; the stream takes it back to pull each batch)
    rc = lib.nxw_write(ctypes.addressof(stream), str(path).encode(), row_group_rows, dict_bytes, len(dict_bytes), delta_bytes,
                       len(delta_bytes), kv_bytes, len(kv_bytes), threads, err, len(err))
    if failed:
        raise failed[0]
    if rc != 0:
        message = err.value.decode(errors="replace") or "the Parquet writer failed"
        code = re.search(r"\[errno (\d+)\]", message)  # Arrow's I/O errors name the errno, as pyarrow's OSError carries it
        raise OSError(int(code.group(1)) if code else None, message)


def _ahead(batches):
    """`batches`, each made on a thread of its own while the writer encodes the one before: the
    columns of a row group do not all take as long to encode, so a core is often free for it.
    The next batch is begun only once the one before is taken: two in memory at once (the one
    encoded and the next), not three (a third made while the next waited): a row group of a
    large trace's events is ~50 MiB with its args."""
    done = object()
    q: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()
    turn = threading.Semaphore(1)  # released as each batch is taken

    def put(item) -> bool:  # False once the consumer has stopped
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def make():
        try:
            it = iter(batches)
            while True:
                while not turn.acquire(timeout=0.1):
                    if stop.is_set():
                        return
                b = next(it, done)
                if not put(b) or b is done:
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put(e)

    t = threading.Thread(target=make, name="nx-parquet-batches", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            turn.release()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        t.join()
