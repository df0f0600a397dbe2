// A PrivateUse1 test backend ("neuron" once renamed from Python) that runs every operator on the CPU
// and reports what a vendor's Kineto plugin reports, in one of three shapes (set_mode):
//
//   full         per operator: a host runtime call `neuronLaunchKernel` (privateuse1_runtime, own
//                correlation id, linked to the CPU operator) + a device kernel with the same correlation
//                id on device 0 / stream 7, joined by an ac2g flow (CUDA's shape)
//   kernel_only  per operator: only the device kernel, with no correlation id of its own: it carries
//                the CPU operator's External id and nothing else (several vendor plugins)
//   driver       TorchNeuron's documented shape: operator dispatch as privateuse1_runtime on the host
//                thread, device interaction as privateuse1_driver on device 0 / stream 7, no kernels
//
// clock_us=true reports the plugin's timestamps in microseconds instead of nanoseconds (a clock bug
// seen in plugins). The backend keeps its own record of kernel time (stats()) for the tests to compare
// the profiler's figures with. Memory is host memory, reported to the memory profiler as device 0.
//
// Built by tests/neuron_backend.py with torch.utils.cpp_extension (-DUSE_KINETO -DFMT_HEADER_ONLY).

#include <torch/extension.h>

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <output_base.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

// Kineto declares but does not ship CpuTraceBuffer; this backend never hands one over (it returns null), so
// only the type's completeness matters here.
namespace libkineto {
struct CpuTraceBuffer {};
}  // namespace libkineto

namespace {

constexpr int32_t kStream = 7;
constexpr int64_t kOwnCorrelationBase = 1 << 20;  // apart from torch's operator ids

enum class Shape { full, kernel_only, driver };
std::atomic<Shape> g_shape{Shape::full};
std::atomic<bool> g_clock_us{false};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- the backend's own record (what a test compares the profiler's figures with) -------------

std::mutex g_stats_mu;
int64_t g_kernels = 0, g_kernel_ns = 0;
int64_t g_allocated = 0, g_peak = 0;

// ---- memory: host memory, reported to torch's memory profiler as device 0 ----------------------

void free_block(void* ctx);

struct Block {
  void* ptr;
  size_t size;
};

struct NeuronAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = n ? std::malloc(n) : nullptr;
    auto* b = new Block{p, n};
    int64_t total;
    {
      std::lock_guard<std::mutex> g(g_stats_mu);
      g_allocated += static_cast<int64_t>(n);
      g_peak = std::max(g_peak, g_allocated);
      total = g_allocated;
    }
    if (n) c10::reportMemoryUsageToProfiler(p, static_cast<int64_t>(n), total, total, c10::Device(c10::DeviceType::PrivateUse1, 0));
    return {p, b, &free_block, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

void free_block(void* ctx) {
  auto* b = static_cast<Block*>(ctx);
  int64_t total;
  {
    std::lock_guard<std::mutex> g(g_stats_mu);
    g_allocated -= static_cast<int64_t>(b->size);
    total = g_allocated;
  }
  if (b->size) c10::reportMemoryUsageToProfiler(b->ptr, -static_cast<int64_t>(b->size), total, total, c10::Device(c10::DeviceType::PrivateUse1, 0));
  std::free(b->ptr);
  delete b;
}

NeuronAllocator g_alloc;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_alloc);

// ---- device guard: one device, streams by id, events that are always complete --------------

thread_local c10::StreamId t_stream = 0;

struct NeuronGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device) const override { return {c10::DeviceType::PrivateUse1, 0}; }
  c10::Device getDevice() const override { return {c10::DeviceType::PrivateUse1, 0}; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::UNSAFE, d, t_stream); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto old = c10::Stream(c10::Stream::UNSAFE, s.device(), t_stream);
    t_stream = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuard);

struct NeuronHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  at::Device getDeviceFromPtr(void*) const override { return {c10::DeviceType::PrivateUse1, 0}; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void resizePrivateUse1Bytes(const c10::Storage&, size_t) const override { TORCH_CHECK(false, "not supported"); }
};

// ---- the Kineto plugin ---------------------------------------------------------------------

