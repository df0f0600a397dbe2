"""Device time, exclusive: each nanosecond of a device's analysed window charged to one class.

The one definition (docs/METRICS.md "Device time") behind the report's per-device breakdown, the
exposed communication of the `comm-exposed` rule, and the critical path's rule that time where a
collective runs is communication, not idle. Per device of a rank, over the analysed window (each
profiler step's range `[ts_ns, ts_ns + dur_ns)`, step by step; the rank's span without steps), by
precedence when streams overlap:

- `compute`: a kernel other than a collective runs (on any stream);
- `communication`: a collective kernel runs and no compute does (exposed communication);
- `memory`: a memcpy or memset runs and no kernel does;
- `idle`: no device work runs on any stream.

With A the union of compute kernels, B the union of all kernels and C the union of all device work
(kernel, memcpy, memset), each within the window W: compute = |A∩W|, communication = |B∩W| − |A∩W|,
memory = |C∩W| − |B∩W|, idle = |W| − |C∩W|. The four are never negative (A ⊆ B ⊆ C) and add up to
the window exactly.

Exposed communication is named: the pieces of B − A in the window are charged to the collective
kernel that covers them (the one reaching furthest), grouped by the collective (the kernel's short
name), the top-level operator it is charged to (the one that launched it; a graph replay's, its
operator at capture: vocab.charged_top_op) and its statement (`source_frame_id`).

Must not: decide what is a problem (rules/comm_exposed.py does) or render anything.
"""

from __future__ import annotations

from bisect import bisect_right

from ..fmt import kernel_labels, kernel_name
from ..store import Run
from ..vocab import DEVICE_WORK_SQL, charged_top_op, comm_kernel_name, cpu_collective, top_op
from .metrics import SPANS, STEPS, Coverage, device_unions_many, span, union_sql
from .rank_rows import prepared_rows

CLASSES = ("compute", "communication", "memory", "idle")
"""The classes of device time, in precedence order (idle last: no work)."""

_COMM = comm_kernel_name()
UNION_WHERES = {
    "compute": f"kind = 'kernel' AND NOT coalesce({_COMM}, false)",
    "kernels": "kind = 'kernel'",
    "busy": f"kind IN {DEVICE_WORK_SQL}",
}
"""The three unions (A, B, C of the module docstring), as `events` predicates."""

EXPOSED_SHOWN = 5
"""Exposed communication: the heaviest collectives kept per device."""


def windows(run: Run, rank: int) -> list[tuple[int | None, int, int]]:
    """The analysed window of a rank as (step, start, end): each profiler step's range; the span
    (step None) when the rank has no steps. Their lengths add up to `analysed_ns` of the summary."""
    steps = run.sql("SELECT step, ts_ns, dur_ns FROM steps WHERE rank = ? ORDER BY step", [rank]).fetchall()
    if steps:
        return [(int(s), int(ts), int(ts) + int(dur)) for s, ts, dur in steps]
    sp = span(run, rank)
    return [(None, int(sp["start_ns"]), int(sp["end_ns"]))] if sp["start_ns"] is not None else []


def windows_sql(ranks: str) -> str:
    """`windows` in plain DuckDB on the `events` view alone (the `steps` view's definition inlined),
    for the ranks that `ranks` lists (SQL: a rank, a list of them, or a query giving them): rows
    (rank, step, lo, hi), each profiler step's range, or the rank's span (step null) where it has no steps."""
    return (f"SELECT rank, step, min(ts_ns) AS lo, max(ts_ns + dur_ns) AS hi FROM events WHERE rank IN ({ranks}) AND kind = 'step' "
            f"GROUP BY rank, step UNION ALL SELECT rank, NULL, min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE rank IN ({ranks}) "
            f"AND kind <> 'other' AND rank NOT IN (SELECT rank FROM events WHERE rank IN ({ranks}) AND kind = 'step') GROUP BY rank")


def _in_ranks(ranks: list[int], col: str = "rank") -> str:
    return f"{col} IN ({', '.join(str(int(r)) for r in ranks)})"


