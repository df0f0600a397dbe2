// The live collector's converter in C++: one recorded cycle of torch.profiler's in-memory results
// (torch::autograd::profiler::ProfilerResult) into raw column buffers, read straight from torch's
// C++ objects instead of through one Python wrapper per event and attribute.
//
// It does exactly what _live_convert.convert_cycle does in Python (that module's docstring
// explains the two sources, the tree walk and the frame rules), and the test suite checks that
// both give the same tables on the same recording. Decisions that need Python (which files are
// the user's, the shared frame table) are asked back through a helper object, once per distinct
// name or frame, so the per-event work stays here.
//
// Built on first use by neuron_explorer/collectors/native/__init__.py with
// torch.utils.cpp_extension (same compiler flags and pybind11 ABI as the torch it runs with).

#include <pybind11/pybind11.h>

#include <ATen/record_function.h>
#include <ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/collection.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <array>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;
using torch::autograd::profiler::KinetoEvent;
using torch::autograd::profiler::ProfilerResult;
using torch::profiler::impl::EventType;
using torch::profiler::impl::ExtraFields;
using torch::profiler::impl::Result;

namespace {

// --- statement lines: the line each operator was called from ------------------------------------
//
// While a recording runs, a RecordFunction callback (thread-local, as the profiler's own: torch
// carries both into the autograd engine's threads) notes for every operator its RecordFunction
// handle (the profiler keeps it as record_function_id_) and where the calling thread's innermost
// Python frame is: the first line of its function and the line being executed. walk_tree gives an
// operator whose parent in the call tree is that Python function's call the executed line as its
// statement: what a `a @ b` or `x[i]` is invisible to the Python tracer for (statements.py).
//
// The frame is read from CPython's thread state without the GIL (torch releases it around most
// operators): only the thread's own frame stack is read, which nothing else changes while the
// thread is inside the operator; the code object's line table is immutable. The layout of
// _PyInterpreterFrame is CPython's private one, so this is compiled for the versions whose layout
// is written below (3.11); elsewhere statement_lines_supported() is false and statements.py uses
// its TorchFunctionMode instead.

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define NX_STATEMENT_LINES 1
// CPython 3.11's _PyInterpreterFrame (Include/internal/pycore_frame.h), up to the fields read.
struct InterpreterFrame311 {
  PyObject* f_func;
  PyObject* f_globals;
  PyObject* f_builtins;
  PyObject* f_locals;
  PyCodeObject* f_code;
  PyObject* frame_obj;
  InterpreterFrame311* previous;
  _Py_CODEUNIT* prev_instr;
  int stacktop;
  bool is_entry;
  char owner;
};
#else
#define NX_STATEMENT_LINES 0
#endif

struct LineRecord {
  uint64_t handle;
  int32_t first_line, entry_line, line;
};

struct ThreadLines {
  std::mutex mutex;  // taken by its own thread per operator (uncontended) and by the reader
  std::vector<LineRecord> records;
};

std::mutex g_lines_mutex;
std::vector<std::shared_ptr<ThreadLines>> g_lines;  // one buffer per thread that ran an operator
std::atomic<uint64_t> g_lines_handle{0};  // the callback's handle, 0: not installed
thread_local std::shared_ptr<ThreadLines> t_lines;

// The lines of a (code object, instruction offset), per thread: PyCode_Addr2Line scans the line
// table from its start, twice per operator, which costs most in long functions (AdamW's step,
// multi_head_attention_forward), and a loop runs the same few hundred call sites every step. A slot
// is trusted only for the same code object, offset, line table object and first line, and only
// within the recording that filled it (g_lines_epoch changes at every lines_start): a code object
// freed while recording and another made at its address would have to match all of these.
struct LineSlot {
  const PyCodeObject* code;
  const PyObject* linetable;
  uint64_t epoch;
  int offset;
  int32_t first_line, entry_line, line;
};
constexpr size_t kLineSlots = 4096;  // direct-mapped: a colliding call site only costs the lookup again
std::atomic<uint64_t> g_lines_epoch{1};
thread_local std::unique_ptr<std::array<LineSlot, kLineSlots>> t_line_slots;

std::unique_ptr<at::ObserverContext> on_operator(const at::RecordFunction& fn) {
#if NX_STATEMENT_LINES
  if (!torch::profiler::impl::profilerEnabled()) return nullptr;  // a schedule's wait and warmup steps
  PyThreadState* ts = PyGILState_GetThisThreadState();
  if (ts == nullptr || ts->cframe == nullptr) return nullptr;
  auto* frame = reinterpret_cast<InterpreterFrame311*>(ts->cframe->current_frame);
  if (frame == nullptr || frame->f_code == nullptr) return nullptr;
  PyCodeObject* code = frame->f_code;
  int offset = static_cast<int>(reinterpret_cast<char*>(frame->prev_instr) - reinterpret_cast<char*>(code->co_code_adaptive));
  if (!t_line_slots) t_line_slots = std::make_unique<std::array<LineSlot, kLineSlots>>();  // zeroed: epoch 0 matches none
  const uint64_t epoch = g_lines_epoch.load(std::memory_order_relaxed);
  LineSlot& slot = (*t_line_slots)[((reinterpret_cast<uintptr_t>(code) >> 4) * 31 + static_cast<uintptr_t>(offset)) % kLineSlots];
  if (slot.code != code || slot.offset != offset || slot.epoch != epoch || slot.linetable != code->co_linetable ||
      slot.first_line != code->co_firstlineno) {
    // the function's first line two ways: the tracer names a module's call by its entry instruction's line (0)
    slot = {code, code->co_linetable, epoch, offset, code->co_firstlineno, PyCode_Addr2Line(code, 0),
            PyCode_Addr2Line(code, offset)};
  }
  LineRecord r{fn.handle(), slot.first_line, slot.entry_line, slot.line};
  if (!t_lines) {
    t_lines = std::make_shared<ThreadLines>();
    std::lock_guard<std::mutex> g(g_lines_mutex);
    g_lines.push_back(t_lines);
  }
  std::lock_guard<std::mutex> g(t_lines->mutex);
  t_lines->records.push_back(r);
#endif
  return nullptr;
}

bool statement_lines_supported() { return NX_STATEMENT_LINES != 0; }

// Installs the callback on this thread (and, through torch, the threads it starts operators on).
bool lines_start() {
  if (!NX_STATEMENT_LINES) return false;
  if (g_lines_handle.load() != 0) return true;
  g_lines_epoch.fetch_add(1);  // every thread's cached lines are from an earlier recording now
  g_lines_handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_operator).needsIds(true));
  return true;
}

