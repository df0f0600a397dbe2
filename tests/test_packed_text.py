"""The importer's args held compressed in blocks (collectors/_packed_text.py): every row taken back is
the text that went in, in any order, nulls and multi-byte text included, and the rows too long to keep
are the ones dropped."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from neuron_explorer.collectors import _packed_text
from neuron_explorer.collectors._packed_text import PackedText

TEXTS = ['{"External id": %d, "Call stack": "train.py(%d): step; é€"}' % (i, i % 7) if i % 5 else None for i in range(1000)]


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(_packed_text, "BLOCK_BYTES", 2000)  # about 35 rows a block
    monkeypatch.setattr(_packed_text, "BLOCK_ROWS", 50)


@pytest.mark.parametrize("native", [True, False], ids=["c++", "arrow"])
@pytest.mark.parametrize("text_type", [pa.string(), pa.large_string()])
def test_rows_come_back_as_they_went_in_in_any_order(small_blocks, monkeypatch, text_type, native):
    """Taken by the C++ library (each row copied once into the result) or by Arrow's take without it."""
    _native_or_not(monkeypatch, native)
    unpacked_at_once = []
    real = _packed_text._Block.unpack
    monkeypatch.setattr(_packed_text._Block, "unpack", lambda b: unpacked_at_once.append(b) or real(b))
    arr = pa.array(TEXTS, text_type).slice(3)  # (an array that does not start at its buffers' start)
    packed = PackedText.pack(arr)
    assert len(packed) == 997 and len(packed.blocks) > 20
    assert all(b.rows <= 50 for b in packed.blocks)
    rows = np.random.default_rng(1).permutation(997)
    assert packed.take(rows).to_pylist() == [TEXTS[3 + r] for r in rows]
    assert len(unpacked_at_once) == len(packed.blocks)  # each block unpacked once, though the rows come from all in turn
    assert packed.take(np.arange(40, 60)).to_pylist() == TEXTS[43:63]  # rows in order, across a block's end
    assert packed.take(pa.array([996, 0, 996])).to_pylist() == [TEXTS[999], TEXTS[3], TEXTS[999]]
    assert packed.unpacked().to_pylist() == TEXTS[3:]
    assert packed.nbytes < sum(len(t.encode()) for t in TEXTS if t)  # held smaller than the text


def test_rows_read_a_block_at_a_time_are_the_rows_asked_for(small_blocks, monkeypatch):
    arr = pa.array(TEXTS)
    packed = PackedText.pack(arr)
    unpacked_at_once = []
    real = _packed_text._Block.unpack
    monkeypatch.setattr(_packed_text._Block, "unpack", lambda b: unpacked_at_once.append(b) or real(b))
    rows = np.random.default_rng(2).choice(1000, 600)  # scattered, some rows twice
    seen = np.zeros(len(rows), dtype=int)
    blocks_read = []
    for at, text in packed.take_by_block(rows):
        assert text.to_pylist() == [TEXTS[r] for r in rows[at]]
        blocks_read.append(np.searchsorted(packed.starts, rows[at], side="right")[0] - 1)
        seen[at] += 1
    assert (seen == 1).all()  # every position once
    assert blocks_read == sorted(set(blocks_read))  # each block unpacked once, in order
    assert len(unpacked_at_once) == len(blocks_read)
    assert list(packed.take_by_block(np.array([], np.int64))) == []


def test_chunks_join_without_unpacking(small_blocks):
    parts = [PackedText.pack(pa.array(TEXTS[:10])), PackedText.pack(pa.array([], pa.string())),
             PackedText.pack(pa.chunked_array([pa.array(TEXTS[10:500]), pa.array(TEXTS[500:])]))]
    whole = PackedText.concat(parts)
    assert len(whole) == 1000
    assert whole.take(np.array([999, 9, 10, 500, 499])).to_pylist() == [TEXTS[i] for i in (999, 9, 10, 500, 499)]
    assert PackedText.concat([]).take(np.array([], np.int64)).to_pylist() == []
    # empty text and rows that are all null (a trace without args) hold no text at all
    assert PackedText.pack(pa.array(["", None, ""])).take(np.array([2, 1, 0])).to_pylist() == ["", None, ""]
    nulls = PackedText.pack(pa.nulls(70000, pa.string()))
    assert (len(nulls), len(nulls.blocks), nulls.take(np.array([69999, 3])).to_pylist()) == (70000, 1400, [None, None])  # 50 rows a block


