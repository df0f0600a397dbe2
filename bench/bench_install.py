"""A new user's install: the wheel in a fresh virtualenv, without extras (the README's first
command) and with `[test]`, each timed and sized; then the demo from the install without extras.

For each variant: a new venv, `pip install torch==2.13.0` (whatever index pip is configured for:
the CPU wheel index on a CPU-only machine, see README), then `pip install WHEEL[extras]`; the
time of each step and the size of the venv's site-packages are printed. The demo then runs from
the install without extras in an empty directory (its first run compiles the C++ converter: the
time includes it, and the notice on stderr says so) and must print a report.

    python bench/bench_install.py                      # without extras, then the demo
    python bench/bench_install.py --extras "" test     # both variants
    python bench/bench_install.py --torch-index https://download.pytorch.org/whl/cpu

Exit code 1 when an install or the demo fails, so CI can run it as the fresh-install test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return time.perf_counter() - start, res


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def _check(res: subprocess.CompletedProcess, what: str) -> None:
    if res.returncode != 0:
        sys.exit(f"bench_install: {what} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", nargs="*", default=[""], help='variants to install: "" (none), test, ray, ... (default: none)')
    parser.add_argument("--torch", default="torch==2.13.0")
    parser.add_argument("--torch-index", help="pip --index-url for torch (e.g. https://download.pytorch.org/whl/cpu)")
    parser.add_argument("--no-demo", action="store_true")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nx-install-") as tmp:
        work = Path(tmp)
        t, res = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(REPO)])
        _check(res, "building the wheel")
        wheel = next((work / "dist").glob("neuron_explorer-*.whl"))
        print(f"wheel: {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB, built in {t:.0f} s)")
        print("| variant | torch install | project install | total | site-packages |")
        print("| --- | --- | --- | --- | --- |")
        venvs = {}
        for extra in opts.extras:
            venv = work / f"venv-{extra or 'none'}"
            _check(_run([sys.executable, "-m", "venv", str(venv)])[1], "creating the venv")
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
            t_torch, res = _run([*pip, opts.torch, *(["--index-url", opts.torch_index] if opts.torch_index else [])])
            _check(res, f"installing {opts.torch}")
            t_proj, res = _run([*pip, f"{wheel}[{extra}]" if extra else str(wheel)])
            _check(res, f"installing the wheel [{extra}]")
            site = next((venv / "lib").glob("python*/site-packages"))
            print(f"| {'[' + extra + ']' if extra else 'no extras'} | {t_torch:.0f} s | {t_proj:.0f} s | {t_torch + t_proj:.0f} s "
                  f"| {_size_mb(site):,.0f} MB |", flush=True)
            venvs[extra] = venv
        if not opts.no_demo:
            venv = venvs.get("", next(iter(venvs.values())))
            run_dir = work / "demo"
            run_dir.mkdir()
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            env["NEURON_EXPLORER_NATIVE_DIR"] = str(work / "native")  # a first run: nothing compiled yet
            t, res = _run([str(venv / "bin" / "neuron-explorer"), "demo"], cwd=run_dir, env=env)
            _check(res, "the demo")
            if "Neuron Explorer report" not in res.stdout:
                sys.exit(f"bench_install: the demo printed no report:\n{res.stdout[-2000:]}")
            notices = [line for line in res.stderr.splitlines() if "compiling" in line]
            print(f"\ndemo (first run, from the install without extras): {t:.0f} s, report printed")
            for line in notices:
                print(f"  {line}")


if __name__ == "__main__":
    main()
