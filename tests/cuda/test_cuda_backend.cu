// tests/cuda/test_cuda_backend.cu: the CUDA backend against the CPU backend, op by op.
//
// Every case of backend_cases.hpp runs on Cuda in float and double, is compared with the CPU
// backend's result for the same inputs (cpu_reference.cpp), and is run a second time to check
// that the CUDA result is bitwise reproducible. Tolerance (kBackendTolerance,
// tests/support/backend_harness.hpp): 1e-5 (float) and 1e-10 (double) relative to each element
// plus the output's largest magnitude, so elements that cancel to near zero are judged at the
// output's scale; cases with the same operation order on both backends must match exactly.
//
// Then every kernel case (tests/support/kernel_cases.hpp) of each contract in kernels::AllKernels
// that Cuda implements, through check_kernel_case: the fused op on Cuda against its naive
// reference on Cuda, and against the CPU backend's fused op for the same inputs (reproducible run
// to run). A contract Cuda does not implement yet is printed as "<Name>: not implemented by Cuda"
// and counted apart, never as passed (its case code is not even instantiated for Cuda: calling an
// unimplemented contract does not compile).
//
// Then whole models (model_step.hpp): the one-block attention, Mamba-3 and MoE LMs' train step (loss,
// every gradient; MoE under bf16 products too) against the CPU, and masking on the GPU, per pattern;
// and the tiny "AAM" model's life on the GPU (tiny_model_lifecycle.hpp): training lowers its loss
// with a fixed number of host waits per step, its checkpoint reads back bitwise (and on the CPU),
// and it generates what the full forward and the CPU generate, waiting once per token.
//
// Then the bf16 tensor-core attention (CudaBf16Attention, attention_bf16_checks.hpp): each case
// against a double reference on bf16-rounded inputs within tolerances derived from bf16's unit
// roundoff, padding exact, run to run bitwise; fp32 back bit for bit after the scope; the model's
// document-masking invariants with the scope on.
//
// Then checks that need no CPU reference: conversions and fill against the host's
// convert_element bit for bit, gradcheck on the device, memory accounting, error reporting; and
// the opt-in product paths against the default ones (on_request_checks.hpp: TF32 GEMMs, the MoE
// experts' grouped products in one launch).
//
// Without a device it prints exactly "no CUDA device: CUDA backend tests skipped" and exits 0;
// CTest's SKIP_REGULAR_EXPRESSION turns that into a skipped test. A plain main (not Catch2)
// keeps nvcc away from Catch2's headers; each check prints PASS or FAIL with the worst element.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "attention_bf16_checks.hpp"
#include "backend_cases.hpp"
#include "cpu_reference.hpp"
#include "model_step.hpp"
#include "on_request_checks.hpp"
#include "support/kernel_cases.hpp"
#include "support/masking_batch.hpp"
#include "tiny_model_lifecycle.hpp"

#include "megacpp/backends/cuda.cuh"
#include "megacpp/optim.hpp"

namespace megacpp::backend_test {
namespace {

static_assert(!Cuda::host_accessible, "megacpp_cuda_data_is_device_memory");

class Report {
 public:
  // Runs one check: `check` returns "" on success or what went wrong.
  template <class Check>
  void run(const std::string& name, Check&& check) {
    std::string why;
    try {
      why = check();
    } catch (const std::exception& e) {
      why = std::string("threw: ") + e.what();
    }
    record(name, why);
  }
  // Records a check that ran elsewhere: `why` is "" on success or what went wrong.
  void record(const std::string& name, const std::string& why) {
    if (why.empty()) {
      ++passed_;
      std::printf("PASS  %s\n", name.c_str());
    } else {
      ++failed_;
      std::printf("FAIL  %s: %s\n", name.c_str(), why.c_str());
    }
  }
  // A kernel contract Cuda does not implement: neither passed nor failed, named in the summary.
  void not_implemented(const std::string& contract) { missing_ += (missing_.empty() ? "" : ", ") + contract; }
  int finish() const {
    std::printf("%d checks passed, %d failed\n", passed_, failed_);
    if (!missing_.empty()) std::printf("kernel contracts not implemented by Cuda (not run): %s\n", missing_.c_str());
    return failed_ ? 1 : 0;
  }

