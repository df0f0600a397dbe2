// Rows of a text column copied from one block of it into their places in a new column (plain C
// ABI, loaded with ctypes; see _packed_text.py, PackedText.take).
//
// The importer holds the events' args compressed in blocks; the write takes each row group's rows
// from the blocks they are in. Taken with Arrow (a `take` per block, the parts joined, then put
// back in the rows' order) each row's bytes were copied three times, into three fresh buffers.
// Here each row's bytes are copied once, into the one buffer of the result, where its offset says.
//
// Must not: know what the text means.

#include <cstdint>
#include <cstring>

extern "C" {

// For k < n: row rows[k] of a block (its bytes from src + src_offsets[rows[k]]) to its place at[k] in
// the result, out + out_offsets[at[k]], as many bytes as the result's offsets give it (the caller
// made them from the same rows' lengths, a null's as 0).
void nxt_take(const int32_t* src_offsets, const uint8_t* src, const int64_t* rows, const int64_t* at, int64_t n,
              const int32_t* out_offsets, uint8_t* out) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t p = at[k];
    const int32_t len = out_offsets[p + 1] - out_offsets[p];
    if (len > 0) memcpy(out + out_offsets[p], src + src_offsets[rows[k]], (size_t)len);
  }
}
}
