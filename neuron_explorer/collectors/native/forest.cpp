// The build's walks over a rank's forest of events (plain C ABI, loaded with ctypes; see _forest.py).
//
// A rank's events are sorted by (start, longest first) before they are linked, so every event's
// parent comes before it: one pass in row order computes what the vectorised pointer jumping of
// _forest.py computes in O(n log depth) passes over every row. Each function first checks that
// order (parent[i] < i for every row) and returns -1 without writing anything when it does not
// hold; _forest.py then takes the pointer-jumping path. Results are equal either way (tests).
//
// Must not: know what the nodes are.

#include <cstdint>

namespace {

template <typename I>
bool parents_first(const I* parent, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (parent[i] >= i || parent[i] < -1) return false;
  return true;
}

template <typename I>
int32_t nearest_marked(const I* parent, const uint8_t* marked, int64_t n, I* out) {
  if (!parents_first(parent, n)) return -1;
  for (int64_t i = 0; i < n; ++i) out[i] = marked[i] ? (I)i : (parent[i] >= 0 ? out[parent[i]] : (I)-1);
  return 0;
}

template <typename I>
int32_t root_of(const I* parent, int64_t n, I* out) {
  if (!parents_first(parent, n)) return -1;
  for (int64_t i = 0; i < n; ++i) out[i] = parent[i] >= 0 ? out[parent[i]] : (I)i;
  return 0;
}

// counted == nullptr: every ancestor counts
template <typename I>
int32_t depth_of(const I* parent, const uint8_t* counted, int64_t n, int32_t* out) {
  if (!parents_first(parent, n)) return -1;
  for (int64_t i = 0; i < n; ++i) {
    const I p = parent[i];
    out[i] = p < 0 ? 0 : out[p] + (counted ? (int32_t)(counted[p] != 0) : 1);
  }
  return 0;
}

// Rows sorted by (track, start, longest first): each row's innermost enclosing row on its track,
// as the index of that row in this order (-1: none). A row encloses a later one when it can
// contain (can[r]) and ends at or after it (end[r] >= end[i]). The walk starts at the previous
// row of the track and climbs through rows already answered: what a rejected row skipped ends
// before it, so before this row too.
template <typename I>
void enclosing(const int64_t* track, const int64_t* end, const uint8_t* can, int64_t n, I* out) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t c = (i > 0 && track[i] == track[i - 1]) ? i - 1 : -1;
    while (c >= 0 && !(can[c] && end[c] >= end[i])) c = out[c];
    out[i] = (I)c;
  }
}

}  // namespace

extern "C" {

void nxf_enclosing(const int64_t* track, const int64_t* end, const uint8_t* can, int64_t n, int32_t wide, void* out) {
  wide ? enclosing(track, end, can, n, (int64_t*)out) : enclosing(track, end, can, n, (int32_t*)out);
}


// `wide`: the index arrays are int64 (else int32); out has the same type (depth: int32 always).
int32_t nxf_nearest_marked(const void* parent, const uint8_t* marked, int64_t n, int32_t wide, void* out) {
  return wide ? nearest_marked((const int64_t*)parent, marked, n, (int64_t*)out)
              : nearest_marked((const int32_t*)parent, marked, n, (int32_t*)out);
}

int32_t nxf_root_of(const void* parent, int64_t n, int32_t wide, void* out) {
  return wide ? root_of((const int64_t*)parent, n, (int64_t*)out) : root_of((const int32_t*)parent, n, (int32_t*)out);
}

int32_t nxf_depth_of(const void* parent, const uint8_t* counted, int64_t n, int32_t wide, int32_t* out) {
  return wide ? depth_of((const int64_t*)parent, counted, n, out) : depth_of((const int32_t*)parent, counted, n, out);
}
}
