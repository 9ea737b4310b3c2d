// tests/cuda_emulation/elementwise_emulated.hpp: the CUDA backend's elementwise launches (maps,
// maps rounded to bf16, in-place updates, broadcasts, strided copies, transposes, conversions, fills:
// detail/elementwise.cuh) and its host-to-device copy (detail/memory.cuh, inline_upload.cuh) run on
// the emulator, with host pointers as device memory. Each mirrors the function of the same name in
// detail/elementwise_launch.cuh or memory.cuh, launched as it launches. Instantiated
// for float and double (elementwise_emulated.cpp) with the functors test_elementwise.cpp uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/optim/functors.hpp"

namespace megacpp::cuda_emulation {

/// The launches, spelled as the backends' calls (Cpu::map, Cuda::map, ...), so a test runs the same
/// code on the CPU backend and here.
struct EmulatedElementwise {
  template <class T, class F, class... Ins>
  static void map(index_t rows, index_t cols, F f, T* out, Ins... ins);
  template <class T, class F, class... Ins>
  static void map_to_bf16(index_t n, F f, bf16* out, const Ins*... ins);
  template <class T, class F>
  static void update_in_place(index_t n, F f, T* a, T* b, T* c, const T* x, bf16* a_rounded = nullptr);
  template <class T, class F>
  static void update_in_place(index_t n, F f, T* a, const T* x, bf16* a_rounded = nullptr);
  template <class T>
  static void expand(index_t outer, index_t n, index_t inner, T scale, const T* src, T beta, T* dst);
  template <class T>
  static void copy_2d(index_t rows, index_t cols, const T* src, index_t src_ld, T beta, T* dst, index_t dst_ld);
  template <class T>
  static void transpose(index_t outer, index_t d0, index_t mid, index_t d1, index_t inner, const T* src, T beta, T* dst);
  template <class From, class To>
  static void convert(std::size_t n, const From* src, To* dst);
  template <class T>
  static void fill(T* dst, std::size_t n, T value);
  static std::pair<std::int32_t, std::int32_t> minmax_index(index_t n, const std::int32_t* idx);
  template <class T>
  static void copy_from_host(T* dst, const T* src, std::size_t n);
  static std::size_t inline_upload_bytes();  ///< cuda::kInlineUploadBytes: one launch's payload
  static std::size_t inline_upload_limit();  ///< the most bytes copy_from_host sends through launches
};

}  // namespace megacpp::cuda_emulation