void lines_stop() {
  uint64_t h = g_lines_handle.exchange(0);
  if (h != 0) at::removeCallback(h);
}

struct NotedLine {
  int32_t first_line, entry_line, line;
};

// handle -> the function's first line (co_firstlineno and its entry instruction's) and the executed
// line; empties the buffers (one cycle's worth).
std::unordered_map<uint64_t, NotedLine> take_lines() {
  std::unordered_map<uint64_t, NotedLine> out;
  std::lock_guard<std::mutex> g(g_lines_mutex);
  for (auto& buf : g_lines) {
    std::vector<LineRecord> records;
    {
      std::lock_guard<std::mutex> gb(buf->mutex);
      records.swap(buf->records);
    }
    out.reserve(out.size() + records.size());
    for (const auto& r : records) out[r.handle] = {r.first_line, r.entry_line, r.line};
  }
  return out;
}

size_t pending_lines() {
  size_t n = 0;
  std::lock_guard<std::mutex> g(g_lines_mutex);
  for (auto& buf : g_lines) {
    std::lock_guard<std::mutex> gb(buf->mutex);
    n += buf->records.size();
  }
  return n;
}

const char* const kUndecodable = "<name not decodable>";
const std::string kModulePrefix = "nn.Module: ";

// A column of int64 with an Arrow validity bitmap (LSB first), grown row by row.
struct Int64Column {
  std::vector<int64_t> values;
  std::vector<uint8_t> valid;
  bool any_null = false;
  void push(int64_t v, bool ok = true) {
    size_t i = values.size();
    values.push_back(v);
    if ((i & 7) == 0) valid.push_back(0);
    if (ok) {
      valid.back() |= static_cast<uint8_t>(1u << (i & 7));
    } else {
      any_null = true;
    }
  }
  bool is_valid(size_t i) const { return (valid[i >> 3] >> (i & 7)) & 1; }
  void append(const Int64Column& o) {
    for (size_t i = 0; i < o.values.size(); ++i) push(o.values[i], o.is_valid(i));
  }
};

