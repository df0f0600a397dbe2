"""Many ranks: analyse and import cost that grows with events, not with ranks (issue 14).

Builds, in a temporary directory, N rank traces by copying one real rank trace with its rank
changed (`distributedInfo.rank` and the file name), and one trace holding the same events in a
single rank (the same trace repeated N times along the time axis, link ids offset per copy).
Then it measures, side by side in one invocation, each measurement in a fresh process whose whole
process tree is polled for RSS (psutil, every 50 ms):

    python bench/bench_ranks.py analyze --ranks 256       # analyze: N ranks vs one rank, same events (target <= 2x)
    python bench/bench_ranks.py import --ranks 256        # import: N files vs one file, same events (target <= 2x)
    python bench/bench_ranks.py memory --ranks 1024       # analyze of N ranks: peak RSS (target <= 2 GB)
    python bench/bench_ranks.py analyze --ranks 256 --without-paths   # without the critical-path and utilisation analyses
    python bench/bench_ranks.py analyze --ranks 256 --distinct-steps  # the one-rank copies numbered in the trace as one long rank records them
    python bench/bench_ranks.py dashboard --ranks 1024    # dashboard server time: rank x step heatmap, first page (target <= 1 s)

Options: --trace (default tests/data/traces/multirank_128/rank-0.json.gz, 4,855 events), --repeat,
--workers (import), --keep DIR (keep the traces and runs there instead of a temporary directory).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / "tests" / "data" / "traces" / "multirank_128" / "rank-0.json.gz"
LINK_ARGS = ("External id", "correlation", "Python id", "Python parent id", "Ev Idx", "Record function id",
             "Sequence number", "Fwd thread id")


def _load(path: Path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _dump(doc: dict, path: Path) -> None:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as f:
        json.dump(doc, f)


def write_rank_copies(trace: Path, out_dir: Path, ranks: int) -> list[Path]:
    """`ranks` copies of one rank trace, as rank-0 ... rank-(N-1) (distributedInfo and file name)."""
    doc = _load(trace)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(ranks):
        info = dict(doc.get("distributedInfo") or {})
        info.update(rank=r, world_size=ranks)
        path = out_dir / f"rank-{r}.json"
        _dump({**doc, "distributedInfo": info}, path)
        files.append(path)
    return files


def write_tiled(trace: Path, out: Path, copies: int, distinct_steps: bool = False) -> Path:
    """One rank holding `copies` copies of the trace's events, each shifted past the previous
    copy's end, with link ids (External id, correlation, flow ids, ...) offset per copy. With
    `distinct_steps`, each copy's ProfilerStep#N is renumbered after the previous copy's steps, as
    one long rank records them. Else every copy repeats the same step numbers, which the import
    numbers on (build.renumbered_steps: the steps are the same either way; before it, each step of
    the tiled rank spanned the whole run)."""
    doc = _load(trace)
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    start = min(float(e["ts"]) for e in timed)
    end = max(float(e["ts"]) + float(e.get("dur") or 0) for e in timed)
    period = int(end - start) + 1000  # microseconds: a 1 ms gap between copies
    top_id = 0
    for e in events:
        args = e.get("args") or {}
        top_id = max([top_id] + [v for k in LINK_ARGS if isinstance(v := args.get(k), int)]
                     + ([e["id"]] if isinstance(e.get("id"), int) else []))
    id_step = top_id + 1
    out_events = [e for e in events if e.get("ph") == "M" or "ts" not in e]
    step_no = {id(e): int(m.group(1)) for e in timed if (m := re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name"))))}
    step_span = (max(step_no.values()) - min(step_no.values()) + 1) if step_no else 0
    for c in range(copies):
        for e in timed:
            n = dict(e)
            n["ts"] = e["ts"] + c * period
            if distinct_steps and id(e) in step_no:
                n["name"] = f"ProfilerStep#{step_no[id(e)] + c * step_span}"
            if c and isinstance(n.get("id"), int):
                n["id"] += c * id_step
            if c and n.get("args"):
                n["args"] = {k: (v + c * id_step if k in LINK_ARGS and isinstance(v, int) and v >= 0 else v)
                             for k, v in n["args"].items()}
            out_events.append(n)
    info = dict(doc.get("distributedInfo") or {})
    info.update(rank=0, world_size=1)
    _dump({**doc, "distributedInfo": info, "traceEvents": out_events}, out)
    return out


def measure(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak summed RSS of the process tree in MiB, stdout) of one command."""
    t = time.perf_counter()
    out_file, err_file = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # a pipe could fill up and block
    proc = subprocess.Popen(cmd, stdout=out_file, stderr=err_file, text=True)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.05)
    wall = time.perf_counter() - t
    out_file.seek(0), err_file.seek(0)
    out, err = out_file.read(), err_file.read()
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err[-2000:]}")
    return wall, peak / 2**20, out


def nx_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "neuron_explorer", *args]


WITHOUT_PATHS = """
from neuron_explorer.analyzers import engine, summary
from neuron_explorer.analyzers.rules import hotspot
summary._bound = summary._utilisation = lambda run, rank: {}
engine._path_ahead = lambda *a: None  # (nor begun on its own thread)
hotspot.on_path_ns = lambda *a, **k: None
import pyarrow as pa
from neuron_explorer.analyzers import outputs
outputs._critical_path = outputs._work = lambda *a: pa.table({})
outputs.rank_parts = lambda run, rank: {}
rules = [r for r in engine.all_rules() if r.RULE_ID not in ('critical-path', 'device-underuse')]
"""


