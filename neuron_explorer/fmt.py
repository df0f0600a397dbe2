"""How figures are written for people: one formatter per kind of figure, used by the text report,
`info`, `diff`, the notebook view and the dashboard alike, so one figure reads the same everywhere;
and the few text helpers the text report and `info` share (rank lists, spreads over ranks, the
collective-wait lines, warnings grouped by kind).

Must not: import anything but the standard library (every layer may import it).
"""

from __future__ import annotations

import functools
import math
import re


def duration(ns: int | float | None) -> str:
    """A duration: `30,012.19 ms` from 1 ms up, `12.50 µs` from 1 µs, `750 ns` below; `-` when
    unknown (None, NaN or infinite). Milliseconds with two decimals up to any size, so that
    figures in one column line up and compare at a glance."""
    if ns is None or (isinstance(ns, float) and not math.isfinite(ns)):
        return "-"
    a = abs(ns)
    if a >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:,.2f} µs"
    return f"{ns:.0f} ns"


def share(x: float | None) -> str:
    """A share (0.123 → `12.3%`); `-` when unknown."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{100 * x:.1f}%"


def size(b: int | None) -> str:
    """A memory size: `1.25 GiB` from 256 MiB up, `3.0 MiB` from 1 MiB, `12.0 KiB` from 1 KiB,
    `512 B` below (the sign kept); `-` when unknown. From 1 MiB up as the text report writes peak
    memory; the dashboard's Memory tab writes sizes this way."""
    if b is None:
        return "-"
    a = abs(b)
    if a >= 2**28:
        return f"{b / 2**30:.2f} GiB"
    if a >= 2**20:
        return f"{b / 2**20:.1f} MiB"
    if a >= 2**10:
        return f"{b / 2**10:.1f} KiB"
    return f"{b} B"


def id_ranges(ids) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out: list[str] = []
    for i in sorted(ids):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


def spread(values: list[tuple[float, int]], fmt) -> str:
    """'min X (rank a), p50 Y, p90 Z, max W (rank b)' of (value, rank) pairs (nearest-rank quantiles)."""
    v = sorted(values)

    def q(f: float) -> float:
        return v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))][0]

    return f"min {fmt(v[0][0])} (rank {v[0][1]}), p50 {fmt(q(0.5))}, p90 {fmt(q(0.9))}, max {fmt(v[-1][0])} (rank {v[-1][1]})"


def collective_wait_lines(waits: list[tuple[float, int, int]], instances: int | None = None, shown: int = 3) -> list[str]:
    """(share, rank, wait ns) per rank -> the spread of the ranks' collective wait and the ranks that wait the most."""
    if not waits:
        return []
    worst = sorted(waits, key=lambda x: (-x[0], x[1]))[:shown]
    return ["  collective wait per rank (for the last arrival, share of its analysed time): "
            + spread([(w, r) for w, r, _ in waits], share),
            "  most waiting: " + ", ".join(f"rank {r} {duration(ns)} ({share(w)})" for w, r, ns in worst)
            + (f" over {instances:,} matched collectives" if instances is not None else "")]


_WARNING_SUBJECT = re.compile(r"^(?:rank (?P<rank>\d+)|(?P<file>[^\s:]+)): (?P<message>.*)$", re.DOTALL)
_LEADING_COUNT = re.compile(r"^(\d+) ")
_NUMBER = re.compile(r"\d+")


def summarise_warnings(warnings: list[str], keep: int = 2) -> list[str]:
    """One line per kind of warning: a kind that more than `keep` ranks (or files) report becomes
    one line with how many, the total of its counts and the ranks with the most. A kind is the
    text after 'rank N: ' with its numbers left out; fewer are kept as they are."""
    groups: dict[str, list[tuple[int | None, str | None, int | None, str]]] = {}
    for w in warnings:
        m = _WARNING_SUBJECT.match(w)
        rank, file, message = (int(m["rank"]) if m["rank"] else None, m["file"], m["message"]) if m else (None, None, w)
        count = _LEADING_COUNT.match(message)
        groups.setdefault(_NUMBER.sub("#", message), []).append((rank, file, int(count[1]) if count else None, w))
    out = []
    for items in groups.values():
        if len(items) <= keep:
            out += [w for *_, w in items]
            continue
        ranks = [r for r, _, _, _ in items if r is not None]
        who = f"{len(items)} ranks" if len(ranks) == len(items) else f"{len(items)} traces"
        _, _, _, first = items[0]
        message = _WARNING_SUBJECT.match(first)["message"] if _WARNING_SUBJECT.match(first) else first
        counts = [(n, r) for r, _, n, _ in items if n is not None]
        if len(counts) == len(items) and len(ranks) == len(items):
            worst = sorted(counts, key=lambda nr: (-nr[0], nr[1]))[:3]
            label = _LEADING_COUNT.sub("", message)
            out.append(f"{who}: {label}: {sum(n for n, _ in counts):,} in all; most on "
                       + ", ".join(f"rank {r} ({n:,})" for n, r in worst))
        else:
            where = f"ranks {id_ranges(ranks)}" if len(ranks) == len(items) else ", ".join(f for _, f, _, _ in items[:3] if f) + ", ..."
            out.append(f"{who}: {message} ({where})")
    return out