// Dictionary-encoded strings: int32 indices (-1 = null) into the distinct values seen.
struct DictColumn {
  std::unordered_map<std::string, int32_t> index;
  std::vector<std::string> values;
  std::vector<int32_t> codes;
  int32_t code_of(const std::string& s) {
    auto it = index.find(s);
    if (it != index.end()) return it->second;
    int32_t c = static_cast<int32_t>(values.size());
    index.emplace(s, c);
    values.push_back(s);
    return c;
  }
  void push(const std::string& s) { codes.push_back(code_of(s)); }
  void push_code(int32_t c) { codes.push_back(c); }
  void append(const DictColumn& o) {
    std::vector<int32_t> remap(o.values.size());
    for (size_t i = 0; i < remap.size(); ++i) remap[i] = code_of(o.values[i]);
    for (int32_t c : o.codes) codes.push_back(c < 0 ? c : remap[c]);
  }
};

// Variable-length strings as Arrow string buffers (int32 offsets + data + validity).
struct StringColumn {
  std::vector<int32_t> offsets{0};
  std::string data;
  std::vector<uint8_t> valid;
  void push(const std::string* s) {
    size_t i = offsets.size() - 1;
    if ((i & 7) == 0) valid.push_back(0);
    if (s != nullptr) {
      data.append(*s);
      valid.back() |= static_cast<uint8_t>(1u << (i & 7));
    }
    offsets.push_back(static_cast<int32_t>(data.size()));
  }
  void append(const StringColumn& o) {
    const int32_t base = static_cast<int32_t>(data.size());
    data += o.data;
    for (size_t i = 0; i + 1 < o.offsets.size(); ++i) {
      size_t row = offsets.size() - 1;
      if ((row & 7) == 0) valid.push_back(0);
      if ((o.valid[i >> 3] >> (i & 7)) & 1) valid.back() |= static_cast<uint8_t>(1u << (row & 7));
      offsets.push_back(base + o.offsets[i + 1]);
    }
  }
};

template <typename T>
py::bytes as_bytes(const std::vector<T>& v) {
  return py::bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

bool valid_utf8(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "strict");
  if (o == nullptr) {
    PyErr_Clear();
    return false;
  }
  Py_DECREF(o);
  return true;
}

// Text Python can hold: torch sometimes records names whose bytes are not UTF-8.
std::string clean(const std::string& s) { return valid_utf8(s) ? s : std::string(kUndecodable); }

