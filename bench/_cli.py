"""What the bench scripts do with their command line before they measure anything: `-h`/`--help`
prints the script's docstring and exits; a run directory that is not there, or is not a run, is
refused in one line (a script never starts a server on it and polls).

Must not: import the project (a script may measure another tree's code in a subprocess).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def help_if_asked(doc: str | None, argv: list[str] | None = None) -> None:
    """Print `doc` and exit 0 when the command line asks for help."""
    args = sys.argv[1:] if argv is None else argv
    if "-h" in args or "--help" in args:
        print((doc or "").strip())
        raise SystemExit(0)


def run_dir(path: str | Path) -> Path:
    """`path` when it is a run directory (a readable manifest.json); else exit 2 with one line."""
    p = Path(path)
    if not p.exists():
        why = "no such path"
    elif not (p / "manifest.json").is_file():
        why = "not a run directory (no manifest.json)"
    else:
        try:
            json.loads((p / "manifest.json").read_bytes())
            return p
        except (OSError, ValueError) as e:
            why = f"unreadable manifest.json ({e})"
    print(f"{Path(sys.argv[0]).name}: {path}: {why}; make one with `neuron-explorer import TRACE -o RUN` (--help for usage)",
          file=sys.stderr)
    raise SystemExit(2)
