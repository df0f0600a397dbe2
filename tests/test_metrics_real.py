"""On the real traces, device busy and kernel times agree exactly with a plain-Python computation over the JSON."""

from __future__ import annotations

import decimal
import gzip
import json

import pytest

from neuron_explorer import open_run
from neuron_explorer.analyzers import metrics
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES

DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset",
               "mtia_ccp_events": "kernel"}
NAMES = ["cuda_event_sync_multistream.json.gz", "cuda_nccl_rank0_of_2.json.gz", "rocm_mi250_train.json.gz",
         "edge_old_category_names.json.gz", "cuda_alexnet_train.json.gz", "mtia_inference.json.gz", "cuda_train_68k_events.json.gz"]


def _expected(path) -> dict[int, dict]:
    """Per device: union length of kernel+memcpy+memset intervals and the kernel sum, from the JSON
    (MTIA's `event_wait`, filed with its kernels, is a wait, not work)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=decimal.Decimal)  # exact: epoch-µs floats would round to 256 ns
    base = doc.get("baseTimeNanoseconds") or 0
    per: dict[int, dict] = {}
    for e in doc["traceEvents"]:
        kind = DEVICE_CATS.get(str(e.get("cat", "")).lower())
        if kind is None or e.get("ph") != "X" or not isinstance(e.get("pid"), int):
            continue
        if e.get("name") == "event_wait":  # MTIA: a queue waiting on an event does no work
            continue
        start = base + int((decimal.Decimal(e["ts"]) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))
        dur = int((decimal.Decimal(e.get("dur", 0)) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))
        d = per.setdefault(e["pid"], {"iv": [], "kernel_ns": 0})
        if kind == "kernel" and e.get("name") != "dma_request":  # MTIA: a DMA transfer is a copy, not a kernel
            d["kernel_ns"] += dur
        if dur > 0:
            d["iv"].append((start, start + dur))
    out = {}
    for dev, d in per.items():
        busy, cur_s, cur_e = 0, None, None
        for s, e in sorted(d["iv"]):
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            busy += cur_e - cur_s
        out[dev] = {"busy_ns": busy, "kernel_ns": d["kernel_ns"]}
    return out


@pytest.mark.parametrize("name", NAMES)
def test_device_busy_and_kernel_time_match_an_independent_computation(name, tmp_path):
    path = TRACES / name
    run_dir = import_traces(path, tmp_path / "run").run_dir
    expected = _expected(path)
    assert expected, name
    with open_run(run_dir) as run:
        (rank,) = metrics.ranks(run)
        got = {d: metrics.device_summary(run, rank, d) for d in metrics.devices(run, rank)}
    assert set(got) == set(expected)
    for dev, exp in expected.items():
        assert got[dev]["busy_ns"] == exp["busy_ns"], (name, dev)
        assert got[dev]["kernel_ns"] == exp["kernel_ns"], (name, dev)


def test_union_array_merges_as_union_sql_does():
    """Touching intervals merge (a new island starts only after the furthest end), nested ones
    vanish, order does not matter; the same as DuckDB's `union_sql` over the same rows."""
    import duckdb

    rows = [(30, 40), (0, 10), (10, 20), (12, 15), (50, 55), (54, 60), (70, 71)]
    assert metrics.union_array([s for s, _ in rows], [e for _, e in rows]).tolist() == [[0, 20], [30, 40], [50, 60], [70, 71]]
    con = duckdb.connect()
    con.execute("CREATE TABLE events AS SELECT * FROM (VALUES " + ", ".join(f"({s}, {e - s})" for s, e in rows) + ") t(ts_ns, dur_ns)")
    assert [list(r) for r in con.execute(metrics.union_sql("TRUE") + " ORDER BY start_ns").fetchall()] == [[0, 20], [30, 40], [50, 60], [70, 71]]
    assert metrics.union_array([], []).shape == (0, 2)


