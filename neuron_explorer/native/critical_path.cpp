// The critical path walk (analyzers/critical_path.py's _Walker, over _path_index.RankIndex) in C++.
//
// It mirrors the Python walk move for move: the same states, the same segments in the same order,
// so the path is identical (tests/test_critical_path_native.py holds them equal on every trace in
// tests/data/traces and on generated ones). Moves are kept per (host thread, t, device event) and
// reused by the walks of later steps that reach the same state (overlapping steps), as in Python.
//
// Plain C ABI, loaded with ctypes by analyzers/_path_native.py. Arrays are the index's columns,
// rows named by position (-1: none). Must not: decide the model (the Python walk is the reference).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int8_t CPU_OP = 0, STEP = 3, RUNTIME = 4, KERNEL = 5;
constexpr int8_t F_SYNC_CALL = 1, F_MEMCPY_CALL = 2, F_INPUT = 4, F_TO_HOST = 8, F_COMM = 16, F_EARLY = 32;
constexpr int64_t NONE = -(int64_t(1) << 62);
constexpr int64_t DEVICE_COMPUTE = 0, COMMUNICATION = 1, MEMCPY = 2, HOST_COMPUTE = 3, LAUNCH_OVERHEAD = 4,
                  INPUT_PIPELINE = 5, IDLE = 6;
// causes: 0 none, 1 the call's own time, 2 untraced host time; device causes are raw codes below 0
constexpr int64_t CAUSE_LAUNCH = -1, CAUSE_STREAM = -2, CAUSE_WAIT_BASE = -10;  // -10 - N: "waiting for stream N"
enum Wait { W_NO = 0, W_ANY = 1, W_OWN = 2, W_SET = 3 };

struct Index {
    int64_t n;
    const int64_t *ts, *end, *device, *launch, *id;
    const int8_t *kind, *flags;
    const int32_t *stream_of, *at_in_stream;
    int64_t ntracks;
    const int64_t *tr_off, *tr_points, *tr_inner;
    int64_t nstreams;
    const int64_t *st_off, *st_rows, *st_starts;
    const int64_t *w_off, *w_ts, *w_target, *w_other;  // stream waits per stream (sorted by ts, id)
    int64_t nlaunched;
    const int64_t *lb_by, *lb_rows;  // device work by the row that launched it, sorted
    const int32_t *sync_set;        // per row: for a sync call, its set of streams (-1: every stream)
    const int64_t *set_off, *set_streams;
    int64_t runtime_wait_min, unlinked_gap_max;
};

// the index of the first element >= v in [lo, hi) (bisect_left)
inline int64_t lower(const int64_t *a, int64_t lo, int64_t hi, int64_t v) {
    return std::lower_bound(a + lo, a + hi, v) - a;
}
inline int64_t upper(const int64_t *a, int64_t lo, int64_t hi, int64_t v) {
    return std::upper_bound(a + lo, a + hi, v) - a;
}

struct Walker {
    const Index &x;
    std::vector<int64_t> seg;  // 5 numbers each: ts, ns, event, category, cause
    explicit Walker(const Index &ix) : x(ix) {}

    void launched(int64_t r, int64_t &lo, int64_t &hi) const {
        lo = lower(x.lb_by, 0, x.nlaunched, r);
        hi = upper(x.lb_by, lo, x.nlaunched, r);
    }

    int wait_targets(int64_t r, int64_t &set) const {
        int8_t f = x.flags[r];
        set = -1;
        if (f & F_SYNC_CALL) {
            set = x.sync_set[r];
            return set < 0 ? W_ANY : W_SET;
        }
        if (f & F_MEMCPY_CALL) {
            int64_t lo, hi;
            launched(r, lo, hi);
            int64_t xend = x.end[r];
            if (hi > lo) {
                for (int64_t k = lo; k < hi; ++k)
                    if (x.ts[x.lb_rows[k]] >= xend) return W_NO;
                return W_OWN;
            }
            return xend - x.ts[r] >= x.runtime_wait_min ? W_ANY : W_NO;
        }
        return x.end[r] - x.ts[r] >= x.runtime_wait_min ? W_ANY : W_NO;
    }

    bool blocking_copy(int64_t r) const {
        int64_t set;
        if (!(x.flags[r] & F_MEMCPY_CALL) || wait_targets(r, set) != W_OWN) return false;
        int64_t lo, hi, xend = x.end[r];
        launched(r, lo, hi);
        for (int64_t k = lo; k < hi; ++k) {
            int64_t d = x.lb_rows[k];
            if ((x.flags[d] & F_TO_HOST) && x.end[d] <= xend) return true;
        }
        return false;
    }