def _itanium_name(name: str) -> str | None:
    """The qualified function name of an Itanium-mangled symbol (`_ZN2at6native6kernelEv` ->
    `at::native::kernel`), without template or parameter types; None when it is not one we read."""
    i, parts = 2, []
    nested = name.startswith("_ZN")
    i += 1 if nested else 0
    while i < len(name):
        while nested and name[i:i + 1] in ("K", "V", "L"):  # cv-qualifiers, internal linkage
            i += 1
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        if j == i:
            break
        n = int(name[i:j])
        parts.append(name[j:j + n])
        i = j + n
        if not nested:
            break
    return "::".join(p for p in parts if p != "_GLOBAL__N_1") or None


_ANONYMOUS = re.compile(r"\(anonymous namespace\)::")
_QUALIFIER = re.compile(r"\b(?:[A-Za-z_]\w*::)+")
_CLOSURE = re.compile(r"::\{[^{}]*\}|::operator\b|\s+const\b")


def _template_argument(text: str) -> str:
    """One level of template arguments as people read them: a function named in it without its
    parameters and the lambdas inside it (`at::native::exp_kernel_cuda(at::TensorIteratorBase&)::
    {lambda()#2}::operator()() const` -> `exp_kernel_cuda`), names without their namespaces."""
    out, depth = [], 0
    for ch in text:  # parameter lists
        if ch == "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    text = "".join(out)
    while True:
        bare = _CLOSURE.sub("", text)
        if bare == text:
            break
        text = bare
    return _QUALIFIER.sub("", text)


def _angle_marks(s: str) -> list[tuple[int, str | None]]:
    """Per character of a C++ name: the depth of template arguments after it, and whether it opens
    or closes one ("<", ">", else None). A `<` or `>` inside parentheses within template arguments
    is a comparison (`std::enable_if<((8)>(0)), void>`), not a bracket."""
    marks, depth, parens = [], 0, 0
    for ch in s:
        bracket = None
        if depth and ch == "(":
            parens += 1
        elif depth and ch == ")" and parens:
            parens -= 1
        elif not parens and ch == "<":
            depth, bracket = depth + 1, "<"
        elif not parens and ch == ">" and depth:
            depth, bracket = depth - 1, ">"
        marks.append((depth, bracket))
    return marks