struct Call {  // one operator run on the device
  std::string op;
  int64_t start_ns, end_ns;
  int64_t external_id;  // the CPU operator's correlation id (0: none)
  int64_t own_id;
  int32_t pid, tid;
};

std::atomic<bool> g_recording{false};
std::mutex g_calls_mu;
std::vector<Call> g_calls;
std::atomic<int64_t> g_next_id{kOwnCorrelationBase};
thread_local std::vector<uint64_t> t_correlation;  // the profiler's stack of operator ids on this thread

// Kineto's in-memory logger keeps pointers to the activities: they must outlive the session, so the
// last few sessions' activities stay here.
struct Generation {
  libkineto::TraceSpan span{0, 0, "neuron"};
  std::deque<libkineto::GenericTraceActivity> activities;
};
std::mutex g_gen_mu;
std::deque<std::unique_ptr<Generation>> g_generations;

int64_t clock_of(int64_t ns) { return g_clock_us.load() ? ns / 1000 : ns; }

class NeuronSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    {
      std::lock_guard<std::mutex> g(g_calls_mu);
      g_calls.clear();
    }
    g_recording = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }
  void stop() override {
    g_recording = false;
    status_ = libkineto::TraceStatus::PROCESSING;
  }
  std::vector<std::string> errors() override { return {}; }
  void processTrace(libkineto::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }
  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_of, int64_t, int64_t) override {
    std::vector<Call> calls;
    {
      std::lock_guard<std::mutex> g(g_calls_mu);
      calls.swap(g_calls);
    }
    auto gen = std::make_unique<Generation>();
    Shape shape = g_shape.load();
    for (const auto& c : calls) {
      const libkineto::ITraceActivity* linked = (linked_of && c.external_id) ? linked_of(static_cast<int32_t>(c.external_id)) : nullptr;
      int64_t dur = c.end_ns - c.start_ns;
      int64_t launch = std::min<int64_t>(1000, dur / 4);
      auto add = [&](libkineto::ActivityType type, const std::string& name, int64_t s, int64_t e, int32_t device, int32_t resource,
                     int64_t id) -> libkineto::GenericTraceActivity& {
        auto& a = gen->activities.emplace_back(gen->span, type, name);
        a.startTime = clock_of(s);
        a.endTime = clock_of(e);
        a.device = device;
        a.resource = resource;
        a.threadId = resource;
        a.id = static_cast<int32_t>(id);
        a.linked = linked;
        return a;
      };
      if (shape == Shape::full) {
        auto& rt = add(libkineto::ActivityType::PRIVATEUSE1_RUNTIME, "neuronLaunchKernel", c.start_ns, c.start_ns + launch, c.pid, c.tid, c.own_id);
        rt.flow.id = static_cast<uint32_t>(c.own_id);
        rt.flow.type = libkineto::kLinkAsyncCpuGpu;
        rt.flow.start = 1;
        auto& k = add(libkineto::ActivityType::CONCURRENT_KERNEL, "nrt_" + c.op, c.start_ns + launch, c.end_ns, 0, kStream, c.own_id);
        k.flow.id = static_cast<uint32_t>(c.own_id);
        k.flow.type = libkineto::kLinkAsyncCpuGpu;
        k.flow.start = 0;
        k.addMetadata("stream", kStream);
        k.addMetadata("device", 0);
      } else if (shape == Shape::kernel_only) {
        auto& k = add(libkineto::ActivityType::CONCURRENT_KERNEL, "nrt_" + c.op, c.start_ns + launch, c.end_ns, 0, kStream, 0);
        k.addMetadata("stream", kStream);
        k.addMetadata("device", 0);
      } else {
        add(libkineto::ActivityType::PRIVATEUSE1_RUNTIME, "neuron::" + c.op, c.start_ns, c.end_ns, c.pid, c.tid, c.own_id);
        add(libkineto::ActivityType::PRIVATEUSE1_DRIVER, "nrt_execute", c.start_ns + launch, c.end_ns, 0, kStream, c.own_id);
      }
    }
    for (const auto& a : gen->activities) logger.handleGenericActivity(a);
    std::lock_guard<std::mutex> g(g_gen_mu);
    g_generations.push_back(std::move(gen));
    while (g_generations.size() > 8) g_generations.pop_front();
  }
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::unique_ptr<libkineto::DeviceInfo>(new libkineto::DeviceInfo{0, 0, "neuron", "neuron 0"});
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {libkineto::ResourceInfo{kStream, kStream, 0, "stream 7"}}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }
  void pushCorrelationId(uint64_t id) override { t_correlation.push_back(id); }
  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
  }
};

class NeuronProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>&, const libkineto::Config&) override {
    return std::make_unique<NeuronSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t, const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"neuron"};
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                                                libkineto::ActivityType::PRIVATEUSE1_DRIVER};
};
REGISTER_PRIVATEUSE1_PROFILER(NeuronProfiler);

// ---- operators: a few natively (allocation, views, copies), every other on the CPU -----------

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout>, std::optional<c10::Device>,
                               std::optional<bool>, std::optional<c10::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &g_alloc, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout>,
                         std::optional<c10::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &g_alloc, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype));
}

at::Tensor as_cpu(const at::Tensor& t) {  // the same memory, seen as a CPU tensor
  if (t.device().is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(c10::kCPU));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  if (self.numel()) as_cpu(dst).copy_(as_cpu(self));
  return dst;
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size, std::optional<c10::MemoryFormat>) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(C10_AS_INTARRAYREF_SLOW(size));
  size_t need = static_cast<size_t>(impl->storage_offset() + impl->numel()) * self.itemsize();
  const auto& storage = impl->unsafe_storage();
  if (need > storage.nbytes()) {
    auto fresh = g_alloc.allocate(need);
    if (storage.nbytes()) std::memcpy(fresh.get(), storage.data(), storage.nbytes());
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
    storage.unsafeGetStorageImpl()->set_nbytes(need);
  }
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sym_sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }
at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) { return at::native::_reshape_alias(self, size, stride); }
at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<int64_t> offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  bool recording = g_recording.load();
  int64_t external = (recording && !t_correlation.empty()) ? static_cast<int64_t>(t_correlation.back()) : 0;
  int64_t start = now_ns();
  at::native::cpu_fallback(op, stack);
  int64_t end = now_ns();
  std::string name = op.schema().name();
  if (name.rfind("aten::", 0) == 0) name = name.substr(6);
  {
    std::lock_guard<std::mutex> g(g_stats_mu);
    g_kernels += 1;
    g_kernel_ns += end - start - std::min<int64_t>(1000, (end - start) / 4);
  }
  if (recording) {
    std::lock_guard<std::mutex> g(g_calls_mu);
    g_calls.push_back(Call{name, start, end, external, g_next_id++, static_cast<int32_t>(getpid()), static_cast<int32_t>(syscall(SYS_gettid))});
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", resize_);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("as_strided", as_strided);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_cpu>()); }

void set_mode(const std::string& shape, bool clock_us) {
  if (shape == "full") g_shape = Shape::full;
  else if (shape == "kernel_only") g_shape = Shape::kernel_only;
  else if (shape == "driver") g_shape = Shape::driver;
  else TORCH_CHECK(false, "unknown shape '", shape, "' (full, kernel_only, driver)");
  g_clock_us = clock_us;
}

pybind11::dict stats() {
  std::lock_guard<std::mutex> g(g_stats_mu);
  pybind11::dict d;
  d["kernels"] = g_kernels;
  d["kernel_ns"] = g_kernel_ns;
  d["allocated"] = g_allocated;
  d["peak"] = g_peak;
  return d;
}

void reset_stats() {
  std::lock_guard<std::mutex> g(g_stats_mu);
  g_kernels = g_kernel_ns = 0;
  g_peak = g_allocated;
}

void register_hooks() {
  static NeuronHooks hooks;
  if (!at::isPrivateUse1HooksRegistered()) at::RegisterPrivateUse1HooksInterface(&hooks);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("set_mode", &set_mode, "shape: full | kernel_only | driver; clock_us: plugin timestamps in microseconds");
  m.def("stats", &stats, "the backend's own record: kernels run, their time in ns, bytes allocated now and at the peak");
  m.def("reset_stats", &reset_stats);
  m.def("register_hooks", &register_hooks);
}