py::list str_list(const std::vector<std::string>& values) {
  py::list out;
  for (const auto& v : values) out.append(py::str(clean(v)));
  return out;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  out += '"';
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// The args the JSON trace gives an operator, formatted as _live_convert._op_args formats them,
// into `out` (reused across events: no allocation per operator once it has grown).
void op_args(std::string& out, const KinetoEvent& e, uint64_t corr) {
  out.assign("{\"External id\":");
  append_int(out, static_cast<int64_t>(corr));
  if (e.hasShapes() && !e.shapes().empty()) {
    out += ",\"Input Dims\":[";
    bool first = true;
    for (const auto& shape : e.shapes()) {
      if (!first) out += ", ";
      first = false;
      out += '[';
      for (size_t i = 0; i < shape.size(); ++i) {
        if (i) out += ", ";
        append_int(out, shape[i]);
      }
      out += ']';
    }
    out += "],\"Input type\":[";
    if (e.hasTypes()) {
      bool first_t = true;
      for (const auto& t : e.dtypes()) {
        if (!first_t) out += ", ";
        first_t = false;
        json_string(out, t);
      }
    }
    out += ']';
  }
  int64_t seq = e.sequenceNr();
  if (seq >= 0) {
    out += ",\"Sequence number\":";
    append_int(out, seq);
    out += ",\"Fwd thread id\":";
    append_int(out, static_cast<int64_t>(e.fwdThreadId()));
  }
  uint64_t flops = e.flops();
  if (flops) {
    out += ",\"flops\":";
    append_int(out, static_cast<int64_t>(flops));
  }
  out += '}';
}

// c10::DeviceType codes as the JSON trace writes them; types _live_convert does not know are
// reported as PrivateUse1 there, and so here.
int32_t device_type_code(c10::DeviceType t) {
  int32_t code = static_cast<int32_t>(t);
  switch (code) {
    case 0: case 1: case 2: case 6: case 9: case 12: case 13: case 14: case 15: case 17: case 18: case 19:
      return code;
    default:
      return 20;
  }
}

struct FrameKey {
  std::string file;
  int line;
  int64_t parent;
  bool operator==(const FrameKey& o) const { return line == o.line && parent == o.parent && file == o.file; }
};
struct FrameKeyHash {
  size_t operator()(const FrameKey& k) const {
    return std::hash<std::string>()(k.file) ^ (std::hash<int64_t>()(k.line) * 31) ^ (std::hash<int64_t>()(k.parent) * 1000003);
  }
};

// Answers from the Python helper, asked once per distinct key.
struct Oracle {
  py::object helper;
  std::unordered_map<std::string, int> kinds;  // _live_convert.call_kind
  std::unordered_map<std::string, int> runs_user;  // -1: not known from the name
  std::unordered_map<std::string, bool> file_user;
  std::unordered_map<FrameKey, int64_t, FrameKeyHash> frames;

  // 0: the job's call; 1: the profiler watching itself; 2: the StatementLines call (no event)
  int call_kind(const std::string& name) {
    auto it = kinds.find(name);
    if (it != kinds.end()) return it->second;
    int v = helper.attr("kind")(clean(name)).cast<int>();
    kinds.emplace(name, v);
    return v;
  }
  int runs_user_code(const std::string& name, bool is_pycall) {
    auto it = runs_user.find(name);
    if (it != runs_user.end()) return it->second;
    py::object v = helper.attr("runs_user")(clean(name), is_pycall);
    int r = v.is_none() ? -1 : (v.cast<bool>() ? 1 : 0);
    runs_user.emplace(name, r);
    return r;
  }
  std::vector<std::string> hooks;  // sources.DISPATCH_HOOKS, asked once
  bool hooks_read = false;
  // user code, and not a dispatch hook (sources.DISPATCH_HOOKS: a frame in a tensor subclass's
  // __torch_function__ runs every operator; the statement is its caller's)
  bool is_user_frame(const std::string& file, const torch::profiler::impl::PyFrameState& frame) {
    auto it = file_user.find(file);
    bool user = it != file_user.end() ? it->second : file_user.emplace(file, helper.attr("file_user")(file).cast<bool>()).first->second;
    if (!user) return false;
    if (!hooks_read) {
      for (auto h : helper.attr("dispatch_hooks")()) hooks.push_back(h.cast<std::string>());
      hooks_read = true;
    }
    const std::string& function = frame.funcname_.str();
    for (const auto& h : hooks)
      if (function == h) return false;
    return true;
  }
  int64_t intern(const std::string& file, int line, const torch::profiler::impl::PyFrameState& caller, int64_t parent) {
    FrameKey key{file, line, parent};
    auto it = frames.find(key);
    if (it != frames.end()) return it->second;
    int64_t v = helper.attr("intern")(file, line, clean(caller.funcname_.str()), parent).cast<int64_t>();
    frames.emplace(std::move(key), v);
    return v;
  }
};

struct PyRow {
  int64_t ts, dur;
  uint64_t tid;
  int32_t name;  // code in the tree's own name dictionary
  int64_t frame;
  int32_t module;
};

struct OpInfo {
  int64_t frame;
  int32_t module;
};

struct StackItem {
  const Result* node;
  int64_t user_frame, any_frame;
  int32_t module;  // code in the module column, -1 = none
  bool in_profiler;
  int caller_user;  // 1, 0, or -1 (not known without asking)
  const torch::profiler::impl::PyFrameState* py_function;  // the Python function whose call is the parent, or null
};

// What the host call tree gives (see _live_convert._walk_tree).
struct TreeOut {
  DictColumn names, modules;
  std::unordered_map<uint64_t, OpInfo> op_info;  // operator correlation id -> its frame and module
  std::unordered_map<uint64_t, NotedLine> lines;  // statement lines (take_lines), by handle
  std::vector<PyRow> py_rows;
  std::vector<const Result*> allocations;
};

void walk_tree(const ProfilerResult& res, Oracle& oracle, TreeOut& out) {
  std::vector<StackItem> stack;
  const auto& roots = res.event_tree();
  for (auto it = roots.rbegin(); it != roots.rend(); ++it) stack.push_back({it->get(), -2, -1, -1, false, -1, nullptr});
  std::unordered_map<std::string, int32_t> module_path_code;  // "<parent code>\x00<segment>" -> code
  while (!stack.empty()) {
    StackItem item = stack.back();
    stack.pop_back();
    const Result* node = item.node;
    int children_caller_user = -1;
    const torch::profiler::impl::PyFrameState* children_function = nullptr;
    EventType tag = node->tag();
    bool is_root = item.user_frame == -2;
    if (is_root) item.user_frame = -1;
    if (tag == EventType::PyCall || tag == EventType::PyCCall) {
      std::string name = node->name();
      int kind = oracle.call_kind(name);
      if (item.in_profiler || kind == 1) {
        // the profiler watching itself (start, stop, step): not part of the job
        item.in_profiler = true;
      } else {
        children_caller_user = oracle.runs_user_code(name, tag == EventType::PyCall);
        if (!is_root && (item.caller_user != 0 || item.user_frame < 0)) {
          const torch::profiler::impl::PyFrameState* caller = nullptr;
          node->visit([&](const auto& f) {
            using T = std::decay_t<decltype(f)>;
            if constexpr (std::is_base_of_v<torch::profiler::impl::PyExtraFieldsBase, T>) caller = &f.caller_;
          });
          std::string file = clean(caller->filename_.str());
          if (oracle.is_user_frame(file, *caller)) {
            item.user_frame = oracle.intern(file, caller->line_no_, *caller, item.user_frame);
            item.any_frame = item.user_frame;
          } else if (item.user_frame < 0) {
            item.any_frame = oracle.intern(file, caller->line_no_, *caller, -1);
          }
        }
        if (tag == EventType::PyCall && !out.lines.empty()) {
          node->visit([&](const auto& f) {
            using T = std::decay_t<decltype(f)>;
            if constexpr (std::is_same_v<T, ExtraFields<EventType::PyCall>>) children_function = &f.callsite_;
          });
        }
        if (tag == EventType::PyCall && name.compare(0, kModulePrefix.size(), kModulePrefix) == 0) {
          std::string seg = name.substr(kModulePrefix.size());
          std::string key = std::to_string(item.module) + '\0' + seg;
          auto mit = module_path_code.find(key);
          if (mit == module_path_code.end()) {
            std::string path = item.module >= 0 ? out.modules.values[item.module] + "." + seg : seg;
            mit = module_path_code.emplace(key, out.modules.code_of(path)).first;
          }
          item.module = mit->second;
        }
        if (kind != 2) {
          int64_t t0 = node->start_time_ns_;
          out.py_rows.push_back({t0, node->endTimeNS() - t0, node->start_tid_, out.names.code_of(name),
                                 item.user_frame >= 0 ? item.user_frame : item.any_frame, item.module});
        }
      }
    } else if (tag == EventType::TorchOp) {
      node->visit([&](const auto& f) {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, ExtraFields<EventType::TorchOp>>) {
          // An operator called straight from a Python function: its statement is the line that
          // function was executing (as the caller of the StatementLines call is, in _walk_tree)
          const auto* fn = item.py_function;
          if (fn != nullptr && !is_root && !item.in_profiler && (item.caller_user != 0 || item.user_frame < 0)) {
            auto lit = out.lines.find(f.record_function_id_);
            if (lit != out.lines.end() && (lit->second.first_line == fn->line_no_ || lit->second.entry_line == fn->line_no_)) {
              std::string file = clean(fn->filename_.str());
              if (oracle.is_user_frame(file, *fn)) {
                item.user_frame = oracle.intern(file, lit->second.line, *fn, item.user_frame);
                item.any_frame = item.user_frame;
              } else if (item.user_frame < 0) {
                item.any_frame = oracle.intern(file, lit->second.line, *fn, -1);
              }
            }
          }
          out.op_info[f.correlation_id_] = {item.user_frame >= 0 ? item.user_frame : item.any_frame, item.module};
        }
      });
    } else if (tag == EventType::Allocation) {
      out.allocations.push_back(node);
      continue;
    }
    const auto& children = node->children_;
    for (auto it = children.rbegin(); it != children.rend(); ++it) {
      stack.push_back({it->get(), item.user_frame, item.any_frame, item.module, item.in_profiler, children_caller_user,
                       children_function});
    }
  }
}

