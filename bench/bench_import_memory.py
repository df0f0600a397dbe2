"""Peak memory of importing one trace against the plan the importer sizes its workers by.

The plan (collectors/chrome_trace.py `import_need`): WORKER_BASE_BYTES + WORKER_BYTES_PER_JSON_BYTE x
the trace's JSON size (for a .gz, the expanded size). Each shape is imported by `python -m
neuron_explorer import` in its own process; the benchmark polls the whole process tree (the
importer's decode uses worker processes) every 50 ms and reports the peak of the summed RSS and of
the summed USS (pages shared after fork counted once), as bench_import.py does.

    python bench/bench_import_memory.py                 # tiny events (200 MiB), the 68k trace tiled 8x, and gzips of both
    python bench/bench_import_memory.py --tiny-mib 50 --copies 4
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_import import TILE, measure  # noqa: E402

if not TILE.exists():  # a worktree beside the shared folder's checkout
    TILE = Path("/work/shared/tools/tile_trace.py")

from neuron_explorer.collectors import chrome_trace  # noqa: E402

BASE_TRACE = REPO / "tests" / "data" / "traces" / "cuda_train_68k_events.json.gz"


def tiny_events(path: Path, mib: int) -> None:
    """A trace of `mib` MiB of the smallest complete events a profiler writes (about 60 bytes each)."""
    target = mib << 20
    with open(path, "w") as f:
        f.write('{"traceEvents": [\n')
        i = n = 0
        while n < target:
            line = f'{{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":{i},"dur":1}},\n'
            f.write(line)
            n += len(line)
            i += 2
        f.write('{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":%d,"dur":1}\n]}\n' % i)


def gzipped(path: Path) -> Path:
    out = path.with_name(path.name + ".gz")
    with open(path, "rb") as src, gzip.open(out, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny-mib", type=int, default=200, help="MiB of tiny events")
    ap.add_argument("--copies", type=int, default=8, help="tiles of the 68k-event trace")
    ap.add_argument("--no-gzip", action="store_true", help="skip the gzip shapes")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_import_memory_"))
    try:
        tiny = work / "tiny.json"
        tiny_events(tiny, args.tiny_mib)
        tiled = work / "tiled.json"
        subprocess.run([sys.executable, str(TILE), str(BASE_TRACE), str(tiled), str(args.copies)], check=True)
        shapes = [(f"tiny events {args.tiny_mib} MiB", tiny), (f"68k trace tiled {args.copies}x", tiled)]
        if not args.no_gzip:
            shapes += [(f"tiny events {args.tiny_mib} MiB, gzip", gzipped(tiny)), (f"68k trace tiled {args.copies}x, gzip", gzipped(tiled))]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, cores: {os.cpu_count()}")
        print(f"{'shape':34} {'file MB':>8} {'JSON MB':>8} {'plan MB':>8} {'peak RSS':>9} {'peak USS':>9} {'USS/plan':>8} {'USS/JSON':>8} {'wall s':>7}")
        for name, path in shapes:
            js = chrome_trace.json_bytes(path)
            plan = chrome_trace.import_need(path)
            out = work / "run"
            r = measure([sys.executable, "-m", "neuron_explorer", "import", str(path), "-o", str(out), "--force"], env=env)
            shutil.rmtree(out, ignore_errors=True)
            uss = r["peak_uss_mb"] * 2**20
            print(f"{name:34} {path.stat().st_size / 1e6:8.0f} {js / 1e6:8.0f} {plan / 1e6:8.0f} {r['peak_rss_mb'] * 2**20 / 1e6:9.0f} "
                  f"{uss / 1e6:9.0f} {uss / plan:8.2f} {(uss - chrome_trace.WORKER_BASE_BYTES) / js:8.2f} {r['wall_s']:7.1f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
