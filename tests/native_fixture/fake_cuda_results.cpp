// Test-only: real torch::autograd::profiler::ProfilerResult objects shaped like one cycle of a
// CUDA job, built from torch's own C++ types, for machines without a GPU.
//
// The live collector has two converters (Python, _live_convert.py, and C++, live_convert.cpp);
// the C++ one reads torch's objects directly, so duck-typed fakes cannot reach it. This builds the
// objects torch's collection.cpp would have built, the way it builds them:
//   - host ops, allocations and Python calls are Results on the recording thread (profiler
//     thread id 1, kineto_info = {process id, system thread id});
//   - Kineto events are Results whose kineto_info is {deviceId, resourceId} of the activity,
//     whose linked_activity_ is the operator that launched them, whose parent in the tree is that
//     operator (runtime calls) or, through the ac2g flow, the runtime call (device events), and
//     whose start_tid_ is their parent's; one with no parent lands in the tree by thread and time;
//   - events() holds a KinetoEvent per finished Result except Python calls, in start order, and
//     event_tree() the roots on the CPU (torch's materializeOpEvents / finalizeTrace).
// at::StringView(std::string) owns its copy, so the frames' file names outlive this code.
//
// make(): the scenario of tests/test_collector_device.py
//   host thread (system tid 77):
//     PyCall "<script>(1): <module>"                          0 .. 2000
//       PyCCall "<built-in method mm of Tensor object>"     990 .. 1510   caller <script>:7
//         TorchOp aten::mm, correlation 10, [[4,4],[4,4]]  1000 .. 1500   (flops 128)
//           Kineto cuda_runtime cudaLaunchKernel, correlation 555, linked to aten::mm  1100 +50
//             Kineto kernel gemm, correlation 555, device 0, stream 7               1300 +200
//           Allocation +64 bytes on cuda:0                    1020
//       Allocation -64 bytes on cuda:0 (the free)             1700
//
// make_busy(): more of what a CUDA cycle holds, for the converters' equality (see the function).
//
// Must not: be used outside tests.

#include <pybind11/pybind11.h>

#include <ATen/ATen.h>
#include <ActivityTraceInterface.h>  // the (empty) trace's deleter needs the complete type
#include <ActivityType.h>
#include <GenericTraceActivity.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/collection.h>

#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;
using libkineto::ActivityType;
using torch::autograd::profiler::KinetoEvent;
using torch::autograd::profiler::ProfilerResult;
using torch::profiler::impl::EventType;
using torch::profiler::impl::ExtraFields;
using torch::profiler::impl::PyFrameState;
using torch::profiler::impl::Result;
using torch::profiler::impl::kineto::DeviceAndResource;
using ResultPtr = std::shared_ptr<Result>;

namespace {

constexpr uint64_t kProfilerTid = 1;  // the profiler's own id of the recording thread

struct Builder {
  int64_t base_ns;
  std::string script;
  DeviceAndResource host;
  std::vector<ResultPtr> all;  // in start order, as torch sorts them

  ResultPtr add(ResultPtr r, const ResultPtr& parent) {
    if (parent) {
      r->parent_ = parent;
      parent->children_.push_back(r);
    }
    r->finished_ = true;
    all.push_back(r);
    return r;
  }

  PyFrameState frame(int line) const {
    return {line, at::StringView(script), at::StringView(std::string("<module>"))};
  }

  // The script's module frame (a tree root: its "caller" is where it stood when recording began).
  ResultPtr module_call(int64_t t0, int64_t t1) {
    ExtraFields<EventType::PyCall>::args_t args{frame(1), std::nullopt, std::nullopt};
    return add(Result::create(base_ns + t0, kProfilerTid, host,
                              ExtraFields<EventType::PyCall>(base_ns + t1, /*python_tid=*/0, frame(1), args)),
               nullptr);
  }

  // A C function called from the script at `line`.
  ResultPtr c_call(const std::string& name, int line, int64_t t0, int64_t t1, const ResultPtr& parent) {
    return add(Result::create(base_ns + t0, kProfilerTid, host,
                              ExtraFields<EventType::PyCCall>(base_ns + t1, 0, frame(line), at::StringView(name))),
               parent);
  }

  ResultPtr op(torch::profiler::impl::TorchOpBasicFields basic, uint64_t correlation, int64_t t0, int64_t t1,
               std::vector<torch::profiler::impl::op_input_t> inputs, torch::profiler::impl::extra_args_t extra_args,
               torch::profiler::impl::Flow flow, const ResultPtr& parent) {
    basic.end_tid_ = kProfilerTid;
    ExtraFields<EventType::TorchOp> f(std::move(basic), correlation, base_ns + t1, std::move(inputs), {}, {}, {},
                                      std::move(extra_args), {}, {}, {}, /*allow_tf32_cublas=*/false, nullptr);
    f.flow = flow;
    return add(Result::create(base_ns + t0, kProfilerTid, host, std::move(f)), parent);
  }