constexpr size_t kRange = 8192;  // events per range read by one thread at a time

struct Flow {
  uint32_t id;
  bool fwdbwd, start;
  int64_t ts, tid;
};

// The Kineto events as rows (see _live_convert.convert_cycle). Touches no Python object, so it
// runs on its own thread while the tree is walked; frames and modules are filled in afterwards
// from `op_key` (the correlation id of the operator a row belongs to, 0 = none).
struct EventsOut {
  DictColumn names, categories;
  Int64Column ts, dur, pids, tids, corr, ext, stream;
  StringColumn args;
  std::vector<uint64_t> op_key;
  std::vector<std::pair<int64_t, uint64_t>> first_seen;  // (resource, profiler thread id) of host threads, in order
  std::vector<Flow> flows;

  void reserve(size_t rows, size_t text) {
    for (Int64Column* c : {&ts, &dur, &pids, &tids, &corr, &ext, &stream}) {
      c->values.reserve(rows);
      c->valid.reserve(rows / 8 + 1);
    }
    names.codes.reserve(rows);
    categories.codes.reserve(rows);
    args.offsets.reserve(rows + 1);
    args.valid.reserve(rows / 8 + 1);
    args.data.reserve(text);
    op_key.reserve(rows);
  }

  // The rows of the next range of events, after these (their dictionaries remapped to ours).
  void append(const EventsOut& o) {
    names.append(o.names);
    categories.append(o.categories);
    ts.append(o.ts);
    dur.append(o.dur);
    pids.append(o.pids);
    tids.append(o.tids);
    corr.append(o.corr);
    ext.append(o.ext);
    stream.append(o.stream);
    args.append(o.args);
    op_key.insert(op_key.end(), o.op_key.begin(), o.op_key.end());
    for (const auto& seen : o.first_seen) {
      bool known = false;
      for (const auto& mine : first_seen) known = known || mine.first == seen.first;
      if (!known) first_seen.push_back(seen);
    }
    flows.insert(flows.end(), o.flows.begin(), o.flows.end());
  }
};

