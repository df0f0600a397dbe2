"""Every real trace (NVIDIA, AMD, MTIA, CPU-only, old category names) imports with nothing lost."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.schema import DEVICE_KINDS, ID_STRIDE, KINDS

from .conftest import TRACES, cli, real_traces


def _source_counts(path: Path) -> tuple[Counter, Counter]:
    """Counts straight from the JSON: (category -> events other than counters/metadata, category -> counter events)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    plain = Counter(e.get("cat", "") for e in events if e.get("ph") in ("X", "i", "I", "s", "f", "t"))
    counters = Counter(e.get("cat", "") for e in events if e.get("ph") == "C")
    return plain, counters


@pytest.mark.parametrize("trace", real_traces(), ids=lambda p: p.name)
def test_every_event_of_every_category_is_kept(trace: Path, tmp_path: Path):
    run_dir = import_traces(trace, tmp_path / "run").run_dir
    plain, counters = _source_counts(trace)
    with open_run(run_dir) as run:
        got = Counter()
        for table in ("events", "flows", "memory"):
            for cat, n in run.sql(f"SELECT category, count(*) FROM {table} GROUP BY 1").fetchall():
                got[cat] += n
        got_counters = Counter(dict(run.sql("SELECT category, count(*) FROM (SELECT DISTINCT category, ts_ns, pid, name FROM counters) "
                                            "GROUP BY 1").fetchall()))
        assert got == plain
        assert got_counters == counters
        # ids are unique and carry the rank
        n, distinct, bad_rank = run.sql("SELECT count(*), count(DISTINCT event_id), "
                                        f"count(*) FILTER (WHERE event_id // {ID_STRIDE} != rank) FROM events").fetchone()
        assert n == distinct and bad_rank == 0
        kinds = {k for (k,) in run.sql("SELECT DISTINCT kind FROM events").fetchall()}
        assert kinds <= set(KINDS)
        # links point at events of the right kind
        wrong = run.sql("""SELECT count(*) FROM events e JOIN events l ON e.launch_id = l.event_id WHERE l.kind != 'runtime'""").fetchone()[0]
        assert wrong == 0
        wrong_op = run.sql("""SELECT count(*) FROM events e JOIN events o ON e.op_id = o.event_id WHERE o.kind != 'cpu_op'""").fetchone()[0]
        assert wrong_op == 0


def test_device_events_link_to_launches_on_cuda_amd_and_mtia(tmp_path: Path):
    shares = {}
    for name in ("cuda_alexnet_train.json.gz", "rocm_mi250_train.json.gz", "mtia_inference.json.gz", "edge_old_category_names.json.gz"):
        run_dir = import_traces(TRACES / name, tmp_path / name).run_dir
        with open_run(run_dir) as run:
            kinds = ", ".join(f"'{k}'" for k in DEVICE_KINDS if k != "gpu_annotation")
            total, linked, with_op = run.sql(
                f"SELECT count(*), count(launch_id), count(op_id) FROM events WHERE kind IN ({kinds})").fetchone()
            shares[name] = (total, linked, with_op)
    # NVIDIA and AMD: every kernel/copy/set/sync has its runtime call (correlation ids)
    for name in ("cuda_alexnet_train.json.gz", "rocm_mi250_train.json.gz", "edge_old_category_names.json.gz"):
        total, linked, _ = shares[name]
        assert total > 0 and linked == total, (name, shares[name])
    # MTIA has no correlation on device events: the links come from ac2g flows
    total, linked, _ = shares["mtia_inference.json.gz"]
    assert total > 0 and linked > total // 2


