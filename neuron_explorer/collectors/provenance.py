"""Inductor's provenance for imported traces: a torch.compile kernel's time on the user statements it came from.

The live collector reads, from the compiled graphs alive in the process, the stack traces of the
FX nodes fused into each generated kernel (compiled.py). A trace recorded with plain
`torch.profiler` has only the kernels' names; the stack traces are in Inductor's structured log,
which torch writes when `TORCH_TRACE=<dir>` is set and `torch._inductor.config.trace.provenance_tracking_level = 1`
(the file tlparse reads, `<dir>/dedicated_log_torch_trace_*.log`): one artifact
`inductor_provenance_tracking_kernel_stack_traces` per compiled graph, followed in the same
compile by `fx_graph_cache_miss` / `fx_graph_cache_hit`, whose `key` is what the trace's
`## Call CompiledFxGraph <key> ##` range names.

`read_provenance` reads such logs (or folders of them, or plain JSON files of
{kernel: [stack traces]}) into what compiled.charge_kernels takes ({graph: {kernel: [stack traces]}});
`charge_rank` charges a built rank's kernels with it, the live collector's way (the same
function), the statements interned as frames under each kernel's own frame (the line that called
the compiled function, as the importer knows it). Must not: import torch, or decide anything a
figure shows (analyzers/lines.py reads the charges).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..schema import ID_STRIDE
from . import compiled
from .sources import is_user_file

LOG_PREFIX = "dedicated_log_torch_trace_"
"""How torch names its structured log in the TORCH_TRACE folder (torch._logging._internal.LOG_PREFIX)."""
LOG_SUFFIX = ".log"
PROVENANCE_ARTIFACT = "inductor_provenance_tracking_kernel_stack_traces"
"""The structured log's artifact that holds, per kernel of one compiled graph, its FX nodes' stack traces."""
CACHE_KEY_ARTIFACTS = ("fx_graph_cache_miss", "fx_graph_cache_hit")
"""Artifacts that follow a graph's provenance in its compile and carry its cache key (`key`)."""
_COMPILE_ID = ("rank", "compiled_autograd_id", "frame_id", "frame_compile_id", "attempt")


def is_log(path: Path) -> bool:
    return path.name.startswith(LOG_PREFIX) and path.name.endswith(LOG_SUFFIX)


def logs_in(folder: Path) -> list[Path]:
    """The structured logs directly in a TORCH_TRACE folder."""
    return sorted(p for p in folder.iterdir() if p.is_file() and is_log(p))


def log_records(text: str):
    """(metadata, payload or None) of each record of a structured log: a line `<glog prefix>] {json}`,
    then its payload's lines, each prefixed with a tab (torch._logging._internal.TorchLogsFormatter)."""
    metadata, payload = None, None
    for line in text.split("\n"):
        if line.startswith("\t"):
            if metadata is not None:
                payload = (payload or []) + [line[1:]]
            continue
        if metadata is not None:
            yield metadata, None if payload is None else "\n".join(payload)
        metadata, payload = None, None
        at = line.find("] {")
        if at < 0:
            continue
        try:
            metadata = json.loads(line[at + 2:])
        except ValueError:
            metadata = None
    if metadata is not None:
        yield metadata, None if payload is None else "\n".join(payload)


def provenance_of_log(text: str, label: str) -> dict[str, dict[str, list[str]]]:
    """{graph: {kernel: [stack traces]}} (compiled.graph_kernels) of the provenance artifacts in a
    structured log. A graph is named by its cache key when its compile logs one after it (the key
    the trace's graph call range names), else `#<label>:<n>` (looked up by kernel name)."""
    graphs: dict[str, dict[str, list[str]]] = {}
    waiting: dict[tuple, str] = {}  # compile id -> the graph whose key its next cache artifact gives
    for n, (meta, payload) in enumerate(log_records(text)):
        artifact = meta.get("artifact") if isinstance(meta, dict) else None
        if not isinstance(artifact, dict) or payload is None:
            continue
        compile_id = tuple(meta.get(k) for k in _COMPILE_ID)
        if artifact.get("name") == PROVENANCE_ARTIFACT:
            try:
                traces = json.loads(payload)
            except ValueError:
                continue
            if not isinstance(traces, dict) or not traces:
                continue
            name = f"#{label}:{n}"
            graphs[name] = compiled.graph_kernels(traces)
            waiting[compile_id] = name
        elif artifact.get("name") in CACHE_KEY_ARTIFACTS and compile_id in waiting:
            try:
                key = json.loads(payload).get("key")
            except (ValueError, AttributeError):
                key = None
            name = waiting.pop(compile_id)
            if isinstance(key, str) and key:
                graphs[key] = graphs.pop(name)
    return graphs


