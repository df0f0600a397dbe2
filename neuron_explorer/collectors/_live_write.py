"""Write a live recording: a whole run for one process, or one rank's partition of a shared run.

One process (no RANK/WORLD_SIZE, or a world of one): `store.write_run`, the importer's writer.
Several ranks writing into one directory at the same time: each writes `rank=<r>/` into a
temporary directory beside it and renames it into place (atomic, never clobbers another rank),
with its manifest entry as `rank=<r>/rank.json`; then, under an exclusive file lock, the run's
`manifest.json` is rebuilt from every `rank=*/rank.json` present and replaced atomically. Any rank
that finishes last leaves a manifest listing all ranks; an early reader sees the ranks done so far.
Faults are store's: a full disk is a one-line InputError, a failed rename keeps the old partition,
and a partition's stale temporary directories (a killed rank's) go at the next write of that rank.

Must not: know about torch; decide what goes in the tables (build.py does).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from .. import schema, store
from ..errors import InputError, RunExistsError

if TYPE_CHECKING:
    import pyarrow as pa

RANK_ENTRY_FILE = "rank.json"
LOCK_FILE = ".manifest.lock"


def partition_dir(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank={rank}"


def free_run_dir(target: Path | str, rank: int = 0, shared: bool = False) -> Path:
    """`target`, or the first of `target-2`, `target-3`, ... that holds no run yet: nothing there
    or an empty directory; for one rank of a run several ranks write (`shared`), no partition of
    this rank there. Every rank of a job that runs again sees its partitions in the same places,
    so all ranks pick the same directory without talking to each other."""
    base = Path(target)
    for n in range(1, 10_000):
        candidate = base if n == 1 else base.with_name(f"{base.name}-{n}")
        taken = partition_dir(candidate, rank).exists() if shared else candidate.exists() and (
            not candidate.is_dir() or any(candidate.iterdir()))
        if not taken:
            return candidate
    return base  # ten thousand runs there already: the profiler's own error says so


def check_target(run_dir: Path | str, *, overwrite: bool, rank: int, shared: bool) -> Path:
    """Fail early, before any training runs, when the run cannot be written."""
    out = Path(run_dir)
    if not shared:
        return store.check_writable_target(out, overwrite)
    if out.is_file():
        raise InputError(out, "cannot create the run: it is a file")
    if partition_dir(out, rank).exists() and not overwrite:
        raise RunExistsError(partition_dir(out, rank))
    store.check_can_create(partition_dir(out, rank))  # permission checks only: other ranks share the directory
    return out


def write_single(run_dir: Path, rank: int, tables: dict[str, pa.Table], manifest: dict, *, overwrite: bool) -> Path:
    return store.write_run(run_dir, {rank: tables}, manifest, force=overwrite)


def write_shared(run_dir: Path, rank: int, tables: dict[str, pa.Table], entry: dict, manifest: dict, *, overwrite: bool) -> Path:
    """This rank's partition of a run that other ranks write too; then the merged manifest."""
    final = partition_dir(run_dir, rank)
    tmp = store.new_temp_dir(final)  # creates run_dir; removes this rank's stale temporary directories
    try:
        store.write_partition(tmp, tables)
        with store.write_errors(tmp):
            (tmp / RANK_ENTRY_FILE).write_text(json.dumps({"entry": entry, "manifest": manifest}, default=str))
        if final.exists() and not overwrite:
            raise RunExistsError(final)
        store.move_into_place(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    merge_manifest(run_dir)
    return run_dir


def merge_manifest(run_dir: Path) -> dict:
    """Rebuild manifest.json from every rank=*/rank.json, under an exclusive lock."""
    with store.write_errors(run_dir), open(run_dir / LOCK_FILE, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            parts = []
            for p in sorted(run_dir.glob(f"rank=*/{RANK_ENTRY_FILE}")):
                try:
                    parts.append(json.loads(p.read_text()))
                except (OSError, ValueError):
                    continue  # a partition being replaced right now; its writer merges again
            parts.sort(key=lambda d: d["entry"]["rank"])
            manifest = dict(parts[0]["manifest"]) if parts else store.base_manifest("live")
            manifest["ranks"] = [d["entry"] for d in parts]
            warnings = []
            for d in parts:
                warnings += d["manifest"].get("warnings", [])
            manifest["warnings"] = list(dict.fromkeys(warnings))
            manifest["command"] = parts[0]["manifest"].get("command") if parts else None
            fields = run_dir / schema.SCHEMA_FIELDS.file
            if not fields.exists():
                tmp = run_dir / f".{fields.name}.{uuid.uuid4().hex[:8]}"
                import pyarrow.parquet as pq  # (not at import: nx.profile starts without pyarrow)

                pq.write_table(schema.schema_fields_table(), tmp)
                os.replace(tmp, fields)
            store.write_manifest(run_dir, manifest)
            return manifest
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