def test_rows_longer_than_the_limit_are_dropped_and_counted(small_blocks):
    texts = ["a" * 10, "é" * 12, None, "b" * 13, "c" * 12]  # 'é' is 2 bytes: 24 bytes, 12 characters
    packed, dropped = PackedText.pack(pa.array(texts)).with_rows_longer_dropped(12)
    assert dropped == 1
    assert packed.take(np.arange(5)).to_pylist() == ["a" * 10, "é" * 12, None, None, "c" * 12]
    same, none = packed.with_rows_longer_dropped(12)
    assert (same is packed, none) == (True, 0)


@pytest.mark.parametrize("native", [True, False], ids=["c++", "arrow"])
def test_sequence_numbers_from_packed_args_are_those_of_the_text(small_blocks, monkeypatch, native):
    from neuron_explorer.collectors.passes import sequence_numbers

    _native_or_not(monkeypatch, native)

    texts = ['{"External id": %d, "Sequence number": %d, "Fwd thread id": 0}' % (i, 3 * i) if i % 3 else
             ('{"External id": %d}' % i if i % 2 else None) for i in range(800)]
    rows = np.random.default_rng(3).permutation(800)[:500]
    expected = [3 * r if r % 3 else -1 for r in rows.tolist()]
    assert sequence_numbers(PackedText.pack(pa.array(texts)), rows).tolist() == expected
    assert sequence_numbers(pa.array(texts), rows).tolist() == expected


@pytest.mark.parametrize("native", [True, False], ids=["c++", "arrow"])
def test_sequence_numbers_are_read_as_the_regex_reads_them(small_blocks, monkeypatch, native):
    """The number after the key is read by the regex that defines it (SEQUENCE_NUMBER_ARG), or from
    the packed args' bytes in the C++ library (native/packed_text.cpp): every spelling gives the
    regex's answer, both ways, and a number past int64 is the regex's error either way."""
    import re

    from neuron_explorer.collectors.kineto_names import SEQUENCE_NUMBER_ARG, SEQUENCE_NUMBER_KEY
    from neuron_explorer.collectors.passes import sequence_numbers

    values = ["7", "-12", "0", "123456789012345678", "9223372036854775807", "3.5", '"4"', "null", "[1]", "+5", "00042", "8e3"]
    spacing = [": ", ":", " : ", ":\n\t", "\f:\f", " " * 40 + ":"]
    texts = [None, "{}", '{"External id": 1}', '{"name": "\\"Sequence number\\": 9"}', '{"Sequence number": 1, "Sequence number": 2}',
             '{"Sequence number": null, "x": {"Sequence number": 5}}', '{"Sequence number"', '{"Sequence number": 77']
    texts += ['{"External id": 3, "Sequence number"%s%s, "Fwd thread id": 0}' % (s, v) for s in spacing for v in values]
    texts += ["é€" * (i % 5) + '{"Sequence number": %d}' % i for i in range(300)]  # (multi-byte text before the key)
    pattern = re.compile(SEQUENCE_NUMBER_ARG)

    def by_regex(t):
        m = t and pattern.search(t)
        return int(m.group("seq")) if m and -(2**63) <= int(m.group("seq")) < 2**63 else -1

    _native_or_not(monkeypatch, native)
    texts += ['{"Sequence number": -%s}' % "9223372036854775808", '{"Sequence number"  :  -1, "more": 2}',
              '{"Sequence number": "x", "Sequence number": 6}', '{"x": "Sequence number": 3}', '"Sequence number":4', '"Sequence number":-']
    rows = np.random.default_rng(5).permutation(len(texts))
    expected = [by_regex(texts[r]) for r in rows]
    read_when_packed = PackedText.pack(pa.array(texts), number_after=SEQUENCE_NUMBER_KEY)  # (as the importer packs args)
    assert read_when_packed.number_after == (SEQUENCE_NUMBER_KEY if native else None)
    assert sequence_numbers(pa.array(texts), rows).tolist() == expected
    assert sequence_numbers(PackedText.pack(pa.array(texts)), rows).tolist() == expected
    assert sequence_numbers(read_when_packed, rows).tolist() == expected
    assert sequence_numbers(read_when_packed, rows[:0]).tolist() == []
    for past in ("9223372036854775808", "-9223372036854775809", "99999999999999999999"):
        with_past = pa.array(texts + ['{"Sequence number": %s}' % past])
        packed = PackedText.pack(with_past, number_after=SEQUENCE_NUMBER_KEY)
        assert packed.number_after is None  # (not read as packed: read when asked, which raises as the regex does)
        for args in (packed, PackedText.pack(with_past)):
            with pytest.raises(pa.ArrowInvalid, match=past):
                sequence_numbers(args, np.arange(len(texts) + 1))


