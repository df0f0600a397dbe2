// The rows of a packed text column (collectors/_packed_text.py) read from one unpacked block of it
// (plain C ABI, loaded with ctypes through _json_native's library).
//
// The importer holds the events' args compressed in blocks. Each row group of the write takes its
// rows from the blocks they are in; with Arrow (a `take` per block, the parts joined, then put back
// in the rows' order) each row's bytes were copied three times, into three fresh buffers: here
// once, into the one buffer of the result, where its offset says (nxt_take). The build reads an
// integer arg of a few hundred thousand operators (their `Sequence number`): with Arrow, each
// block's rows were taken into an array and a regex run over it; here each row's bytes are read in
// the unpacked block itself (nxt_int_after).
//
// Must not: know which table the text belongs to.

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace {

inline bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }  // RE2's \s

// The integer of the first place in [p, e) where `key` is followed by \s*:\s*-?\d+ (the regex
// `key\s*:\s*(-?\d+)`'s leftmost match); 0 with *found false where there is none; -1 with *overflow
// where that integer does not fit an int64.
int64_t int_after(const char* p, const char* e, const char* key, int64_t klen, bool* found, bool* overflow) {
  *found = *overflow = false;
  while (e - p >= klen) {
    const char* k = (const char*)memmem(p, (size_t)(e - p), key, (size_t)klen);
    if (!k) return 0;
    const char* q = k + klen;
    p = k + 1;  // (the next occurrence may begin inside this one)
    while (q < e && space(*q)) ++q;
    if (q >= e || *q != ':') continue;
    ++q;
    while (q < e && space(*q)) ++q;
    bool neg = q < e && *q == '-';
    if (neg) ++q;
    if (q >= e || *q < '0' || *q > '9') continue;
    uint64_t v = 0;
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; q < e && *q >= '0' && *q <= '9'; ++q) {
      const uint64_t d = (uint64_t)(*q - '0');
      if (v > (limit - d) / 10) {
        *overflow = true;
        return -1;
      }
      v = v * 10 + d;
    }
    *found = true;
    return neg ? (int64_t)(0 - v) : (int64_t)v;
  }
  return 0;
}

// Calls each(r, k) once for each row r < n of a block (its bytes from src + src_offsets[r]) where `key`
// is found starting in the row (k: the first such place), in row order, until each returns false:
// the block is searched whole (memmem: gigabytes a second), each place found gives its row, and the
// search goes on from the next row (a place that runs past its row's end is given too: the caller
// decides).
template <typename F>
void rows_with(const int32_t* src_offsets, const uint8_t* src, int64_t n, const char* key, size_t klen, F each) {
  const char* text = (const char*)src;
  const char* end = text + src_offsets[n];
  const char* p = text;
  int64_t r = 0;
  while (klen && (size_t)(end - p) >= klen) {
    const char* k = (const char*)memmem(p, (size_t)(end - p), key, klen);
    if (!k) return;
    // the row it starts in: the last whose start is at or before it (rows only go forward)
    r = (int64_t)(std::upper_bound(src_offsets + r, src_offsets + n + 1, (int32_t)(k - text)) - src_offsets) - 1;
    if (!each(r, k)) return;
    p = text + src_offsets[r + 1];  // (a later place in this row is in it as well, or past its end)
  }
}

}  // namespace

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

// For k < n: out[k] = the integer after `key` in row rows[k] of a block (see int_after), or
// `missing` where the row has none. Returns 0, or -1 (out left partly written) where an integer does
// not fit an int64: the caller reads that block another way.
int32_t nxt_int_after(const int32_t* src_offsets, const uint8_t* src, const int64_t* rows, int64_t n, const char* key,
                      int64_t klen, int64_t missing, int64_t* out) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t r = rows[k];
    const char* p = (const char*)src + src_offsets[r];
    bool found, overflow;
    const int64_t v = int_after(p, (const char*)src + src_offsets[r + 1], key, klen, &found, &overflow);
    if (overflow) return -1;
    out[k] = found ? v : missing;
  }
  return 0;
}

// For each row r < n of a block: out[r] = 1 where the row holds one of the `needles` (NUL-terminated,
// one after another, nlen bytes in all), else 0; a place that runs past its row's end is in no row.
// Returns how many rows hold one.
int64_t nxt_mark_holding(const int32_t* src_offsets, const uint8_t* src, int64_t n, const char* needles, int64_t nlen,
                         uint8_t* out) {
  memset(out, 0, (size_t)n);
  int64_t marked = 0;
  for (const char* needle = needles; needle < needles + nlen; needle += strlen(needle) + 1) {
    const size_t len = strlen(needle);
    rows_with(src_offsets, src, n, needle, len, [&](int64_t r, const char* k) {
      if (k + len <= (const char*)src + src_offsets[r + 1] && !out[r]) {
        out[r] = 1;
        ++marked;
      }
      return true;
    });
  }
  return marked;
}

// For each row r < n of a block with an integer after `key` (as int_after reads it; a row where
// valid[r] == 0 is a null and has none; valid may be nullptr): its row in rows_out and the integer in
// values_out, in row order (both hold n). Only the rows the key is found in are read. Returns how
// many rows have one, or -1 where an integer does not fit an int64.
int64_t nxt_ints_after_all(const int32_t* src_offsets, const uint8_t* src, int64_t n, const uint8_t* valid, const char* key,
                           int64_t klen, int32_t* rows_out, int64_t* values_out) {
  const char* text = (const char*)src;
  int64_t found_rows = 0;
  bool overflowed = false;
  rows_with(src_offsets, src, n, key, (size_t)(klen > 0 ? klen : 0), [&](int64_t r, const char*) {
    if (valid != nullptr && !valid[r]) return true;
    bool found, overflow;
    const int64_t v = int_after(text + src_offsets[r], text + src_offsets[r + 1], key, klen, &found, &overflow);
    if (overflow) return !(overflowed = true);
    if (found) {
      rows_out[found_rows] = (int32_t)r;
      values_out[found_rows++] = v;
    }
    return true;
  });
  return overflowed ? -1 : found_rows;
}

// Whether any row rows[k] (k < n) of a block holds one of the `needles` (NUL-terminated, one after
// another, nlen bytes in all): 1, at the first found; else 0.
int32_t nxt_any_holds(const int32_t* src_offsets, const uint8_t* src, const int64_t* rows, int64_t n, const char* needles,
                      int64_t nlen) {
  for (int64_t k = 0; k < n; ++k) {
    const char* p = (const char*)src + src_offsets[rows[k]];
    const size_t len = (size_t)(src_offsets[rows[k] + 1] - src_offsets[rows[k]]);
    for (const char* needle = needles; needle < needles + nlen; needle += strlen(needle) + 1)
      if (memmem(p, len, needle, strlen(needle))) return 1;
  }
  return 0;
}
}
