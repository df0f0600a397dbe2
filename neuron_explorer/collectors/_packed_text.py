"""A text column held compressed in memory, in blocks: how the importer holds the events' args.

A trace's args (operators' input shapes and types, call stacks) are most of its JSON: two thirds
of a memory-profiled ResNet-50 trace. Held as one Arrow array they were most of the import's
memory peak, and joining the decoded pieces' arrays into one held them twice. Here the text of
each block of rows (about BLOCK_BYTES) is compressed with lz4 as the decode's threads make it
(20-40x smaller for such args), and the build and the write take the rows they need (`take`): only
the blocks those rows are in are decompressed. Rows in time order come from a few runs of
neighbouring rows of the trace (each thread's and device's events are written in time order), so a
row group of the events file decompresses little more than its own args.

Must not: know what the text means (JSON args) or which table it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

BLOCK_BYTES = 1 << 20
"""Text per block: what one `take` decompresses at least."""
BLOCK_ROWS = 16384
"""Rows per block at most (rows of null or short text would otherwise make blocks of a whole piece)."""
CODEC = pa.Codec("lz4")


@dataclass
class _Block:
    rows: int
    offsets: np.ndarray  # int32, rows + 1, from 0
    text: bytes  # the compressed text
    size: int  # bytes of text
    validity: pa.Buffer | None  # Arrow bitmap, None when no row is null
    nulls: int
    longest: int  # bytes of the longest value
    holding: np.ndarray | None = None  # with the text's `marks`: one bool per row, True where it holds one (None: no row does)
    numbers: tuple[np.ndarray, np.ndarray] | None = None  # with its `number_after`: (rows, their integers) of the rows with one

    def unpack(self) -> pa.Buffer:
        """The block's text, decompressed."""
        return CODEC.decompress(self.text, self.size) if self.size else pa.py_buffer(b"")

    def array(self) -> pa.StringArray:
        return pa.StringArray.from_buffers(self.rows, pa.py_buffer(self.offsets), self.unpack(), self.validity, self.nulls)

    def valid_rows(self) -> np.ndarray | None:
        """One bool per row, False for a null; None when no row is null."""
        return _bits(self.validity, 0, self.rows) if self.nulls else None


def _library():
    from . import _json_native  # (it imports this module)

    return _json_native.loaded()


def needles(texts) -> bytes:
    """Texts as the C++ library reads a list of them (each NUL-terminated)."""
    return b"".join(t.encode() + b"\0" for t in texts)


def _holding(lib, needles: bytes, offsets: np.ndarray, address: int, valid: np.ndarray | None) -> np.ndarray | None:
    """One bool per row of a block (its `offsets` from 0, its text at `address`, `valid` False for a
    null): whether it holds one of the `needles` (a null holds nothing, whatever bytes it spans);
    None where no row does."""
    out = np.empty(len(offsets) - 1, np.uint8)
    if not lib.nxt_mark_holding(offsets.ctypes.data, address, len(out), needles, len(needles), out.ctypes.data):
        return None
    holding = out.view(bool)
    if valid is not None:
        holding &= valid
    return holding if holding.any() else None


class _Overflow(Exception):
    """An integer after the key that does not fit an int64 (the numbers are then not kept)."""


def _numbers(lib, key: bytes, offsets: np.ndarray, address: int, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows, integers) of the rows of a block with an integer after `key` (see PackedText); None where none has."""
    n = len(offsets) - 1
    rows, values = np.empty(n, np.int32), np.empty(n, np.int64)
    v = None if valid is None else np.ascontiguousarray(valid, dtype=bool).view(np.uint8)
    found = lib.nxt_ints_after_all(offsets.ctypes.data, address, n, None if v is None else v.ctypes.data, key, len(key),
                                   rows.ctypes.data, values.ctypes.data)
    if found < 0:
        raise _Overflow
    return (rows[:found].copy(), values[:found].copy()) if found else None


def _bits(buffer: pa.Buffer | None, offset: int, n: int) -> np.ndarray | None:
    """One bool per row of an Arrow validity bitmap (None: no bitmap). No pyarrow conversion: that
    would import pandas, which the decode's threads must not wait for."""
    if buffer is None:
        return None
    return np.unpackbits(np.frombuffer(buffer, np.uint8), bitorder="little")[offset:offset + n].astype(bool)


