"""Graph replays matched to their capture: the operator and statement each replayed kernel had when
its graph was captured.

A CUDA/HIP graph replay (`cudaGraphLaunch`, `hipGraphLaunch`) runs kernels that were launched once,
at capture, under the model's operators and statements; the replay's trace shows only the launch.
When the capture was profiled too (vLLM and SGLang keep it as separate trace files), each captured
graph is the launch calls (kernel launches, copies and sets) on the capturing thread between
`…StreamBeginCapture` and `…StreamEndCapture`, in call order, each with the operator around it, the
outermost operator, and its statement and frame. `graphs_of` reads those from a capture trace's
built tables (chrome_trace.read_captures);
`link_replays` matches them to the replayed device work of each graph launch (the rule, in
docs/METRICS.md "Graph replays"):

- a launch's replayed device events, in time order, are its sequence; a node's key is its kernel
  name (a launch call's `kernel` arg; none recorded: any kernel), 'memcpy' or 'memset';
- the launch takes a captured graph with the same keys in the same order (exact match); when several
  captured graphs match (a graph captured several times), the launches with that sequence take them
  in turn, in capture order;
- else the graph that aligns most of its events (each replayed event, in order, pairs with the next
  captured node of the same key), when that is at least half of them; the events left unpaired keep
  their launch's attribution;
- a paired event takes the node's operator names (columns `capture_op`, `capture_top_op`) and, when
  the node had one, its statement and frame (the capture's frames are appended to the rank's).

Must not: read files, or know about the run directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..schema import KINDS
from ..vocab import is_memcpy_call_name, is_memset_call_name
from .kineto_names import CAPTURE_BEGIN_CALL, CAPTURE_END_CALL, GRAPH_LAUNCH_CALL, KERNEL_ARG, LAUNCH_CALL

CAPTURE_FOLDER = "capture_traces"
"""A folder of capture traces, read as the captures of the trace(s) beside it or above it (TraceLens's layout)."""
_K = {k: k for k in KINDS}
"""The run's kinds, looked up by their name (the collectors spell no kind themselves)."""
MIN_PARTIAL_SHARE = 0.5
"""A launch whose sequence matches no captured graph exactly takes the best-aligned one only when at
least this share of its events pair."""


@dataclass
class CapturedGraph:
    source: str  # the capture trace it came from
    keys: list  # per node, in capture order: kernel name (None: not recorded), 'memcpy' or 'memset'
    op: list  # innermost operator name around the launch call (None: none)
    top_op: list  # outermost operator name
    frame: list  # index into Captures.frames (-1: none)
    source_frame: list  # the statement (index into Captures.frames, -1: none)


@dataclass
class Captures:
    graphs: list = field(default_factory=list)
    frames: list = field(default_factory=list)  # (file, line, function, is_user, line_kind, parent index or -1)
    files: list = field(default_factory=list)
    rank: dict = field(default_factory=dict)  # capture file -> its rank (None: not said)
    whole: bool = False  # every rank takes every capture (an import of one trace)

    def for_rank(self, rank: int) -> Captures:
        """The captures recorded by `rank` (and those that name no rank)."""
        keep = [g for g in self.graphs if self.rank.get(g.source) in (None, rank)]
        return Captures(keep, self.frames, self.files, self.rank, True)


def _node_key(name: str, args: str | None) -> tuple[bool, str | None]:
    """(is a node, key) for a runtime call made during a capture."""
    if not name or GRAPH_LAUNCH_CALL.search(name):
        return False, None
    if is_memcpy_call_name(name):
        return True, _K["memcpy"]
    if is_memset_call_name(name):
        return True, _K["memset"]
    if not LAUNCH_CALL.search(name):
        return False, None
    kernel = None
    if args and f'"{KERNEL_ARG}"' in args:
        try:
            kernel = json.loads(args).get(KERNEL_ARG)
        except ValueError:
            kernel = None
    return True, kernel


def graphs_of(events: pa.Table, frames: pa.Table, source: str, out: Captures) -> None:
    """Append the graphs captured in one built rank (`events`, `frames`: build_rank's tables) to `out`."""
    cols = events.select(["event_id", "kind", "name", "ts_ns", "dur_ns", "pid", "tid", "op_id", "top_op_id", "frame_id",
                          "source_frame_id", "args"]).to_pydict()
    n = len(cols["event_id"])
    ids = {e: i for i, e in enumerate(cols["event_id"])}
    name, kind = cols["name"], cols["kind"]
    begins, ends = {}, {}
    for i in range(n):
        if kind[i] != _K["runtime"] or not name[i]:
            continue
        if CAPTURE_BEGIN_CALL in name[i]:
            begins.setdefault((cols["pid"][i], cols["tid"][i]), []).append(i)
        elif CAPTURE_END_CALL in name[i]:
            ends.setdefault((cols["pid"][i], cols["tid"][i]), []).append(i)
    fr = frames.select(["frame_id", "file", "line", "function", "is_user", "line_kind", "parent_frame_id"]).to_pydict()
    frame_row = {f: j for j, f in enumerate(fr["frame_id"])}
    taken: dict[int, int] = {}

    def frame(fid) -> int:  # the capture's frame (and its callers) in out.frames
        if fid is None or fid not in frame_row:
            return -1
        if fid in taken:
            return taken[fid]
        j = frame_row[fid]
        parent = frame(fr["parent_frame_id"][j]) if fr["parent_frame_id"][j] != fid else -1
        taken[fid] = len(out.frames)
        out.frames.append((fr["file"][j], fr["line"][j], fr["function"][j], fr["is_user"][j], fr["line_kind"][j], parent))
        return taken[fid]

    for thread, starts in begins.items():
        stops = sorted(ends.get(thread, []))
        for b in starts:
            t0 = cols["ts_ns"][b] + cols["dur_ns"][b]
            e = next((s for s in stops if cols["ts_ns"][s] >= t0), None)
            if e is None:
                continue
            t1 = cols["ts_ns"][e]
            g = CapturedGraph(source, [], [], [], [], [])
            for i in range(b + 1, e):
                if kind[i] != _K["runtime"] or (cols["pid"][i], cols["tid"][i]) != thread or not t0 <= cols["ts_ns"][i] <= t1:
                    continue
                is_node, key = _node_key(name[i], cols["args"][i])
                if not is_node:
                    continue
                op, top = ids.get(cols["op_id"][i]), ids.get(cols["top_op_id"][i])
                g.keys.append(key)
                g.op.append(name[op] if op is not None else None)
                g.top_op.append(name[top] if top is not None else None)
                g.frame.append(frame(cols["frame_id"][i]))
                g.source_frame.append(frame(cols["source_frame_id"][i]))
            if g.keys:
                out.graphs.append(g)


def _aligned(seq: list, keys: list) -> list[int]:
    """For each replayed event of `seq`, the node of `keys` it pairs with (-1: none): each event pairs
    with the next node of the same key after the last paired one (a node without a kernel name pairs
    with any kernel)."""
    out, c = [], 0
    for s in seq:
        j = c
        while j < len(keys) and not (keys[j] == s or (keys[j] is None and s not in (_K["memcpy"], _K["memset"]))):
            j += 1
        if j < len(keys):
            out.append(j)
            c = j + 1
        else:
            out.append(-1)
    return out


@dataclass
class Linked:
    node: np.ndarray  # per event: index of its node in its graph (-1: not paired)
    graph: np.ndarray  # per event: index of the graph in Captures.graphs (-1: none)
    launches_matched: int
    launches_exact: int


def link_replays(replayed: np.ndarray, launch: np.ndarray, keys: dict, graphs: list) -> Linked:
    """Pair each replayed device event (`replayed`: a mask in time order; `launch`: its launch;
    `keys`: its key, by event index) with a node of a captured graph (the module's rule)."""
    n = len(replayed)
    node = np.full(n, -1, dtype=np.int64)
    which = np.full(n, -1, dtype=np.int64)
    rows = np.flatnonzero(replayed)
    by_launch: dict[int, list[int]] = {}
    for i in rows.tolist():
        by_launch.setdefault(int(launch[i]), []).append(i)
    turn: dict[tuple, int] = {}
    matched = exact = 0
    for first in sorted(by_launch, key=lambda lid: by_launch[lid][0]):
        members = by_launch[first]
        seq = [keys[i] for i in members]
        same = [g for g, gr in enumerate(graphs) if len(gr.keys) == len(seq) and _aligned(seq, gr.keys) == list(range(len(seq)))]
        if same:
            t = tuple(seq)
            pick = same[turn.get(t, 0) % len(same)]
            turn[t] = turn.get(t, 0) + 1
            pairs = list(range(len(seq)))
            exact += 1
        else:
            best, pairs, got = -1, [], 0
            for g, gr in enumerate(graphs):
                a = _aligned(seq, gr.keys)
                k = sum(1 for x in a if x >= 0)
                if k > got:
                    best, pairs, got = g, a, k
            if best < 0 or got < MIN_PARTIAL_SHARE * len(seq):
                continue
            pick = best
        matched += 1
        for i, j in zip(members, pairs):
            if j >= 0:
                node[i], which[i] = j, pick
    return Linked(node, which, matched, exact)