  ResultPtr kineto(const std::string& name, ActivityType type, int64_t t0, int64_t dur, uint64_t correlation,
                   DeviceAndResource where, const ResultPtr& linked, torch::profiler::impl::Flow flow,
                   const ResultPtr& parent) {
    ExtraFields<EventType::Kineto> f;
    f.name_ = name;
    f.duration_ns_ = dur;
    f.correlation_id_ = correlation;
    f.activity_type_ = type;
    f.flow = flow;
    f.linked_activity_ = linked;
    return add(Result::create(base_ns + t0, kProfilerTid, where, std::move(f)), parent);
  }

  ResultPtr allocation(int64_t t, int64_t bytes, size_t total_allocated, const ResultPtr& parent) {
    torch::profiler::impl::RawAllocation raw{};
    raw.ptr_ = reinterpret_cast<void*>(static_cast<uintptr_t>(0x7f0000200000));
    raw.alloc_size_ = bytes;
    raw.total_allocated_ = total_allocated;
    raw.total_reserved_ = 2 << 20;
    raw.device_type_ = c10::DeviceType::CUDA;
    raw.device_index_ = 0;
    return add(Result::create(base_ns + t, kProfilerTid, host, ExtraFields<EventType::Allocation>(raw)), parent);
  }

  std::unique_ptr<ProfilerResult> finish() {
    std::stable_sort(all.begin(), all.end(), [](const ResultPtr& a, const ResultPtr& b) {
      return a->start_time_ns_ < b->start_time_ns_;
    });
    std::vector<KinetoEvent> events;
    std::vector<ResultPtr> tree;
    for (auto& r : all) {
      // torch leaves the Python calls out of events(): they are read from the tree
      if (r->tag() != EventType::PyCall && r->tag() != EventType::PyCCall) events.emplace_back(r, /*verbose=*/false);
      if (r->parent_.expired() && r->deviceType() == c10::DeviceType::CPU) tree.push_back(r);
    }
    return std::make_unique<ProfilerResult>(static_cast<uint64_t>(base_ns), std::move(events), nullptr, std::move(tree));
  }
};

// One input as the profiler records it with record_shapes.
torch::profiler::impl::TensorMetadata tensor_input(const at::Tensor& t) {
  torch::profiler::impl::RawTensorMetadata raw(t);
  return torch::profiler::impl::TensorMetadata(raw, t.sizes().vec(), t.strides().vec());
}

torch::profiler::impl::TorchOpBasicFields op_fields(const std::string& name, int64_t sequence_number,
                                                   at::RecordScope scope, uint64_t id) {
  torch::profiler::impl::TorchOpBasicFields basic;
  basic.sequence_number_ = sequence_number;  // -1: no autograd
  basic.forward_tid_ = 0;
  basic.scope_ = scope;
  basic.record_function_id_ = id;
  basic.name_ = name;
  return basic;
}

// aten::mm of two float [4, 4] tensors, with the arguments torch computes its flops from.
ResultPtr mm(Builder& b, int64_t sequence_number, torch::profiler::impl::Flow flow, int64_t t0, int64_t t1,
             const ResultPtr& parent) {
  at::Tensor x = at::zeros({4, 4}, at::kFloat), y = at::zeros({4, 4}, at::kFloat);
  std::vector<torch::profiler::impl::op_input_t> inputs;
  inputs.emplace_back(tensor_input(x));
  inputs.emplace_back(tensor_input(y));
  torch::profiler::impl::extra_args_t extra_args;
  extra_args.emplace("mat1_size", c10::IValue(x.sizes().vec()));
  extra_args.emplace("mat2_size", c10::IValue(y.sizes().vec()));
  return b.op(op_fields("aten::mm", sequence_number, at::RecordScope::FUNCTION, 1), /*correlation=*/10, t0, t1,
              std::move(inputs), std::move(extra_args), flow, parent);
}

constexpr torch::profiler::impl::Flow kNoFlow{};
torch::profiler::impl::Flow ac2g(uint32_t id, bool start) { return {id, libkineto::kLinkAsyncCpuGpu, start}; }

// base_ns: the clock origin (Unix-epoch ns); script: the user's script file (its frames count as
// user code only if the file exists); host_pid / host_tid: the recording process and system
// thread as Kineto reports them (kineto_info of host events).
std::unique_ptr<ProfilerResult> make(int64_t base_ns, const std::string& script, int32_t host_pid, int32_t host_tid) {
  Builder b{base_ns, script, {host_pid, host_tid}, {}};
  auto root = b.module_call(0, 2000);
  auto call = b.c_call("<built-in method mm of Tensor object>", 7, 990, 1510, root);
  auto op = mm(b, -1, kNoFlow, 1000, 1500, call);
  // What Kineto hands back: the launch on the host and the kernel it queued, joined by the CUPTI
  // correlation id (555) and an ac2g flow, both linked to the operator. Torch attaches Kineto
  // events to their parent before it builds the rest of the tree, so they come first.
  auto launch = b.kineto("cudaLaunchKernel", ActivityType::CUDA_RUNTIME, 1100, 50, 555, b.host, op, ac2g(555, true), op);
  b.kineto("gemm", ActivityType::CONCURRENT_KERNEL, 1300, 200, 555, {0, 7}, op, ac2g(555, false), launch);
  // the caching allocator: the product on cuda:0, freed later, back in the script
  b.allocation(1020, 64, 64, op);
  b.allocation(1700, -64, 0, root);
  return b.finish();
}

// The same call with what else a CUDA cycle holds:
//   aten::mm under autograd (sequence number 3, a forward-backward flow start, id 42) launching
//     a kernel with a name that is not UTF-8 (device 0, stream 7), a copy (device 1, stream 13)
//     and a driver call; a GPU-side annotation linked to it;
//   a record_function range (user_annotation) around aten::cat (a tensor-list, a scalar and a
//     None input);
//   a sync and a kernel that Kineto could not link to any operator (tree placement by time).
std::unique_ptr<ProfilerResult> make_busy(int64_t base_ns, const std::string& script, int32_t host_pid, int32_t host_tid) {
  Builder b{base_ns, script, {host_pid, host_tid}, {}};
  auto root = b.module_call(0, 5000);
  auto call = b.c_call("<built-in method mm of Tensor object>", 7, 990, 4000, root);
  auto op = mm(b, 3, {42, libkineto::kLinkFwdBwd, 1}, 1000, 3500, call);
  auto launch = b.kineto("cudaLaunchKernel", ActivityType::CUDA_RUNTIME, 1100, 50, 555, b.host, op, ac2g(555, true), op);
  auto copy = b.kineto("cudaMemcpyAsync", ActivityType::CUDA_RUNTIME, 1200, 50, 556, b.host, op, ac2g(556, true), op);
  b.kineto("cuDeviceSynchronize", ActivityType::CUDA_DRIVER, 1300, 50, 557, b.host, op, kNoFlow, op);
  b.kineto("gpu_region", ActivityType::GPU_USER_ANNOTATION, 1400, 300, 0, {0, 7}, op, kNoFlow, op);
  b.kineto("gemm_\xff\xfe", ActivityType::CONCURRENT_KERNEL, 1400, 200, 555, {0, 7}, op, ac2g(555, false), launch);
  b.kineto("Memcpy HtoD (Pageable -> Device)", ActivityType::GPU_MEMCPY, 1500, 100, 556, {1, 13}, op, ac2g(556, false), copy);
  b.allocation(1020, 64, 64, op);

  auto region = b.op(op_fields("## forward ##", -1, at::RecordScope::USER_SCOPE, 2), 11, 4100, 4500, {}, {}, kNoFlow, root);
  at::Tensor t = at::zeros({2, 3}, at::kDouble);
  std::vector<torch::profiler::impl::op_input_t> inputs;
  inputs.emplace_back(std::vector<torch::profiler::impl::TensorMetadata>{tensor_input(t), tensor_input(t)});
  inputs.emplace_back(c10::IValue(static_cast<int64_t>(0)));
  inputs.emplace_back(std::nullopt);
  auto cat = b.op(op_fields("aten::cat", -1, at::RecordScope::FUNCTION, 3), 12, 4150, 4300, std::move(inputs), {}, kNoFlow,
                  region);
  b.kineto("cudaStreamSynchronize", ActivityType::CUDA_SYNC, 4200, 10, 0, {0, 7}, nullptr, kNoFlow, cat);
  b.kineto("orphan_kernel", ActivityType::CONCURRENT_KERNEL, 4600, 100, 999, {1, 3}, nullptr, kNoFlow, root);
  b.allocation(4700, -64, 0, root);
  return b.finish();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Test-only: CUDA-shaped torch ProfilerResults built in C++ (no GPU needed)";
  m.def("make", &make, py::arg("base_ns"), py::arg("script"), py::arg("host_pid"), py::arg("host_tid"));
  m.def("make_busy", &make_busy, py::arg("base_ns"), py::arg("script"), py::arg("host_pid"), py::arg("host_tid"));
}
