// The importer's fast reader of a traceEvents array (plain C ABI, loaded with ctypes; see json_reader.py).
//
// It reads the hot event shapes straight into columns: slices ('X', 'i', 'I' but `[memory]`) and
// flow endpoints ('s', 'f', 't'). Every other event (metadata, counters, `[memory]`, unknown
// phases) is handed back as its byte range, for the Python decoder. It validates the JSON as it
// goes, and at the first thing it does not handle exactly as the Python decoder (_kineto_json.py)
// would (an escape in a name, a float id, ts with more than 3 decimals or an exponent, an args
// value of an odd type, deep nesting, anything malformed, text after the array) it gives up on the
// whole piece (status != 0): the Python decoder then reads it, with its exact errors. So what it
// returns always equals what the Python decoder returns; tests hold the two equal.
//
// Must not: decide anything the Python decoder does not (it mirrors _slice_table and _flow_table).

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace {

struct Text {  // Arrow large_string layout: offsets (n + 1), data, validity (1 = value)
  std::string data;
  std::vector<int64_t> off{0};
  std::vector<uint8_t> valid;
  void add(const char* p, size_t n) { data.append(p, n); off.push_back((int64_t)data.size()); valid.push_back(1); }
  void null() { off.push_back((int64_t)data.size()); valid.push_back(0); }
};

// Text as codes into its distinct values, numbered in order of first occurrence (as Arrow's
// dictionary_encode numbers them); -1: null. A slice's category and name repeat (a few thousand
// distinct in a million events): coded here, their text is written once, not once per event and
// hashed again by the caller. The index's keys are views into the piece being read: cleared with it.
struct Coded {
  Text values;
  std::vector<int32_t> code;
  std::unordered_map<std::string_view, int32_t> index;
  void add(const char* p, size_t n) {
    auto [it, fresh] = index.try_emplace(std::string_view(p, n), (int32_t)index.size());
    if (fresh) values.add(p, n);
    code.push_back(it->second);
  }
  void null() { code.push_back(-1); }
};

struct Ints {
  std::vector<int64_t> v;
  std::vector<uint8_t> valid;
  void add(int64_t x) { v.push_back(x); valid.push_back(1); }
  void null() { v.push_back(0); valid.push_back(0); }
};

struct Out {
  int status = 0;  // 0: read; else the reason the Python decoder reads this piece
  int64_t at = 0;  // where it gave up
  int64_t end = -1;  // where the array closed (its ']'), when a piece may end it; -1: not in this piece
  // slices
  Coded s_cat, s_name;
  Text s_pid_text, s_tid_text, s_args;
  std::vector<uint8_t> s_phase;  // 'X' or 'i'
  Ints s_ts, s_dur, s_pid, s_tid, s_corr, s_ext, s_stream, s_pyid, s_pypid;
  // flows
  Coded f_cat, f_name, f_phase, f_bp;
  Ints f_id, f_ts, f_pid, f_tid;
  // everything else: byte ranges [start, end)
  std::vector<int64_t> other;

  // Room for a piece of `size` bytes, so that the columns are not copied as they grow. Trace
  // events take 150-400 bytes each; what is reserved and never written costs no memory.
  void reserve(int64_t size) {
    size_t n = (size_t)(size / 128) + 16;
    for (Ints* c : {&s_ts, &s_dur, &s_pid, &s_tid, &s_corr, &s_ext, &s_stream, &s_pyid, &s_pypid}) {
      c->v.reserve(n);
      c->valid.reserve(n);
    }
    for (Text* t : {&s_pid_text, &s_tid_text, &s_args}) {
      t->off.reserve(n + 1);
      t->valid.reserve(n);
    }
    s_phase.reserve(n);
    for (Coded* c : {&s_cat, &s_name, &f_cat, &f_name, &f_phase, &f_bp}) c->code.reserve(n);
    // args can hold most of a piece (two thirds of a memory-profiled trace): room for all of it,
    // as a string that outgrew half of it was copied into one twice as large (8 MB of page faults
    // and copying per 16 MB piece)
    s_args.data.reserve((size_t)size);
  }
};

struct Span {  // p and n are read only once set (left uninitialised: an event clears ten of these)
  const char* p;
  size_t n;
  bool set = false;
};

enum Kind { K_NONE, K_NULL, K_STRING, K_INT, K_NUMBER, K_OTHER };

struct PlainTable {
  bool t[256];
  constexpr PlainTable() : t() {
    for (int c = 0x20; c < 0x80; ++c) t[c] = c != '"' && c != '\\';
  }
  constexpr bool operator[](unsigned char c) const { return t[c]; }
};
constexpr PlainTable kPlain;

struct GiveUp {
  int code;
};

struct Parser {
  const char* b;
  const char* p;
  const char* e;
  int max_nesting;

  [[noreturn]] void fail(int code) { throw GiveUp{code}; }
  void ws() {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
  }
  void expect(char c) {
    if (p >= e || *p != c) fail(1);
    ++p;
  }
  // Past the bytes that need no look (printable ASCII but '"' and '\\'), 16 at a time where SSE2 is.
  void skip_plain() {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (e - p >= 16) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      // signed: bytes >= 0x80 (UTF-8) are negative, so "< 0x20" also finds them
      __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                     _mm_cmplt_epi8(v, space));
      int mask = _mm_movemask_epi8(special);
      if (mask) {
        p += __builtin_ctz((unsigned)mask);
        return;
      }
      p += 16;
    }
#endif
    while (p < e && kPlain[(unsigned char)*p]) ++p;
  }
  // After a member of an object or array: true past the ',' when another follows, false past `close`.
  bool more(char close) {
    ws();
    if (p < e && *p == ',') {
      ++p;
      return true;
    }
    expect(close);
    return false;
  }
  // A string; `escaped` tells whether it holds a backslash (its text then differs from its bytes).
  Span string(bool& escaped) {
    expect('"');
    Span s;
    s.p = p;
    escaped = false;
    while (true) {
      skip_plain();  // printable ASCII but '"' and '\\'
      if (p >= e) fail(1);
      unsigned char c = (unsigned char)*p;
      if (c == '"') break;
      if (c < 0x20) fail(1);
      if (c == '\\') {
        escaped = true;
        ++p;
        if (p >= e) fail(1);
        char x = *p;
        if (x == 'u') {
          if (e - p < 5) fail(1);
          for (int i = 1; i <= 4; ++i) {
            char h = p[i];
            if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) fail(1);
          }
          p += 5;
          continue;  // (surrogates: only in keys and values that are not read here, or the piece gives up)
        }
        if (!strchr("\"\\/bfnrt", x) || x == 0) fail(1);
        ++p;
        continue;
      }
      if (c >= 0x80) {  // UTF-8, checked as strictly as the Python decoder does
        int len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || e - p < len) fail(2);
        uint32_t cp = c & (0xFF >> (len + 1));
        for (int i = 1; i < len; ++i) {
          unsigned char d = (unsigned char)p[i];
          if ((d & 0xC0) != 0x80) fail(2);
          cp = (cp << 6) | (d & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
          fail(2);
        p += len;
        continue;
      }
      ++p;
    }
    s.n = (size_t)(p - s.p);
    s.set = true;
    ++p;
    return s;
  }
  // A JSON number; `is_int` when it has no fraction and no exponent.
  Span number(bool& is_int) {
    Span s;
    s.p = p;
    is_int = true;
    if (p < e && *p == '-') ++p;
    if (p >= e) fail(1);
    if (*p == '0') {
      ++p;
    } else if (*p >= '1' && *p <= '9') {
      while (p < e && *p >= '0' && *p <= '9') ++p;
    } else {
      fail(1);
    }
    if (p < e && *p == '.') {
      is_int = false;
      ++p;
      if (p >= e || !(*p >= '0' && *p <= '9')) fail(1);
      while (p < e && *p >= '0' && *p <= '9') ++p;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
      is_int = false;
      ++p;
      if (p < e && (*p == '+' || *p == '-')) ++p;
      if (p >= e || !(*p >= '0' && *p <= '9')) fail(1);
      while (p < e && *p >= '0' && *p <= '9') ++p;
    }
    s.n = (size_t)(p - s.p);
    s.set = true;
    return s;
  }
  void literal(const char* word) {
    size_t n = strlen(word);
    if ((size_t)(e - p) < n || memcmp(p, word, n) != 0) fail(1);
    p += n;
  }
  // Any value, validated; its kind, and its span.
  Kind value(Span& s, int depth, bool& escaped) {
    ws();
    if (p >= e) fail(1);
    const char* start = p;
    Kind k;
    escaped = false;
    char c = *p;
    if (c == '"') {
      s = string(escaped);
      return K_STRING;
    } else if (c == '{' || c == '[') {
      if (depth >= max_nesting) fail(3);
      char close = c == '{' ? '}' : ']';
      ++p;
      ws();
      if (p < e && *p == close) {
        ++p;
      } else {
        while (true) {
          Span inner;
          bool esc;
          if (c == '{') {
            ws();
            string(esc);
            ws();
            expect(':');
          }
          value(inner, depth + 1, esc);
          if (!more(close)) break;
        }
      }
      k = K_OTHER;
    } else if (c == 't') {
      literal("true");
      k = K_OTHER;
    } else if (c == 'f') {
      literal("false");
      k = K_OTHER;
    } else if (c == 'n') {
      literal("null");
      k = K_NULL;
    } else {
      bool is_int;
      number(is_int);
      k = is_int ? K_INT : K_NUMBER;
    }
    s.p = start;
    s.n = (size_t)(p - start);
    s.set = true;
    return k;
  }
};

