"""The table views: operators, kernels, kernels by operator, source lines, steps and memory, and
the one registry (`TABLE_VIEWS`) that the dashboard's tabs, the table panels, the JSON API and the
table → timeline jumps all read.

Every view returns plain data: `rows`, `truncated`, `total_rows`, and `shares` (for each % column,
what it is a share of, said in words: shares of overlapping things need not add up to 100%).
Times are ns (`*_ns`) or ms from the run's first event (`*_ms`).

Must not: draw (ui/panels.py does) or read source files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...analyzers import metrics
from ...vocab import charged_at_capture, charged_op, charged_top_op, device_work, line_key_sql, memory_allocation, memory_free, top_op
from ..chain import ms_from_start
from ..runs import OpenRun, RunSet, parse_int
from ..timeline import MAX_WIDTH_PX, memory_track, parse_rank

TABLE_LIMIT = 500
"""Rows a table view returns when the request does not say (the output says when it cut)."""
MAX_TABLE_LIMIT = 1_000_000
"""The largest `limit` a table view accepts; a negative or larger one is answered with HTTP 400."""


def _rank_where(rank: int | None, col: str = "rank") -> str:
    return "" if rank is None else f" AND {col} = {int(rank)}"


def _table(rows: list[dict], limit: int, **shares: str) -> dict:
    """A table view's answer: the first `limit` rows, whether it cut, and what each % column is of."""
    return {"rows": rows[:limit], "truncated": len(rows) > limit, "total_rows": len(rows), "shares": shares}


def _pct(part_ns, whole_ns) -> float | None:
    """A % column's value: 100 * part / whole to one decimal, as the report writes a share (fmt.share)."""
    return None if not whole_ns else round(100.0 * part_ns / whole_ns, 1)


DEVICE_SHARE = "% of all device time (kernels, copies, sets) of the rank(s) shown"
CPU_SELF_SHARE = "% of the CPU self time of all operators (the column adds up to 100%)"
CPU_TOP_SHARE = "% of the CPU time of all top-level operators"


def totals(r: OpenRun, rank: int | None) -> dict:
    """The denominators of the % columns, over the rank (all ranks for None): device_ns (all device
    work) and cpu_top_ns (the CPU time of the top-level operators: all operator time, counted once)."""
    def compute() -> dict:
        rw = _rank_where(rank)
        _, rows = r.query(f"""SELECT coalesce(sum(dur_ns) FILTER (WHERE {device_work()}), 0)::BIGINT,
                                     coalesce(sum(dur_ns) FILTER (WHERE {top_op()}), 0)::BIGINT
                              FROM events WHERE true{rw}""")
        dev, top = rows[0]
        return {"device_ns": int(dev), "cpu_top_ns": int(top)}
    return r.cached(("totals", rank), compute)