@pytest.mark.parametrize("name", ["cuda_train_68k_events.json.gz", "cuda_nccl_rank0_of_2.json.gz", "mi300x_ddp_resnet_act_checkpoint.json.gz"])
def test_step_device_busy_from_the_work_read_once_equals_a_query_per_device(name, tmp_path):
    """critical_path.saving_bound reads the device work once and merges it in NumPy per name left
    out: the same busy ns per step and device as the union query of each device without that name,
    for no name, one kernel name, a class of names, and a class that holds '' (events with no name)."""
    run_dir = import_traces(TRACES / name, tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        (rank,) = metrics.ranks(run)
        work = metrics.device_work_intervals(run, rank)
        top = [n for (n,) in run.sql("SELECT name FROM events WHERE kind = 'kernel' AND dur_ns > 0 GROUP BY name "
                                     "ORDER BY sum(dur_ns) DESC, name LIMIT 3").fetchall()]
        assert len(top) == 3 and metrics.rank_rows(run, metrics.STEPS, rank), name
        for without in (None, top[0], tuple(sorted(top[:2])), ("", top[2])):
            want = metrics.step_device_busy(run, rank, without_name=without)
            assert metrics.step_device_busy(run, rank, without_name=without, work=work) == want, (name, without)
        assert any(r["busy_ns"] for r in want)


def test_device_unions_merge_each_class_as_its_sql_does():
    """One device's work, drawn (a collective overlaps a compute kernel; an unnamed kernel counts as
    compute but in neither communication union, as SQL's NULL does):

        0    5    10   15   20   25   30   40   45   50   55
        [gemm----)                                           kernel
             [nccl_allreduce-)                               kernel, collective
                                 [H2D-)                      memcpy
                                             [?--)           kernel, no name
                                                      [?--)  memset, no name

    Every union of `device_unions` (read once, merged in NumPy) is the one `union_sql` gives for
    its predicate, and the communication figures are `comm_overlap_sql`'s."""
    import duckdb

    from neuron_explorer.analyzers import device_time

    rows = [("kernel", "gemm", 0, 10), ("kernel", "ncclKernel_AllReduce", 5, 15), ("memcpy", "Memcpy HtoD", 25, 5),
            ("kernel", None, 40, 5), ("memset", None, 50, 5)]
    con = duckdb.connect()
    con.execute("CREATE TABLE events (rank INT, device INT, kind VARCHAR, name VARCHAR, ts_ns BIGINT, dur_ns BIGINT)")
    con.executemany("INSERT INTO events VALUES (0, 0, ?, ?, ?, ?)", [list(r) for r in rows])
    work = {k: v for k, v in con.execute(metrics.DEVICE_WORK.one, [0]).fetchnumpy().items()}
    got = {k: v.tolist() for k, v in metrics.device_unions(work)[0].items()}
    assert got == {"busy": [[0, 20], [25, 30], [40, 45], [50, 55]], "kernels": [[0, 20], [40, 45]], "compute": [[0, 10], [40, 45]],
                   "comm": [[5, 20]], "not_comm": [[0, 10], [25, 30]]}
    from neuron_explorer.vocab import COMM_KERNEL_PATTERN, sql_literal

    pat = f"regexp_matches(name, {sql_literal(COMM_KERNEL_PATTERN)})"  # the regexp itself, not the SQL the modules use
    wheres = {**{"busy" if k == "busy" else k: w for k, w in device_time.UNION_WHERES.items()},
              "comm": f"kind = 'kernel' AND {pat}", "not_comm": f"kind IN {metrics.DEVICE_WORK_SQL} AND NOT {pat}"}
    for k, where in wheres.items():
        assert [list(r) for r in con.execute(metrics.union_sql(f"device = 0 AND {where}") + " ORDER BY start_ns").fetchall()] == got[k], k
    u = metrics.device_unions(work)[0]
    assert metrics.covered_within(u["comm"], u["not_comm"]) == 5  # [5, 10): the collective under the gemm
    assert con.execute(metrics.comm_overlap_sql(0, 0)).fetchone() == (15, 5, 10)


@pytest.mark.parametrize("name", ["cuda_nccl_rank0_of_2.json.gz", "mi300x_ddp_resnet_act_checkpoint.json.gz"])
def test_summary_device_figures_from_the_shared_unions_equal_each_devices_queries(name, tmp_path):
    """The summary merges every device union once (metrics.device_unions_many); its busy, window,
    idle and communication figures are those of the per-device evidence queries (`busy_sql`,
    `comm_overlap_sql`), and the busy unions it leaves prepared are DEVICE_BUSY's rows."""
    from neuron_explorer.analyzers import summary

    run_dir = import_traces(TRACES / name, tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        (rank,) = metrics.ranks(run)
        got = summary.rank_summaries(run, [rank], per_rank=False)[rank]["devices"]
        assert got and any(d["comm_ns"] and d["comm_overlap_ns"] for d in got), name  # both hold collectives beside compute
        for d in got:
            assert d == metrics.device_summary(run, rank, d["device"]), (name, d["device"])
        prepared = run.prepared[metrics.DEVICE_BUSY.name][rank]
        want = run.sql(metrics.DEVICE_BUSY.one, [rank]).fetchnumpy()
        for col in ("device", "start_ns", "end_ns"):
            assert prepared[col].tolist() == want[col].tolist(), (name, col)