def analyze_cmd(run: Path, without_paths: bool = False) -> list[str]:
    """nx.analyze in a fresh process. `without_paths`: leave out the critical-path and utilisation
    analyses (the summary's bound and utilisation, the critical-path and device-underuse rules,
    hotspot's critical-path test, analysis/critical_path.parquet and work.parquet), which walk every event in Python: the analyses of when the
    issue was filed, to see the cost of everything else."""
    code = ((WITHOUT_PATHS if without_paths else "rules = None\n")
            + "import sys, neuron_explorer as nx; from neuron_explorer.analyzers.engine import analyze; "
            "r = analyze(sys.argv[1], rules=rules); print(len(r.findings))")
    return [sys.executable, "-c", code, str(run)]


DASHBOARD = """
import sys, time, json
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard import ranks_view
t = time.perf_counter(); rs = RunSet([sys.argv[1]]); opened = time.perf_counter() - t
t = time.perf_counter(); fig = ranks_view.heatmap_figure(rs, 0); body = json.dumps(fig); heat = time.perf_counter() - t
from neuron_explorer.dashboard.app import create_app, warm
import dash, dash.backends._flask  # imported by a server at start-up, before any page (0.2-0.6 s, whatever the run)
t = time.perf_counter(); warm(rs); app = create_app(rs); page = app.server.test_client().get('/_dash-layout'); first = time.perf_counter() - t
assert page.status_code == 200
print(json.dumps({"open_s": opened, "heatmap_s": heat, "heatmap_bytes": len(body), "first_page_s": first, "layout_bytes": len(page.data)}))
"""


def dashboard_cmd(run: Path) -> list[str]:
    """The dashboard's server time on a fresh process: opening the run, the rank x step heatmap
    (its query, figure and JSON), and the whole first page (warm-up, layout with the first
    timeline and the heatmap, served as /_dash-layout; Dash and Flask imported before)."""
    return [sys.executable, "-c", DASHBOARD, str(run)]


def _events(run: Path) -> int:
    return sum(r.get("events", 0) for r in json.loads((run / "manifest.json").read_text())["ranks"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("analyze", "import", "memory", "dashboard"))
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None, help="import --workers (default: the importer's choice)")
    ap.add_argument("--keep", type=Path, default=None, help="keep traces and runs in this directory")
    ap.add_argument("--without-paths", action="store_true", help="analyze without the critical-path and utilisation analyses")
    ap.add_argument("--distinct-steps", action="store_true",
                    help="the one-rank trace's copies get their own step numbers in the trace (else the import numbers them on)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="nx-bench-ranks-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        suffix = "_steps" if args.distinct_steps else ""
        many_dir, one_file = work / f"ranks{args.ranks}", work / f"one_rank_x{args.ranks}{suffix}.json"
        if not many_dir.is_dir():
            t = time.perf_counter()
            write_rank_copies(args.trace, many_dir, args.ranks)
            print(f"wrote {args.ranks} rank traces in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        if args.what not in ("memory", "dashboard") and not one_file.exists():
            write_tiled(args.trace, one_file, args.ranks, args.distinct_steps)
        workers = ["--workers", str(args.workers)] if args.workers else []
        many_run, one_run = work / f"run_ranks{args.ranks}", work / f"run_one_x{args.ranks}{suffix}"
        if args.what == "dashboard":
            if not (many_run / "manifest.json").exists():
                measure(nx_cmd("import", str(many_dir), "-o", str(many_run), "--force", *workers))
            for _ in range(args.repeat):
                wall, rss, out = measure(dashboard_cmd(many_run))
                got = json.loads(out.strip().splitlines()[-1])
                print(f"dashboard {args.ranks} ranks ({_events(many_run):,} events): open {got['open_s']:.2f} s, "
                      f"heatmap {got['heatmap_s']:.2f} s ({got['heatmap_bytes'] / 1024:.0f} KiB), first page (warm-up + layout) "
                      f"{got['first_page_s']:.2f} s ({got['layout_bytes'] / 2**20:.1f} MiB), peak RSS {rss:.0f} MiB")
            return
        if args.what == "import":
            results = {"many": [], "one": []}
            for _ in range(args.repeat):  # alternate, so that the machine's load hits both alike
                results["many"].append(measure(nx_cmd("import", str(many_dir), "-o", str(many_run), "--force", *workers)))
                results["one"].append(measure(nx_cmd("import", str(one_file), "-o", str(one_run), "--force", *workers)))
        else:
            if not (many_run / "manifest.json").exists():
                measure(nx_cmd("import", str(many_dir), "-o", str(many_run), "--force", *workers))
            if args.what == "analyze" and not (one_run / "manifest.json").exists():
                measure(nx_cmd("import", str(one_file), "-o", str(one_run), "--force", *workers))
            results = {"many": []} if args.what == "memory" else {"many": [], "one": []}
            for _ in range(args.repeat):
                results["many"].append(measure(analyze_cmd(many_run, args.without_paths)))
                if "one" in results:
                    results["one"].append(measure(analyze_cmd(one_run, args.without_paths)))
        label = {"many": f"{args.ranks} ranks", "one": f"1 rank, {args.ranks}x tiled"}
        for key, rs in results.items():
            run = many_run if key == "many" else one_run
            best = min(r[0] for r in rs)
            print(f"{args.what} {label[key]}: {_events(run):,} events, best of {len(rs)} {best:.2f} s "
                  f"(all: {', '.join(f'{r[0]:.2f}' for r in rs)}), peak RSS {max(r[1] for r in rs):.0f} MiB")
        if "one" in results:
            ratio = min(r[0] for r in results["many"]) / min(r[0] for r in results["one"])
            median = statistics.median(r[0] for r in results["many"]) / statistics.median(r[0] for r in results["one"])
            print(f"ratio {args.ranks} ranks / 1 rank: {ratio:.2f}x best of each, {median:.2f}x medians  (cpus {os.cpu_count()})")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
