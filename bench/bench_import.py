"""Import of a large Kineto trace: Neuron Explorer vs HolisticTraceAnalysis, side by side in one run.

Each tool runs in its own process; the benchmark polls the whole process tree (the importer uses
worker processes) every 50 ms and reports the peak of the summed RSS and of the summed USS
(memory private to each process, so pages shared after fork are not counted twice) with --uss only:
polling slows the import measured, and each run's peak RSS is otherwise the kernel's count for the
process (wait4). Targets
(DESIGN.md): at least 25x faster than HTA's `TraceAnalysis(trace_dir=...)`, at least 250 MB/s of
JSON, peak memory no larger than the JSON.

    python bench/bench_import.py                       # makes /tmp/big.json (2.2M events) if missing
    python bench/bench_import.py --trace my.json.gz --hta-python /path/to/venv/bin/python
    python bench/bench_import.py --skip-hta --baseline /tmp/old   # before/after: another source tree, runs alternating
    python bench/bench_import.py --python-reader                  # also the Python decoder alone (no C++ reader), alternating

`--baseline DIR` times the `neuron_explorer` package of another source tree (e.g. `git worktree add
/tmp/old <commit>`, or `git archive <commit> neuron_explorer | tar -x -C /tmp/old`) against this
one, alternating run by run so that both see the same load.

HTA is not a dependency of the project: install it in any environment (`pip install
holistictraceanalysis`) and pass that environment's python with --hta-python.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
TILE = REPO.parent / "shared" / "tools" / "tile_trace.py"
BASE_TRACE = REPO.parent / "shared" / "traces" / "cuda_train_68k_events.json.gz"

HTA_SCRIPT = """
import sys
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1])
"""


def measure(cmd: list[str], env: dict | None = None, cwd: Path | None = None, uss: bool = False) -> dict:
    """Wall time and peak RSS of a command: its own peak, from the kernel when it is reaped (wait4's
    ru_maxrss; one process, as the import of one trace is: it reads a trace on threads). With `uss`,
    the peak summed RSS and USS of its whole process tree, polled every 50 ms instead: USS is read
    from each process's smaps, which the kernel builds by walking its page tables, and the polling
    slows what it measures (the import read 2.09-2.17 s polled so, 1.72-1.85 s unpolled, the same
    tree in the same half hour; polling RSS alone still cost it 0.05-0.1 s)."""
    start = time.perf_counter()
    if not uss:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
        err = proc.stderr.read().decode(errors="replace")  # (until it exits: its stderr is small)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
        return {"wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "peak_uss_mb": float("nan")}
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    peak_rss = peak_uss = 0
    while proc.poll() is None:
        rss = uss_now = 0
        try:
            procs = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in procs:
            try:
                m = p.memory_full_info()
                rss += m.rss
                uss_now += m.uss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        peak_rss, peak_uss = max(peak_rss, rss), max(peak_uss, uss_now)
        time.sleep(0.05)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    return {"wall_s": wall, "peak_rss_mb": peak_rss / 2**20, "peak_uss_mb": peak_uss / 2**20}


def _best(runs: list[dict]) -> dict:
    """The fastest run's wall time, and the largest peaks of all runs."""
    best = dict(min(runs, key=lambda r: r["wall_s"]))
    best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    best["peak_uss_mb"] = max(r["peak_uss_mb"] for r in runs)
    return best


def _mb(v: float) -> str:
    return "-" if v != v else f"{v:.0f}"  # (nan: not measured)


