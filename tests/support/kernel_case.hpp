// Shared test helper: what a kernel test case is, and check_kernel_case, the one helper that runs
// a case every way it can be checked:
//   (a) reference: the fused op against its naive reference on one backend, in float and double;
//   (b) gradcheck: the fused op's backward against central differences, in double;
//   (c) backend:   the fused op on one backend against another backend's results for the same
//                  inputs (ggml's test-backend-ops: backend against backend).
// The cases themselves, one table per kernel contract, are in tests/support/kernel_cases/; the
// compile-time check that every contract has a table is in tests/support/kernel_cases.hpp.
//
// Includes no backend and no test framework: the CPU test (tests/kernels, Catch2) and the CUDA
// test (tests/cuda, nvcc, plain main) run the same cases through the same helper.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "support/backend_harness.hpp"

#include "megacpp/autograd.hpp"
#include "megacpp/core/kernels/registry.hpp"

namespace megacpp::testing {

// One kernel test problem on backend B in T: the differentiable inputs (drawn from the case's
// seed), the fused op under test, and its reference computed the independent way.
template <class T, Backend B>
struct KernelProblem {
  using V = Var<T, B>;
  using Op = std::function<V(const std::vector<V>&)>;
  // (same inputs, the harness that drew them) -> the forward value, then the gradient of each
  // input for the upstream gradient the harness draws next; or the forward value alone when the
  // reference has no backward (the fused op's gradients are then checked by gradcheck only).
  using Reference = std::function<Outputs(const std::vector<V>&, Harness<T, B>&)>;