bool eq(const Span& s, const char* word) { return s.n == strlen(word) && memcmp(s.p, word, s.n) == 0; }

struct Key {  // a key and its length, compared length first
  const char* s;
  size_t n;
};
template <size_t N>
constexpr Key key(const char (&s)[N]) { return Key{s, N - 1}; }
// Keys are short: compared inline, a word at a time (the first and the last 8 or 4 bytes, which
// overlap, cover keys of up to 16), not by a call to memcmp.
inline bool eq(const Span& s, const Key& k) {
  size_t n = k.n;
  if (s.n != n) return false;
  if (n > 16) return memcmp(s.p, k.s, n) == 0;
  if (n >= 8) {
    uint64_t a, b, c, d;
    memcpy(&a, s.p, 8), memcpy(&b, k.s, 8), memcpy(&c, s.p + n - 8, 8), memcpy(&d, k.s + n - 8, 8);
    return a == b && c == d;
  }
  if (n >= 4) {
    uint32_t a, b, c, d;
    memcpy(&a, s.p, 4), memcpy(&b, k.s, 4), memcpy(&c, s.p + n - 4, 4), memcpy(&d, k.s + n - 4, 4);
    return a == b && c == d;
  }
  for (size_t i = 0; i < n; ++i)
    if (s.p[i] != k.s[i]) return false;
  return true;
}