def operators(rs: RunSet, run=0, rank=None, limit=None) -> dict:
    """Per CPU operator name: calls; CPU total (sum of the durations of its calls that no call of
    the same name holds: aten::copy_ inside aten::copy_ is in the outer call's time once, where
    mi300x_sglang_qwen3_decode's 7 copies summed 926.20 ms in a 473.83 ms trace) and self (minus
    the slices directly inside it on its thread); device self (device work launched from inside the operator
    with no other operator in between: op_id) and device total (device work launched anywhere
    inside it: the operator is on the op_id → parent-operator chain of the kernel's launch). A
    graph replay linked to its capture counts on its operators at capture instead (vocab.charged_op,
    charged_top_op: self on the innermost, total on the innermost and the outermost); an operator
    seen only at capture has a row with no calls and no CPU time."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    limit = parse_int(limit, "limit", TABLE_LIMIT, 0, MAX_TABLE_LIMIT)
    def compute() -> list[dict]:
        rw = _rank_where(rank, "o.rank")
        base = r.records(
            f"""SELECT o.name, count(*) AS calls, (sum(o.dur_ns) - coalesce(sum(c.child_ns), 0))::BIGINT AS cpu_self_ns
                FROM events o LEFT JOIN (SELECT parent_id, sum(dur_ns) AS child_ns FROM events WHERE parent_id IS NOT NULL GROUP BY 1) c
                ON c.parent_id = o.event_id WHERE o.kind = 'cpu_op'{rw} GROUP BY o.name""")
        # parent operator of each operator: the innermost operator around its parent slice
        tbl = r.arrow(f"""SELECT o.event_id, o.name, o.dur_ns, p.op_id AS parent_op FROM events o LEFT JOIN events p ON p.event_id = o.parent_id
                          WHERE o.kind = 'cpu_op'{rw} ORDER BY o.event_id""")
        ids = tbl["event_id"].to_numpy()
        parent = tbl["parent_op"].to_numpy(zero_copy_only=False)
        parent = np.where(np.isnan(parent.astype(float)), -1, parent).astype(np.int64) if parent.dtype != np.int64 else parent
        import pandas as pd

        codes, uniq = pd.factorize(tbl["name"].to_numpy(zero_copy_only=False))
        up = _positions(ids, parent)  # each operator's parent operator, as a row of `ids` (-1: none)
        cpu_total = dict(zip(uniq, _outermost_totals(codes, up, tbl["dur_ns"].to_numpy(), len(uniq)).tolist()))
        base = [{"name": b["name"], "calls": b["calls"], "cpu_total_ns": cpu_total.get(b["name"], 0), "cpu_self_ns": b["cpu_self_ns"]}
                for b in base]
        dev = r.arrow(f"SELECT op_id, dur_ns FROM events WHERE {device_work()} AND op_id IS NOT NULL AND NOT ({charged_at_capture()})"
                      f"{_rank_where(rank)}")
        k_dur = dev["dur_ns"].to_numpy()
        self_dev: dict[str, int] = {}
        total_dev: dict[str, int] = {}
        pos = _positions(ids, dev["op_id"].to_numpy())
        if (pos >= 0).any():
            ok = pos >= 0
            pos, dur = pos[ok], k_dur[ok]
            self_dev = pd.Series(dur).groupby(uniq[codes[pos]]).sum().to_dict()
            # walk each kernel's operator chain upwards; a kernel counts once per operator name
            kernel_idx, name_code = [], []
            cur, k_index = pos, np.arange(len(pos))
            for _ in range(256):  # operator nesting is far shallower than this
                alive = cur >= 0
                if not alive.any():
                    break
                kernel_idx.append(k_index[alive])
                name_code.append(codes[cur[alive]])
                cur = np.where(alive, up[np.maximum(cur, 0)], -1)
            pairs = pd.DataFrame({"k": np.concatenate(kernel_idx), "n": np.concatenate(name_code)}).drop_duplicates()
            pairs["dur"] = dur[pairs["k"].to_numpy()]
            total_dev = {uniq[c]: int(v) for c, v in pairs.groupby("n")["dur"].sum().items()}
            self_dev = {k: int(v) for k, v in self_dev.items()}
        for op, top, ns in r.query(
                f"""SELECT {charged_op('k', 'o')}, {charged_top_op('k', 't')}, sum(k.dur_ns)::BIGINT FROM events k
                    LEFT JOIN events o ON o.event_id = k.op_id LEFT JOIN events t ON t.event_id = k.top_op_id
                    WHERE {device_work('k')} AND {charged_at_capture('k')}{_rank_where(rank, 'k.rank')} GROUP BY 1, 2""")[1]:
            if op is not None:
                self_dev[op] = self_dev.get(op, 0) + int(ns)
            for name in {op, top} - {None}:  # counted once per name, as the walk above
                total_dev[name] = total_dev.get(name, 0) + int(ns)
        seen = {b["name"] for b in base}
        base += [{"name": name, "calls": 0, "cpu_total_ns": 0, "cpu_self_ns": 0} for name in sorted(total_dev.keys() - seen)]
        for b in base:
            b["device_self_ns"] = self_dev.get(b["name"], 0)
            b["device_total_ns"] = total_dev.get(b["name"], 0)
        base.sort(key=lambda x: (-x["device_total_ns"], -x["cpu_total_ns"], x["name"]))
        return base
    rows = r.cached(("operators", rank), compute)
    t = totals(r, rank)
    self_all = sum(x["cpu_self_ns"] for x in rows)
    return _table([{**x, "device_pct": _pct(x["device_total_ns"], t["device_ns"]), "cpu_pct": _pct(x["cpu_self_ns"], self_all)}
                   for x in rows], limit, device_pct=DEVICE_SHARE, cpu_pct=CPU_SELF_SHARE)


def _positions(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of each of `wanted` in `ids` (sorted), -1 where it is not there (or negative)."""
    if not len(ids):
        return np.full(len(wanted), -1, dtype=np.int64)
    at = np.searchsorted(ids, wanted).clip(0, len(ids) - 1)
    return np.where((wanted >= 0) & (ids[at] == wanted), at, -1)


