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
#include <vector>

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

// Rows sorted by (start, longest first), on dense tracks 0..ntracks-1: `enclosing` without sorting
// the rows by track first. The rows of a track keep their order in any stable sort by track, so the
// previous row of the track is the one this pass saw last on it, and the walk is the same. A row that
// cannot contain others is a point at its start (its end is its start). Also counts the overlaps:
// rows not `uncounted` (nullptr: all count) that start inside the counted row before them on their
// track, which can contain, and end after it.
template <typename T, typename I>
int64_t enclosing_parents(const T* track, const int64_t* ts, const int64_t* end, const uint8_t* can, const uint8_t* uncounted,
                          int64_t n, int64_t ntracks, I* out) {
  std::vector<int64_t> last((std::size_t)ntracks, -1), last_counted((std::size_t)ntracks, -1);
  int64_t overlaps = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = (int64_t)track[i];
    const int64_t e = can[i] ? end[i] : ts[i];
    int64_t c = last[t];
    while (c >= 0 && !(can[c] && end[c] >= e)) c = (int64_t)out[c];
    out[i] = (I)c;
    last[t] = i;
    if (uncounted == nullptr || !uncounted[i]) {
      const int64_t p = last_counted[t];
      if (p >= 0 && can[p] && ts[i] < end[p] && end[p] < e) ++overlaps;
      last_counted[t] = i;
    }
  }
  return overlaps;
}

}  // namespace

extern "C" {

// `track_wide`: track is int64 (else int32); `wide`: out is int64 (else int32). Returns the overlaps.
int64_t nxf_enclosing_parents(const void* track, int32_t track_wide, const int64_t* ts, const int64_t* end, const uint8_t* can,
                              const uint8_t* uncounted, int64_t n, int64_t ntracks, int32_t wide, void* out) {
  if (track_wide)
    return wide ? enclosing_parents((const int64_t*)track, ts, end, can, uncounted, n, ntracks, (int64_t*)out)
                : enclosing_parents((const int64_t*)track, ts, end, can, uncounted, n, ntracks, (int32_t*)out);
  return wide ? enclosing_parents((const int32_t*)track, ts, end, can, uncounted, n, ntracks, (int64_t*)out)
              : enclosing_parents((const int32_t*)track, ts, end, can, uncounted, n, ntracks, (int32_t*)out);
}

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
