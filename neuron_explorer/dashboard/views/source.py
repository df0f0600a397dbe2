"""The source view: the user's code around a frame's line, read from the file the run's frame names.

A request names a frame id, never a path. The file is looked for where the run says it came from:
an absolute path as recorded; a relative one (`python sub/train.py` records `sub/train.py`) under
the working directory the live collector recorded (manifest `cwd`), then the folders of the
imported traces, then the folder the run lives in (`OpenRun.source_roots`). The answer says where
it looked (`looked_in`), so the panel can say why a file was not found.

Must not: read a file that is not a .py source of at most MAX_SOURCE_BYTES, whatever a (possibly
hostile) run names, or draw.
"""

from __future__ import annotations

from pathlib import Path

from ..runs import OpenRun, QueryError, RunSet, parse_int

SOURCE_CONTEXT = 7
"""Lines shown above and below the user's line."""
MAX_SOURCE_BYTES = 2 << 20
"""Larger files are not read."""
MAX_CALLERS = 20
"""Most caller frames listed."""


def candidates(r: OpenRun, file: str) -> list[Path]:
    """Where a frame's file is looked for, in order (see the module docstring)."""
    p = Path(file)
    return [p] if p.is_absolute() else [root / p for root in r.source_roots()]


def resolve(r: OpenRun, file: str) -> Path | None:
    """The readable .py file a frame names, or None. The check is made on the real path, symlinks
    resolved (`evil.py -> /etc/passwd` is not a .py file)."""
    if not file or not file.endswith(".py") or "\x00" in file:
        return None
    for c in candidates(r, file):
        try:
            real = c.resolve(strict=True)
            if real.suffix == ".py" and real.is_file() and real.stat().st_size <= MAX_SOURCE_BYTES:
                return real
        except (OSError, RuntimeError):  # missing, unreadable, or a symlink loop
            continue
    return None


def frame_row(r: OpenRun, frame_id: int) -> dict | None:
    recs = r.records("SELECT frame_id, file, line, function, is_user, line_kind, parent_frame_id FROM frames WHERE frame_id = ?",
                     [frame_id])
    return recs[0] if recs else None


def source(rs: RunSet, run=0, frame_id=None, context=None) -> dict:
    """The code around a frame's line: file, line, function, the callers (live runs record parent
    frames), `readable` with `lines` ({line, text, current}) when the file was found, else
    `reason`; `path` is the file read and `looked_in` the places tried, in order."""
    r = rs.get(run)
    fid = parse_int(frame_id, "frame_id")
    ctx = parse_int(context, "context", SOURCE_CONTEXT, 0, 50)
    f = frame_row(r, fid)
    if f is None:
        raise QueryError(f"no frame {fid} in run {r.index}")
    out = {"frame_id": fid, "file": f["file"], "line": f["line"], "function": f["function"], "is_user": f["is_user"],
           "line_kind": f["line_kind"], "readable": False, "lines": [], "callers": [], "path": None,
           "looked_in": [str(c) for c in candidates(r, f["file"])] if f["file"] else []}
    seen, cur = {fid}, f["parent_frame_id"]
    while cur is not None and cur not in seen and len(out["callers"]) < MAX_CALLERS:
        seen.add(cur)
        up = frame_row(r, cur)
        if up is None:
            break
        out["callers"].append({k: up[k] for k in ("frame_id", "file", "line", "function")})
        cur = up["parent_frame_id"]
    path = resolve(r, f["file"])
    if path is None:
        out["reason"] = ("source file not found; looked at " + ", ".join(out["looked_in"]) if out["looked_in"]
                         else "the frame names no source file")
        return out
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as e:
        out["reason"] = f"cannot read {path} ({e.strerror})"
        return out
    line = int(f["line"] or 0)
    lo, hi = max(1, line - ctx), min(len(text), line + ctx)
    out.update(readable=True, path=str(path),
               lines=[{"line": n, "text": text[n - 1], "current": n == line} for n in range(lo, hi + 1)])
    return out