    int64_t category(int64_t e) const {
        if (e < 0) return HOST_COMPUTE;
        if (x.device[e] != NONE) {
            if (x.kind[e] == KERNEL) return (x.flags[e] & F_COMM) ? COMMUNICATION : DEVICE_COMPUTE;
            return MEMCPY;
        }
        if (x.flags[e] & F_INPUT) return INPUT_PIPELINE;
        if (x.kind[e] != RUNTIME) return HOST_COMPUTE;
        return ((x.flags[e] & F_MEMCPY_CALL) && blocking_copy(e)) ? HOST_COMPUTE : LAUNCH_OVERHEAD;
    }

    void add(int64_t ts, int64_t ns, int64_t ev, int64_t cat, int64_t cause) {
        seg.push_back(ts);
        seg.push_back(ns);
        seg.push_back(ev);
        seg.push_back(cat);
        seg.push_back(cause);
    }

    void host_at(int64_t t, int64_t own, int64_t floor, int64_t &ev, int64_t &lo) const {
        ev = -1;
        bool has = false;
        if (own >= 0) {
            int64_t a = x.tr_off[own], b = x.tr_off[own + 1];
            int64_t i = lower(x.tr_points, a, b, t) - 1;
            if (i >= a) {
                ev = x.tr_inner[i];
                lo = x.tr_points[i];
                has = true;
            }
        }
        if (!has || lo < floor) lo = floor;
        if (ev >= 0 && (x.kind[ev] == CPU_OP || x.kind[ev] == RUNTIME)) return;
        int64_t best = -1;
        for (int64_t k = 0; k < x.ntracks; ++k) {
            if (k == own) continue;
            int64_t a = x.tr_off[k], b = x.tr_off[k + 1];
            int64_t i = lower(x.tr_points, a, b, t) - 1;
            if (i < a) continue;
            if (x.tr_points[i] > lo) lo = x.tr_points[i];
            int64_t other = x.tr_inner[i];
            if (other >= 0 && (x.kind[other] == CPU_OP || x.kind[other] == RUNTIME) && (best < 0 || x.ts[other] > x.ts[best]))
                best = other;
        }
        if (best >= 0) ev = best;
    }

    int64_t awaited(int64_t r, int64_t t) const {
        int64_t set;
        int w = wait_targets(r, set);
        if (w == W_NO) return -1;
        if (w == W_OWN) {
            int64_t lo, hi, best = -1;
            launched(r, lo, hi);
            for (int64_t k = lo; k < hi; ++k) {
                int64_t d = x.lb_rows[k];
                if (x.ts[d] < t && (best < 0 || x.end[d] > x.end[best] || (x.end[d] == x.end[best] && x.id[d] > x.id[best])))
                    best = d;
            }
            return best;
        }
        int64_t best = -1, xts = x.ts[r], xend = x.end[r];
        int64_t until = t < xend ? t : xend;
        for (int64_t s = 0; s < x.nstreams; ++s) {
            if (w == W_SET) {
                bool in = false;
                for (int64_t k = x.set_off[set]; k < x.set_off[set + 1]; ++k)
                    if (x.set_streams[k] == s) { in = true; break; }
                if (!in) continue;
            }
            int64_t a = x.st_off[s], b = x.st_off[s + 1];
            int64_t i = lower(x.st_starts, a, b, until) - 1;
            while (i >= a && (x.end[x.st_rows[i]] > xend || x.launch[x.st_rows[i]] == r)) --i;
            if (i >= a) {
                int64_t e = x.st_rows[i];
                if (x.end[e] > xts && (best < 0 || x.end[e] > x.end[best])) best = e;
            }
        }
        return best;
    }