def _walls(runs: list[dict]) -> str:
    return ", ".join(f"{r['wall_s']:.2f}" for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=Path("/tmp/big.json"))
    ap.add_argument("--copies", type=int, default=32, help="tiles of the 68k-event trace when --trace is missing")
    ap.add_argument("--hta-python", default=sys.executable, help="a python with holistictraceanalysis installed")
    ap.add_argument("--repeat", type=int, default=2, help="runs of Neuron Explorer (the best is reported)")
    ap.add_argument("--skip-hta", action="store_true", help="only time Neuron Explorer")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--baseline", type=Path, help="another source tree whose neuron_explorer package is timed too, alternating")
    ap.add_argument("--uss", action="store_true", help="also poll each process's USS (smaps: slows what it measures, see measure)")
    ap.add_argument("--python-reader", action="store_true",
                    help="also time the import with the C++ trace reader off (NEURON_EXPLORER_NATIVE=0), alternating")
    args = ap.parse_args()
    if args.baseline and not (args.baseline / "neuron_explorer" / "__init__.py").is_file():
        raise SystemExit(f"--baseline {args.baseline}: no neuron_explorer package there")

    if not args.trace.exists():
        print(f"making {args.trace} ({args.copies} copies of {BASE_TRACE.name}) ...", file=sys.stderr)
        subprocess.run([sys.executable, str(TILE), str(BASE_TRACE), str(args.trace), str(args.copies)], check=True)
    work = Path(tempfile.mkdtemp(prefix="bench_import_"))
    try:
        trace_dir = work / "trace"
        trace_dir.mkdir()
        os.symlink(args.trace.resolve(), trace_dir / args.trace.name)
        ours_runs, base_runs, py_runs = [], [], []
        load_before = os.getloadavg()
        # the C++ reader is compiled on first use: once here, so that no timed run pays for it
        subprocess.run([sys.executable, "-c", "from neuron_explorer.collectors import _json_native; _json_native.load()"],
                       cwd=REPO, check=True)
        # bytecode, as `pip install` compiles it: a source checkout run with PYTHONDONTWRITEBYTECODE
        # (set on the development machine) would compile the package again in every timed run
        for tree in (REPO, args.baseline):
            if tree:
                subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(tree) / "neuron_explorer")], check=True)
        for i in range(args.repeat):
            out = work / f"run{i}"
            # `python -m` imports the package of its working directory first: this tree, or the baseline
            ours_runs.append(measure([sys.executable, "-m", "neuron_explorer", "import", str(args.trace.resolve()), "-o", str(out)],
                                     cwd=REPO, uss=args.uss))
            run_bytes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
            shutil.rmtree(out)
            if args.python_reader:
                py_runs.append(measure([sys.executable, "-m", "neuron_explorer", "import", str(args.trace.resolve()), "-o", str(out)],
                                       cwd=REPO, env={**os.environ, "NEURON_EXPLORER_NATIVE": "0"}, uss=args.uss))
                shutil.rmtree(out)
            if args.baseline:
                base_runs.append(measure([sys.executable, "-m", "neuron_explorer", "import", str(args.trace.resolve()), "-o", str(out)],
                                         cwd=args.baseline.resolve(), uss=args.uss))
                shutil.rmtree(out)
        ours = _best(ours_runs)
        baseline = _best(base_runs) if base_runs else None
        hta = None if args.skip_hta else measure([args.hta_python, "-c", HTA_SCRIPT, str(trace_dir)], uss=args.uss)
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    trace_bytes = _json_bytes(args.trace)  # of JSON: a .gz trace's decompressed size
    result = {
        "trace": str(args.trace),
        "trace_mb": trace_bytes / 2**20,
        "file_mb": args.trace.stat().st_size / 2**20,
        "neuron_explorer": ours,
        "hta": hta,
        "baseline": baseline and {**baseline, "source": str(args.baseline), "runs": base_runs},
        "python_reader": py_runs and {**_best(py_runs), "runs": py_runs},
        "mb_per_s": trace_bytes / 1e6 / ours["wall_s"],
        "load_average": {"before": load_before, "after": load_after},
        "neuron_explorer_runs": ours_runs,
        "run_mb": run_bytes / 2**20,
        "run_vs_json": run_bytes / trace_bytes,
        "cpus": os.cpu_count(),
    }
    if hta:
        result["speedup"] = hta["wall_s"] / ours["wall_s"]
        result["rss_ratio"] = ours["peak_rss_mb"] / hta["peak_rss_mb"]
        result["uss_ratio"] = ours["peak_uss_mb"] / hta["peak_uss_mb"]
    if args.json:
        print(json.dumps(result, indent=1))
        return
    gz = f", {result['file_mb']:.0f} MB compressed" if result["file_mb"] != result["trace_mb"] else ""
    print(f"trace: {args.trace} ({result['trace_mb']:.0f} MB of JSON{gz}), {os.cpu_count()} CPUs")
    print(f"{'':22}{'wall s':>10}{'peak RSS MB':>14}{'peak USS MB':>14}")
    print(f"{'neuron-explorer':22}{ours['wall_s']:>10.2f}{ours['peak_rss_mb']:>14.0f}{_mb(ours['peak_uss_mb']):>14}"
          f"   (runs: {_walls(ours_runs)})")
    if py_runs:
        py = result["python_reader"]
        print(f"{'  Python reader only':22}{py['wall_s']:>10.2f}{py['peak_rss_mb']:>14.0f}{_mb(py['peak_uss_mb']):>14}"
              f"   (runs: {_walls(py_runs)})")
    if baseline:
        print(f"{'baseline':22}{baseline['wall_s']:>10.2f}{baseline['peak_rss_mb']:>14.0f}{_mb(baseline['peak_uss_mb']):>14}"
              f"   (runs: {_walls(base_runs)}; {args.baseline})")
    if hta:
        print(f"{'HTA TraceAnalysis':22}{hta['wall_s']:>10.2f}{hta['peak_rss_mb']:>14.0f}{_mb(hta['peak_uss_mb']):>14}")
        uss = "" if result["uss_ratio"] != result["uss_ratio"] else f", {result['uss_ratio']:.2f}x USS"  # (NaN: USS not polled, --uss)
        print(f"speedup {result['speedup']:.1f}x (target >= 25x); memory {result['rss_ratio']:.2f}x RSS{uss} of HTA")
    print(f"{result['mb_per_s']:.0f} MB/s of JSON (target >= 250); peak RSS {ours['peak_rss_mb'] / result['trace_mb']:.2f}x the "
          f"JSON (target <= 1); run size {result['run_mb']:.0f} MB = {result['run_vs_json']:.2f}x the JSON")
    print("load average (1, 5, 15 min) before {:.1f} {:.1f} {:.1f}, after {:.1f} {:.1f} {:.1f} on {} CPUs".format(
        *load_before, *load_after, os.cpu_count()))


def _json_bytes(path: Path) -> int:
    """The size of the trace's JSON: its file's, or for gzip the decompressed bytes, counted."""
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as f:
        while block := f.read(16 << 20):
            n += len(block)
    return n


if __name__ == "__main__":
    main()