// Events [begin, end) of the recording, in order.
void read_events(const ProfilerResult& res, int64_t pid, size_t begin, size_t end, EventsOut& out) {
  using libkineto::ActivityType;
  const std::string memory_name = "[memory]";
  std::array<int32_t, 256> category_code;  // Kineto activity type -> code in the category column
  category_code.fill(-1);
  std::unordered_set<int64_t> seen_threads;
  std::string args_text;
  const auto& events = res.events();
  out.op_key.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    const KinetoEvent& e = events[i];
    const uint8_t type = e.activityType();
    const auto activity = static_cast<ActivityType>(type);
    if (activity == ActivityType::PYTHON_FUNCTION) continue;  // taken from the tree
    std::string name = e.name();
    if (activity == ActivityType::CPU_INSTANT_EVENT && name == memory_name) continue;  // from the tree too
    if (category_code[type] < 0) category_code[type] = out.categories.code_of(libkineto::toString(activity));
    int64_t start = static_cast<int64_t>(e.startNs());
    int64_t resource = e.deviceResourceId();
    uint64_t key = 0;
    const bool is_op = activity == ActivityType::CPU_OP;
    if (is_op || activity == ActivityType::USER_ANNOTATION) {
      if (seen_threads.insert(resource).second) out.first_seen.emplace_back(resource, e.startThreadId());
      uint64_t corr = e.correlationId();
      key = corr;
      out.pids.push(pid);
      out.tids.push(resource);
      out.stream.push(0, false);
      out.corr.push(0, false);
      out.ext.push(static_cast<int64_t>(corr));
      if (is_op) {
        op_args(args_text, e, corr);
        out.args.push(&args_text);
        if (uint32_t fid = e.flowId()) out.flows.push_back({fid, e.flowType() == 1, e.flowStart(), start, resource});
      } else {
        out.args.push(nullptr);
      }
    } else {
      // a runtime call belongs to the operator that made it (its External id); device events
      // get theirs through their launch, in build.py
      // (privateuse1_driver: a CPU activity to torch, yet on a device stream; kineto_names.py)
      bool on_host = e.deviceType() == c10::DeviceType::CPU && activity != ActivityType::PRIVATEUSE1_DRIVER;
      uint64_t linked = e.linkedCorrelationId();
      out.corr.push(static_cast<int64_t>(e.correlationId()));
      out.ext.push(static_cast<int64_t>(linked), linked != 0);
      out.args.push(nullptr);
      if (on_host) {
        key = linked;
        out.pids.push(pid);
        out.tids.push(resource);
        out.stream.push(0, false);
      } else {  // pid = device index, tid = stream, as in the JSON trace
        out.pids.push(e.deviceIndex());
        out.tids.push(resource);
        out.stream.push(resource);
      }
    }
    out.categories.push_code(category_code[type]);
    out.names.push(name);
    out.ts.push(start);
    out.dur.push(static_cast<int64_t>(e.durationNs()));
    out.op_key.push_back(key);
  }
}