@pytest.mark.parametrize("native", [True, False], ids=["c++", "arrow"])
def test_whether_any_of_the_rows_names_inputs_is_read_in_each_of_them(small_blocks, monkeypatch, native):
    """passes.args_name_inputs: true only where one of the rows asked for (not another row) holds
    '"Input' or '"flops"', in packed args (their rows marked as they were packed, as the importer
    packs them, or read when asked) and in an Arrow array, nulls read as nothing."""
    from neuron_explorer.collectors.kineto_names import ARGS_NAMING_INPUTS
    from neuron_explorer.collectors.passes import args_name_inputs

    _native_or_not(monkeypatch, native)
    texts = ['{"External id": %d}' % i if i % 5 else None for i in range(600)]
    texts[431] = '{"External id": 431, "Input Dims": [[2, 3]]}'
    texts[77] = '{"External id": 77, "flops": 12}'
    marked = PackedText.pack(pa.array(texts), ARGS_NAMING_INPUTS)
    assert marked.marks == (ARGS_NAMING_INPUTS if native else None)  # (marked by the C++ library only)
    for args in (marked, PackedText.pack(pa.array(texts)), pa.array(texts)):
        assert args_name_inputs(args, np.array([5, 431, 10]))
        assert args_name_inputs(args, np.array([77]))
        assert not args_name_inputs(args, np.array([i for i in range(600) if i not in (431, 77)]))
        assert not args_name_inputs(args, np.array([], dtype=np.int64))


def test_rows_holding_a_substring_are_marked_as_they_are_packed(small_blocks):
    """Each row that holds one of the substrings asked for is marked, and no other: not a row whose
    end and the next row's start spell one together, not a null, not a row holding only part of one;
    the marks survive joining packed pieces and dropping long rows (the rows left keep theirs)."""
    marks = ('"Input', '"flops"')
    rng = np.random.default_rng(2)
    choices = ['{"Input Dims": [[1]]}', '{"a": 1, "flops": 3}', '{"x": "Input"}', 'ends "Inpu', 't" starts', '"flops',
               '{"External id": 4}', None, "é€ \"Input\"", '"Input']
    texts = [choices[i] for i in rng.integers(len(choices), size=700)]
    holds = [t is not None and any(m in t for m in marks) for t in texts]
    packed = PackedText.pack(pa.array(texts), marks)
    assert packed.marks == marks and len(packed.blocks) > 10
    held = np.concatenate([b.holding if b.holding is not None else np.zeros(b.rows, bool) for b in packed.blocks])
    assert held.tolist() == holds and 100 < sum(holds) < 600
    for rows in (np.flatnonzero(holds)[:1], np.flatnonzero(~np.array(holds)), np.arange(700)):
        assert packed.any_marked(rows) == any(holds[r] for r in rows)
    joined = PackedText.concat([PackedText.pack(pa.array(texts[:300]), marks), PackedText.pack(pa.array(texts[300:]), marks)])
    assert joined.marks == marks and joined.any_marked([350]) == holds[350]
    assert PackedText.concat([joined, PackedText.pack(pa.array(texts))]).marks is None  # (one part not marked)
    kept, dropped = packed.with_rows_longer_dropped(15)
    assert dropped and kept.marks == marks and kept.number_after is None
    numbered = PackedText.pack(pa.array([t and f'{t}, "n": {i}' for i, t in enumerate(texts)]), marks, '"n"')
    kept_numbers, _ = numbered.with_rows_longer_dropped(30)
    assert kept_numbers.number_after == '"n"'
    assert kept_numbers.numbers_of(np.arange(700)).tolist() == [
        i if t is not None and len(f'{t}, "n": {i}') <= 30 else -1 for i, t in enumerate(texts)]
    left = [t is not None and len(t) <= 15 and any(m in t for m in marks) for t in texts]
    assert np.concatenate([b.holding if b.holding is not None else np.zeros(b.rows, bool) for b in kept.blocks]).tolist() == left
    with pytest.raises(ValueError):
        PackedText.pack(pa.array(texts)).any_marked([0])


def _native_or_not(monkeypatch, native: bool) -> None:
    from neuron_explorer.collectors import _json_native

    if native:
        assert _json_native.load() is not None
    else:
        monkeypatch.setattr(_json_native, "loaded", lambda: None)