    // as RankIndex.running_at: collectives count only when work launched before t (or before the trace: F_EARLY)
    // waits on a stream at t
    int64_t running_at(int64_t t) const {
        int64_t best = -1, comm = -1;
        bool queued = false;
        auto later = [&](int64_t e, int64_t than) {
            return than < 0 || x.ts[e] > x.ts[than] || (x.ts[e] == x.ts[than] && x.id[e] > x.id[than]);
        };
        for (int64_t s = 0; s < x.nstreams; ++s) {
            int64_t a = x.st_off[s], b = x.st_off[s + 1];
            int64_t i = lower(x.st_starts, a, b, t);
            if (i < b && !queued) {
                int64_t next = x.launch[x.st_rows[i]];
                queued = (next >= 0 && x.end[next] <= t) || (x.flags[x.st_rows[i]] & F_EARLY);
            }
            if (i - 1 >= a) {
                int64_t e = x.st_rows[i - 1];
                if (x.end[e] > t) {
                    if (!(x.flags[e] & F_COMM)) {
                        if (later(e, best)) best = e;
                    } else if (later(e, comm)) {
                        comm = e;
                    }
                }
            }
        }
        if (queued && comm >= 0 && later(comm, best)) return comm;
        return best;
    }

    // the predecessor that became ready last: how 0 stream, 1 launch, 2 a stream waited on (other: its number)
    bool predecessor(int64_t d, int64_t &ready, int &how, int64_t &row, int64_t &other) const {
        int64_t ds = x.ts[d];
        int64_t si = x.stream_of[d], i = x.at_in_stream[d];
        int64_t a = x.st_off[si];
        int64_t prev = i > 0 ? x.st_rows[a + i - 1] : -1;
        int64_t launch = x.launch[d];
        bool have = false;
        int pref = 0;
        if (prev >= 0 && (launch >= 0 || ds - x.end[prev] <= x.unlinked_gap_max || (x.flags[d] & F_EARLY))) {
            int64_t pe = x.end[prev];
            ready = pe < ds ? pe : ds, pref = 2, how = 0, row = prev, have = true;
        }
        if (launch >= 0 && x.device[launch] == NONE) {
            int64_t set;
            bool blocking = wait_targets(launch, set) != W_NO && !(x.flags[launch] & F_SYNC_CALL);
            int64_t le = x.end[launch];
            int64_t r = (blocking && le > ds) ? x.ts[launch] : le;
            if (r > ds) r = ds;
            if (!have || r > ready || (r == ready && 1 > pref)) ready = r, pref = 1, how = 1, row = launch, have = true;
        }
        int64_t wa = x.w_off[si], wb = x.w_off[si + 1];
        if (wb > wa) {
            int64_t lo = prev >= 0 ? lower(x.w_ts, wa, wb, x.ts[prev]) : wa;
            int64_t hi = upper(x.w_ts, wa, wb, ds);
            for (int64_t k = lo; k < hi; ++k) {
                int64_t o = x.w_target[k];
                if (o < 0) continue;
                int64_t oa = x.st_off[o], ob = x.st_off[o + 1];
                int64_t j = lower(x.st_starts, oa, ob, ds) - 1;
                while (j >= oa && x.end[x.st_rows[j]] > ds) --j;
                if (j >= oa && (!have || x.end[x.st_rows[j]] > ready))
                    ready = x.end[x.st_rows[j]], pref = 0, how = 2, row = x.st_rows[j], other = x.w_other[k], have = true;
            }
        }
        return have;
    }

    // one move from (t, dev); appends segments, latest first; returns the next state
    void move(int64_t &t, int64_t &dev, int64_t own, int64_t start) {
        if (dev < 0) {
            int64_t ev, lo;
            host_at(t, own, start, ev, lo);
            bool waiting = false;  // inside a blocking copy whose own copy has not run yet: the host waits on the device
            if (ev >= 0 && x.kind[ev] == RUNTIME) {
                int64_t d = awaited(ev, t);
                if (d >= 0 && x.end[d] > lo) {
                    int64_t dend = x.end[d];
                    if (dend < t) {
                        add(dend, t - dend, ev, category(ev), 1);
                        t = dend;
                    }
                    dev = d;
                    return;
                }
                waiting = d < 0 && (x.flags[ev] & F_MEMCPY_CALL) && blocking_copy(ev);
            }
            if (ev >= 0 && x.kind[ev] == STEP) ev = -1;
            if (t > lo) add(lo, t - lo, ev, category(ev), waiting ? 3 : ev >= 0 ? 0 : 2);
            t = lo > start ? lo : start;
            dev = -1;
            return;
        }
        int64_t lo = x.ts[dev] < start ? start : x.ts[dev];
        if (t > lo) add(lo, t - lo, dev, category(dev), 0);
        t = lo;
        if (t <= start) { dev = -1; return; }
        int64_t ready = 0, row = -1, other = 0;
        int how = 0;
        if (!predecessor(dev, ready, how, row, other)) { dev = -1; return; }
        if (ready < t) {
            int64_t cause = how == 1 ? CAUSE_LAUNCH : how == 0 ? CAUSE_STREAM : CAUSE_WAIT_BASE - other;
            int64_t l2 = ready > start ? ready : start;
            add(l2, t - l2, dev, IDLE, cause);
            t = l2;
            if (t <= start) { dev = -1; return; }
        }
        dev = how == 1 ? -1 : row;
    }
};

