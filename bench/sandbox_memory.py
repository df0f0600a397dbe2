"""Peak memory of the SQL sandbox's worker on runaway queries, against its memory limit (issue 40.1).

For each query: the worker's peak resident memory (VmHWM, sampled every 20 ms by a thread here and
read once more after the call), the time the call took and its one-line answer. Run:

    python bench/sandbox_memory.py RUN [LIMIT_MB ...]

The figures go in the commit and the issue's note; they depend on the machine's load (say `uptime`).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import _cli

from neuron_explorer.agent.sandbox import Sandbox

BOMBS = {
    "list_range bomb (range lists of 100M+ BIGINTs)": "SELECT sum(len(range(0, 100000000 + i))) FROM range(50) t(i)",
    "list of big strings aggregated": "SELECT len(list(repeat('x', 1000000) || i::VARCHAR)) FROM range(6000) t(i)",
    "wide rows of big strings fetched": "SELECT repeat('x', 20000000) || i::VARCHAR AS a, repeat('y', 20000000) AS b FROM range(1000) t(i)",
    "struct rows of big strings fetched": "SELECT {'a': repeat('x', 30000000), 'b': [repeat('z', 1000000) for j in range(20)]} AS s FROM range(500)",
}


def _hwm(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def main(run: str, limits: list[int]) -> None:
    print(f"load average: {os.getloadavg()}")
    for limit in limits:
        with Sandbox(run, memory_limit_mb=limit) as box:
            for name, sql in BOMBS.items():
                worker = box._worker
                if worker is None:
                    box.query("SELECT 1")
                    worker = box._worker
                pid, peak, done = worker.proc.pid, [0], threading.Event()

                def watch(pid=pid, peak=peak, done=done):
                    while not done.is_set():
                        peak[0] = max(peak[0], _hwm(pid))
                        time.sleep(0.02)

                t = threading.Thread(target=watch, daemon=True)
                t.start()
                t0 = time.perf_counter()
                res = box.query(sql, timeout_s=10)
                took = time.perf_counter() - t0
                peak[0] = max(peak[0], _hwm(pid))
                done.set()
                t.join()
                answer = res.error if not res.ok else f"ok, {res.row_count} rows, truncated={res.truncated} ({res.note})"
                print(f"limit {limit} MB | {name}: peak RSS {peak[0]} MB, {took:.1f} s | {answer}")


if __name__ == "__main__":
    _cli.help_if_asked(__doc__)
    if len(sys.argv) < 2:
        raise SystemExit("sandbox_memory.py: give a RUN (--help for usage)")
    main(str(_cli.run_dir(sys.argv[1])), [int(x) for x in sys.argv[2:]] or [2048])