def _outermost_totals(codes: np.ndarray, up: np.ndarray, dur: np.ndarray, n_names: int) -> np.ndarray:
    """Per name code: the summed `dur` of the operators (name `codes`, parent operator rows `up`)
    that no operator of the same name holds, up their parent chain."""
    nested = np.zeros(len(codes), bool)
    cur = up
    for _ in range(256):  # operator nesting is far shallower than this
        alive = (cur >= 0) & ~nested
        if not alive.any():
            break
        nested |= alive & (codes[np.maximum(cur, 0)] == codes)
        cur = np.where(alive, up[np.maximum(cur, 0)], -1)
    sums = np.bincount(codes[~nested], weights=dur[~nested].astype(np.float64), minlength=n_names)  # (exact below 2^53 ns)
    return sums.astype(np.int64)


def kernels(rs: RunSet, run=0, rank=None, limit=None) -> dict:
    """Per device kernel (and copy/set) name: count, device total (= self: device work does not
    nest), mean and max, and the CPU time of the runtime calls that launched them. A call that
    launched several device events (a graph launch: every kernel it replays) is shared evenly
    among them, so the column adds up to the launch calls' time: each of the 12 kernel names of
    mi300x_sglang_qwen3_decode's graph replays showed the whole 56.61 ms of its 36 graph launches
    (113.23 ms for the three replayed twice per graph)."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    limit = parse_int(limit, "limit", TABLE_LIMIT, 0, MAX_TABLE_LIMIT)
    rows = r.records(
        f"""WITH launched AS (SELECT launch_id, count(*) AS n FROM events k
              WHERE {device_work('k')}{_rank_where(rank, 'k.rank')} AND k.launch_id IS NOT NULL GROUP BY ALL)
            SELECT k.name, k.kind, count(*) AS calls, sum(k.dur_ns)::BIGINT AS device_total_ns, sum(k.dur_ns)::BIGINT AS device_self_ns,
              avg(k.dur_ns)::BIGINT AS mean_ns, max(k.dur_ns) AS max_ns, coalesce(sum(l.dur_ns / n.n), 0)::BIGINT AS launch_cpu_ns
            FROM events k LEFT JOIN events l ON l.event_id = k.launch_id LEFT JOIN launched n ON n.launch_id = k.launch_id
            WHERE {device_work('k')}{_rank_where(rank, 'k.rank')}
            GROUP BY k.name, k.kind ORDER BY device_total_ns DESC, k.name""")
    t = totals(r, rank)
    return _table([{**x, "device_pct": _pct(x["device_total_ns"], t["device_ns"])} for x in rows], limit, device_pct=DEVICE_SHARE)


def kernels_by_operator(rs: RunSet, run=0, rank=None, limit=None) -> dict:
    """Device work grouped by the operator that launched it and the kernel: per (operator, kernel
    name, kind) the count, device total, mean and max. `operator` is the innermost CPU operator
    around the launch (op_id; a graph replay linked to its capture: its innermost operator at
    capture, vocab.charged_op); work launched outside every operator is under '(no operator)'."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    limit = parse_int(limit, "limit", TABLE_LIMIT, 0, MAX_TABLE_LIMIT)
    rows = r.records(
        f"""SELECT coalesce({charged_op('k', 'o')}, '(no operator)') AS operator, k.name, k.kind, count(*) AS calls,
              sum(k.dur_ns)::BIGINT AS device_total_ns, avg(k.dur_ns)::BIGINT AS mean_ns, max(k.dur_ns) AS max_ns
            FROM events k LEFT JOIN events o ON o.event_id = k.op_id
            WHERE {device_work('k')}{_rank_where(rank, 'k.rank')}
            GROUP BY ALL ORDER BY device_total_ns DESC, operator, k.name""")
    t = totals(r, rank)
    return _table([{**x, "device_pct": _pct(x["device_total_ns"], t["device_ns"])} for x in rows], limit, device_pct=DEVICE_SHARE)