 private:
  int passed_ = 0, failed_ = 0;
  std::string missing_;
};

template <class T>
void run_cases(Report& report) {
  constexpr bool is_double = std::is_same_v<T, double>;
  const double rtol = testing::kBackendTolerance.rtol<T>();
  const auto cases = all_cases<T, Cuda>();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    report.run(std::string(cases[i].name) + (is_double ? " [double]" : " [float]"), [&]() -> std::string {
      Harness<T, Cuda> first(case_seed(i));
      const Outputs got = cases[i].run(first);
      std::string why = testing::compare_outputs(got, cpu_reference(i, is_double), cases[i].exact ? 0.0 : rtol);
      if (!why.empty()) return "differs from the CPU backend: " + why;
      Harness<T, Cuda> second(case_seed(i));
      why = testing::compare_outputs(cases[i].run(second), got, 0.0);
      return why.empty() ? why : "not reproducible run to run: " + why;
    });
  }
}

// --- kernel contracts: the registry's cases, Cuda against its reference and against the CPU -----

// Prints one line per contract Cuda does not implement yet ("<Name>: not implemented by Cuda") and,
// given a report, records each so that the summary names it: never counted as passed.
void report_kernel_coverage(Report* report) {
  testing::for_each_kernel(kernels::AllKernels{}, [&]<template <class> class Kernel>(std::size_t contract) {
    if constexpr (!kernels::Implemented<Kernel<Cuda>>) {
      const std::string name(kernels::kKernelNames[contract]);
      std::printf("%s: not implemented by Cuda (%zu CPU cases not compared)\n", name.c_str(),
                  cpu_kernel_case_count(contract));
      if (report) report->not_implemented(name);
    }
  });
}

// Every case of every contract Cuda implements: the table must match the CPU translation unit's,
// then check_kernel_case runs (a) fused vs reference on Cuda and (c) Cuda vs the CPU. The case
// code is instantiated for Cuda only inside `if constexpr`: an unimplemented contract's would not
// compile.
void run_kernel_cases(Report& report) {
  testing::for_each_kernel(kernels::AllKernels{}, [&]<template <class> class Kernel>(std::size_t contract) {
    if constexpr (kernels::Implemented<Kernel<Cuda>>) {
      const auto cases = testing::KernelCases<Kernel>::template cases<float, Cuda>();
      const std::string name(kernels::kKernelNames[contract]);
      report.run(name + ": the CPU and CUDA translation units see the same case table", [&]() -> std::string {
        if (cases.size() != cpu_kernel_case_count(contract)) return "case counts differ: rebuild both translation units";
        for (std::size_t i = 0; i < cases.size(); ++i)
          if (cpu_kernel_case_name(contract, i) != cases[i].name) return "case " + std::to_string(i) + " is named differently";
        return "";
      });
      for (std::size_t i = 0; i < cases.size(); ++i) {
        const testing::KernelChecks checks{
            .reference = true,
            .other_backend = [contract, i](bool use_double) { return cpu_kernel_outputs(contract, i, use_double); },
            .other_name = "CPU"};
        for (const testing::KernelCheckResult& r : testing::check_kernel_case<Kernel, Cuda>(i, checks))
          report.record(r.what, r.failure);
      }
    }
  });
}

// --- whole models on the GPU ---------------------------------------------------------------------

// The one-block model's training step (model_step.hpp) on Cuda against the CPU backend: loss and
// every parameter gradient within kBackendTolerance, and bitwise the same on a second run.
template <class T>
std::string check_model_step(std::size_t pattern) {
  const Outputs got = model_step_outputs<T, Cuda>(pattern);
  std::string why = testing::compare_outputs(got, cpu_model_step(pattern, std::is_same_v<T, double>),
                                             testing::kBackendTolerance.rtol<T>());
  if (!why.empty()) return "differs from the CPU backend: " + why;
  why = testing::compare_outputs(model_step_outputs<T, Cuda>(pattern), got, 0.0);
  return why.empty() ? why : "not reproducible run to run: " + why;
}

// The same under bf16 products, to 1e-2 of each output's scale: one bf16 step (2^-8) where the two
// backends' fp32 sums round either side of a boundary; a wrong product is off by its whole size.
std::string check_model_step_bf16(std::size_t pattern) {
  const Outputs got = model_step_outputs<float, Cuda>(pattern, true);
  std::string why = testing::compare_outputs(got, cpu_model_step_bf16(pattern), 1e-2);
  if (!why.empty()) return "differs from the CPU backend: " + why;
  why = testing::compare_outputs(model_step_outputs<float, Cuda>(pattern, true), got, 0.0);
  return why.empty() ? why : "not reproducible run to run: " + why;
}

// The document-masking invariants (nn/model/masking_check.hpp) of the one-block model on the GPU:
// isolation and the zero cross-document gradient bitwise, packed vs alone within packed_tolerance
// (1e-5: cuBLAS may pick another algorithm for another row count); the same model blind to the
// documents must fail, so the check sees the block mixing positions (not for "E": MoE is per token).
template <FixedString P>
std::string check_model_masking(double packed_tolerance = 1e-5) {
  using Model = typename StepModel<float, Cuda, P>::type;
  Model model(11);
  testing::randomise_matrices(model, 12);
  const testing::MaskingBatch data(static_cast<std::int32_t>(Model::dims.vocab));
  MaskingCheckOptions opt;
  opt.bos_id = testing::MaskingBatch::bos;
  opt.vocab = static_cast<std::int32_t>(Model::dims.vocab);
  opt.packed_tolerance = packed_tolerance;
  const MaskingCheckResult r = check_document_masking(model, data.ids, data.targets, testing::MaskingBatch::batch, testing::MaskingBatch::seq, opt);
  if (!r.ok) return r.violation;
  if (r.documents_checked != static_cast<std::size_t>(testing::MaskingBatch::documents))
    return "checked " + std::to_string(r.documents_checked) + " documents, the batch holds 8";
  if constexpr (P.size() == 1 && P[0] == 'E') return "";
  const testing::DocumentBlind<Model> blind{model};
  if (check_document_masking(blind, data.ids, data.targets, testing::MaskingBatch::batch, testing::MaskingBatch::seq, opt).ok)
    return "the document-blind model passed: the check cannot see a leak through this block";
  return "";
}

void run_model_checks(Report& report) {
  for (std::size_t i = 0; i < model_step_patterns().size(); ++i) {
    const std::string name = "one-block \"" + model_step_patterns()[i] + "\" model";
    report.run(name + " train step [float] cuda vs CPU", [i] { return check_model_step<float>(i); });
    report.run(name + " train step [double] cuda vs CPU", [i] { return check_model_step<double>(i); });
    if (i == kMoEPattern)  // the experts' grouped products on bf16 operands (GemmEx) in a whole step
      report.run(name + " train step [float, bf16 products] cuda vs CPU", [i] { return check_model_step_bf16(i); });
    with_model_step_pattern(i, [&]<FixedString P>() {
      report.run(name + " document masking on the GPU", [] { return check_model_masking<P>(); });
    });
  }
  report.run("tiny \"AAM\" model on the GPU: trains, checkpoints (read back bitwise, and by the CPU) and generates",
             check_tiny_model_lifecycle);
  report.run("tiny \"AAM\" model with MTP on the GPU: host-made inputs give the device tensors' losses, one wait per step",
             check_tiny_mtp_step);
}

// --- bf16 tensor-core attention on request --------------------------------------------------------

void run_bf16_attention_checks(Report& report) {
  const std::vector<attention_bf16_test::Problem> problems = attention_bf16_test::problems();
  for (std::size_t i = 0; i < problems.size(); ++i)
    report.run("bf16 attention (CudaBf16Attention) vs double reference: " + problems[i].name,
               [&] { return attention_bf16_test::check_problem(problems[i], 500 + i); });
  report.run("bf16 attention: fp32 back bit for bit after the scope; double and head_dim 160 stay fp32",
             attention_bf16_test::check_scope_restores_fp32);
  report.run("bf16 attention asked for by the op (AttentionParams::products, Bf16Mixed), backward after the scope",
             attention_bf16_test::check_products_follow_the_op);
  // Packed vs alone within 2e-2: should cuBLAS round a q, k or v element of the lone document one
  // ulp differently, its bf16 rounding may flip (2^-8 of it) and move the outputs by ~1e-3.
  // Isolation and the zero cross-document gradient stay bitwise.
  report.run("one-block \"A\" model document masking under CudaBf16Attention", [] {
    const CudaBf16Attention on(true);
    return check_model_masking<"A">(2e-2);
  });
}

// --- conversions and fill, bit for bit against the host ----------------------------------------
template <class... Ts>
struct Types {};
using StorageTypes = Types<float, double, bf16, f16, std::int32_t, std::uint8_t>;

template <class From, class To>
std::string check_convert() {
  // In [0, 250] so that every conversion, including to uint8, is defined; includes
  // round-to-nearest-even ties for bf16 (1 + 2^-8, 1 + 3 * 2^-8) and f16 (1 + 2^-11) and
  // values no 16-bit type holds exactly.
  // 12 elements take the kernel that converts 4 per thread (cuda::convert_vector_kernel), 14 the
  // one-per-thread kernel.
  const double values[] = {0, 0.1, 0.5, 1, 1.00390625, 1.01171875, 1.00048828125, 2.5, 3.3, 7.75, 100.2, 127, 200.7, 250};
  for (const std::size_t count : {std::size_t{12}, std::size_t{14}}) {
    std::vector<From> src;
    for (std::size_t i = 0; i < count; ++i) src.push_back(convert_element<From>(values[i]));
    const auto device = CudaTensor<From>::from_host(Shape{static_cast<index_t>(src.size())}, src);
    const std::vector<To> got = device.template to<To>().to_host();
    for (std::size_t i = 0; i < src.size(); ++i) {
      const To want = convert_element<To>(src[i]);
      if (std::memcmp(&got[i], &want, sizeof(To)) != 0)
        return "element " + std::to_string(i) + " of " + std::to_string(count) + " (" + std::to_string(values[i]) +
               ") converts differently from the host";
    }
  }
  return "";
}

template <class From, class... Tos>
void check_converts_from(Report& report, Types<Tos...>) {
  (report.run("convert " + std::string(dtype_name<From>()) + " -> " + std::string(dtype_name<Tos>()), check_convert<From, Tos>),
   ...);
}
template <class... Froms>
void check_all_converts(Report& report, Types<Froms...>) {
  (check_converts_from<Froms>(report, StorageTypes{}), ...);
}

// 70000 elements take a packet per thread (a memset for zero bytes), 70001 and the fill from an
// unaligned pointer one element per thread; the element before that fill keeps its value.
template <class T>
std::string check_fill(T value) {
  for (const index_t count : {index_t{70000}, index_t{70001}}) {
    const std::vector<T> got = CudaTensor<T>::full(Shape{count}, value).to_host();
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &value, sizeof(T)) != 0)
        return "element " + std::to_string(i) + " of " + std::to_string(count) + " differs";
  }
  const T before = convert_element<T>(3.0);
  CudaTensor<T> shifted = CudaTensor<T>::full(Shape{1001}, before);
  Cuda::fill(shifted.data() + 1, 1000, value);
  const std::vector<T> got = shifted.to_host();
  if (std::memcmp(&got[0], &before, sizeof(T)) != 0) return "the element before an unaligned fill changed";
  for (std::size_t i = 1; i < got.size(); ++i)
    if (std::memcmp(&got[i], &value, sizeof(T)) != 0) return "element " + std::to_string(i) + " of the unaligned fill differs";
  return "";
}

