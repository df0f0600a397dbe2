"""Dashboard start, server side, side by side: `neuron-explorer dashboard RUN` of two source trees,
alternating, each in a fresh process: start → `/` answers, and → `/_dash-layout` answers (the page
with its first timeline). Prints the load average with each figure; read the ratios.

    git archive <commit> | tar -x -C /tmp/before
    python bench/bench_serve_start.py RUN [REPEAT] [--before /tmp/before]

Each server runs with its tree as working directory and PYTHONPATH (`python -m` puts the working
directory first on the path: started from this checkout, the "before" server ran this checkout's code).
A RUN that is not a run directory is refused; a server that exits before answering is reported.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import _cli


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(url: str, proc) -> float:
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"bench_serve_start.py: the server exited ({proc.returncode}) before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=600) as r:
                r.read()
                return time.time()
        except OSError:
            time.sleep(0.05)


def main() -> None:
    _cli.help_if_asked(__doc__)
    args = sys.argv[1:]
    before = "/tmp/before"
    if "--before" in args:
        k = args.index("--before")
        before = args[k + 1]
        del args[k:k + 2]
    if not args:
        raise SystemExit("bench_serve_start.py: give a RUN (--help for usage)")
    run, repeat = str(_cli.run_dir(args[0]).resolve()), int(args[1]) if len(args) > 1 else 1
    if not (Path(before) / "neuron_explorer" / "__init__.py").is_file():
        raise SystemExit(f"bench_serve_start.py: --before {before}: not a source tree (no neuron_explorer/__init__.py)")
    trees = {"before": before, "after": str(Path(__file__).resolve().parents[1])}
    print(f"load {os.getloadavg()[0]:.1f}")
    for _ in range(repeat):
        for name, tree in trees.items():
            port = free_port()
            t = time.time()
            proc = subprocess.Popen([sys.executable, "-m", "neuron_explorer", "dashboard", run, "--port", str(port)],
                                    cwd=tree, env={**os.environ, "PYTHONPATH": tree}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            a = until(f"http://127.0.0.1:{port}/", proc) - t
            b = until(f"http://127.0.0.1:{port}/_dash-layout", proc) - t
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            print(f"{name}: / answers {a:.2f} s, page with its first timeline {b:.2f} s after start; load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