@functools.lru_cache(maxsize=16384)  # the same kernel names recur in every step and rank; long C++ names cost ~0.1 ms each
def kernel_name(name: str | None, width: int = 60) -> str | None:
    """A device kernel's name for people, the one shortening every view uses (the text report, the
    findings, the dashboard, the agent tools): an Itanium-mangled name (`_Z...`) demangled to its
    qualified name; no return type (`void `), no parameter list, no `(anonymous namespace)::`;
    template arguments kept one level deep, each without namespaces, parameters and lambdas, deeper
    ones as `<…>`; at most `width` characters: where longer, without its own namespaces, then cut
    (`…`). `void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,
    at::detail::Array<char*, 1> >(int, ...)` -> `at::native::vectorized_elementwise_kernel<4,
    FillFunctor<…>, Array<…> >`, or `vectorized_elementwise_kernel<4, FillFunctor<…>, Array<…> >`. Names that are no
    signature (`Memcpy DtoD (Device -> Device)`, `triton_poi_fused_add_0`) stay whole. The full name
    is in the run's events and in every finding's evidence."""
    if not name:
        return name
    s = name.strip()
    if s.startswith("_Z"):
        s = _itanium_name(s) or s
    s = _ANONYMOUS.sub("", s).replace("(anonymous namespace)", "")
    if s.startswith("void "):
        s = s[5:]
    marks = _angle_marks(s)
    cut = next((i for i, ch in enumerate(s)  # the parameter list: the first '(' outside template arguments
                if ch == "(" and marks[i][0] == 0 and i > 0 and s[i - 1] != " "), len(s))
    if cut < len(s):  # a C++ signature: drop a return type left before the name (`std::enable_if<…>::type f<…>`)
        last_space = max((i for i in range(cut) if s[i] == " " and marks[i][0] == 0), default=-1)
        s, marks, cut = s[last_space + 1:], marks[last_space + 1:], cut - last_space - 1
    out, arg = [], []
    for ch, (depth, bracket) in zip(s[:cut], marks[:cut]):
        if bracket == "<":
            if depth == 1:
                out.append("<")
            elif depth == 2:
                arg.append("<…")
        elif bracket == ">":
            if depth == 1:
                arg.append(">")
            elif depth == 0:
                out.append(_template_argument("".join(arg)) + ">")
                arg = []
        elif depth == 0:
            out.append(ch)
        elif depth == 1:
            arg.append(ch)
    if arg:  # (unbalanced)
        out.append(_template_argument("".join(arg)))
    s = re.sub(r"\s+", " ", "".join(out)).strip() or name
    if len(s) > width and "<" in s:  # too long: the name's own namespaces go before its template arguments do
        head, _, tail = s.partition("<")
        s = head.rsplit("::", 1)[-1] + "<" + tail
    return s if len(s) <= width else s[:width - 1] + "…"


_LITERAL = re.compile(r"L([ijlmstxy])(n?)(\d+)E|Lb([01])E")
_SKIPPED = re.compile(r"[ST][0-9A-Z]*_|DF\d+[_b]|D[nav]")  # substitutions, template parameters, some builtin types
_NOISE_TOKENS = frozenset(("void", "const", "operator", "lambda", "anonymous", "namespace", "_GLOBAL__N_1"))
_TAG_CHARS = 24


def _mangled_tokens(name: str) -> list[str]:
    """An Itanium-mangled name's identifiers (`19cutlass_cudnn_train` -> `cutlass_cudnn_train`) and
    template literals (`Li128E` -> `128`, `Lb1E` -> `true`), in order; the rest is skipped."""
    out, i = [], 2
    while i < len(name):
        if m := _LITERAL.match(name, i):
            out.append(("true" if m.group(4) == "1" else "false") if m.group(4) else ("-" if m.group(2) else "") + m.group(3))
            i = m.end()
            continue
        if m := _SKIPPED.match(name, i):
            i = m.end()
            continue
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        if j > i and name[j:j + 1] == "E" and not name[j + 1:j + 2].islower():  # an enum's value (`L…Enum` `7E`)
            out.append(name[i:j])
            i = j + 1
            continue
        if j > i and j < len(name) and (name[j].isalpha() or name[j] == "_"):
            word = name[j:j + int(name[i:j])]
            if len(word) == int(name[i:j]) > 1 and re.fullmatch(r"\w+", word):
                out.append(word)
                i = j + len(word)
                continue
        i = max(j, i + 1)
    return [t for t in out if t not in _NOISE_TOKENS]


def _name_tokens(name: str) -> list[str]:
    """A kernel name's words and numbers in order, without namespaces and C++ noise (`void`,
    `const`, lambdas' `operator`): what tells two kernels of one template apart."""
    if name.startswith("_Z"):
        return _mangled_tokens(name)
    text = _QUALIFIER.sub("", _ANONYMOUS.sub("", name))
    return [t for t in re.findall(r"[A-Za-z_]\w*|\d\w*", text) if t not in _NOISE_TOKENS]


