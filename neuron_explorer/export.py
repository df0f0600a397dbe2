"""Write a run back out as a Chrome / Perfetto trace (Kineto JSON layout).

Timestamps are written in microseconds relative to a per-rank `baseTimeNanoseconds`, as exact
decimal text (`12.345` is 12345 ns; never a float), so import → export → import keeps every event,
link and timing to the nanosecond. Reads the run only through open_run.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec

from .collectors.kineto_names import MEMORY_ARGS, MEMORY_EVENT_NAME
from .errors import InputError
from .store import cursor as store_cursor
from .store import open_run

_ENC = msgspec.json.Encoder()
_TIME_LIMIT_NS = 2**62
"""chrome_trace.TIME_LIMIT_NS: times and baseTimeNanoseconds an import accepts lie within ±2^62 ns."""


def _us(ns: int, base: int = 0) -> msgspec.Raw:
    """ns - base as microseconds in decimal text with three decimals: exact, whatever the size."""
    v = int(ns) - base
    whole, frac = divmod(abs(v), 1000)
    return msgspec.Raw(f"{'-' if v < 0 else ''}{whole}.{frac:03d}".encode())


def export_chrome(run_dir: Path | str, out: Path | str, rank: int | None = None) -> list[Path]:
    """Export one rank to `out`; with several ranks and no `rank`, `out` is a directory of rank-N files
    (a file name there is an error: it would silently become a directory)."""
    run = open_run(run_dir)
    try:
        ranks = run.ranks
        if rank is not None and rank not in ranks:
            raise InputError(run_dir, f"no rank {rank} in this run (ranks: {ranks})")
        targets: list[tuple[int, Path]]
        out = Path(out)
        if rank is not None or len(ranks) <= 1:
            targets = [(rank if rank is not None else (ranks[0] if ranks else 0), out)]
        else:
            if out.name.endswith((".json", ".json.gz")) or out.is_file():
                raise InputError(out, f"the run has {len(ranks)} ranks ({', '.join(map(str, ranks))}): give a directory "
                                      "to write one rank-N.json.gz each, or pick one rank with --rank")
            out.mkdir(parents=True, exist_ok=True)
            targets = [(r, out / f"rank-{r}.json.gz") for r in ranks]
        written = []
        for r, path in targets:
            _export_rank(run, r, path)
            written.append(path)
        return written
    finally:
        run.close()


def _rank_entry(run, rank: int) -> dict:
    for e in run.manifest.get("ranks", []):
        if e.get("rank") == rank:
            return e
    return {}


def _export_rank(run, rank: int, path: Path) -> None:
    entry = _rank_entry(run, rank)
    first, last = run.sql("SELECT min(ts_ns), max(end_ns) FROM (SELECT ts_ns, ts_ns + greatest(dur_ns, 0) AS end_ns FROM events "
                          "WHERE rank = ? UNION ALL SELECT ts_ns, ts_ns FROM flows WHERE rank = ? UNION ALL SELECT ts_ns, ts_ns "
                          "FROM memory WHERE rank = ? UNION ALL SELECT ts_ns, ts_ns FROM counters WHERE rank = ?)",
                          [rank] * 4).fetchone()
    base = int(entry.get("base_ns") or 0)
    if first is not None and (first < base or first - base > 10**15):
        # relative microseconds keep the numbers short (they are exact text at any size)
        base = (int(first) // 1_000_000_000) * 1_000_000_000
    if first is not None and not (-_TIME_LIMIT_NS <= base <= _TIME_LIMIT_NS and last - base <= _TIME_LIMIT_NS):
        base = 0  # times over more than 2^62 ns (an import holds at most ±2^62): absolute, so that the file imports again
    header = dict(entry.get("trace_metadata") or {})
    header.setdefault("schemaVersion", 1)
    if entry.get("device_properties") is not None:
        header["deviceProperties"] = entry.get("device_properties")
    dist = entry.get("distributed_info")
    if isinstance(dist, dict):
        dist = dict(dist)
        dist.setdefault("rank", rank)
    else:
        dist = {"rank": rank}
    header["distributedInfo"] = dist
    header["baseTimeNanoseconds"] = base

    opener = gzip.open if str(path).endswith(".gz") else open
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with opener(tmp, "wb") as f:
        head = json.dumps({k: v for k, v in header.items()})[:-1]
        f.write(head.encode() + b', "traceEvents": [\n')
        first_item = True

        def emit(obj: dict) -> None:
            nonlocal first_item
            f.write((b"" if first_item else b",\n") + _ENC.encode(obj))
            first_item = False

        for m in entry.get("metadata_events") or []:
            emit({k: v for k, v in m.items() if v is not None and k != "count"})  # a repeated metadata event once
        cur = store_cursor(run.con)
        rel = cur.execute(
            "SELECT category, name, phase, ts_ns, dur_ns, pid, tid, pid_text, tid_text, args FROM events WHERE rank = ? ORDER BY event_id",
            [rank])
        while batch := rel.fetchmany(50_000):
            for cat, name, ph, ts, dur, pid, tid, pid_text, tid_text, args in batch:
                ev = {"ph": ph}
                if cat:
                    ev["cat"] = cat
                ev["name"] = name
                ev["pid"] = pid_text if pid_text is not None else pid
                ev["tid"] = tid_text if tid_text is not None else tid
                ev["ts"] = _us(ts, base)
                if ph == "X":
                    ev["dur"] = _us(dur)
                else:
                    ev["s"] = "t"
                if args is not None:
                    ev["args"] = msgspec.Raw(args.encode())
                emit(ev)
        rel = cur.execute("SELECT flow_id, category, name, phase, ts_ns, pid, tid, binding_point FROM flows WHERE rank = ? ORDER BY ts_ns", [rank])
        for fid, cat, name, ph, ts, pid, tid, bp in rel.fetchall():
            ev = {"ph": ph, "id": fid, "pid": pid, "tid": tid, "ts": _us(ts, base), "cat": cat, "name": name}
            if bp:
                ev["bp"] = bp
            emit(ev)
        rel = cur.execute("SELECT ts_ns, pid, tid, device_type, device, addr, bytes, total_allocated, total_reserved, category "
                          "FROM memory WHERE rank = ? ORDER BY ts_ns", [rank])
        for ts, pid, tid, dtype, dev, addr, nbytes, talloc, tres, cat in rel.fetchall():
            args = {MEMORY_ARGS[col]: v for col, v in (("device_type", dtype), ("device", dev), ("addr", addr), ("bytes", nbytes),
                                                         ("total_allocated", talloc), ("total_reserved", tres))}
            ev = {"ph": "i", "name": MEMORY_EVENT_NAME, "pid": pid, "tid": tid, "ts": _us(ts, base), "s": "t",
                  "args": {k: v for k, v in args.items() if v is not None}}
            if cat:
                ev["cat"] = cat
            emit(ev)
        rel = cur.execute("SELECT ts_ns, pid, name, category, list(series ORDER BY series), list(value ORDER BY series) "
                          "FROM counters WHERE rank = ? GROUP BY ALL ORDER BY ts_ns", [rank])
        for ts, pid, name, cat, series, values in rel.fetchall():
            ev = {"ph": "C", "name": name, "pid": pid, "ts": _us(ts, base), "args": dict(zip(series, values))}
            if cat:
                ev["cat"] = cat
            emit(ev)
        f.write(b"\n]}\n")
    tmp.replace(path)