// --- memory accounting and errors ----------------------------------------------------------------
std::string check_memory_stats() {
  const MemoryStats before = Cuda::memory_stats();
  {
    const CudaTensor<float> t(Shape{1000});  // 4000 bytes: one 4096-byte block in 256-byte units
    const MemoryStats during = Cuda::memory_stats();
    if (during.current_bytes != before.current_bytes + 4096)
      return "current grew by " + std::to_string(during.current_bytes - before.current_bytes) + " bytes, expected 4096";
    if (during.peak_bytes < during.current_bytes) return "peak below current";
  }
  const MemoryStats after = Cuda::memory_stats();
  if (after.current_bytes != before.current_bytes) return "freeing did not return current to its earlier value";
  Cuda::reset_peak_memory();
  if (Cuda::memory_stats().peak_bytes != after.current_bytes) return "reset_peak_memory did not reset the peak";
  return "";
}

std::string check_allocation_failure() {
  try {
    Cuda::allocate<float>(std::size_t{1} << 60);
    return "allocating 4 EiB did not throw";
  } catch (const Error& e) {
    if (e.op() != "cuda" || std::string(e.what()).find("cudaMalloc") == std::string::npos)
      return std::string("unexpected message: ") + e.what();
  }
  // The failure must not linger as a "last error" that the next launch check would report.
  if (CudaTensor<float>::full(Shape{3}, 2.0f).to_host() != std::vector<float>{2, 2, 2})
    return "the device is unusable after the failed allocation";
  return "";
}