def windows_many(run: Run, ranks: list[int]) -> dict[int, list[tuple[int | None, int, int]]]:
    """`windows` of every rank of `ranks`: from the steps' and spans' rows the batch prepared
    (metrics.STEPS and SPANS: the summary reads both for every rank), else by a query grouped by rank
    for each of the two."""
    steps = {int(r): prepared_rows(run, STEPS, r) for r in ranks}
    asked = [r for r, got in steps.items() if got is None]
    if asked:
        steps.update({r: [] for r in asked})
        for r, *row in run.sql(f"SELECT rank, step, ts_ns, dur_ns FROM steps WHERE {_in_ranks(asked)} ORDER BY rank, step").fetchall():
            steps[int(r)].append(row)
    out: dict[int, list] = {r: [(int(st), int(ts), int(ts) + int(dur)) for st, ts, dur in rows] for r, rows in steps.items()}
    spans = {r: prepared_rows(run, SPANS, r) for r, w in out.items() if not w}
    asked = [r for r, got in spans.items() if got is None]
    if asked:
        spans.update({r: [] for r in asked})
        for r, lo, hi in run.sql(f"SELECT rank, min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE {_in_ranks(asked)} AND kind <> 'other' "
                                 "GROUP BY rank").fetchall():
            spans[int(r)] = [(lo, hi)]
    for r, rows in spans.items():
        if rows and rows[0][0] is not None:
            out[r] = [(None, int(rows[0][0]), int(rows[0][1]))]
    return out


def split(cov: dict[str, Coverage], lo: int, hi: int) -> dict[str, int]:
    """The exclusive classes of [lo, hi) (module docstring), adding up to hi - lo."""
    a, b, c = (cov[k].within(lo, hi) for k in UNION_WHERES)
    return {"compute_ns": a, "communication_ns": b - a, "memory_ns": c - b, "idle_ns": (hi - lo) - c}


