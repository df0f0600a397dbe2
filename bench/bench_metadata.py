"""Import of a trace that repeats a few metadata events many times (issue #37 item 9: a real trace
held 310,046 metadata events, 24 distinct): import time and the manifest's size.

    python bench/bench_metadata.py [--events 310046] [--distinct 24]

Run it from a checkout (PYTHONPATH=$PWD) to measure that checkout's import."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import MANIFEST


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=310_046)
    ap.add_argument("--distinct", type=int, default=24)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "meta.json"
        events = [{"ph": "M", "name": "process_labels", "pid": i % a.distinct, "tid": 0, "ts": i, "args": {"labels": f"device {i % a.distinct}"}}
                  for i in range(a.events)]
        events += [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5, "args": {}} for i in range(1000)]
        trace.write_text(json.dumps({"traceEvents": events}))
        start = time.perf_counter()
        run = import_traces(trace, Path(tmp) / "run").run_dir
        took = time.perf_counter() - start
        size = (run / MANIFEST).stat().st_size
        print(f"{a.events} metadata events ({a.distinct} distinct), trace {trace.stat().st_size / 1e6:.1f} MB: import {took:.2f} s, "
              f"manifest.json {size / 1e6:.3f} MB")


if __name__ == "__main__":
    main()