def read_provenance(paths: list[Path | str]) -> dict[str, dict[str, list[str]]]:
    """The merged provenance of `paths`: each a TORCH_TRACE folder (its structured logs), a
    structured log, or a JSON file of {kernel (or `kernel:handle`): [stack traces]} (one graph,
    as the provenance artifact's payload is). A path that is missing, unreadable or holds none is
    an InputError naming it."""
    out: dict[str, dict[str, list[str]]] = {}
    for given in paths:
        path = Path(given)
        try:
            if not path.exists():
                raise InputError(path, "no such provenance file or folder")
            files = logs_in(path) if path.is_dir() else [path]
            if not files:
                raise InputError(path, f"no {LOG_PREFIX}*{LOG_SUFFIX} (torch's structured log, written under TORCH_TRACE) in this folder")
            for f in files:
                text = f.read_text(errors="replace")
                graphs = _plain_json(text, str(f)) if not is_log(f) else None
                if graphs is None:
                    graphs = provenance_of_log(text, str(f))
                if not graphs:
                    raise InputError(f, f"no kernel provenance in it (no '{PROVENANCE_ARTIFACT}' artifact: record with "
                                        "torch._inductor.config.trace.provenance_tracking_level = 1 and TORCH_TRACE set, "
                                        "or give a JSON file of {kernel: [stack traces]})")
                out.update(graphs)
        except OSError as e:
            raise InputError(path, f"cannot read ({' '.join((e.strerror or str(e)).split())})") from None
    return out


def _plain_json(text: str, label: str) -> dict[str, dict[str, list[str]]] | None:
    """A JSON file of {kernel: [stack traces]} as one graph (`#<label>`), or None when it is not one."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not data or not all(isinstance(v, list) for v in data.values()):
        return None
    return {f"#{label}": compiled.graph_kernels(data)}


def beside(source: Path | str) -> Path | None:
    """The one structured log directly beside a trace file (or directly in a folder of traces), if
    there is exactly one: a TORCH_TRACE folder given with the trace. None when there is none or
    several (which one belongs to the trace is not known)."""
    src = Path(source)
    folder = src if src.is_dir() else src.parent
    try:
        logs = logs_in(folder)
    except OSError:
        return None
    return logs[0] if len(logs) == 1 else None


def charge_rank(tables: dict, rank: int, provenance: dict[str, dict[str, list[str]]]) -> compiled.ChargeCount:
    """Charge the compiled kernels of a built rank (build.RankTables.tables) to their statements
    (compiled.charge_kernels): their args get COMPILED_FROM_ARG, and the statements' frames are
    added to `tables["frames"]`, each chain under the kernel's own frame. In place; the count."""
    from .build import SortedTable, frames_table

    count = compiled.ChargeCount()
    events = tables["events"]
    if not provenance or not events.num_rows:
        return count
    needed = ("name", "ts_ns", "dur_ns", "tid", "frame_id", "args")
    if isinstance(events, SortedTable):
        whole = slice(0, events.num_rows)
        view = pa.table({c: events.makers[c](whole) for c in needed})
    else:
        view = events.select(list(needed))
    frames = tables["frames"]
    base = rank * ID_STRIDE + frames.num_rows
    keys: dict[tuple, int] = {}
    added: list[tuple] = []

    def intern(file: str, line: int, function: str, parent: int) -> int:
        key = (file, int(line), parent)
        if key not in keys:
            keys[key] = base + len(added)
            added.append((file, int(line), function, parent))
        return keys[key]

    charged = compiled.charge_kernels(view, provenance, intern, lambda frame_id: frame_id, is_user_file, count, frame_column="frame_id")
    if not count.charged:
        return count
    args = charged["args"].combine_chunks()
    if isinstance(events, SortedTable):
        events.makers["args"] = lambda sl: args.slice(sl.start, sl.stop - sl.start)
    else:
        tables["events"] = events.set_column(events.column_names.index("args"), "args", args)
    parents = np.array([a[3] for a in added], dtype=np.int64)
    extra = frames_table(rank, base, added, "call", parents, schema=frames.schema)
    tables["frames"] = pa.concat_tables([frames, extra])
    return count


def charge_warning(rank: int, count: compiled.ChargeCount) -> str | None:
    """The one line the manifest says when some compiled kernels found no statement."""
    if not count.kernels or count.charged == count.kernels:
        return None
    names = ", ".join(sorted(count.unmatched)[:3])
    return (f"rank {rank}: {count.kernels - count.charged} of {count.kernels} torch.compile kernel calls were not traced to a "
            f"statement by the provenance given (kernels {names}…): their time stays on the line that called the compiled function")