py::dict convert(py::handle results, py::handle helper, int64_t pid) {
  const auto& res = py::cast<const ProfilerResult&>(results);
  Oracle oracle{py::reinterpret_borrow<py::object>(helper)};

  // The events are read in ranges by a second thread from the start, and by this one too once
  // it has walked the tree (which needs Python, so only this thread can): both cores work.
  const size_t n_events = res.events().size();
  const size_t n_ranges = (n_events + kRange - 1) / kRange;
  std::vector<EventsOut> ranges(n_ranges);
  std::atomic<size_t> next_range{0};
  auto read_ranges = [&] {
    for (size_t r; (r = next_range.fetch_add(1)) < n_ranges;) {
      read_events(res, pid, r * kRange, std::min(n_events, (r + 1) * kRange), ranges[r]);
    }
  };
  std::exception_ptr events_error;
  std::thread events_thread([&] {
    try {
      read_ranges();
    } catch (...) {
      events_error = std::current_exception();
      next_range = n_ranges;
    }
  });
  TreeOut tree;
  tree.lines = take_lines();
  try {
    walk_tree(res, oracle, tree);
    py::gil_scoped_release no_gil;  // reading events touches no Python object: let other threads run
    read_ranges();
    events_thread.join();
  } catch (...) {
    next_range = n_ranges;
    if (events_thread.joinable()) events_thread.join();
    throw;
  }
  if (events_error) std::rethrow_exception(events_error);
  size_t rows = tree.py_rows.size(), text = 0;  // (Python call rows are added to the same columns below)
  for (const auto& part : ranges) {
    rows += part.op_key.size();
    text += part.args.data.size();
  }
  EventsOut ev = n_ranges ? std::move(ranges[0]) : EventsOut{};
  ev.reserve(rows, text);  // the merged columns grow once, not by doubling
  for (size_t r = 1; r < n_ranges; ++r) {
    ev.append(ranges[r]);
    ranges[r] = EventsOut{};  // its memory back now
  }

  // host threads: the tree names them by the profiler's own ids, the events by resource id
  std::unordered_map<uint64_t, int64_t> internal_tid;
  for (const auto& [resource, thread] : ev.first_seen) internal_tid[thread] = resource;

  Int64Column frame_c;
  std::vector<int32_t> module_codes;
  module_codes.reserve(ev.op_key.size() + tree.py_rows.size());
  for (uint64_t key : ev.op_key) {
    auto it = key ? tree.op_info.find(key) : tree.op_info.end();
    if (it != tree.op_info.end()) {
      frame_c.push(it->second.frame);
      module_codes.push_back(it->second.module);
    } else {
      frame_c.push(-1);
      module_codes.push_back(-1);
    }
  }
  int32_t py_category = ev.categories.code_of("python_function");
  std::vector<int32_t> py_name_code(tree.names.values.size());
  for (size_t i = 0; i < py_name_code.size(); ++i) py_name_code[i] = ev.names.code_of(tree.names.values[i]);
  for (const PyRow& r : tree.py_rows) {
    auto it = internal_tid.find(r.tid);
    ev.categories.push_code(py_category);
    ev.names.push_code(py_name_code[r.name]);
    ev.ts.push(r.ts);
    ev.dur.push(r.dur);
    ev.pids.push(pid);
    ev.tids.push(it != internal_tid.end() ? it->second : static_cast<int64_t>(r.tid));
    ev.corr.push(0, false);
    ev.ext.push(0, false);
    ev.stream.push(0, false);
    ev.args.push(nullptr);
    frame_c.push(r.frame);
    module_codes.push_back(r.module);
  }

  // --- allocations: the memory table ---
  Int64Column m_ts, m_tid, m_addr, m_bytes, m_alloc, m_reserved;
  std::vector<int32_t> m_dtype, m_device;
  for (const Result* node : tree.allocations) {
    node->visit([&](const auto& f) {
      using T = std::decay_t<decltype(f)>;
      if constexpr (std::is_same_v<T, ExtraFields<EventType::Allocation>>) {
        auto it = internal_tid.find(node->start_tid_);
        m_ts.push(node->start_time_ns_);
        m_tid.push(it != internal_tid.end() ? it->second : static_cast<int64_t>(node->start_tid_));
        m_dtype.push_back(device_type_code(f.device_type_));
        m_device.push_back(f.device_index_);
        m_addr.push(reinterpret_cast<intptr_t>(f.ptr_));
        m_bytes.push(f.alloc_size_);
        m_alloc.push(static_cast<int64_t>(f.total_allocated_));
        m_reserved.push(static_cast<int64_t>(f.total_reserved_));
      }
    });
  }

  py::dict out;
  out["n"] = ev.ts.values.size();
  out["category_codes"] = as_bytes(ev.categories.codes);
  out["category_values"] = str_list(ev.categories.values);
  out["name_codes"] = as_bytes(ev.names.codes);
  out["name_values"] = str_list(ev.names.values);
  out["module_codes"] = as_bytes(module_codes);
  out["module_values"] = str_list(tree.modules.values);
  for (auto& [key, col] : std::vector<std::pair<const char*, Int64Column*>>{
           {"ts_ns", &ev.ts}, {"dur_ns", &ev.dur}, {"pid", &ev.pids}, {"tid", &ev.tids}, {"correlation", &ev.corr},
           {"external_id", &ev.ext}, {"stream", &ev.stream}, {"frame_index", &frame_c}}) {
    out[py::str(key)] = py::make_tuple(as_bytes(col->values), col->any_null ? py::object(as_bytes(col->valid)) : py::object(py::none()));
  }
  out["args"] = py::make_tuple(as_bytes(ev.args.offsets), py::bytes(ev.args.data), as_bytes(ev.args.valid));
  py::list flow_id, flow_cat, flow_phase, flow_ts, flow_tid, flow_bp;
  for (const Flow& f : ev.flows) {
    flow_id.append(f.id);
    flow_cat.append(f.fwdbwd ? "fwdbwd" : "ac2g");
    flow_phase.append(f.start ? "s" : "f");
    flow_ts.append(f.ts);
    flow_tid.append(f.tid);
    flow_bp.append(f.start ? py::object(py::none()) : py::object(py::str("e")));
  }
  py::dict flows;
  flows["flow_id"] = flow_id;
  flows["category"] = flow_cat;
  flows["phase"] = flow_phase;
  flows["ts_ns"] = flow_ts;
  flows["tid"] = flow_tid;
  flows["binding_point"] = flow_bp;
  out["flows"] = flows;
  py::dict memory;
  memory["n"] = m_ts.values.size();
  memory["ts_ns"] = as_bytes(m_ts.values);
  memory["tid"] = as_bytes(m_tid.values);
  memory["device_type"] = as_bytes(m_dtype);
  memory["device"] = as_bytes(m_device);
  memory["addr"] = as_bytes(m_addr.values);
  memory["bytes"] = as_bytes(m_bytes.values);
  memory["total_allocated"] = as_bytes(m_alloc.values);
  memory["total_reserved"] = as_bytes(m_reserved.values);
  out["memory"] = memory;
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Neuron Explorer: torch.profiler results to raw run columns, in C++";
  m.def("convert", &convert, py::arg("results"), py::arg("helper"), py::arg("pid"));
  m.def("statement_lines_supported", &statement_lines_supported);
  m.def("lines_start", &lines_start);
  m.def("lines_stop", &lines_stop);
  m.def("pending_lines", &pending_lines);
}
