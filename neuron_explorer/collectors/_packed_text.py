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

    def unpack(self) -> pa.Buffer:
        """The block's text, decompressed."""
        return CODEC.decompress(self.text, self.size) if self.size else pa.py_buffer(b"")

    def array(self) -> pa.StringArray:
        return pa.StringArray.from_buffers(self.rows, pa.py_buffer(self.offsets), self.unpack(), self.validity, self.nulls)

    def valid_rows(self) -> np.ndarray | None:
        """One bool per row, False for a null; None when no row is null."""
        return _bits(self.validity, 0, self.rows) if self.nulls else None


def _bits(buffer: pa.Buffer | None, offset: int, n: int) -> np.ndarray | None:
    """One bool per row of an Arrow validity bitmap (None: no bitmap). No pyarrow conversion: that
    would import pandas, which the decode's threads must not wait for."""
    if buffer is None:
        return None
    return np.unpackbits(np.frombuffer(buffer, np.uint8), bitorder="little")[offset:offset + n].astype(bool)


class PackedText:
    """Rows of text (string or null), compressed in blocks. `take` gives rows back as a StringArray."""

    def __init__(self, blocks: list[_Block]):
        self.blocks = blocks
        rows = np.array([b.rows for b in blocks], dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(rows)))  # first row of each block, and the end

    @classmethod
    def pack(cls, array: pa.Array | pa.ChunkedArray) -> PackedText:
        """A string or large_string array (or chunked array), compressed."""
        if isinstance(array, pa.ChunkedArray):
            return cls.concat([cls.pack(c) for c in array.chunks])
        n = len(array)
        if n == 0:
            return cls([])
        validity, offsets_buf, data = array.buffers()
        wide = np.int64 if pa.types.is_large_string(array.type) else np.int32
        offsets = np.frombuffer(offsets_buf, wide)[array.offset:array.offset + n + 1]
        valid = _bits(validity, array.offset, n) if array.null_count else None
        lengths = np.diff(offsets)
        # block ends: after each BLOCK_BYTES of text, and at most BLOCK_ROWS rows apart
        ends = np.searchsorted(offsets, np.arange(offsets[0] + BLOCK_BYTES, offsets[-1], BLOCK_BYTES), side="right") - 1
        ends = np.union1d(ends[ends > 0], np.arange(BLOCK_ROWS, n, BLOCK_ROWS))
        bounds = np.concatenate(([0], ends, [n])).astype(np.int64)
        blocks = []
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if b <= a:
                continue
            lo, hi = int(offsets[a]), int(offsets[b])
            v = None if valid is None else valid[a:b]
            nulls = 0 if v is None else int(b - a - np.count_nonzero(v))
            blocks.append(_Block(
                rows=b - a, offsets=(offsets[a:b + 1] - lo).astype(np.int32), size=hi - lo,
                # (as bytes: the codec's own buffer keeps the room of an uncompressible input)
                text=CODEC.compress(data.slice(lo, hi - lo), asbytes=True) if hi > lo else b"",
                validity=pa.py_buffer(np.packbits(v, bitorder="little")) if nulls else None, nulls=nulls,
                longest=int(lengths[a:b].max())))
        return cls(blocks)

    @classmethod
    def concat(cls, parts: list[PackedText]) -> PackedText:
        return cls([b for p in parts for b in p.blocks])

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
        from . import _json_native  # (it imports this module)

        lib = _json_native.loaded()
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

        blocks, dropped = [], 0
        for b in self.blocks:
            if b.longest <= limit:
                blocks.append(b)
                continue
            arr = b.array()
            long = pc.greater(pc.utf8_length(arr), limit)
            dropped += pc.sum(long).as_py() or 0
            blocks += PackedText.pack(pc.if_else(long, pa.scalar(None, pa.string()), arr)).blocks
        return (PackedText(blocks), dropped) if dropped else (self, 0)