def source_lines(rs: RunSet, run=0, rank=None, limit=None) -> dict:
    """Per user source line, by the one definition (analyzers/lines.py): its code, calls per step,
    CPU time of its top-level operators and device time of their work, self (the line is the
    statement) and total (the line is anywhere in the statement's user-frame ancestry), the
    backward part of self (backward work counts on its forward statement) and Python-level time."""
    from ...analyzers.lines import self_and_total

    r = rs.get(run)
    rank = parse_rank(r, rank)
    limit = parse_int(limit, "limit", TABLE_LIMIT, 0, MAX_TABLE_LIMIT)
    merged: dict[tuple, dict] = {}
    has_frames = False
    for rk in ([rank] if rank is not None else r.run.ranks):
        with r.lock:
            got = self_and_total(r.run, rk)
        has_frames |= got["has_frames"]
        steps = len([s for s in r.steps() if s["rank"] == rk]) or None
        for source, x in got["lines"].items():
            merged[(rk, source)] = {
                "rank": rk, "source": source, "code": x["code"],
                "calls_per_step": round(x["calls_self"] / steps, 1) if steps else None,
                "cpu_self_ns": x["cpu_ns_self"], "cpu_total_ns": x["cpu_ns_total"],
                "device_self_ns": x["device_ns_self"], "device_total_ns": x["device_ns_total"],
                "backward_self_ns": x["cpu_backward_ns_self"] + x["device_backward_ns_self"],
                "python_self_ns": x["python_ns_self"]}
    t = totals(r, rank)
    rows = sorted(({**x, "device_pct": _pct(x["device_total_ns"], t["device_ns"]), "cpu_pct": _pct(x["cpu_total_ns"], t["cpu_top_ns"])}
                   for x in merged.values()), key=lambda x: (-x["device_total_ns"], -x["cpu_total_ns"], x["source"]))
    return {**_table(rows, limit, device_pct=DEVICE_SHARE, cpu_pct=CPU_TOP_SHARE), "has_frames": has_frames}


STEP_SHARE = ("busy time of the step's busiest device (its kernels, copies and sets on any stream, overlaps counted once) "
              "within the step's range, as % of the step's time (metrics.step_device_busy; at most 100%)")


def _step_busy(r: OpenRun, rank: int) -> dict[int, int]:
    """step → busy ns of the rank's busiest device within the step (metrics.step_device_busy), computed once."""
    def compute():
        out: dict[int, int] = {}
        for x in metrics.step_device_busy(r.run, rank):
            out[x["step"]] = max(out.get(x["step"], 0), x["busy_ns"])
        return out
    return r.cached(("step_busy", rank), compute)


def steps(rs: RunSet, run=0, rank=None) -> dict:
    """Per profiler step and rank: start (ms from the run's first event), duration, the device
    time of the work launched in it (`device_ns`: every stream's and device's added up, so it can
    exceed the step), the busy time of the busiest device within the step (`busy_ns`: the union of
    its work, as the Overview's bars) and that as % of the step (`device_pct`, at most 100%);
    `note` says when the added-up device time exceeds step time (streams overlap)."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    dev = {(a, b): c for a, b, c in r.query(
        f"SELECT rank, step, sum(dur_ns)::BIGINT FROM events WHERE {device_work()} AND step IS NOT NULL"
        f"{_rank_where(rank)} GROUP BY ALL")[1]}
    shown = [s for s in r.steps() if rank is None or s["rank"] == rank]
    busy = {rk: _step_busy(r, rk) for rk in sorted({s["rank"] for s in shown})}
    rows = []
    for s in shown:
        b = busy[s["rank"]].get(s["step"], 0)
        rows.append({"rank": s["rank"], "step": s["step"], "start_ms": ms_from_start(r, s["ts_ns"]), "dur_ms": s["dur_ns"] / 1e6,
                     "ts_ns": s["ts_ns"], "dur_ns": s["dur_ns"], "device_ns": dev.get((s["rank"], s["step"]), 0),
                     "busy_ns": b, "device_pct": _pct(b, s["dur_ns"])})
    over = sum(1 for x in rows if x["device_ns"] > x["dur_ns"])
    note = (f"device work exceeds the step's time in {over} of {len(rows)} steps: work on several streams (or devices) "
            "overlaps, and device work adds up the work of each; busy counts each device's overlapping work once") if over else ""
    return {"rows": rows, "truncated": False, "total_rows": len(rows), "shares": {"device_pct": STEP_SHARE}, "note": note}


def memory(rs: RunSet, run=0, rank=None, width=None) -> dict:
    """Allocated bytes over the whole run per (rank, device): the highest value in each of `width`
    time buckets; x is ms from the run's first event."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    width = parse_int(width, "width", 1000, 10, MAX_WIDTH_PX)
    start, end = r.span()
    series = memory_track(r, rank, start, end + 1, width)
    for s in series:
        s["x_ms"] = [x / 1000.0 for x in s.pop("x")]
    return {"series": series, "truncated": False}