class PackedText:
    """Rows of text (string or null), compressed in blocks. `take` gives rows back as a StringArray.

    What a pass over many rows would otherwise unpack every block for can be read as the rows are
    packed, while their text is at hand (with the C++ library): `marks`, substrings, each row that
    holds one marked (`any_marked`); `number_after`, a key, the integer after it in each row that has
    one (`numbers_of`: the key, then `\\s*:\\s*-?\\d+`, its leftmost match). Each is None where it was
    not asked for or not read (no library; an integer past int64)."""

    def __init__(self, blocks: list[_Block], marks: tuple[str, ...] | None = None, number_after: str | None = None):
        self.blocks = blocks
        self.marks = marks
        self.number_after = number_after
        rows = np.array([b.rows for b in blocks], dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(rows)))  # first row of each block, and the end

    @classmethod
    def pack(cls, array: pa.Array | pa.ChunkedArray, marks: tuple[str, ...] | None = None,
             number_after: str | None = None) -> PackedText:
        """A string or large_string array (or chunked array), compressed; with `marks` and
        `number_after`, those read from each row (see the class)."""
        lib = _library() if marks or number_after else None
        marks, number_after = (tuple(marks) if marks else None, number_after) if lib is not None else (None, None)
        if isinstance(array, pa.ChunkedArray):
            return cls.concat([cls.pack(c, marks, number_after) for c in array.chunks]) if array.num_chunks else cls([], marks, number_after)
        n = len(array)
        if n == 0:
            return cls([], marks, number_after)
        validity, offsets_buf, data = array.buffers()
        wide = np.int64 if pa.types.is_large_string(array.type) else np.int32
        offsets = np.frombuffer(offsets_buf, wide)[array.offset:array.offset + n + 1]
        valid = _bits(validity, array.offset, n) if array.null_count else None
        lengths = np.diff(offsets)
        # block ends: after each BLOCK_BYTES of text, and at most BLOCK_ROWS rows apart
        ends = np.searchsorted(offsets, np.arange(offsets[0] + BLOCK_BYTES, offsets[-1], BLOCK_BYTES), side="right") - 1
        ends = np.union1d(ends[ends > 0], np.arange(BLOCK_ROWS, n, BLOCK_ROWS))
        bounds = np.concatenate(([0], ends, [n])).astype(np.int64)
        needles_, key = marks and needles(marks), number_after and number_after.encode()
        blocks = []
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if b <= a:
                continue
            lo, hi = int(offsets[a]), int(offsets[b])
            v = None if valid is None else valid[a:b]
            nulls = 0 if v is None else int(b - a - np.count_nonzero(v))
            block_offsets = (offsets[a:b + 1] - lo).astype(np.int32)
            block = _Block(
                rows=b - a, offsets=block_offsets, size=hi - lo,
                # (as bytes: the codec's own buffer keeps the room of an uncompressible input)
                text=CODEC.compress(data.slice(lo, hi - lo), asbytes=True) if hi > lo else b"",
                validity=pa.py_buffer(np.packbits(v, bitorder="little")) if nulls else None, nulls=nulls,
                longest=int(lengths[a:b].max()))
            if hi > lo and needles_:
                block.holding = _holding(lib, needles_, block_offsets, data.address + lo, v)
            if hi > lo and key:
                try:
                    block.numbers = _numbers(lib, key, block_offsets, data.address + lo, v)
                except _Overflow:  # (read from the text when asked, which raises as the regex does)
                    key, number_after = None, None
            blocks.append(block)
        if number_after is None:
            for block in blocks:
                block.numbers = None
        return cls(blocks, marks, number_after)

    @classmethod
    def concat(cls, parts: list[PackedText]) -> PackedText:
        # (each read only where every part read it alike)
        marks, numbers = {p.marks for p in parts}, {p.number_after for p in parts}
        return cls([b for p in parts for b in p.blocks], marks.pop() if len(marks) == 1 else None,
                   numbers.pop() if len(numbers) == 1 else None)

    def any_marked(self, rows) -> bool:
        """Whether any of the given rows holds one of `marks` (which must not be None)."""
        if self.marks is None:
            raise ValueError("no substrings were marked when this text was packed")
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows) or all(b.holding is None for b in self.blocks):
            return False
        return bool(np.concatenate([b.holding if b.holding is not None else np.zeros(b.rows, bool) for b in self.blocks])[rows].any())

    def forget_reads(self) -> None:
        """Let go of what was read as the rows were packed (`marks` and `number_after` become None)."""
        self.marks = self.number_after = None
        for b in self.blocks:
            b.holding = b.numbers = None

    def numbers_of(self, rows) -> np.ndarray:
        """The integer after `number_after` (which must not be None) in each of the given rows, -1 where there is none."""
        if self.number_after is None:
            raise ValueError("no integers were read when this text was packed")
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(len(rows), -1, dtype=np.int64)
        have = [(self.starts[i] + b.numbers[0], b.numbers[1]) for i, b in enumerate(self.blocks) if b.numbers is not None]
        if not len(rows) or not have:
            return out
        at, values = np.concatenate([h[0] for h in have]), np.concatenate([h[1] for h in have])  # (rows in order)
        i = np.minimum(np.searchsorted(at, rows), len(at) - 1)
        hit = at[i] == rows
        out[hit] = values[i[hit]]
        return out

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def longest(self) -> int:
        """Bytes of the longest value (0 when there is none)."""
        return max((b.longest for b in self.blocks), default=0)

    @property
    def nbytes(self) -> int:
        """Memory held (compressed text, offsets, bitmaps)."""
        return sum(len(b.text) + b.offsets.nbytes + (b.validity.size if b.validity is not None else 0) for b in self.blocks)

    def take(self, rows) -> pa.StringArray:
        """The given rows (integers: a numpy or Arrow array), in that order. Each block they are in is
        decompressed once, its rows taken and the block let go before the next: only the rows asked
        for are held unpacked, with one block. (Blocks joined first, to take from them at once, held
        up to 64 MiB of text twice, the joined and its parts: a large trace's row group of events
        took its args from several hundred blocks, and that was the import's memory peak.) With the
        importer's C++ library loaded, each row's bytes are copied once, into the result
        (`_take_native`); else Arrow takes them from each block and joins the parts."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return pa.array([], pa.string())
        block = np.searchsorted(self.starts, rows, side="right") - 1
        by_block = None if (np.diff(block) >= 0).all() else np.argsort(block, kind="stable")
        if by_block is not None:
            rows, block = rows[by_block], block[by_block]
        bounds = np.concatenate(([0], np.flatnonzero(np.diff(block)) + 1, [len(block)])).tolist()
        lib = _library()
        if lib is not None:
            taken = self._take_native(lib, rows, block, bounds, np.arange(len(rows)) if by_block is None else by_block)
            if taken is not None:
                return taken
        parts = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            b = int(block[lo])
            parts.append(self.blocks[b].array().take(pa.array(rows[lo:hi] - self.starts[b])))
        taken = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
        del parts
        if by_block is None:
            return taken
        back = np.empty_like(by_block)
        back[by_block] = np.arange(len(by_block))
        return taken.take(pa.array(back))

    def _take_native(self, lib, rows: np.ndarray, block: np.ndarray, bounds: list[int], at: np.ndarray) -> pa.StringArray | None:
        """`take` with the C++ library (native/packed_text.cpp): the rows' lengths first, so that each
        row's bytes are copied once, from its unpacked block straight to its place in the result;
        `rows` and `block` grouped by block (`bounds`), `at` their positions in the result. None
        where the result's text would not fit a string array's 32-bit offsets."""
        n = len(rows)
        lengths = np.empty(n, np.int64)
        valid = None
        parts = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            b = int(block[lo])
            blk, local, pos = self.blocks[b], rows[lo:hi] - self.starts[b], at[lo:hi]
            lengths[pos] = blk.offsets[local + 1] - blk.offsets[local]
            if (rows_valid := blk.valid_rows()) is not None:
                if valid is None:
                    valid = np.ones(n, dtype=bool)
                valid[pos] = rows_valid[local]
            parts.append((blk, local, np.ascontiguousarray(pos)))
        if valid is not None:
            lengths[~valid] = 0  # (a null's bytes, if its block kept any, are not copied)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] > np.iinfo(np.int32).max:
            return None
        offsets = offsets.astype(np.int32)
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        for blk, local, pos in parts:
            if blk.size:
                text = blk.unpack()
                lib.nxt_take(blk.offsets.ctypes.data, text.address, local.ctypes.data, pos.ctypes.data, len(local),
                             offsets.ctypes.data, out.ctypes.data)
                del text
        nulls = 0 if valid is None else int(n - np.count_nonzero(valid))
        validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out), validity, nulls)

    def take_by_block(self, rows):
        """The given rows a block at a time: (their positions in `rows`, their text) for each block
        they are in, in the blocks' order. Only one block (about BLOCK_BYTES) is unpacked at once:
        for a pass over many scattered rows that needs each row's text only for a moment (a number
        read from the args), where `take` would hold all the rows' text unpacked."""
        for at, local, block in self.rows_by_block(rows):
            yield at, block.array().take(pa.array(local))

    def rows_by_block(self, rows):
        """The given rows grouped by the block they are in, in the blocks' order: (their positions in
        `rows`, their rows in the block, the block) for each, the block still packed (`_Block.unpack`
        gives its text, `offsets` and `validity` where each row is): for code that reads the rows in
        the block's own memory (passes.sequence_numbers, with the C++ library)."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return
        block = np.searchsorted(self.starts, rows, side="right") - 1
        by_block = np.argsort(block, kind="stable")
        block = block[by_block]
        bounds = np.flatnonzero(np.diff(block)) + 1
        for lo, hi in zip(np.concatenate(([0], bounds)).tolist(), np.concatenate((bounds, [len(block)])).tolist()):
            at = by_block[lo:hi]
            b = int(block[lo])
            yield at, rows[at] - self.starts[b], self.blocks[b]

    def unpacked(self) -> pa.StringArray:
        """All rows as one array."""
        if not self.blocks:
            return pa.array([], pa.string())
        return pa.concat_arrays([b.array() for b in self.blocks])

    def with_rows_longer_dropped(self, limit: int) -> tuple[PackedText, int]:
        """The text with every value longer than `limit` characters made null, and how many were
        (only the blocks that hold a value of more than `limit` bytes are decompressed)."""
        if self.longest <= limit:
            return self, 0
        import pyarrow.compute as pc

        parts, dropped = [], 0
        for b in self.blocks:
            if b.longest <= limit:
                parts.append(PackedText([b], self.marks, self.number_after))
                continue
            arr = b.array()
            long = pc.greater(pc.utf8_length(arr), limit)
            dropped += pc.sum(long).as_py() or 0
            parts.append(PackedText.pack(pc.if_else(long, pa.scalar(None, pa.string()), arr), self.marks, self.number_after))
        return (PackedText.concat(parts), dropped) if dropped else (self, 0)