// Which of N known keys a key is: they differ in length or first byte (checked when compiled), so
// one table lookup gives the only candidate and one comparison settles it.
template <size_t N>
struct KeyIndex {
  Key keys[N];
  int8_t at[32][256];
  bool distinct;
  template <class T, class NameOf>
  constexpr KeyIndex(const T (&items)[N], NameOf name_of) : keys(), at(), distinct(N < 128) {
    for (auto& row : at)
      for (auto& slot : row) slot = -1;
    for (size_t i = 0; i < N; ++i) {
      Key k = keys[i] = name_of(items[i]);
      if (k.n == 0 || k.n >= 32 || at[k.n][(unsigned char)k.s[0]] != -1) distinct = false;
      if (k.n > 0 && k.n < 32) at[k.n][(unsigned char)k.s[0]] = (int8_t)i;
    }
  }
  // The key's index among the N, else -1.
  int find(const Span& s) const {
    if (s.n == 0 || s.n >= 32) return -1;
    int i = at[s.n][(unsigned char)s.p[0]];
    return i >= 0 && eq(s, keys[i]) ? i : -1;
  }
};

// An integer's text → int64; false when beyond int64. (The text is a JSON integer, checked by
// Parser::number: no leading zeros, so 20 digits or more is at least 10^19, beyond int64.)
bool to_int64(const Span& s, int64_t& out) {
  const char* p = s.p;
  const char* e = s.p + s.n;
  bool neg = p < e && *p == '-';
  if (neg) ++p;
  if (e - p > 19) return false;
  uint64_t v = 0;  // at most 19 digits: below 10^19 < 2^64
  for (; p < e; ++p) v = v * 10 + (uint64_t)(*p - '0');
  if (neg ? v > (uint64_t)1 << 63 : v > (uint64_t)INT64_MAX) return false;
  out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

// Microseconds as JSON text (a number, at most 3 decimals, no exponent) → exact ns. The digits
// before and after the point, padded to 3 decimals, make one integer: with more than 16 before
// the point it is at least 10^19 ns, beyond int64. A time that is not a number (null, missing,
// a string) is false too: the Python decoder drops or reads that event and counts it in a warning.
bool to_ns(const Span& s, Kind k, int64_t& out) {
  if (k != K_INT && k != K_NUMBER) return false;
  // one pass over text that Parser::number checked: [-]digits[.digits][(e|E)...]
  const char* p = s.p;
  const char* e = s.p + s.n;
  bool neg = *p == '-';
  if (neg) ++p;
  uint64_t v = 0;
  int digits = 0;
  for (; p < e && *p >= '0' && *p <= '9'; ++p) {
    if (++digits > 16) return false;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  int frac = 0;
  if (p < e && *p == '.')
    for (++p; p < e && *p >= '0' && *p <= '9'; ++p) {
      if (++frac > 3) return false;
      v = v * 10 + (uint64_t)(*p - '0');
    }
  if (p != e) return false;  // an exponent
  for (int i = frac; i < 3; ++i) v *= 10;
  if (neg ? v > (uint64_t)1 << 63 : v > (uint64_t)INT64_MAX) return false;
  out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

// The args the slice table reads (all of _Args' keys are checked: one of an odd type would make
// the Python decoder drop that event's args).
enum { EXT, EXT_OLD, CORR, STREAM, DEVICE, PYID, PYPID, ADDR, BYTES, TALLOC, TRES, DTYPE, DID, NKEYS };
constexpr Key kArgKeys[NKEYS] = {key("External id"), key("external id"), key("correlation"), key("stream"),
                             key("device"), key("Python id"), key("Python parent id"), key("Addr"), key("Bytes"),
                             key("Total Allocated"), key("Total Reserved"), key("Device Type"), key("Device Id")};
constexpr Key key_itself(const Key& k) { return k; }
constexpr KeyIndex<NKEYS> kArgIndex(kArgKeys, key_itself);
static_assert(kArgIndex.distinct, "args keys must differ in length or first byte");

struct ArgsRead {  // what an args object holds of kArgKeys, read in the one pass that validates it
  uint32_t has = 0;  // bit i: val[i] holds key i's integer
  uint32_t seen = 0;  // bit i: key i was there
  int64_t val[NKEYS];  // read only where `has` says
  int fail = 0;  // the first reason a slice with these args makes the piece give up (0: none)
  bool get(int i) const { return has >> i & 1; }
};

struct Event {
  Span ph, cat, name, ts, dur, pid, tid, id, bp, args;
  Kind ts_k = K_NONE, dur_k = K_NONE, pid_k = K_NONE, tid_k = K_NONE, id_k = K_NONE, cat_k = K_NONE, name_k = K_NONE,
       bp_k = K_NONE, args_k = K_NONE;
  ArgsRead a;
};

struct EventField {  // a key of a trace event that the slice and flow tables read, and where it goes
  Key name;
  Span Event::*span;
  Kind Event::*kind;  // null: "ph", which must be a string
};
constexpr EventField kEventFields[] = {
    {key("ph"), &Event::ph, nullptr},         {key("cat"), &Event::cat, &Event::cat_k},
    {key("name"), &Event::name, &Event::name_k}, {key("ts"), &Event::ts, &Event::ts_k},
    {key("dur"), &Event::dur, &Event::dur_k},   {key("pid"), &Event::pid, &Event::pid_k},
    {key("tid"), &Event::tid, &Event::tid_k},   {key("id"), &Event::id, &Event::id_k},
    {key("bp"), &Event::bp, &Event::bp_k},     {key("args"), &Event::args, &Event::args_k}};
constexpr Key field_name(const EventField& f) { return f.name; }
constexpr KeyIndex<sizeof(kEventFields) / sizeof(kEventFields[0])> kEventIndex(kEventFields, field_name);
static_assert(kEventIndex.distinct, "event keys must differ in length or first byte");

// The value of "args" when it is an object (the parser at its '{'): validated exactly as
// Parser::value would at depth 1, and its known keys read on the way. Only slices read them, so
// what would make a slice give up is kept in `a.fail`, not raised.
Kind args_object(Parser& ps, ArgsRead& a, Span& s) {
  const char* start = ps.p;
  if (1 >= ps.max_nesting) ps.fail(3);
  a.has = a.seen = 0;
  a.fail = 0;
  ++ps.p;
  ps.ws();
  auto give_up = [&](int code) { if (!a.fail) a.fail = code; };
  if (ps.p < ps.e && *ps.p == '}') {
    ++ps.p;
  } else {
    while (true) {
      ps.ws();
      bool key_esc, esc;
      Span key = ps.string(key_esc);
      ps.ws();
      ps.expect(':');
      Span v;
      Kind k = ps.value(v, 2, esc);
      if (key_esc) give_up(5);
      if (int i = kArgIndex.find(key); i >= 0) {
        if (a.seen >> i & 1) give_up(6);
        a.seen |= 1u << i;
        if (k == K_INT) {
          if (to_int64(v, a.val[i])) {
            a.has |= 1u << i;
          } else {
            give_up(4);
          }
        } else if (k == K_STRING && i == DEVICE) {
        } else if (k != K_NULL) {
          give_up(7);
        }
      }
      if (!ps.more('}')) break;
    }
  }
  s.p = start;
  s.n = (size_t)(ps.p - start);
  s.set = true;
  return K_OTHER;
}

// A string that is an integer's own text ("25738", "-3"; not "007", "-0", "+1", " 1"): the Python
// decoder's `_json_numbers._INT_TEXT`.
bool int_text(const Span& s) {
  const char* p = s.p;
  const char* e = s.p + s.n;
  if (p < e && *p == '-') ++p;
  if (p == e) return false;
  if (*p == '0') return e - p == 1 && p == s.p;
  for (; p < e; ++p)
    if (*p < '0' || *p > '9') return false;
  return true;
}

// A pid or tid: an integer, or an integer's text (torch 1.8-1.10 write "tid": "25738") as that
// integer when it fits int64; other text (and text beyond int64) kept as text.
void id_column(Parser& ps, const Span& s, Kind k, Ints& ints, Text* text) {
  int64_t v;
  if (k == K_INT) {
    if (!to_int64(s, v)) ps.fail(4);
    ints.add(v);
    if (text) text->null();
  } else if (k == K_STRING && int_text(s) && to_int64(s, v)) {
    ints.add(v);
    if (text) text->null();
  } else if (k == K_STRING) {
    ints.null();
    if (text) text->add(s.p, s.n);
  } else {  // missing or null
    ints.null();
    if (text) text->null();
  }
}

// The slice's args columns, from what args_object read.
void slice_args(Parser& ps, Out& o, const Event& ev) {
  const ArgsRead& a = ev.a;
  if (ev.args_k == K_OTHER && ev.args.p[0] == '{') {
    if (a.fail) ps.fail(a.fail);
  } else if (ev.args_k != K_NONE && ev.args_k != K_NULL) {
    ps.fail(7);  // args that are not an object
  }
  auto put = [&](Ints& column, int i) { a.get(i) ? column.add(a.val[i]) : column.null(); };
  put(o.s_corr, CORR);
  put(o.s_ext, a.get(EXT) ? EXT : EXT_OLD);
  put(o.s_stream, STREAM);
  put(o.s_pyid, PYID);
  put(o.s_pypid, PYPID);
  if (ev.args_k == K_NONE) {
    o.s_args.null();
  } else {
    size_t n = ev.args.n;
    if ((n == 2 || n == 4) && (ev.args.p[0] == '{' || ev.args.p[0] == 'n')) {
      o.s_args.null();
    } else {
      o.s_args.add(ev.args.p, n);
    }
  }
}

void event(Parser& ps, Out& o) {
  const char* start = ps.p;
  ps.expect('{');
  Event ev;
  ps.ws();
  if (ps.p < ps.e && *ps.p == '}') {
    ++ps.p;
  } else {
    while (true) {
      ps.ws();
      bool esc;
      Span key = ps.string(esc);
      if (esc) ps.fail(5);
      ps.ws();
      ps.expect(':');
      Span v;
      Kind k;
      ps.ws();
      if (ps.p < ps.e && *ps.p == '{' && eq(key, ::key("args"))) {
        k = args_object(ps, ev.a, v);  // (a repeated "args" gives up below)
        esc = false;
      } else {
        k = ps.value(v, 1, esc);
      }
      if (int i = kEventIndex.find(key); i >= 0) {
        const EventField& f = kEventFields[i];
        Span& span = ev.*f.span;
        if (span.set) ps.fail(6);  // a repeated key
        if (esc && k == K_STRING) ps.fail(5);  // text that differs from its bytes
        span = v;
        span.set = true;
        if (f.kind) ev.*f.kind = k;
        if (!f.kind && k != K_STRING) ps.fail(7);  // ph
      }
      if (!ps.more('}')) break;
    }
  }
  // the types the Python decoder's struct accepts
  auto text_or_null = [&](Kind k) { return k == K_NONE || k == K_NULL || k == K_STRING; };
  auto id_like = [&](Kind k) { return k == K_NONE || k == K_NULL || k == K_STRING || k == K_INT; };
  if (!text_or_null(ev.cat_k) || !text_or_null(ev.bp_k) || !text_or_null(ev.name_k) || !id_like(ev.pid_k) ||
      !id_like(ev.tid_k) || !id_like(ev.id_k))
    ps.fail(7);
  char ph = 0;
  if (ev.ph.set && ev.ph.n == 1) ph = ev.ph.p[0];
  bool memory = ev.name_k == K_STRING && eq(ev.name, "[memory]");
  bool slice = (ph == 'X' || ph == 'i' || ph == 'I') && !memory;
  bool flow = ph == 's' || ph == 'f' || ph == 't';
  if (!slice && !flow) {
    o.other.push_back(start - ps.b);
    o.other.push_back(ps.p - ps.b);
    return;
  }
  int64_t ts;
  if (!to_ns(ev.ts, ev.ts_k, ts)) ps.fail(8);
  if (slice) {
    if (ev.cat_k == K_STRING) o.s_cat.add(ev.cat.p, ev.cat.n); else o.s_cat.add("", 0);
    if (ev.name_k == K_STRING) o.s_name.add(ev.name.p, ev.name.n); else o.s_name.null();
  } else {
    if (ev.cat_k == K_STRING) o.f_cat.add(ev.cat.p, ev.cat.n); else o.f_cat.add("", 0);
    if (ev.name_k == K_STRING) o.f_name.add(ev.name.p, ev.name.n); else o.f_name.null();
  }
  if (slice) {
    int64_t dur = 0;
    if (ph == 'X' && !to_ns(ev.dur, ev.dur_k, dur)) ps.fail(8);
    o.s_phase.push_back(ph == 'X' ? 'X' : 'i');
    o.s_ts.add(ts);
    o.s_dur.add(dur);
    id_column(ps, ev.pid, ev.pid_k, o.s_pid, &o.s_pid_text);
    id_column(ps, ev.tid, ev.tid_k, o.s_tid, &o.s_tid_text);
    slice_args(ps, o, ev);
  } else {
    if (ev.id_k == K_STRING) ps.fail(7);  // a numeric string id: the Python decoder's rule
    id_column(ps, ev.id, ev.id_k, o.f_id, nullptr);
    o.f_phase.add(ev.ph.p, ev.ph.n);
    o.f_ts.add(ts);
    id_column(ps, ev.pid, ev.pid_k, o.f_pid, nullptr);
    id_column(ps, ev.tid, ev.tid_k, o.f_tid, nullptr);
    if (ev.bp_k == K_STRING) {
      o.f_bp.add(ev.bp.p, ev.bp.n);
    } else {
      o.f_bp.null();
    }
  }
}

}  // namespace

extern "C" {

// Reads `[event, event, ...]` (the whole buffer, nothing after the array; `bare` 0), or the events
// of a piece of such an array without its brackets (`event, event, ...`, at least one; `bare` 1).
// With `bare` 2 the piece may also hold the array's end (`event, event] ...`): reading stops at
// that ']' and what follows it is the document's, not read here (nxj_end says where it is).
// The args' text buffer of the last result freed on this thread, reused by the next read on it:
// a piece's args can be most of its bytes, and a fresh buffer costs a page fault for every 4 KB
// written (the caller that packs the args from the result leaves the buffer in it; a taken one is
// not kept).
thread_local std::string spare_args;

void* nxj_read(const char* data, int64_t size, int32_t max_nesting, int32_t bare) {
  Out* o = new Out();
  o->s_args.data.swap(spare_args);
  o->s_args.data.clear();
  o->reserve(size);
  Parser ps{data, data, data + size, max_nesting};
  try {
    ps.ws();
    if (!bare) ps.expect('[');
    ps.ws();
    if (!bare && ps.p < ps.e && *ps.p == ']') {
      ++ps.p;
    } else {
      while (true) {
        ps.ws();
        event(ps, *o);
        ps.ws();
        if (ps.p < ps.e && *ps.p == ',') {
          ++ps.p;
          continue;
        }
        if (!bare) {
          ps.expect(']');
        } else if (bare == 2 && ps.p < ps.e && *ps.p == ']') {
          o->end = ps.p - data;
          ps.p = ps.e;
        }
        break;
      }
    }
    ps.ws();
    if (ps.p != ps.e) ps.fail(9);
    for (Coded* c : {&o->s_cat, &o->s_name, &o->f_cat, &o->f_name, &o->f_phase, &o->f_bp}) c->index.clear();  // (its keys view the piece)
  } catch (const GiveUp& g) {
    o->status = g.code;
    o->at = ps.p - data;
  } catch (...) {
    o->status = 10;
  }
  return o;
}

int32_t nxj_status(void* h) { return ((Out*)h)->status; }

int64_t nxj_end(void* h) { return ((Out*)h)->end; }

// Field `i` of the result (see _json_native for the order): exactly one of the three is set, or none
// past the last field.
struct FieldRef {
  std::vector<int64_t>* ints = nullptr;
  std::string* text = nullptr;
  std::vector<uint8_t>* bytes = nullptr;
  std::vector<int32_t>* codes = nullptr;
};

// (a coded column's text fields are its distinct values; the codes come last)
FieldRef field_of(Out& o, int32_t i) {
  Text* texts[] = {&o.s_cat.values, &o.s_name.values, &o.s_pid_text, &o.s_tid_text, &o.s_args,
                   &o.f_cat.values, &o.f_name.values, &o.f_phase.values, &o.f_bp.values};
  Coded* coded[] = {&o.s_cat, &o.s_name, &o.f_cat, &o.f_name, &o.f_phase, &o.f_bp};
  Ints* numbers[] = {&o.s_ts, &o.s_dur, &o.s_pid, &o.s_tid, &o.s_corr, &o.s_ext, &o.s_stream, &o.s_pyid, &o.s_pypid,
                     &o.f_id, &o.f_ts, &o.f_pid, &o.f_tid};
  const int nt = 9, nn = 13;
  FieldRef f;
  if (i < nt * 3) {
    Text& t = *texts[i / 3];
    if (i % 3 == 0) f.ints = &t.off; else if (i % 3 == 1) f.text = &t.data; else f.bytes = &t.valid;
    return f;
  }
  i -= nt * 3;
  if (i < nn * 2) {
    Ints& n = *numbers[i / 2];
    if (i % 2 == 0) f.ints = &n.v; else f.bytes = &n.valid;
    return f;
  }
  i -= nn * 2;
  if (i == 0) f.bytes = &o.s_phase;
  if (i == 1) f.ints = &o.other;
  if (i >= 2 && i < 8) f.codes = &coded[i - 2]->code;
  return f;
}

// Field `i` of the result: its address and size in bytes.
const void* nxj_field(void* h, int32_t i, int64_t* nbytes) {
  FieldRef f = field_of(*(Out*)h, i);
  *nbytes = f.ints ? (int64_t)(f.ints->size() * 8) : f.text ? (int64_t)f.text->size() : f.bytes ? (int64_t)f.bytes->size()
           : f.codes ? (int64_t)(f.codes->size() * 4) : 0;
  return f.ints ? (const void*)f.ints->data() : f.text ? (const void*)f.text->data() : f.bytes ? (const void*)f.bytes->data()
         : f.codes ? (const void*)f.codes->data() : nullptr;
}

void nxj_free(void* h) {
  Out* o = (Out*)h;
  if (o->s_args.data.capacity() > spare_args.capacity()) spare_args.swap(o->s_args.data);
  delete o;
}

// Moves field `i` (64-bit values, text or codes) out of the result into memory of its own, freed by
// nxj_release: an Arrow buffer can then wrap it without a copy, and hold only that column, not the
// whole result, for as long as it lives. Byte fields (validity, phase) are not moved.
struct Held {
  std::vector<int64_t> ints;
  std::string text;
  std::vector<int32_t> codes;
};

void* nxj_take(void* h, int32_t i, const void** data, int64_t* nbytes) {
  FieldRef f = field_of(*(Out*)h, i);
  Held* held = new Held();
  if (f.ints) held->ints = std::move(*f.ints);
  if (f.text) held->text = std::move(*f.text);
  if (f.codes) held->codes = std::move(*f.codes);
  *data = f.text ? (const void*)held->text.data() : f.codes ? (const void*)held->codes.data() : (const void*)held->ints.data();
  *nbytes = f.text ? (int64_t)held->text.size() : f.codes ? (int64_t)(held->codes.size() * 4) : (int64_t)(held->ints.size() * 8);
  return held;
}

void nxj_release(void* held) { delete (Held*)held; }
}