// Uploads past what launches' parameters carry (63,488 bytes), up to kMaxStagedCopy, go through
// reused pinned blocks (memory.cuh, pinned_staging.cuh): no host wait, the bytes the caller had at
// the call even when it overwrites them at once, ordered after a kernel queued before that still
// reads the old values, and no new pinned memory once a loop's sizes have their blocks. Uploads
// queued behind ~7 ms of kernels (their blocks still in flight when the next upload comes) each
// land their own values: no block is reused before its copy has run. A larger upload waits once
// (a pageable cudaMemcpy).
std::string check_staged_uploads() {
  constexpr std::size_t n = 40000;  // 160,000 bytes of float
  const auto values = [](float salt) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) * 0.25f + salt;
    return v;
  };
  const auto count = static_cast<index_t>(n);
  CudaTensor<float> x(Shape{count}), y(Shape{count}), z(Shape{count});
  const std::vector<float> first = values(1), second = values(2), third = values(3);
  Cuda::copy_from_host(x.data(), first.data(), n);
  Cuda::synchronize();
  std::vector<float> reused = second;
  const std::uint64_t waits = Cuda::host_waits_during([&] {
    Cuda::map<float>(1, count, fn::Scale{2.0}, y.data(), In<float>{x.data()});  // reads the first values
    Cuda::copy_from_host(x.data(), reused.data(), n);
    reused.assign(n, -1.0f);  // the caller reuses its buffer at once
    Cuda::copy_from_host(z.data(), third.data(), n);
  });
  if (waits != 0) return "two staged uploads made the host wait " + std::to_string(waits) + " times";
  std::vector<float> doubled(first);
  for (float& v : doubled) v *= 2;
  if (y.to_host() != doubled) return "a kernel queued before the upload read the new values";
  if (x.to_host() != second) return "the staged upload did not land the values the caller had at the call";
  if (z.to_host() != third) return "the second staged upload's values differ";
  std::size_t pinned = 0;
  for (int step = 0; step < 5; ++step) {
    Cuda::copy_from_host(x.data(), third.data(), n);
    Cuda::copy_from_host(z.data(), first.data(), n);
    if (x.to_host() != third || z.to_host() != first) return "step " + std::to_string(step) + "'s uploads differ";
    if (step == 0) pinned = Cuda::pinned_staging_bytes();
  }
  if (Cuda::pinned_staging_bytes() != pinned)
    return "pinned staging grew from " + std::to_string(pinned) + " to " + std::to_string(Cuda::pinned_staging_bytes()) +
           " bytes over steps of the same uploads";
  {
    constexpr index_t kBusy = index_t{1} << 26;  // 256 MiB: 40 passes keep the GPU busy for milliseconds
    CudaTensor<float> busy = CudaTensor<float>::full(Shape{kBusy}, 1.0f);
    std::vector<CudaTensor<float>> targets;
    for (int i = 0; i < 4; ++i) targets.emplace_back(Shape{count});
    const std::uint64_t busy_waits = Cuda::host_waits_during([&] {
      for (int pass = 0; pass < 40; ++pass) Cuda::map<float>(1, kBusy, fn::Scale{1.0}, busy.data(), In<float>{busy.data()});
      for (int i = 0; i < 4; ++i) {
        const std::vector<float> v = values(static_cast<float>(10 + i));  // gone when the call returns
        Cuda::copy_from_host(targets[static_cast<std::size_t>(i)].data(), v.data(), n);
      }
    });
    if (busy_waits != 0) return "uploads behind busy kernels made the host wait " + std::to_string(busy_waits) + " times";
    for (int i = 0; i < 4; ++i)
      if (targets[static_cast<std::size_t>(i)].to_host() != values(static_cast<float>(10 + i)))
        return "upload " + std::to_string(i) + " behind busy kernels did not land its own values";
  }
  const std::size_t large = cuda::kMaxStagedCopy / sizeof(float) + 1;
  std::vector<float> big(large);
  for (std::size_t i = 0; i < large; ++i) big[i] = static_cast<float>(i % 4096);
  CudaTensor<float> w(Shape{static_cast<index_t>(large)});
  const std::uint64_t large_waits = Cuda::host_waits_during([&] { Cuda::copy_from_host(w.data(), big.data(), large); });
  if (large_waits != 1) return "an upload above kMaxStagedCopy waited " + std::to_string(large_waits) + " times, expected 1";
  if (w.to_host() != big) return "the upload above kMaxStagedCopy differs";
  std::printf("      pinned staging: %zu bytes for two 160,000-byte uploads per step\n", pinned);
  return "";
}

