"""Start-up of the `neuron-explorer` command: wall time of `--help`, `version` and `info` of a small run.

Targets (issue 37): at most 0.5 s for `--help` and `version`, at most 1 s for `info` of a small run.
Each command runs in a fresh process, as a user types it (`python -c` of the console script's
entry point, the source tree on PYTHONPATH); the median and the best of `--repeat` runs are
printed, with the load average before and after (the machine is shared).

    python bench/bench_startup.py                          # this tree
    python bench/bench_startup.py --baseline /tmp/old      # another tree too, runs alternating

`--baseline DIR` times the `neuron_explorer` package of another source tree (e.g. `git worktree
add /tmp/old <commit>`) against this one, run by run, so that both see the same load. Also shown:
which heavy packages `import neuron_explorer.cli` loads (none is the aim: torch, pandas, dash,
ray, pyarrow, duckdb and numpy are imported by the commands that use them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMALL_TRACE = REPO / "tests" / "data" / "traces" / "cuda_simple_add.json.gz"
ENTRY = "import sys; sys.argv[0] = 'neuron-explorer'; from neuron_explorer.cli import main; main()"
HEAVY = ("torch", "pandas", "dash", "ray", "pyarrow", "duckdb", "numpy", "rich")


def _env(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(tree)}


NEUTRAL_CWD = tempfile.gettempdir()
"""Where the commands run: `python -c` puts the current directory first on sys.path, and a source
tree there would shadow the one on PYTHONPATH."""


def _time(tree: Path, args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", ENTRY, *args], env=_env(tree), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=NEUTRAL_CWD)
    return time.perf_counter() - start


def _heavy_imports(tree: Path) -> list[str]:
    code = f"import sys, neuron_explorer.cli; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    return subprocess.run([sys.executable, "-c", code], env=_env(tree), capture_output=True, text=True, check=True,
                          cwd=NEUTRAL_CWD).stdout.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--baseline", type=Path, help="another source tree to time against this one")
    opts = parser.parse_args()
    trees = {"this tree": REPO}
    if opts.baseline:
        trees["baseline"] = opts.baseline.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "small"
        subprocess.run([sys.executable, "-m", "neuron_explorer", "import", str(SMALL_TRACE), "-o", str(run)], env=_env(REPO),
                       check=True, stdout=subprocess.DEVNULL)
        commands = {"--help": ["--help"], "version": ["version"], "info (small run)": ["info", str(run)]}
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        times: dict = {(t, c): [] for t in trees for c in commands}
        for _ in range(opts.repeat):
            for c, args in commands.items():
                for t, tree in trees.items():
                    times[t, c].append(_time(tree, args))
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\n| command | {' | '.join(f'{t}: median (best)' for t in trees)} |")
    print(f"| --- | {' | '.join('---' for _ in trees)} |")
    for c in commands:
        cells = [f"{statistics.median(times[t, c]):.2f} s ({min(times[t, c]):.2f} s)" for t in trees]
        print(f"| {c} | {' | '.join(cells)} |")
    for t, tree in trees.items():
        print(f"\n{t}: `import neuron_explorer.cli` loads {', '.join(_heavy_imports(tree)) or 'none of ' + ', '.join(HEAVY)}")


if __name__ == "__main__":
    main()
