"""Matching what the base and the test have in common: a source line by its file, function and
code text (so an edit above a hot line does not make it new), one file recorded by two paths, a
line of a renamed file by its function and code text, and a kernel whose full name changed but not
its name as people read it (another torch build's template arguments).
(Recordings made in pairs are found in collect.py, beside the Side they read.)

Must not: read anything of a run but its frames, or judge a change.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import PurePath

from ...fmt import kernel_name
from ...store import Run
from ...vocab import line_key


def source_file(file: str | None, cwd: str | None) -> str | None:
    """The file a frame names, absolute where the run says from where: a relative path (as
    `python sub/train.py` records the script) joined to the working directory recorded in the
    manifest (`cwd`, live runs). Pseudo-files (`<string>`) and absolute paths stay as recorded."""
    if not file or not cwd or file.startswith("<") or os.path.isabs(file):
        return file
    return os.path.normpath(os.path.join(cwd, file))


def line_keys(run: Run) -> dict[str, tuple[str, str]]:
    """frame_id → (matching key, display 'file:line').

    Several frames can share a line (the live collector keeps call sites as a tree). The matching
    key is file, function and code text — with the rank of the line among lines of equal text in
    that function, so duplicates pair up in order — else file, function and line number. The
    file is `source_file`'s: a path recorded relative to the working directory is made absolute
    with the cwd the run recorded.
    """
    cwd = run.manifest.get("cwd")
    rows = [(fid, source_file(file, cwd), line, function, code)
            for fid, file, line, function, code in run.sql("SELECT frame_id, file, line, function, code FROM frames").fetchall()]
    lines_by_text: dict[tuple, set[int]] = defaultdict(set)
    for _, file, line, function, code in rows:
        if code:
            lines_by_text[(file, function, code)].add(line)
    rank_of = {k: {ln: i for i, ln in enumerate(sorted(v), 1)} for k, v in lines_by_text.items()}
    keys = {}
    for frame_id, file, line, function, code in rows:
        if code:
            match = f"{file}\x1f{function}\x1f{code}\x1f{rank_of[(file, function, code)][line]}"
        else:
            match = f"{file}\x1f{function}\x1fline {line}"
        keys[str(frame_id)] = (match, line_key(file, line))
    return keys


def rekey_lines(values: dict, keys: dict[str, tuple[str, str]]) -> tuple[dict, dict[str, str]]:
    """`values` ((type, key, metric) -> per-step vector) with each source line's frame id replaced
    by its matching key (line_keys), frames of one key added up; and matching key -> 'file:line'."""
    out: dict[tuple[str, str, str], list[float]] = {}
    display: dict[str, str] = {}
    for (type_, key, metric), vec in values.items():
        if type_ == "source_line":
            match, shown = keys.get(key, (key, key))
            display[match] = shown
            key = match
        prev = out.get((type_, key, metric))
        out[(type_, key, metric)] = vec if prev is None else [a + b for a, b in zip(prev, vec)]
    return out, display


def match_files(base_files: set[str], test_files: set[str]) -> dict[str, str]:
    """test file -> the base file it is the same file as, for test files that the base run does not
    name by the same path: the one base file with which it shares the longer one's path as a
    suffix, whole components (`sub/train.py` and `/home/u/proj/sub/train.py`; not `ain.py`). A
    file that matches none, or several, keeps its own path."""
    def parts(f: str) -> tuple[str, ...]:
        return tuple(p for p in f.replace("\\", "/").split("/") if p not in ("", "."))

    by_name: dict[str, list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
    for f in base_files:
        if f and not f.startswith("<"):
            by_name[PurePath(f).name].append((f, parts(f)))
    out = {}
    for f in test_files:
        if not f or f in base_files or f.startswith("<"):
            continue
        mine = parts(f)
        hits = [b for b, bp in by_name.get(PurePath(f).name, [])
                if mine and bp and (bp[-len(mine):] == mine if len(mine) <= len(bp) else mine[-len(bp):] == bp)]
        if len(hits) == 1:
            out[f] = hits[0]
    return out


def match_renamed_lines(base_keys: set[str], test_keys: set[str]) -> dict[str, str]:
    """test line key -> base line key, for lines the other side does not have under the same key
    whose function and code text (with the rank among equal lines) match exactly one such line of
    the other side in another file: `base_train.py` renamed `train.py`. Lines matched by line number
    (no code text) are not matched across files."""
    def tail(key: str) -> str | None:
        parts = key.split("\x1f")
        return "\x1f".join(parts[1:]) if len(parts) == 4 else None

    def by_tail(keys: set[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for k in keys:
            if (t := tail(k)) is not None:
                out[t].append(k)
        return out

    base_only, test_only = by_tail(base_keys - test_keys), by_tail(test_keys - base_keys)
    return {ks[0]: base_only[t][0] for t, ks in test_only.items() if len(ks) == 1 and len(base_only.get(t, ())) == 1}


def match_line_files(base_vals: dict, test_vals: dict, test_disp: dict) -> tuple[dict, dict]:
    """The test side's values and line display with the source-line keys whose file `match_files`
    pairs with a base file renamed to that file (one file, recorded by two paths), then those that
    `match_renamed_lines` pairs with a line of another file (the file renamed)."""
    file_of = lambda key: key.split("\x1f", 1)[0]
    base_files = {file_of(k) for t, k, _ in base_vals if t == "source_line"}
    test_files = {file_of(k) for t, k, _ in test_vals if t == "source_line"}
    same = match_files(base_files, test_files)
    renamed_file = lambda key: same.get(file_of(key), file_of(key)) + key[len(file_of(key)):]
    lines = match_renamed_lines({k for t, k, _ in base_vals if t == "source_line"},
                                {renamed_file(k) for t, k, _ in test_vals if t == "source_line"})
    if not same and not lines:
        return test_vals, test_disp
    rename = lambda key: lines.get(renamed_file(key), renamed_file(key))
    vals: dict = {}
    for (t, k, m), vec in test_vals.items():
        new_key = (t, rename(k) if t == "source_line" else k, m)
        vals[new_key] = vec if new_key not in vals else [a + b for a, b in zip(vals[new_key], vec)]
    return vals, {rename(k): v for k, v in test_disp.items()}


def match_kernels(base_vals: dict, test_vals: dict) -> dict:
    """The test side's values with each kernel that only it has renamed to the one kernel only the
    base has under the same name as people read it (fmt.kernel_name, whole): torch 1.8 and 1.9 name
    ReLU's kernel `vectorized_elementwise_kernel<4, threshold_kernel_impl<…>, Array<…> >` with other
    template arguments inside, and diff listed it new in one and gone in the other. Only a name
    that one kernel on each side has is matched."""
    def only(vals: dict, other: dict) -> dict[str, list[str]]:
        keys = {k for t, k, _ in vals if t == "kernel"} - {k for t, k, _ in other if t == "kernel"}
        out: dict[str, list[str]] = defaultdict(list)
        for k in keys:
            out[kernel_name(k, 1 << 20)].append(k)
        return out

    base_only, test_only = only(base_vals, test_vals), only(test_vals, base_vals)
    rename = {ks[0]: base_only[n][0] for n, ks in test_only.items() if len(ks) == 1 and len(base_only.get(n, ())) == 1}
    if not rename:
        return test_vals
    return {(t, rename.get(k, k) if t == "kernel" else k, m): vec for (t, k, m), vec in test_vals.items()}