struct Key {
    int64_t own, t, dev;
    bool operator==(const Key &o) const { return own == o.own && t == o.t && dev == o.dev; }
};
inline uint64_t mix(uint64_t z) {  // splitmix64's finaliser: every input bit moves every output bit
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// the kept moves by state: open addressing, linear probing, at most half full
struct Memo {
    std::vector<Key> keys;
    std::vector<int64_t> vals;  // -1: empty slot
    size_t used = 0;
    Memo() : keys(1024), vals(1024, -1) {}
    static size_t hash(const Key &k) { return size_t(mix(uint64_t(k.t) ^ mix(uint64_t(k.dev) ^ (uint64_t(k.own) << 48)))); }
    int64_t find(const Key &k) const {
        size_t mask = keys.size() - 1;
        for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
            if (vals[i] < 0) return -1;
            if (keys[i] == k) return vals[i];
        }
    }
    void put(const Key &k, int64_t v) {
        if (2 * (used + 1) > keys.size()) {
            std::vector<Key> ok;
            std::vector<int64_t> ov;
            ok.swap(keys);
            ov.swap(vals);
            keys.assign(ok.size() * 2, Key{0, 0, 0});
            vals.assign(ok.size() * 2, -1);
            used = 0;
            for (size_t j = 0; j < ok.size(); ++j)
                if (ov[j] >= 0) put(ok[j], ov[j]);
        }
        size_t mask = keys.size() - 1;
        size_t i = hash(k) & mask;
        while (vals[i] >= 0) i = (i + 1) & mask;
        keys[i] = k, vals[i] = v, ++used;
    }
};
struct Node {
    int64_t t2, dev2, first, count;  // next state; its segments in the kept pool
};

struct Result {
    std::vector<int64_t> seg;      // 5 numbers a segment, each step's latest first
    std::vector<int64_t> step_off;  // step k: segments [step_off[k], step_off[k + 1])
    int status = 0;                 // 1: a walk did not finish
};

}  // namespace