def test_directory_of_rank_files_becomes_one_run_with_each_rank(tmp_path: Path):
    run_dir = import_traces(TRACES / "multirank_128", tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        assert run.ranks == [0, 1]
        assert run.sql("SELECT list(DISTINCT rank ORDER BY rank) FROM events").fetchone()[0] == [0, 1]
        assert (run_dir / "rank=0" / "events.parquet").is_file() and (run_dir / "rank=1" / "events.parquet").is_file()
        assert run.manifest["ranks"][1]["world_size"] == 128


def test_rank_from_file_name_then_zero_with_a_warning(tmp_path: Path):
    src = (TRACES / "edge_no_rank.json.gz").read_bytes()
    named = tmp_path / "worker_rank_3.json.gz"
    named.write_bytes(src)
    run = import_traces(named, tmp_path / "a")
    assert [r["rank"] for r in run.manifest["ranks"]] == [3]
    run = import_traces(TRACES / "edge_no_rank.json.gz", tmp_path / "b")
    assert [r["rank"] for r in run.manifest["ranks"]] == [0]
    assert any("assumed rank 0" in w for w in run.manifest["warnings"])


def test_data_quality_is_counted_not_raised(tmp_path: Path):
    run = import_traces(TRACES / "mtia_inference.json.gz", tmp_path / "run")
    q = run.manifest["ranks"][0]["data_quality"]
    assert q["device_events_without_launch"] > 0
    assert any("no launch" in w for w in run.manifest["warnings"])


def test_trace_metadata_devices_and_distributed_info_are_kept(tmp_path: Path):
    run = import_traces(TRACES / "cuda_nccl_rank0_of_2.json.gz", tmp_path / "run")
    entry = run.manifest["ranks"][0]
    assert entry["distributed_info"]["backend"] == "nccl" and entry["world_size"] == 2
    assert entry["device_properties"][0]["name"].startswith("NVIDIA")
    assert "traceName" in entry["trace_metadata"] and "INFO" in entry["trace_metadata"]
    assert any(m["name"] == "process_name" for m in entry["metadata_events"])
    with open_run(run.run_dir) as r:
        assert r.sql("SELECT count(*) FROM devices").fetchone()[0] >= 1
        # steps come from ProfilerStep#N and host events carry them
        steps = r.sql("SELECT count(*) FROM steps").fetchone()[0]
        assert steps >= 1
        # baseTimeNanoseconds puts timestamps on the Unix epoch
        assert r.sql("SELECT min(ts_ns) FROM events").fetchone()[0] > 1_700_000_000 * 10**9


# --- steps and devices, expected from the trace text ----------------------------------------

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
# categories of events that run on a device (pid = device index), in every spelling the traces use
_DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "mtia_ccp_events", "cuda_sync", "gpu_user_annotation"}


def _trace_docs(trace: Path) -> list[dict]:
    files = sorted(trace.glob("*.json*")) if trace.is_dir() else [trace]
    docs = []
    for f in files:
        opener = gzip.open if f.name.endswith(".gz") else open
        with opener(f, "rt") as fh:
            docs.append(json.load(fh))
    return docs


@pytest.mark.parametrize("trace", [*real_traces(), TRACES / "multirank_128"], ids=lambda p: p.name)
def test_steps_and_devices_of_every_real_trace(trace: Path, tmp_path: Path):
    run = import_traces(trace, tmp_path / "run")
    entries = sorted(run.manifest["ranks"], key=lambda e: e["source"])
    docs = _trace_docs(trace)
    assert len(entries) == len(docs)
    for entry, doc in zip(entries, docs):
        events = doc["traceEvents"]
        # host ProfilerStep#N ranges, whatever category the torch version filed them under
        want_steps = sorted({int(m.group(1)) for e in events
                             if (m := _STEP.match(str(e.get("name")))) and str(e.get("cat")).lower() != "gpu_user_annotation"})
        assert [s["step"] for s in entry["steps"]] == want_steps
        used = sorted({e["pid"] for e in events if str(e.get("cat")).lower() in _DEVICE_CATEGORIES and isinstance(e.get("pid"), int)})
        props = doc.get("deviceProperties") or doc.get("computeProperties") or []
        names = {p["id"]: p.get("name") for p in props}
        assert entry["devices_used"] == [{"device": d, "name": names.get(d)} for d in used]
        assert entry["devices_listed_without_events"] == sorted(set(names) - set(used))
        assert entry["devices_without_properties"] == [d for d in used if d not in names]


def test_old_torch_steps_are_listed_by_info(tmp_path: Path):
    res = cli("info", TRACES / "v100_resnet50_torch19_memory.json.gz", "--json")
    assert res.returncode == 0, res.stderr
    rank = json.loads(res.stdout)["ranks"][0]
    assert (rank["steps"], rank["step_first"], rank["step_last"]) == (6, 16, 21)
    assert rank["devices"] == [{"device": 0, "name": "Tesla V100-DGXS-32GB"}]
    assert rank["devices_listed_without_events"] == [1, 2, 3]
