"""Traces in an object store (`s3://bucket/prefix/`, through pyarrow's filesystems), imported
as local ones are.

The decoder reads local files only (byte ranges, mmap), so each rank's import (a worker process,
or a Ray task on whatever node runs it) copies its one trace to a local temporary file, streamed
in blocks and never held in memory, imports it and deletes the copy: a worker's disk holds about
one trace at a time ($TMPDIR chooses where). Listing, sizes and modification times come from
pyarrow's FileInfo, so a rerun after a partial failure takes the ranks kept for the same URI,
size and time. The run itself is written to a filesystem (local or shared), never to a URI:
DuckDB reads it there.

Credentials, region and endpoint are pyarrow's S3 defaults, read by each process that opens a
trace: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or AWS_PROFILE and ~/.aws
(or an instance role), AWS_DEFAULT_REGION, and AWS_ENDPOINT_URL for an S3-compatible store.

Must not: decode a trace (chrome_trace does, on the local copy).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

from ..errors import InputError

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
COPY_BLOCK = 8 << 20
"""Bytes read from the store and written to the local copy at a time."""
_SECRET_KEYS = ("access_key", "secret_key", "session_token")


def is_uri(source: object) -> bool:
    """`source` names a trace by URI (s3://...) rather than by a path on this machine."""
    return isinstance(source, str) and bool(_URI.match(source))


@dataclass(frozen=True)
class RemoteTrace:
    """A trace file in an object store, as listed: its URI, size and modification time. Answers
    what the importer asks of a trace's path: `name`, `stat()` (as listed), `resolve()`, `str()`."""

    uri: str
    size: int
    mtime_ns: int | None

    @property
    def name(self) -> str:
        return urlsplit(self.uri).path.rstrip("/").rsplit("/", 1)[-1]

    def stat(self) -> SimpleNamespace:
        return SimpleNamespace(st_size=self.size, st_mtime_ns=self.mtime_ns)

    def resolve(self) -> RemoteTrace:
        return self

    def __str__(self) -> str:
        return self.uri


def _reason(e: BaseException) -> str:
    """pyarrow's message on one line, without the request id that AWS appends."""
    text = re.sub(r"\s*\(Request ID: [^)]*\)", "", " ".join(str(e).split()))
    text = re.sub(r"^\[Errno \d+\] ", "", text)
    if re.search(r"ACCESS_DENIED|credentials|InvalidAccessKeyId|SignatureDoesNotMatch|Forbidden", text, re.IGNORECASE):
        text += ("; check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) and the region "
                 "(AWS_DEFAULT_REGION)")
    return text or type(e).__name__


def filesystem(uri: str):
    """(pyarrow filesystem, path in it) for `uri`; a URI it cannot serve is a one-line error."""
    from pyarrow import fs

    query = dict(parse_qsl(urlsplit(uri).query))
    if any(k in query for k in _SECRET_KEYS):
        raise InputError(uri.split("?", 1)[0], "give the credentials in the environment (AWS_ACCESS_KEY_ID, ...), not in "
                                               "the URI: the run's manifest records it")
    try:
        return fs.FileSystem.from_uri(uri)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(uri, f"cannot open ({_reason(e)})") from None


def _uri_of(uri: str, path: str) -> str:
    """The URI of `path`, a file under `uri` (same scheme, same query options)."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{path}" + (f"?{parts.query}" if parts.query else "")


def find_traces(uri: str, suffixes: tuple[str, ...]) -> list[RemoteTrace]:
    """The traces at `uri`: the object itself, or every object under the prefix whose name ends
    with one of `suffixes`, in the order of their keys."""
    from pyarrow import fs

    filesys, path = filesystem(uri)
    try:
        info = filesys.get_file_info(path)
        if info.type == fs.FileType.File:
            found = [info]
        elif info.type == fs.FileType.Directory:
            found = sorted((i for i in filesys.get_file_info(fs.FileSelector(path, recursive=True))
                            if i.type == fs.FileType.File and i.base_name.endswith(suffixes)), key=lambda i: i.path)
        else:
            bucket = path.split("/", 1)[0]
            if bucket != path and filesys.get_file_info(bucket).type == fs.FileType.NotFound:
                raise InputError(uri, f"no such bucket ({bucket})")
            raise InputError(uri, "no such object or prefix")
    except OSError as e:
        raise InputError(uri, f"cannot list ({_reason(e)})") from None
    if not found:
        raise InputError(uri, f"no {' or '.join(suffixes)} traces under this prefix")
    return [RemoteTrace(_uri_of(uri, i.path), i.size, i.mtime_ns) for i in found]


def json_bytes(trace: RemoteTrace) -> int:
    """As chrome_trace.json_bytes: the size, or for .gz the size its trailer records (one ranged read)."""
    if not (trace.name.endswith(".gz") and trace.size >= 18):
        return trace.size
    filesys, path = filesystem(trace.uri)
    try:
        with filesys.open_input_file(path) as f:
            return max(trace.size, int.from_bytes(f.read_at(4, trace.size - 4), "little"))
    except OSError as e:
        raise InputError(trace.uri, f"cannot read ({_reason(e)})") from None


@contextlib.contextmanager
def local_copy(trace: RemoteTrace) -> Iterator[Path]:
    """A local temporary copy of `trace` (in $TMPDIR), deleted on leaving."""
    filesys, path = filesystem(trace.uri)
    suffix = ".json.gz" if trace.name.endswith(".gz") else ".json"
    fd, name = tempfile.mkstemp(prefix="neuron-explorer-", suffix=suffix)
    try:
        copied = 0
        with os.fdopen(fd, "wb") as dst:
            try:
                src = filesys.open_input_stream(path, compression=None)  # the bytes as stored: the decoder un-gzips
            except OSError as e:
                raise InputError(trace.uri, f"cannot read ({_reason(e)})") from None
            with src:
                while True:
                    try:
                        block = src.read(COPY_BLOCK)
                    except OSError as e:
                        raise InputError(trace.uri, f"cannot read ({_reason(e)})") from None
                    if not block:
                        break
                    try:
                        dst.write(block)
                    except OSError as e:
                        raise InputError(trace.uri, f"cannot copy it to {name} ({' '.join(str(e.strerror or e).split())}); "
                                                    "set TMPDIR to a folder with room for one trace") from None
                    copied += len(block)
        if copied != trace.size:
            raise InputError(trace.uri, f"changed while it was imported ({trace.size} bytes when listed, {copied} read); "
                                        "import again")
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