MEMORY_ROWS = 200
"""Most lines and operators listed by the memory view (the largest allocators first)."""


def memory_summary(rs: RunSet, run=0, rank=None) -> dict:
    """The memory tables: per (rank, device) the peak of allocated bytes, when it was reached (ms
    from the run's first event), and the peak of reserved bytes (what the caching allocator holds:
    reserved minus allocated is cached but unused); per user source line and per operator the
    allocations made under it (count and bytes) and the bytes freed under it."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    rw = _rank_where(rank)
    devices = r.records(f"""SELECT rank, device_type, device, max(total_allocated) AS peak_allocated_bytes,
                              arg_max(ts_ns, total_allocated) AS peak_ts_ns, max(total_reserved) AS peak_reserved_bytes,
                              count(*) FILTER (WHERE {memory_allocation()}) AS allocations
                            FROM memory WHERE true{rw} GROUP BY ALL ORDER BY rank, device_type, device""")
    for d in devices:
        d["where"] = "CPU" if d["device_type"] == 0 else f"device {d['device']}"
        d["peak_ms"] = ms_from_start(r, d.pop("peak_ts_ns"))
        if not d["peak_reserved_bytes"]:  # the CPU allocator reserves nothing; old traces do not say
            d["peak_reserved_bytes"] = None
        d["reserved_unused_bytes"] = (None if d["peak_reserved_bytes"] is None or d["peak_allocated_bytes"] is None
                                      else d["peak_reserved_bytes"] - d["peak_allocated_bytes"])
    by_line = r.records(f"""SELECT {line_key_sql('f')} AS source, count(*) FILTER (WHERE {memory_allocation('m')}) AS allocations,
                              coalesce(sum(m.bytes) FILTER (WHERE {memory_allocation('m')}), 0)::BIGINT AS allocated_bytes,
                              coalesce(-sum(m.bytes) FILTER (WHERE {memory_free('m')}), 0)::BIGINT AS freed_bytes
                            FROM memory m JOIN frames f ON f.frame_id = m.frame_id
                            WHERE true{_rank_where(rank, 'm.rank')} GROUP BY 1 HAVING allocations > 0
                            ORDER BY allocated_bytes DESC, source LIMIT {MEMORY_ROWS}""")
    by_op = r.records(f"""SELECT coalesce(o.name, '(no operator)') AS operator, count(*) FILTER (WHERE {memory_allocation('m')}) AS allocations,
                            coalesce(sum(m.bytes) FILTER (WHERE {memory_allocation('m')}), 0)::BIGINT AS allocated_bytes,
                            coalesce(-sum(m.bytes) FILTER (WHERE {memory_free('m')}), 0)::BIGINT AS freed_bytes
                          FROM memory m LEFT JOIN events o ON o.event_id = m.op_id
                          WHERE true{_rank_where(rank, 'm.rank')} GROUP BY 1 HAVING allocations > 0
                          ORDER BY allocated_bytes DESC, operator LIMIT {MEMORY_ROWS}""")
    return {"devices": devices, "by_line": by_line, "by_operator": by_op, "truncated": len(by_line) >= MEMORY_ROWS or len(by_op) >= MEMORY_ROWS}


# ---- the registry ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Col:
    """A column shown in a table tab: the row field, its header, and how it is shown: 'text', 'int',
    'ms' (a *_ns field shown in ms), 'pct', 'bytes' (shown in MiB), 'kernel' (a device kernel's name
    as every view shortens it, fmt.kernel_labels; the whole name on hover), 'path' (a source line,
    `…/folder/file.py:12`, fmt.short_path; the whole path on hover)."""
    field: str
    header: str
    kind: str = "text"
    wide: bool = False


@dataclass(frozen=True)
class TableView:
    """One table: its tab, its query function, the columns it shows, and what it says when empty.
    `jumps`: a click on a row jumps to the row's instances on the timeline (views/navigate.py)."""
    key: str
    label: str
    query: object
    columns: tuple[Col, ...]
    empty: str
    jumps: bool = False
    takes_limit: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)