def difference(b: list[tuple[int, int]], a: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """b minus a, both sorted disjoint interval lists."""
    out, j = [], 0
    for s, e in b:
        t = s
        while j < len(a) and a[j][1] <= t:
            j += 1
        k = j
        while k < len(a) and a[k][0] < e:
            if a[k][0] > t:
                out.append((t, a[k][0]))
            t = max(t, a[k][1])
            k += 1
        if t < e:
            out.append((t, e))
    return out


def _collectives(run: Run, rank: int) -> dict[int, tuple[list, list, list, list, list]]:
    """Per device: collective kernels sorted by start, as (starts, prefix-furthest ends, the row that
    reaches it, rows (name, op, frame id), event ids)."""
    return _collectives_many(run, [rank]).get(int(rank), {})


def _collectives_many(run: Run, ranks: list[int]) -> dict[int, dict[int, tuple[list, list, list, list, list]]]:
    """`_collectives` of every rank of `ranks` that has some, by one query grouped by rank."""
    rows = run.sql(f"""SELECT k.rank, k.device, k.ts_ns, k.ts_ns + k.dur_ns, k.name, {charged_top_op('k', 'o')}, k.source_frame_id, k.event_id
        FROM events k
        LEFT JOIN events o ON o.event_id = k.top_op_id
        WHERE {_in_ranks(ranks, 'k.rank')} AND k.device IS NOT NULL AND k.dur_ns > 0 AND k.kind = 'kernel'
        AND {comm_kernel_name('k.name')}
        ORDER BY k.rank, k.device, k.ts_ns, k.event_id""").fetchall()
    out: dict[int, dict[int, tuple[list, list, list, list, list]]] = {}
    for r, d, s, e, name, op, frame, event_id in rows:
        starts, far, who, info, ids = out.setdefault(int(r), {}).setdefault(int(d), ([], [], [], [], []))
        ids.append(int(event_id))
        i = len(starts)
        starts.append(int(s))
        if not far or int(e) > far[-1]:
            far.append(int(e))
            who.append(i)
        else:
            far.append(far[-1])
            who.append(who[-1])
        info.append((kernel_name(name), op, frame))
    return out


def _name_pieces(pieces: list[tuple[int | None, int, int]], kernels: tuple[list, list, list, list, list]) -> dict[tuple, dict]:
    """Exposed pieces (step, start, end) charged to the collective kernel covering them, grouped by
    (collective, op, frame): ns in all and per step, and how many kernels."""
    starts, far, who, info, _ = kernels
    groups: dict[tuple, dict] = {}
    for step, lo, hi in pieces:
        t = lo
        while t < hi:
            i = bisect_right(starts, t) - 1
            if i < 0 or far[i] <= t:  # not covered by a collective (cannot happen for B - A): leave it unnamed
                break
            end = min(hi, far[i])
            g = groups.setdefault(info[who[i]], {"ns": 0, "step_ns": {}, "kernels": set()})
            g["ns"] += end - t
            if step is not None:
                g["step_ns"][step] = g["step_ns"].get(step, 0) + (end - t)
            g["kernels"].add(who[i])
            t = end
    return groups


def breakdown(run: Run, rank: int) -> list[dict]:
    """Per device of the rank: the exclusive device time over the analysed window (`window_ns`,
    `compute_ns`, `communication_ns`, `memory_ns`, `idle_ns`, adding up to `window_ns`), the same
    per step (`steps[]`), and the exposed communication by collective (`exposed_communication[]`:
    `collective`, `op`, `source_frame_id`, `source`, `ns`, `steps` [{step, ns}], `kernels`, `sample_id`; heaviest first)
    and its kernels with the most time (`top_kernels[]`, see `top_kernels`)."""
    return breakdowns(run, [rank])[int(rank)]


def breakdowns(run: Run, ranks: list[int], unions: dict | None = None) -> dict[int, list[dict]]:
    """`breakdown` of every rank of `ranks`, the same figures, each of its queries grouped by rank
    over all of them (a job of many small ranks pays each query's fixed cost once). `unions`: the
    ranks' `metrics.device_unions_many`, already merged (else read here)."""
    ranks = [int(r) for r in ranks]
    if not ranks:
        return {}
    wins = windows_many(run, ranks)
    per_rank = device_unions_many(run, ranks) if unions is None else unions
    with_device = [r for r in ranks if per_rank.get(r)]
    # exposed communication is named only where collectives ran (B - A is their union's part)
    with_comm = [r for r in with_device if any(len(u["comm"]) for u in per_rank[r].values())]
    colls = _collectives_many(run, with_comm) if with_comm else {}
    kernels = _top_kernels_many(run, {r: wins[r] for r in with_device}) if with_device else {}
    out = {r: _breakdown(wins[r], per_rank.get(r, {}), colls.get(r, {}), kernels.get(r, {})) for r in ranks}
    exposed = [x for devices in out.values() for d in devices for x in d["exposed_communication"]]
    frames = _sources(run, {x["source_frame_id"] for x in exposed if x["source_frame_id"] is not None})
    for x in exposed:
        x["source"] = frames.get(x["source_frame_id"])
    return out


def _breakdown(wins: list, per_device: dict, colls: dict, kernels: dict) -> list[dict]:
    """One rank's `breakdown` from its windows, unions, collectives and top kernels (the exposed
    communication's `source` left for the caller to fill in)."""
    out = []
    for d in sorted(per_device):
        u = per_device[d]
        cov = {k: Coverage(u[k]) for k in UNION_WHERES}
        total = {k: 0 for k in ("window_ns", "compute_ns", "communication_ns", "memory_ns", "idle_ns")}
        steps = []
        for step, lo, hi in wins:
            parts = split(cov, lo, hi)
            for k, v in parts.items():
                total[k] += v
            total["window_ns"] += hi - lo
            if step is not None:
                steps.append({"step": step, "dur_ns": hi - lo, **parts})
        exposed = []
        if total["communication_ns"] and d in colls:
            diff = Coverage(difference(u["kernels"].tolist(), u["compute"].tolist()))
            pieces = []
            diff_starts, diff_intervals = diff.starts, diff.intervals
            for step, lo, hi in wins:
                i = max(bisect_right(diff_starts, lo) - 1, 0)
                while i < len(diff_intervals) and diff_intervals[i][0] < hi:
                    s, e = diff_intervals[i]
                    if e > lo:
                        pieces.append((step, max(s, lo), min(e, hi)))
                    i += 1
            groups = _name_pieces(pieces, colls[d])
            ids = colls[d][4]
            exposed = [{"collective": name, "op": op, "source_frame_id": frame, "source": None, "ns": g["ns"],
                        "steps": [{"step": st, "ns": ns} for st, ns in sorted(g["step_ns"].items())], "kernels": len(g["kernels"]),
                        "sample_id": min(ids[k] for k in g["kernels"])}
                       for (name, op, frame), g in groups.items()]
            exposed.sort(key=lambda x: (-x["ns"], x["collective"] or "", x["op"] or ""))
        out.append({"device": d, **total, "steps": steps, "exposed_communication": exposed[:EXPOSED_SHOWN],
                    "top_kernels": kernels.get(d, [])})
    return out


TOP_KERNELS = 10
"""Top kernels kept per device."""


def top_kernels(run: Run, rank: int, limit: int = TOP_KERNELS, wins: list | None = None) -> dict[int, list[dict]]:
    """Per device: the kernel names with the most device time in the analysed window (`windows`;
    each kernel's part inside it): per full `name`, `kernel` (its label in the list, fmt.kernel_labels),
    `dur_ns`, `count` (kernels that ran in the window), and `share` = dur_ns / the summed kernel time of the device in the
    window (concurrent kernels each count, so the shares of all names add up to 1)."""
    wins = windows(run, rank) if wins is None else wins
    return _top_kernels_many(run, {int(rank): wins}, limit).get(int(rank), {})


GROUPED_WINDOWS_MAX = 32
"""`_top_kernels_many` joins the kernels of ranks with at most this many windows (steps) in one
query on (rank, overlap): per rank, kernels x windows comparisons. A rank with more has a query
of its own, an interval join on the overlap alone."""


def _top_kernels_many(run: Run, wins: dict[int, list], limit: int = TOP_KERNELS) -> dict[int, dict[int, list[dict]]]:
    """`top_kernels` of every rank of `wins` (rank -> its windows), by one query grouped by rank
    for the ranks with few windows, one query each for the others."""
    few = [r for r, ws in wins.items() if 0 < len(ws) <= GROUPED_WINDOWS_MAX]
    rows = []
    if few:
        values = ", ".join(f"({int(r)}, {lo}, {hi})" for r in few for _, lo, hi in wins[r])
        rows += run.sql(f"""WITH w(rank, lo, hi) AS (VALUES {values})
        SELECT k.rank, k.device, k.name, sum(least(k.ts_ns + k.dur_ns, w.hi) - greatest(k.ts_ns, w.lo))::BIGINT, count(DISTINCT k.event_id)
        FROM events k JOIN w ON k.rank = w.rank AND k.ts_ns < w.hi AND k.ts_ns + k.dur_ns > w.lo
        WHERE {_in_ranks(few, 'k.rank')} AND k.kind = 'kernel' AND k.device IS NOT NULL AND k.dur_ns > 0 GROUP BY ALL""").fetchall()
    for r in (r for r, ws in wins.items() if len(ws) > GROUPED_WINDOWS_MAX):
        ws = sorted((lo, hi) for _, lo, hi in wins[r])
        if all(b[0] >= a[1] for a, b in zip(ws, ws[1:])):  # disjoint (steps one after another): two ASOF joins
            rows += run.sql(_covered_kernels_sql(ws), [int(r)]).fetchall()
            continue
        values = ", ".join(f"({lo}, {hi})" for _, lo, hi in wins[r])
        rows += run.sql(f"""WITH w(lo, hi) AS (VALUES {values})
        SELECT k.rank, k.device, k.name, sum(least(k.ts_ns + k.dur_ns, w.hi) - greatest(k.ts_ns, w.lo))::BIGINT, count(DISTINCT k.event_id)
        FROM events k JOIN w ON k.ts_ns < w.hi AND k.ts_ns + k.dur_ns > w.lo
        WHERE k.rank = ? AND k.kind = 'kernel' AND k.device IS NOT NULL AND k.dur_ns > 0 GROUP BY ALL""", [int(r)]).fetchall()
    per: dict[tuple[int, int], list[dict]] = {}
    total: dict[tuple[int, int], int] = {}
    for r, d, name, ns, n in rows:
        key = (int(r), int(d))
        per.setdefault(key, []).append({"name": name, "dur_ns": int(ns or 0), "count": int(n)})
        total[key] = total.get(key, 0) + int(ns or 0)
    out: dict[int, dict[int, list[dict]]] = {}
    for (r, d), ks in per.items():
        top = sorted(ks, key=lambda k: (-k["dur_ns"], k["name"] or ""))[:limit]
        labels = kernel_labels(k["name"] for k in top)  # (two kernels of one template listed: each told apart)
        out.setdefault(r, {})[d] = [{"kernel": labels.get(k["name"]) or "(unnamed)", **k,
                                     "share": (k["dur_ns"] / total[(r, d)]) if total[(r, d)] else 0.0} for k in top]
    return out


def _covered_kernels_sql(wins: list[tuple[int, int]]) -> str:
    """Per (rank, device, name): the kernels' time inside the windows `wins` (sorted, disjoint) and
    how many have some, for one rank (`?`): `_top_kernels_many`'s figures, by the windows' coverage
    C(t) (the windows' time before t, read at a kernel's start and end through an ASOF join each)
    instead of a join of every kernel with every window."""
    before, values = 0, []
    for lo, hi in wins:
        values.append(f"({lo}, {hi}, {before})")
        before += hi - lo
    return f"""WITH w(lo, hi, c0) AS (VALUES {", ".join(values)}),
k AS (SELECT rank, device, name, ts_ns AS a, ts_ns + dur_ns AS b FROM events
      WHERE rank = ? AND kind = 'kernel' AND device IS NOT NULL AND dur_ns > 0),
ka AS (SELECT k.*, coalesce(w.c0 + least(k.a, w.hi) - w.lo, 0) AS ca FROM k ASOF LEFT JOIN w ON k.a >= w.lo),
kb AS (SELECT ka.*, coalesce(w.c0 + least(ka.b, w.hi) - w.lo, 0) AS cb FROM ka ASOF LEFT JOIN w ON ka.b >= w.lo)
SELECT rank, device, name, sum(cb - ca)::BIGINT, count(*) FILTER (WHERE cb > ca) FROM kb GROUP BY ALL
HAVING count(*) FILTER (WHERE cb > ca) > 0"""


COUNTED_SHARE_MIN = 0.01
"""Below this share of the compute kernels' time in counted operators, `achieved` gives no rate over
the window (the FLOPs describe too little of the device's work to say how fast it ran)."""


def achieved(utilisation: dict | None, devices: list[dict], analysed_ns: int) -> dict:
    """Achieved FLOP rate of a rank over its analysed window (docs/METRICS.md "Device time"):
    `flops` = counted FLOPs of the operators in its profiler steps (all counted FLOPs without
    steps; utilisation.py); `tflops_per_s` = flops / `analysed_ns`; `mfu` = that / the device's
    peak for the main dtype (null without a peak); `compute_ns` = compute time of the breakdown
    summed over the rank's devices; `tflops_per_compute_s` = the FLOPs the counted operators'
    kernels carry / those kernels' summed duration (how fast the counted kernels run, not how busy
    the device is); `counted_share` = those kernels' summed duration / every launched compute
    kernel's in the same scope (at most 1: the part of the kernels' time the FLOPs describe).
    Where the device ran compute kernels and under COUNTED_SHARE_MIN of their time in counted
    operators, the counted FLOPs describe almost none of its work: no window rate and no MFU (null),
    not a rate of a few MFLOP/s (mtia_inference: 3.97 MFLOP/s over a window 91.7% busy computing)."""
    u = utilisation or {}
    steps = u.get("steps") or []
    flops = float(sum(st["flops"] for st in steps)) if steps else float(u.get("flops") or 0.0)
    compute = sum(d["compute_ns"] for d in devices)
    peak = ((u.get("peak") or {}).get("tflops") or {}).get(u.get("dtype") or "")
    k_flops, k_ns, all_ns = u.get("kernel_flops") or 0.0, u.get("kernel_ns") or 0, u.get("compute_kernel_ns") or 0
    described = not all_ns or k_ns >= COUNTED_SHARE_MIN * all_ns  # (a CPU run: no compute kernels, its operators' rate)
    rate = flops / (analysed_ns / 1e9) / 1e12 if analysed_ns and flops and described else None
    return {"flops": flops, "analysed_ns": analysed_ns, "tflops_per_s": rate,
            "mfu": (rate / peak) if rate is not None and peak else None, "compute_ns": compute,
            "kernel_ns": k_ns, "tflops_per_compute_s": k_flops / (k_ns / 1e9) / 1e12 if k_ns and k_flops else None,
            "counted_share": k_ns / all_ns if all_ns else None}


def _sources(run: Run, frame_ids: set) -> dict[int, str]:
    if not frame_ids:
        return {}
    return {int(f): f"{file}:{line}" for f, file, line in run.sql(
        "SELECT frame_id, file, line FROM frames WHERE frame_id IN (SELECT unnest(?::BIGINT[]))", [sorted(frame_ids)]).fetchall()}


def launched_by(collective: dict) -> str:
    """Who launched an exposed collective (an `exposed_communication` row), in words: its statement,
    else its operator, else 'no traced operator' (no launch call in the trace, or one outside every
    operator). A collective run by a gradient hook inside an `AccumulateGrad` node (DDP's bucket
    all-reduce: charged to no statement, collectors/passes.py) is 'a gradient hook in backward
    (after AccumulateGrad)'. The report's text and comm-exposed's title both say it this way."""
    op = collective.get("op")
    if not collective.get("source") and op and op.endswith("AccumulateGrad"):
        return "a gradient hook in backward (after AccumulateGrad)"
    return collective.get("source") or op or "no traced operator"


CPU_COMPUTE = f"{top_op()} AND NOT ({cpu_collective()})"
"""Host work a collective on the host can hide behind: a top-level operator other than a collective."""

_IN_WINDOW = "u.start_ns < w.hi AND u.end_ns > w.lo"
_CLIPPED_NS = "least(u.end_ns, w.hi) - greatest(u.start_ns, w.lo)"
"""A union's piece `u` overlapping an analysed window `w` (rows of `windows_sql`), and its ns inside it."""


WINDOWS_WRITTEN = 20_000
"""`cpu_comm_sql`'s windows written in its text up to this many (a longer VALUES list costs more to parse than the read)."""


def cpu_comm_sql(ranks: str, host_only: list[int] | None = None, windows: list[tuple[int, int, int]] | None = None) -> str:
    """The host's collectives (vocab.cpu_collective: collective operators, and the ranges gloo records
    around the collectives it runs on its own threads) of the ranks `ranks` lists (SQL, as
    `windows_sql` takes), within each rank's analysed window (its profiler steps, or its span): rows
    (rank, comm_cpu_ns, comm_cpu_exposed_ns, comm_cpu_intervals). `comm_cpu_ns`: their union within
    the window; `comm_cpu_exposed_ns`, on a rank without device work (null on the others, whose
    exposed communication is their devices'): the part of it during which no other top-level
    operator runs on any thread of the rank (CPU_COMPUTE), what a CPU job waits for (with K that
    union of host work: |(C ∪ K) ∩ W| − |K ∩ W|, never more than comm_cpu_ns); `comm_cpu_intervals`:
    the union's pieces in the window. Ranks with no collective in their window have no row. Plain
    DuckDB on the `events` view alone: the comm-exposed finding's evidence on a rank without a device.
    `host_only`: the ranks of `ranks` without device work where the caller knows them (the summary
    does): the host work's unions are then made for those alone, none for a job whose every rank
    has a device (each union's filter scans every operator's name: ~20 ms a million events).
    `windows`: the ranks' analysed windows as rows (rank, lo, hi), where the caller has read them
    (`windows_many`: the summary has read the steps and spans), written in the query instead of
    read again (at most WINDOWS_WRITTEN of them)."""
    coll, work = cpu_collective(), CPU_COMPUTE
    w = windows_sql(ranks) if windows is None or len(windows) > WINDOWS_WRITTEN else \
        "SELECT * FROM (VALUES " + (", ".join(f"({int(r)}, {int(lo)}, {int(hi)})" for r, lo, hi in windows) or "(NULL, NULL, NULL)") + \
        ") v(rank, lo, hi) WHERE rank IS NOT NULL"
    if host_only is None:
        host, dev = f"rank IN ({ranks}) AND rank NOT IN (SELECT rank FROM dev)", \
            f"dev AS (SELECT DISTINCT rank FROM events WHERE rank IN ({ranks}) AND kind IN {DEVICE_WORK_SQL}),\n"
    else:
        host, dev = f"rank IN ({', '.join(str(int(r)) for r in host_only) or 'NULL'})", ""
    parts = {"c": union_sql(f"rank IN ({ranks}) AND {coll}", ("rank",))}
    if host_only is None or host_only:
        parts |= {"k": union_sql(f"{host} AND {work}", ("rank",)),  # every top-level operator: only where it is read
                  "ck": union_sql(f"{host} AND (({coll}) OR ({work}))", ("rank",))}
    covered = ",\n".join(
        [f"{name} AS (SELECT u.rank, sum({_CLIPPED_NS})::BIGINT AS ns, count(*) AS pieces "
         f"FROM ({u}) u JOIN w ON u.rank = w.rank AND {_IN_WINDOW} GROUP BY u.rank)" for name, u in parts.items()]
        + [f"{name} AS (SELECT NULL::INTEGER AS rank, NULL::BIGINT AS ns WHERE false)" for name in ("k", "ck") if name not in parts])
    return (f"WITH w AS ({w}),\n{dev}"
            f"{covered}\n"
            "SELECT c.rank, c.ns AS comm_cpu_ns, (ck.ns - coalesce(k.ns, 0))::BIGINT AS comm_cpu_exposed_ns, c.pieces AS comm_cpu_intervals "
            "FROM c LEFT JOIN ck ON ck.rank = c.rank LEFT JOIN k ON k.rank = c.rank ORDER BY c.rank")


def cpu_comm(run: Run, rank: int) -> dict:
    """`cpu_comm_sql` of one rank: {comm_cpu_ns, comm_cpu_exposed_ns, comm_cpu_intervals} (zeros without collectives)."""
    got = run.sql(cpu_comm_sql(str(int(rank)))).fetchone()
    return cpu_comm_of(got[1:] if got else None)


def cpu_comm_of(row) -> dict:
    """A `cpu_comm_sql` row's figures (after its rank), zeros for no row."""
    ns, exposed, pieces = row or (0, 0, 0)
    return {"comm_cpu_ns": int(ns or 0), "comm_cpu_exposed_ns": None if exposed is None else int(exposed),
            "comm_cpu_intervals": int(pieces or 0)}


def exposed_sql(rank: int, device: int) -> str:
    """Evidence SQL: one row, `communication_ns` (collective kernels running with no compute kernel,
    within the rank's profiler steps, or its span without steps), `collective_ns` (the collective
    union within the same window) and `window_ns`: `breakdown`'s communication_ns, in plain DuckDB
    on the `events` view alone (the steps are the `steps` view's definition, inlined)."""
    base = f"rank = {int(rank)} AND device = {int(device)}"
    a = union_sql(f"{base} AND {UNION_WHERES['compute']}")
    b = union_sql(f"{base} AND {UNION_WHERES['kernels']}")
    c = union_sql(f"{base} AND kind = 'kernel' AND {_COMM}")
    win = f"SELECT lo, hi FROM ({windows_sql(str(int(rank)))})"

    def covered(u: str) -> str:
        return f"(SELECT coalesce(sum(greatest({_CLIPPED_NS}, 0)), 0) FROM ({u}) u JOIN w ON {_IN_WINDOW})"
    return (f"WITH w AS ({win})\nSELECT ({covered(b)} - {covered(a)})::BIGINT AS communication_ns, {covered(c)}::BIGINT AS collective_ns, "
            "(SELECT sum(hi - lo) FROM w)::BIGINT AS window_ns")