// The library's finite-difference gradcheck, run with the CUDA backend end to end.
std::string check_gradcheck_on_device() {
  using V = Var<double, Cuda>;
  Rng rng(7);
  std::vector<V> inputs{V::parameter(randn<double, Cuda>(Shape{3, 4}, rng)), V::parameter(randn<double, Cuda>(Shape{4, 5}, rng))};
  const GradcheckResult result =
      gradcheck<Cuda>([](const std::vector<V>& in) { return softmax(rmsnorm(matmul(in[0], in[1]))); }, inputs);
  return result.ok ? "" : result.report;
}

void print_device() {
  cudaDeviceProp prop{};
  int runtime = 0, driver = 0;
  MEGACPP_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  MEGACPP_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  MEGACPP_CUDA_CHECK(cudaDriverGetVersion(&driver));
  std::printf("device: %s (sm_%d%d, %d SMs), CUDA runtime %d, driver %d\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, runtime, driver);
}

}  // namespace
}  // namespace megacpp::backend_test

int main() {
  using namespace megacpp;
  using namespace megacpp::backend_test;
  if (!Cuda::device_available()) {
    report_kernel_coverage(nullptr);
    std::puts("no CUDA device: CUDA backend tests skipped");
    return 0;
  }
  Report report;
  try {
    print_device();
  } catch (const std::exception& e) {
    std::printf("FAIL  device query: %s\n", e.what());
    return 1;
  }
  report.run("the CPU and CUDA translation units see the same case list", []() -> std::string {
    const auto cases = all_cases<float, Cuda>();
    if (cases.size() != cpu_case_count()) return "case counts differ: rebuild both translation units";
    for (std::size_t i = 0; i < cases.size(); ++i)
      if (cpu_case_name(i) != cases[i].name) return "case " + std::to_string(i) + " is named differently";
    return "";
  });
  run_cases<float>(report);
  run_cases<double>(report);
  report_kernel_coverage(&report);
  run_kernel_cases(report);
  run_model_checks(report);
  check_all_converts(report, StorageTypes{});
  report.run("fill float 0 (a memset), -0 and 2.5", [] {
    for (const float v : {0.0f, -0.0f, 2.5f})
      if (std::string why = check_fill(v); !why.empty()) return std::to_string(v) + ": " + why;
    return std::string{};
  });
  report.run("fill double 0 and -1.25", [] {
    for (const double v : {0.0, -1.25})
      if (std::string why = check_fill(v); !why.empty()) return std::to_string(v) + ": " + why;
    return std::string{};
  });
  report.run("fill bf16", [] { return check_fill(bf16(1.5f)); });
  report.run("fill f16", [] { return check_fill(f16(-0.333f)); });
  report.run("fill int32", [] { return check_fill(std::int32_t{-7}); });
  report.run("fill uint8", [] { return check_fill(std::uint8_t{200}); });
  report.run("gradcheck of softmax(rmsnorm(matmul)) on the device", check_gradcheck_on_device);
  report.run("memory_stats counts 256-byte blocks; reset_peak_memory", check_memory_stats);
  report.run("a failed cudaMalloc throws megacpp::Error and leaves the device usable", check_allocation_failure);
  report.run("uploads past the launches' parameters go through pinned blocks without a wait", check_staged_uploads);
  report.run("TF32 products on request (CudaTf32Products), fp32 again after", check_tf32_products);
  report.run("GroupedGemm on bf16 operands in one launch per product on request", check_one_launch_grouped_products);
  run_bf16_attention_checks(report);
  report.run("synchronize", []() -> std::string {
    Cuda::synchronize();
    return "";
  });
  return report.finish();
}
