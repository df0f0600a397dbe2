"""The index the critical path walks (analyzers/critical_path.py): a rank's events, and the
moves of the model — the host event charged at a moment, the device work a runtime call waited
for, a device event's predecessor, the device work running at a moment.

Private to critical_path.py (may change). Must not: charge time (the walk does) or read the run.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from dataclasses import dataclass, field

from .metrics import COMM_KERNEL_PATTERN, DEVICE_WORK_KINDS

RUNTIME_WAIT_MIN_NS = 20_000
"""A runtime call at least this long, during which device work finished, is taken as waiting for
the device (a launch blocked on a full launch queue); shorter calls are launch overhead."""

UNLINKED_GAP_MAX_NS = 10_000
"""A device event with no recorded launch follows the previous work on its stream only when it
started within this long after it (back to back); after a longer gap nothing says what it waited
for, and the path returns to the host."""

HOST_KINDS = ("cpu_op", "python", "user_annotation", "step", "runtime")
"""Host events the path can charge."""


@dataclass(eq=False)
class Ev:
    __slots__ = ("id", "kind", "name", "ts", "end", "track", "device", "stream", "launch_id", "pass_", "frame", "args")
    id: int
    kind: str
    name: str
    ts: int
    end: int
    track: tuple
    device: int | None
    stream: int | None
    launch_id: int | None
    pass_: str | None
    frame: int | None
    args: str | None


@dataclass
class _Track:
    """A host thread: the innermost event from each change point on (points sorted)."""
    points: list[int] = field(default_factory=list)
    inner: list = field(default_factory=list)

    def at(self, t: int):
        """(innermost event just before t or None, the change point where that began)."""
        i = bisect_left(self.points, t) - 1
        return (None, None) if i < 0 else (self.inner[i], self.points[i])


def _build_track(events: list[Ev]) -> _Track:
    events = sorted(events, key=lambda e: (e.ts, -e.end, e.id))
    bounds = sorted({e.ts for e in events} | {e.end for e in events})
    tr, stack, j = _Track(), [], 0
    for b in bounds:
        while stack and stack[-1].end <= b:
            stack.pop()
        while j < len(events) and events[j].ts == b:
            stack.append(events[j])
            j += 1
        while stack and stack[-1].end <= b:  # improperly nested slices: drop what has already ended
            stack.pop()
        top = stack[-1] if stack else None
        if not tr.inner or tr.inner[-1] is not top:
            tr.points.append(b)
            tr.inner.append(top)
    return tr


class RankIndex:
    """A rank's events, indexed for the walk."""

    def __init__(self, rows):
        comm = re.compile(COMM_KERNEL_PATTERN)
        self.by_id: dict[int, Ev] = {}
        host: dict[tuple, list[Ev]] = {}
        streams: dict[tuple, list[Ev]] = {}
        self.syncs_of_launch: dict[int, list[Ev]] = {}
        self.stream_waits: dict[tuple, list[Ev]] = {}
        self.launched: dict[int, list[Ev]] = {}
        for r in rows:
            e = Ev(*r)
            self.by_id[e.id] = e
            if e.device is None:
                if e.kind in HOST_KINDS:
                    host.setdefault(e.track, []).append(e)
            elif e.kind in DEVICE_WORK_KINDS:
                streams.setdefault((e.device, e.stream), []).append(e)
                if e.launch_id is not None:
                    self.launched.setdefault(e.launch_id, []).append(e)
            elif e.kind == "sync":
                if e.launch_id is not None:
                    self.syncs_of_launch.setdefault(e.launch_id, []).append(e)
                if "Wait" in e.name:
                    self.stream_waits.setdefault((e.device, e.stream), []).append(e)
        self.tracks = {k: _build_track(v) for k, v in sorted(host.items(), key=lambda kv: str(kv[0]))}
        self.streams = {}
        self.stream_pos: dict[int, tuple[tuple, int]] = {}
        for key, evs in sorted(streams.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
            evs.sort(key=lambda e: (e.ts, e.end, e.id))
            self.streams[key] = (evs, [e.ts for e in evs])
            for i, e in enumerate(evs):
                self.stream_pos[e.id] = (key, i)
        for key in self.stream_waits:
            self.stream_waits[key].sort(key=lambda e: (e.ts, e.id))
        self.is_comm = {e.id for evs, _ in self.streams.values() for e in evs if e.kind == "kernel" and comm.search(e.name or "")}
        self._wait_targets: dict[int, object] = {}

    # --- host side -------------------------------------------------------------------------
    def host_at(self, t: int, step_track: tuple, floor: int) -> tuple[Ev | None, int]:
        """The host event charged just before t, and the time from which that choice holds."""
        own = self.tracks.get(step_track)
        ev, lo = own.at(t) if own else (None, None)
        lo = floor if lo is None else max(lo, floor)
        if ev is not None and ev.kind in ("cpu_op", "runtime"):
            return ev, lo
        best = None
        for key, tr in self.tracks.items():
            if key == step_track:
                continue
            other, olo = tr.at(t)
            if olo is not None:
                lo = max(lo, olo)
            if other is not None and other.kind in ("cpu_op", "runtime") and (best is None or other.ts > best.ts):
                best = other
        return (best or ev), lo

    def wait_targets(self, x: Ev):
        """The streams a runtime call may wait on: a set of (device, stream), None for every stream,
        "own" for a blocking copy (its own copy), or False when the call does not wait for the device."""
        if x.id in self._wait_targets:
            return self._wait_targets[x.id]
        name = x.name or ""
        targets: object = False
        if "Synchronize" in name:
            targets = set()
            for s in self.syncs_of_launch.get(x.id, []):
                kind = _sync_kind(s)
                if kind == "Stream Sync" and s.stream is not None and s.stream >= 0:
                    targets.add((s.device, s.stream))
                elif kind == "Event Sync" and _arg_int(s, "wait_on_stream", -1) >= 0:
                    targets.add((s.device, _arg_int(s, "wait_on_stream", -1)))
                else:
                    targets = None
                    break
            if targets is not None and not targets:
                targets = None
        elif "Memcpy" in name or "memcpy" in name:
            own = self.launched.get(x.id, [])
            if own and all(d.ts < x.end for d in own):
                targets = "own"  # a blocking copy: it returns when its own copy is done
        elif x.end - x.ts >= RUNTIME_WAIT_MIN_NS:
            targets = None
        self._wait_targets[x.id] = targets
        return targets

    def awaited(self, x: Ev, t: int) -> Ev | None:
        """The device work a waiting runtime call x waited for, as seen just before t: on its
        target streams, the event started before t that ended last within the call."""
        targets = self.wait_targets(x)
        if targets is False:
            return None
        if targets == "own":
            own = [d for d in self.launched.get(x.id, []) if d.ts < t]
            return max(own, key=lambda d: (d.end, d.id)) if own else None
        best = None
        for key, (evs, starts) in self.streams.items():
            if targets is not None and key not in targets:
                continue
            i = bisect_left(starts, min(t, x.end)) - 1
            while i >= 0 and evs[i].end > x.end:
                i -= 1
            if i >= 0 and evs[i].end > x.ts and (best is None or evs[i].end > best.end):
                best = evs[i]
        return best

    # --- device side -----------------------------------------------------------------------
    def running_at(self, t: int) -> Ev | None:
        """The device work still running at t (started before, ends after), the one started last;
        collectives are left out (one may spin waiting for other ranks while the host goes on)."""
        best = None
        for evs, starts in self.streams.values():
            i = bisect_left(starts, t) - 1
            if i >= 0 and evs[i].end > t and evs[i].id not in self.is_comm and (best is None or (evs[i].ts, evs[i].id) > (best.ts, best.id)):
                best = evs[i]
        return best

    def predecessor(self, d: Ev):
        """(ready time, kind, event) of the predecessor that became ready last, or None."""
        ds = d.ts
        key, i = self.stream_pos[d.id]
        evs, _ = self.streams[key]
        cands = []
        prev = evs[i - 1] if i > 0 else None
        launch = self.by_id.get(d.launch_id) if d.launch_id is not None else None
        if prev is not None and (launch is not None or ds - prev.end <= UNLINKED_GAP_MAX_NS):
            cands.append((min(prev.end, ds), 2, "stream", prev))
        if launch is not None and launch.device is None:
            blocking = self.wait_targets(launch) is not False and "Synchronize" not in (launch.name or "")
            ready = launch.ts if blocking and launch.end > ds else min(launch.end, ds)
            cands.append((min(ready, ds), 1, "launch", launch))
        for w in self.stream_waits.get(key, []):
            if w.ts > ds or (prev is not None and w.ts < prev.ts):
                continue
            other = _arg_int(w, "wait_on_stream", -1)
            if other < 0 or (key[0], other) not in self.streams or (key[0], other) == key:
                continue
            oevs, ostarts = self.streams[(key[0], other)]
            j = bisect_left(ostarts, ds) - 1
            while j >= 0 and oevs[j].end > ds:
                j -= 1
            if j >= 0:
                cands.append((oevs[j].end, 0, f"stream {other}", oevs[j]))
        if not cands:
            return None
        ready, _, how, ev = max(cands, key=lambda c: (c[0], c[1]))
        return ready, how, ev


def _args(e: Ev) -> dict:
    try:
        a = json.loads(e.args or "{}")
    except ValueError:
        return {}
    return a if isinstance(a, dict) else {}


def _sync_kind(e: Ev) -> str:
    return _args(e).get("cuda_sync_kind") or e.name


def _arg_int(e: Ev, key: str, default: int) -> int:
    try:
        return int(_args(e).get(key, default))
    except (ValueError, TypeError):
        return default