extern "C" {

// Walks nsteps steps ([start, end), host thread own or -1, starting on the device work running at steps_at: the
// end, or just before the end of a window that ends with its last work); returns a Result (nxcp_* read it).
void *nxcp_walk(const int64_t *dims, const void **p, const int64_t *steps_start, const int64_t *steps_end, const int64_t *steps_own,
                const int64_t *steps_at, int64_t nsteps) {
    Index x;
    x.n = dims[0], x.ntracks = dims[1], x.nstreams = dims[2], x.nlaunched = dims[3];
    x.runtime_wait_min = dims[4], x.unlinked_gap_max = dims[5];
    int k = 0;
    x.ts = (const int64_t *)p[k++], x.end = (const int64_t *)p[k++], x.device = (const int64_t *)p[k++];
    x.launch = (const int64_t *)p[k++], x.id = (const int64_t *)p[k++];
    x.kind = (const int8_t *)p[k++], x.flags = (const int8_t *)p[k++];
    x.stream_of = (const int32_t *)p[k++], x.at_in_stream = (const int32_t *)p[k++];
    x.tr_off = (const int64_t *)p[k++], x.tr_points = (const int64_t *)p[k++], x.tr_inner = (const int64_t *)p[k++];
    x.st_off = (const int64_t *)p[k++], x.st_rows = (const int64_t *)p[k++], x.st_starts = (const int64_t *)p[k++];
    x.w_off = (const int64_t *)p[k++], x.w_ts = (const int64_t *)p[k++], x.w_target = (const int64_t *)p[k++];
    x.w_other = (const int64_t *)p[k++];
    x.lb_by = (const int64_t *)p[k++], x.lb_rows = (const int64_t *)p[k++];
    x.sync_set = (const int32_t *)p[k++], x.set_off = (const int64_t *)p[k++], x.set_streams = (const int64_t *)p[k++];

    Walker w(x);
    std::vector<int64_t> pool;  // kept moves' segments
    std::vector<Node> nodes;
    Memo memo;
    // moves are kept only when a step's window overlaps another's: a walk never leaves its own
    // window, so walks of disjoint steps share no move (keeping them would cost a copy and a hash each)
    bool share = false;
    {
        std::vector<std::pair<int64_t, int64_t>> win;
        for (int64_t s = 0; s < nsteps; ++s) win.emplace_back(steps_start[s], steps_end[s]);
        std::sort(win.begin(), win.end());
        int64_t reach = win.empty() ? 0 : win[0].second;  // the latest end of the windows before
        for (size_t s = 1; s < win.size() && !share; ++s) {
            share = reach > win[s].first;
            reach = std::max(reach, win[s].second);
        }
    }
    auto *res = new Result();
    res->step_off.push_back(0);
    for (int64_t s = 0; s < nsteps; ++s) {
        int64_t start = steps_start[s], own = steps_own[s];
        int64_t t = steps_end[s];
        int64_t dev = t > start ? w.running_at(steps_at[s]) : -1;  // the device work still running at the end (a window: just before it)
        int64_t guard = 0;
        while (t > start) {
            Key key{own, t, dev};
            int64_t hit = share ? memo.find(key) : -1;
            if (hit >= 0 && nodes[hit].t2 > start) {
                const Node &nd = nodes[hit];
                res->seg.insert(res->seg.end(), pool.begin() + nd.first, pool.begin() + nd.first + nd.count);
                t = nd.t2, dev = nd.dev2;
            } else {
                w.seg.clear();
                int64_t t2 = t, d2 = dev;
                w.move(t2, d2, own, start);
                res->seg.insert(res->seg.end(), w.seg.begin(), w.seg.end());
                if (t2 <= start) break;
                if (share && hit < 0) {
                    memo.put(key, int64_t(nodes.size()));
                    nodes.push_back(Node{t2, d2, int64_t(pool.size()), int64_t(w.seg.size())});
                    pool.insert(pool.end(), w.seg.begin(), w.seg.end());
                }
                t = t2, dev = d2;
            }
            if (++guard > 10000000) {
                res->status = 1;
                return res;
            }
        }
        res->step_off.push_back(int64_t(res->seg.size() / 5));
    }
    return res;
}

// A host thread's change points and the innermost event from each on (_path_index._innermost, whose
// NumPy passes are the reference). Rows are sorted by (ts, -end, id); `bounds` are the distinct
// starts and ends, sorted. The innermost event at a point b is the last row with ts <= b whose end is
// > b: from the last row with ts <= b, jump to the previous row with a strictly greater end (`prev`)
// while the row has ended. Writes each point where the innermost row's `pos` (-1: none) changes, and
// that pos, into `points` and `inner` (room for nb); returns how many.
int64_t nxcp_innermost(const int64_t *ts, const int64_t *end, const int64_t *pos, int64_t n, const int64_t *bounds, int64_t nb,
                       int64_t *points, int64_t *inner) {
    std::vector<int64_t> prev(size_t(n > 0 ? n : 0));
    for (int64_t i = 0; i < n; ++i) {
        int64_t c = i - 1;
        while (c >= 0 && end[c] <= end[i]) c = prev[c];  // the rows between were ruled out for c, so for i
        prev[i] = c;
    }
    int64_t m = 0, j = -1, last = 0;
    for (int64_t b = 0; b < nb; ++b) {
        const int64_t t = bounds[b];
        while (j + 1 < n && ts[j + 1] <= t) ++j;
        int64_t k = j;
        while (k >= 0 && end[k] <= t) k = prev[k];
        const int64_t got = k >= 0 ? pos[k] : -1;
        if (m == 0 || got != last) {
            points[m] = t, inner[m] = got, ++m;
            last = got;
        }
    }
    return m;
}

int32_t nxcp_status(void *r) { return ((Result *)r)->status; }
int64_t nxcp_segments(void *r) { return int64_t(((Result *)r)->seg.size() / 5); }
void nxcp_copy(void *r, int64_t *seg, int64_t *step_off) {
    auto *res = (Result *)r;
    if (!res->seg.empty()) std::memcpy(seg, res->seg.data(), res->seg.size() * sizeof(int64_t));
    std::memcpy(step_off, res->step_off.data(), res->step_off.size() * sizeof(int64_t));
}
void nxcp_free(void *r) { delete (Result *)r; }
}
