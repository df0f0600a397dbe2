"""The user's source files, as a collector sees them: which paths are user code, and the text of
a frame's line (the frames table's `code` column, which lets `diff` match lines that moved).

build.py turns frames into rows without reading a file; the collector that builds a run then
fills `code` here (`with_code`), in its own process and working directory: the importer
(chrome_trace) for the def lines of python_function events, the live collector (torch_profiler)
for the call sites it recorded.

Must not: know about JSON, torch or the other run tables.
"""

from __future__ import annotations

import linecache
import os
import re

import pyarrow as pa
import pyarrow.compute as pc

_NOT_USER = re.compile(r"(^<built-in|^<frozen|/site-packages/|/dist-packages/|/lib/python\d|(^|/)torch/|^torch/"
                       r"|(^|/)triton(_kernels)?/|^<string>$|^<unknown>$|(^|/)torchinductor_[^/]*/|^<eval_with_key>)")
"""`torchinductor_<user>/`: the code torch.compile generates (Inductor's default cache folder);
`<eval_with_key>.N`: the forward torch.fx generates for a GraphModule (a split piece of a compiled
model, as vLLM's piecewise graphs run it), numbered per module made, so no person can open it and
its number changes between runs; `triton/`, `triton_kernels/`: Triton's launcher and kernel
library, as an imported trace names them (relative to site-packages)."""


def is_user_file(path: str) -> bool:
    """User code: not torch or Triton, not site-packages, not the standard library, not a built-in, not code that
    torch.compile or torch.fx generated (in Inductor's cache folder, also where TORCHINDUCTOR_CACHE_DIR puts it;
    a GraphModule's `<eval_with_key>.N`)."""
    path = path.replace("\\", "/")
    generated = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if generated and path.startswith(generated.replace("\\", "/").rstrip("/") + "/"):
        return False
    return not _NOT_USER.search(path)


DISPATCH_HOOKS = frozenset({"__torch_function__", "__torch_dispatch__"})
"""A tensor subclass's or a mode's dispatch hooks: torch calls them for every torch function, so a
line in one runs every operator, and the statement that called the operator is its caller's.
vLLM's parameter classes define `__torch_function__` (vllm/model_executor/parameter.py:122): the
b200 trace's linear layers were all charged to it; a user's subclass in a recorded script charged
every operator to its hook's line."""


def is_user_frame(file: str, function: str | None) -> bool:
    """A frame of user code (is_user_file) that is not a dispatch hook (DISPATCH_HOOKS)."""
    return function not in DISPATCH_HOOKS and is_user_file(file)

def code_lines(files: list, lines: list) -> pa.Array:
    """The text of each (file, line) where the file is readable here; lets `diff` match moved lines."""
    out = []
    for f in set(files):
        linecache.checkcache(f)  # the file may have changed since this process last read it
    for f, n in zip(files, lines):
        text = linecache.getline(f, n).strip() if f and n and is_user_file(f) and os.path.isfile(f) else ""
        out.append(text or None)
    return pa.array(out, pa.string())


def with_code(frames: pa.Table) -> pa.Table:
    """The run's frames table with `code` read from the source files where it is null (build leaves
    it null unless the collector's raw frames carried it)."""
    code = frames["code"]
    if code.null_count == 0:
        return frames
    read = code_lines(frames["file"].to_pylist(), frames["line"].to_pylist())
    filled = read if code.null_count == len(code) else pc.coalesce(code.combine_chunks(), read)
    i = frames.schema.get_field_index("code")
    return pa.Table.from_arrays([filled if j == i else frames.column(j) for j in range(frames.num_columns)],
                                schema=frames.schema)
