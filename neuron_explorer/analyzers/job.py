"""What job a run recorded, and whether two runs recorded the same one.

A comparison of step times only means something between two recordings of the same job: the same
script, the same model and the same kind of device. `identity` reads what a run says about its
job; `differences` lists, in words, how two runs differ ("script: train.py vs bench.py"), and is
empty when nothing says they differ. diff.compare turns a non-empty list into a "cannot tell"
verdict and a note, so neither the CLI nor the dashboard prints "SLOWER +1350%" between two
different programs. Definitions: docs/COMPARE.md ("Not the same job").

- script: the file name of the command's script (live runs; an imported trace names no script).
- model: the top-level module's class (the first part of `events.module_path`, its `_0`
  instance suffix dropped); when neither run recorded modules, the operator names: runs that
  share fewer than MIN_SHARED_OPERATORS of the operator names either of them ran differ.
- device: the device names the runs reported, and whether they ran device work at all.

Must not: compare times (analyzers/diff/ does) or print.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from ..store import Run
from ..vocab import device_work
from .metrics import device_events_lost

MIN_SHARED_OPERATORS = 0.5
"""Two runs with no module names are different models when they share fewer than this share of
the operator names that either ran (|A ∩ B| / |A ∪ B|)."""
_INSTANCE = re.compile(r"_\d+$")


def identity(run: Run) -> dict:
    """script (or None), models (top-level module classes), operators (names), devices (names),
    device_work (whether any kernel, copy or set ran on a device), device_events_lost (no device work
    recorded, but launches were: metrics.device_events_lost)."""
    m = run.manifest
    script = None
    cmd = m.get("command")
    if m.get("source") == "live" and isinstance(cmd, list) and cmd:
        head = [str(x) for x in cmd]
        script = " ".join(head[:2]) if head[0] in ("-m", "-c") else PurePath(head[0]).name
    roots = {r[0] for r in run.sql("SELECT DISTINCT split_part(module_path, '.', 1) FROM events "
                                   "WHERE module_path IS NOT NULL AND module_path <> ''").fetchall()}
    ops = {r[0] for r in run.sql("SELECT DISTINCT name FROM events WHERE kind = 'cpu_op'").fetchall()}
    devices = sorted({r[0] for r in run.sql("SELECT DISTINCT name FROM devices WHERE name IS NOT NULL").fetchall()})
    work = run.sql(f"SELECT count(*) FROM (SELECT 1 FROM events WHERE {device_work()} "
                   "AND device IS NOT NULL LIMIT 1)").fetchall()[0][0] > 0
    lost = any(device_events_lost(e) for e in m.get("ranks", []))
    return {"script": script, "models": sorted({_INSTANCE.sub("", r) for r in roots}), "operators": ops,
            "devices": devices, "device_work": bool(work), "device_events_lost": bool(lost and not work)}


def differences(base: dict, test: dict) -> list[str]:
    """How two runs' identities (from `identity`) say they are different jobs; [] when nothing does."""
    out = []
    if base["script"] and test["script"] and base["script"] != test["script"]:
        out.append(f"script: {base['script']} vs {test['script']}")
    if base["models"] and test["models"]:
        if not set(base["models"]) & set(test["models"]):
            out.append(f"model: {', '.join(base['models'])} vs {', '.join(test['models'])}")
    elif not base["models"] and not test["models"] and base["operators"] and test["operators"]:
        union = base["operators"] | test["operators"]
        shared = len(base["operators"] & test["operators"]) / len(union)
        if shared < MIN_SHARED_OPERATORS:
            out.append(f"model: they share {shared:.0%} of their {len(union)} operator names")
    if base["device_work"] != test["device_work"] and not (base.get("device_events_lost") or test.get("device_events_lost")):
        # a run whose trace lost its device events ran on a device too: nothing says the jobs differ
        where = lambda x: ", ".join(x["devices"]) or "a device" if x["device_work"] else "the CPU only"  # noqa: E731
        out.append(f"device: {where(base)} vs {where(test)}")
    elif base["devices"] and test["devices"] and base["devices"] != test["devices"]:
        out.append(f"device: {', '.join(base['devices'])} vs {', '.join(test['devices'])}")
    return out