TABLE_VIEWS: dict[str, TableView] = {v.key: v for v in (
    TableView("operators", "Operators", operators, (
        Col("name", "operator", wide=True), Col("calls", "calls", "int"),
        Col("device_total_ns", "device total ms", "ms"), Col("device_self_ns", "device self ms", "ms"), Col("device_pct", "% of device time", "pct"),
        Col("cpu_total_ns", "CPU total ms", "ms"), Col("cpu_self_ns", "CPU self ms", "ms"), Col("cpu_pct", "% of operator CPU self time", "pct")),
        "no operators in this run", jumps=True),
    TableView("kernels", "Kernels", kernels, (
        Col("name", "kernel", "kernel", wide=True), Col("kind", "kind"), Col("calls", "calls", "int"),
        Col("device_total_ns", "device total ms", "ms"), Col("device_pct", "% of device time", "pct"),
        Col("mean_ns", "mean ms", "ms"), Col("max_ns", "max ms", "ms"), Col("launch_cpu_ns", "launch CPU ms", "ms")),
        "no device work in this run", jumps=True),
    TableView("kernels_by_operator", "Kernels by operator", kernels_by_operator, (
        Col("operator", "operator", wide=True), Col("name", "kernel", "kernel", wide=True), Col("kind", "kind"), Col("calls", "calls", "int"),
        Col("device_total_ns", "device total ms", "ms"), Col("device_pct", "% of device time", "pct"),
        Col("mean_ns", "mean ms", "ms"), Col("max_ns", "max ms", "ms")),
        "no device work in this run"),
    TableView("lines", "Source lines", source_lines, (
        Col("source", "source line", "path", wide=True), Col("code", "code", wide=True), Col("rank", "rank", "int"),
        Col("calls_per_step", "calls / step"),
        Col("device_total_ns", "device total ms", "ms"), Col("device_self_ns", "device self ms", "ms"), Col("device_pct", "% of device time", "pct"),
        Col("cpu_total_ns", "CPU total ms", "ms"), Col("cpu_self_ns", "CPU self ms", "ms"), Col("cpu_pct", "% of top-level operator CPU time", "pct"),
        Col("backward_self_ns", "backward self ms", "ms"), Col("python_self_ns", "Python self ms", "ms")),
        "no user source lines in this run (record with with_stack=True)", jumps=True),
    TableView("steps", "Steps", steps, (
        Col("rank", "rank", "int"), Col("step", "step", "int"), Col("start_ms", "start ms"), Col("dur_ns", "duration ms", "ms"),
        Col("device_ns", "device work ms (all streams)", "ms"), Col("busy_ns", "busiest device busy ms", "ms"),
        Col("device_pct", "device busy % of step", "pct")),
        "no ProfilerStep ranges in this run (call prof.step())", jumps=True, takes_limit=False),
)}
"""The table tabs, in their order; `jumps` ones are wired to the timeline. Memory is a tab of its
own (a chart and three small tables: memory_summary)."""


def table(rs: RunSet, key: str, run=0, rank=None, limit=None) -> dict:
    """The rows of one registered table view."""
    from ..runs import QueryError

    v = TABLE_VIEWS.get(key)
    if v is None:
        raise QueryError(f"table must be one of {', '.join(TABLE_VIEWS)}, got {key!r}")
    return v.query(rs, run=run, rank=rank, **({"limit": limit} if v.takes_limit else {}))