  std::vector<V> inputs;  // the inputs gradients are taken for, in the order of the outputs
  Op fused;               // the op that reaches the kernel contract under test
  Reference reference;    // the naive reference
};

// One case of a kernel contract's table (KernelCases<Contract>::cases<T, B>()).
template <class T, Backend B>
struct KernelCase {
  const char* name;                           // what the case covers (documents, GQA, ...)
  KernelProblem<T, B> (*make)(Harness<T, B>&);  // draws the inputs and builds the problem
  Tolerance tolerance;                        // fused against the reference (check (a))
  bool gradcheck = false;  // (b) applies: small enough for finite differences, smooth in its inputs
};

// The case table of a kernel contract: a specialisation per contract in tests/support/kernel_cases/,
// each with `specialised = true`, the name of its reference and
//   template <class T, Backend B> static std::vector<KernelCase<T, B>> cases();
// The primary template is "no cases": kernel_case_tables_cover (kernel_cases.hpp) refuses it.
template <template <class> class Kernel>
struct KernelCases {
  static constexpr bool specialised = false;
};

// A reference written with autograd ops: the gradients come from the same upstream gradient
// through those ops' own backward functions.
template <class T, Backend B>
typename KernelProblem<T, B>::Reference autograd_reference(typename KernelProblem<T, B>::Op f) {
  return [f](const std::vector<Var<T, B>>& inputs, Harness<T, B>& h) { return h.finish(f(inputs), inputs); };
}

// A forward-only reference (no backward exists): compared on the forward value alone.
template <class T, Backend B>
typename KernelProblem<T, B>::Reference forward_reference(typename KernelProblem<T, B>::Op f) {
  return [f](const std::vector<Var<T, B>>& inputs, Harness<T, B>&) {
    NoGrad no_grad;
    return Outputs{Harness<T, B>::doubles(f(inputs).value())};
  };
}

// --- the registry: contracts by index and name ----------------------------------------------------

namespace detail {
template <template <class> class A, template <class> class C>
struct same_contract : std::false_type {};
template <template <class> class A>
struct same_contract<A, A> : std::true_type {};

// Position of Kernel in the list, or the list's size when it is not there.
template <template <class> class Kernel, template <class> class... Ks>
constexpr std::size_t index_in(kernels::KernelList<Ks...>) {
  constexpr std::array<bool, sizeof...(Ks)> matches{same_contract<Kernel, Ks>::value...};
  for (std::size_t i = 0; i < matches.size(); ++i)
    if (matches[i]) return i;
  return matches.size();
}
}  // namespace detail

// Position of a contract in kernels::AllKernels (and kKernelNames).
template <template <class> class Kernel>
constexpr std::size_t kernel_index() {
  constexpr std::size_t index = detail::index_in<Kernel>(kernels::AllKernels{});
  static_assert(index < kernels::AllKernels::size,
                "megacpp_kernel_not_in_registry: this contract is not listed in kernels::AllKernels "
                "(megacpp/core/kernels/registry.hpp): add it there with its name in kKernelNames");
  return index;
}

// The contract's name as kKernelNames spells it ("FusedAttention", ...).
template <template <class> class Kernel>
std::string kernel_name() {
  return std::string(kernels::kKernelNames[kernel_index<Kernel>()]);
}

// Calls visit.template operator()<Kernel>(index) for every contract of the list, in order.
template <template <class> class... Ks, class Visit>
void for_each_kernel(kernels::KernelList<Ks...>, Visit&& visit) {
  std::size_t index = 0;
  (visit.template operator()<Ks>(index++), ...);
}

// The seed of case `index` of a contract's table: the same in every translation unit and on every
// backend, so they all draw the same inputs.
template <template <class> class Kernel>
std::uint64_t kernel_case_seed(std::size_t index) {
  return 7000 + 100 * kernel_index<Kernel>() + index;
}

// --- running a case --------------------------------------------------------------------------------

// The fused op's results: the forward value, then each input's gradient for the upstream gradient
// drawn after the inputs; the forward value alone for a forward-only kernel (DecodeAttention: its
// result carries no gradient).
template <class T, Backend B>
Outputs run_fused(const KernelCase<T, B>& c, std::uint64_t seed) {
  Harness<T, B> h(seed);
  const KernelProblem<T, B> p = c.make(h);
  Var<T, B> y = p.fused(p.inputs);
  if (!y.requires_grad()) return Outputs{Harness<T, B>::doubles(y.value())};
  return h.finish(std::move(y), p.inputs);
}

// The reference's results for the same inputs and upstream gradient (its forward value alone when
// it has no backward).
template <class T, Backend B>
Outputs run_reference(const KernelCase<T, B>& c, std::uint64_t seed) {
  Harness<T, B> h(seed);
  const KernelProblem<T, B> p = c.make(h);
  return p.reference(p.inputs, h);
}

// (a) "" when the fused op matches its reference within the case's tolerance for T.
template <class T, Backend B>
std::string compare_with_reference(const KernelCase<T, B>& c, std::uint64_t seed) {
  Outputs got = run_fused(c, seed);
  const Outputs want = run_reference(c, seed);
  if (want.size() == 1) got.resize(1);  // forward-only reference: gradients are gradcheck's
  return compare_outputs(got, want, c.tolerance.template rtol<T>());
}

// (b) The library's gradcheck of the fused op in double (all inputs, every element).
template <Backend B>
GradcheckResult gradcheck_kernel_case(const KernelCase<double, B>& c, std::uint64_t seed) {
  Harness<double, B> h(seed);
  const KernelProblem<double, B> p = c.make(h);
  return gradcheck<B>(p.fused, p.inputs);
}

// (c) "" when the fused op on B matches `other` (another backend's run_fused for the same case and
// seed) within kBackendTolerance, and a second run on B is bitwise the first.
template <class T, Backend B>
std::string compare_with_backend(const KernelCase<T, B>& c, std::uint64_t seed, const Outputs& other) {
  const Outputs got = run_fused(c, seed);
  std::string why = compare_outputs(got, other, kBackendTolerance.rtol<T>());
  if (!why.empty()) return "differs from the other backend: " + why;
  why = compare_outputs(run_fused(c, seed), got, 0.0);
  return why.empty() ? why : "not reproducible run to run: " + why;
}

// Which of the three checks check_kernel_case runs.
struct KernelChecks {
  bool reference = false;  // (a), float and double
  bool gradcheck = false;  // (b), double, on cases that allow it
  // (c) when set: the other backend's run_fused of this case (false: float, true: double).
  std::function<Outputs(bool use_double)> other_backend{};
  std::string other_name = "the other backend";  // named in the check's description
};

// One check's outcome: what was checked, and "" or what went wrong.
struct KernelCheckResult {
  std::string what;
  std::string failure;
};

// Runs case `index` of Kernel's table on backend B the ways `checks` asks for; one result per check
// (an exception is a failure that names it). The caller reports them (CHECK, or PASS/FAIL lines).
template <template <class> class Kernel, Backend B>
std::vector<KernelCheckResult> check_kernel_case(std::size_t index, const KernelChecks& checks) {
  using Table = KernelCases<Kernel>;
  const auto float_cases = Table::template cases<float, B>();
  const auto double_cases = Table::template cases<double, B>();
  const std::uint64_t seed = kernel_case_seed<Kernel>(index);
  const std::string name = kernel_name<Kernel>() + " / " + float_cases.at(index).name;
  std::vector<KernelCheckResult> results;
  auto run = [&](std::string what, auto&& check) {
    std::string failure;
    try {
      failure = check();
    } catch (const std::exception& e) {
      failure = std::string("threw: ") + e.what();
    }
    results.push_back({name + " " + what, failure});
  };
  if (checks.reference) {
    const std::string vs = std::string("fused vs ") + Table::reference;
    run("[float] " + vs, [&] { return compare_with_reference(float_cases.at(index), seed); });
    run("[double] " + vs, [&] { return compare_with_reference(double_cases.at(index), seed); });
  }
  if (checks.gradcheck && double_cases.at(index).gradcheck) {
    run("[double] gradcheck", [&]() -> std::string {
      const GradcheckResult r = gradcheck_kernel_case(double_cases.at(index), seed);
      if (r.checked > 0 && r.ok) return "";
      std::ostringstream os;
      os << r.report << " (checked " << r.checked << " elements, max |diff| " << r.max_abs_error << ")";
      return os.str();
    });
  }
  if (checks.other_backend) {
    run("[float] " + std::string(B::name) + " vs " + checks.other_name,
        [&] { return compare_with_backend(float_cases.at(index), seed, checks.other_backend(false)); });
    run("[double] " + std::string(B::name) + " vs " + checks.other_name,
        [&] { return compare_with_backend(double_cases.at(index), seed, checks.other_backend(true)); });
  }
  return results;
}

}  // namespace megacpp::testing