def _common_prefix(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _nearest_prefix(ordered: list, at: int, ok) -> int:
    """The longest common prefix of `ordered[at]` with any other item of `ordered` (sorted) that
    `ok` accepts: it is with the nearest accepted item on one side or the other."""
    best = 0
    for step in (-1, 1):
        j = at + step
        while 0 <= j < len(ordered) and not ok(j):
            j += step
        if 0 <= j < len(ordered):
            best = max(best, _common_prefix(ordered[at], ordered[j]))
    return best


def _cut_stem(word: str, stem: int) -> str:
    """A word that shares its first `stem` characters with another's (a long generated name:
    `…_tilesize64x64x64_…`) from where the two part, at an underscore."""
    return "…" + word[word.rfind("_", 0, stem + 1) + 1 or stem:] if stem >= 8 else word


def _tags(tokens: dict[str, list[str]]) -> dict[str, str]:
    """What sets each kernel's name apart from the others' of its group (names that shorten to the
    same label; `tokens`: each name's words and numbers): its first word that none of them has (a
    functor, a dtype), else its first number none has, else the words from the first place where
    it parts from the nearest of them; a word sharing a stem with another's is given from where
    the two part. In time about linear in the group's words (sorted neighbours, not every pair)."""
    holders: dict[str, set] = {}
    for n, ts in tokens.items():
        for t in ts:
            holders.setdefault(t, set()).add(n)
    words = sorted(holders)
    where = {w: i for i, w in enumerate(words)}
    sequences = sorted(tokens.items(), key=lambda kv: kv[1])
    place = {n: i for i, (n, _) in enumerate(sequences)}
    seqs = [ts for _, ts in sequences]
    out = {}
    for n, ts in tokens.items():
        own = [t for t in ts if holders[t] == {n}]
        word = next((t for t in own if not t[0].isdigit()), own[0] if own else None)
        if word is None:  # the same words, in another order or number: from where it parts from the nearest
            at = _nearest_prefix(seqs, place[n], lambda j: True)
            first = ts[at] if at < len(ts) else ""
            if first:
                first = _cut_stem(first, _nearest_prefix(words, where[first], lambda j, first=first: words[j] != first))
            word = ", ".join([first] + ts[at + 1:at + 3])
        else:
            word = _cut_stem(word, _nearest_prefix(words, where[word], lambda j, n=n: holders[words[j]] != {n}))
        out[n] = word if len(word) <= _TAG_CHARS else word[:_TAG_CHARS - 1] + "…"
    return out


def kernel_labels(names, width: int = 60) -> dict[str, str]:
    """Each kernel name of a listing (a top-kernels table, a grid, a diff) -> its label there:
    `kernel_name(name, width)`, and where several names of the listing shorten to the same text,
    that text followed by what sets each apart in brackets, so that no two rows read alike:
    `vectorized_elementwise_kernel<4, BinaryFunctor<…>, Array<…>… [MulFunctor]` beside `…
    [threshold_kernel_impl]`. Labels that still read alike are numbered instead (`#2`).
    A label stays within `width` (the shortened name is cut for its tag)."""
    distinct = sorted({n for n in names if n})
    labels = {n: kernel_name(n, width) for n in distinct}

    def alike() -> list[list[str]]:
        groups: dict[str, list[str]] = {}
        for n in distinct:
            groups.setdefault(labels[n], []).append(n)
        return [g for g in groups.values() if len(g) > 1]

    def tagged(n: str, tag: str) -> str:
        return f"{kernel_name(n, max(12, width - len(tag) - 3))} [{tag}]"

    for group in alike():
        for n, tag in _tags({n: _name_tokens(n) for n in group}).items():
            labels[n] = tagged(n, tag or "?")
    numbered = [n for group in alike() for n in group]  # (each label then ends in its own number)
    for i, n in enumerate(numbered, 1):
        labels[n] = tagged(n, f"#{i}")
    return labels


SHORT_PATH_PARTS = 2
"""A source line's path in a table shows this many of its last parts (folders and file)."""


def short_path(key: str) -> str:
    """`/home/u/proj/sub/train.py:12` → `…/sub/train.py:12`: the end of a long path, which says
    which file and line (a table shows the whole path on hover)."""
    parts = key.split("/")
    return key if len(parts) <= SHORT_PATH_PARTS + 1 else "…/" + "/".join(parts[-SHORT_PATH_PARTS:])


def shapes(shapes_: list | None, dtypes: list | None = None, times: str = "×") -> str:
    """Input shapes and dtypes as one reads them: `[16×1024], [1024×1024] float` (scalars and
    unshaped inputs left out; `times` joins a shape's sizes, "x" for ASCII); '' when none was recorded."""
    def one(s: list) -> str:  # a tensor's shape, or a tensor list's shapes
        return ", ".join(one(x) for x in s if isinstance(x, list) and x) if isinstance(s[0], list) else "[" + times.join(map(str, s)) + "]"

    text = ", ".join(t for t in (one(s) for s in shapes_ or [] if isinstance(s, list) and s) if t)
    kinds = sorted({str(d) for d in dtypes or [] if d and d != "Scalar"}, key=lambda d: list(dtypes).index(d))
    return (text + (" " + "/".join(kinds) if kinds else "")).strip()
