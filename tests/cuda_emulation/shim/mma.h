// tests/cuda_emulation/shim/mma.h: nvcuda::wmma for bf16 m16n16k16 with float accumulators, per
// the CUDA C++ Programming Guide, "Warp Matrix Functions".
//
// A fragment holds 256 elements spread over the warp, 8 per lane, by a fixed mapping (CUDA leaves
// the mapping unspecified; Options::fragment_mapping picks one of two scrambled ones, so a kernel
// that depended on it would give different bits under each). Rules checked, each a real GPU
// failure mode: mptr 256-bit (32-byte) aligned; ldm a multiple of 16 bytes (8 bf16, 4 floats);
// mptr, ldm, layout and the template arguments the same in every lane of the warp; every lane
// takes part; WMMA accesses to dynamic shared memory within the bytes the launch requested.
//
// load_matrix_sync and store_matrix_sync move each lane's own elements when that lane calls them
// and do not wait for the others (the guide's "waits until all warp lanes have arrived" orders
// the instruction, not the other lanes' memory accesses: that takes __syncwarp). So a lane that
// reads what another lane stored, or loads what another lane wrote, without a __syncwarp between
// sees stale bytes here, as it may on the GPU. mma_sync waits for every lane: it needs all their
// fragments. The product: each element of A B is summed over k in float from exact products (bf16
// x bf16 is exact in float), in k order, onto C. The hardware's summation order and internal
// precision are unspecified, so results agree with a GPU to fp32 rounding, not bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda_bf16.h"
#include "emulator/device.hpp"
#include "emulator/options.hpp"

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "emulated WMMA: m16n16k16 only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float> : std::is_same_v<T, __nv_bfloat16>,
                "emulated WMMA: bf16 operands, float accumulators");

 public:
  using element_type = T;
  static constexpr int num_elements = 8;  // 16 x 16 over 32 lanes
  T x[num_elements];
};

namespace emulation {
namespace emu = ::megacpp::cuda_emulation;
template <class Use>
inline constexpr unsigned kUse = std::is_same_v<Use, matrix_a> ? 0 : std::is_same_v<Use, matrix_b> ? 1 : 2;

// Element e of lane `lane`'s fragment is element (index / 16, index % 16) of the 16 x 16 matrix:
// an odd multiplier mod 256 is a bijection, different per use and per Options::fragment_mapping.
inline unsigned element(unsigned use, unsigned lane, unsigned e) {
  static constexpr unsigned kMultiplier[2][3] = {{37, 77, 113}, {201, 9, 131}};
  const unsigned variant = emu::options().fragment_mapping % 2;
  return ((lane * 8 + e) * kMultiplier[variant][use] + 11 * use) % 256;
}

// Offset of element (r, c) at leading dimension ldm.
inline std::size_t offset(unsigned r, unsigned c, unsigned ldm, bool row_major_layout) {
  return row_major_layout ? std::size_t{r} * ldm + c : r + std::size_t{c} * ldm;
}

inline void check_access(const char* op, const void* p, unsigned ldm, std::size_t element_bytes, const char* file,
                         unsigned line) {
  const std::string where = std::string(op) + " (" + file + ":" + std::to_string(line) + ")";
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0)
    emu::device_fail(where + ": mptr " + std::to_string(reinterpret_cast<std::uintptr_t>(p)) +
                     " is not 256-bit (32-byte) aligned");
  if (ldm * element_bytes % 16 != 0)
    emu::device_fail(where + ": ldm " + std::to_string(ldm) + " is not a multiple of " + std::to_string(16 / element_bytes) +
                     " elements (16 bytes)");
  // The footprint, row or column major alike: 15 strides plus 16 elements.
  if (!emu::within_requested_shared(p, (15 * std::size_t{ldm} + 16) * element_bytes))
    emu::device_fail(where + ": the 16 x 16 tile at ldm " + std::to_string(ldm) +
                     " runs past the dynamic shared memory the launch requested");
}

template <class LayoutA, class LayoutB>
void mma(const emu::LaneOperands (&lanes)[emu::kWarpSize]) {
  using A = fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>;
  using B = fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>;
  using C = fragment<accumulator, 16, 16, 16, float>;
  float a[256], b[256], c[256];
  for (unsigned l = 0; l < emu::kWarpSize; ++l)
    for (unsigned e = 0; e < 8; ++e) {
      a[element(0, l, e)] = __bfloat162float(static_cast<const A*>(lanes[l][1])->x[e]);
      b[element(1, l, e)] = __bfloat162float(static_cast<const B*>(lanes[l][2])->x[e]);
      c[element(2, l, e)] = static_cast<const C*>(lanes[l][3])->x[e];
    }
  float d[256];
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j) {
      float sum = c[i * 16 + j];
      for (unsigned k = 0; k < 16; ++k) sum += a[i * 16 + k] * b[k * 16 + j];
      d[i * 16 + j] = sum;
    }
  for (unsigned l = 0; l < emu::kWarpSize; ++l)
    for (unsigned e = 0; e < 8; ++e) static_cast<C*>(lanes[l][0])->x[e] = d[element(2, l, e)];
}
}  // namespace emulation

namespace emulation {
// One lane's part of a load_matrix_sync: the injected faults (Options), the rules, the warp's
// sequence of collectives (`op` with ldm and the layout as its per-warp arguments), then this
// lane's 8 elements of the fragment of kind `use`.
template <class T>
void load_lane(T (&x)[8], const T* mptr, unsigned ldm, unsigned use, bool row_major_layout, const char* op,
               const char* file, unsigned line) {
  const auto& o = emu::options();
  mptr = reinterpret_cast<const T*>(reinterpret_cast<const char*>(mptr) + o.wmma_pointer_shift);  // fault
  ldm += o.wmma_ldm_shift;                                                                       // fault
  check_access("wmma::load_matrix_sync", mptr, ldm, sizeof(T), file, line);
  emu::warp_collective({op, mptr, ldm * 2u + (row_major_layout ? 0u : 1u), file, line});
  const unsigned lane = emu::lane_index();
  for (unsigned e = 0; e < 8; ++e) {
    const unsigned i = element(use, lane, e);
    x[e] = mptr[offset(i / 16, i % 16, ldm, row_major_layout)];
  }
}
}  // namespace emulation

// matrix_a / matrix_b from bf16 memory; the fragment's layout says how mptr is read.
template <class Use, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& a, const __nv_bfloat16* mptr, unsigned ldm,
                      const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  emulation::load_lane(a.x, mptr, ldm, emulation::kUse<Use>, std::is_same_v<Layout, row_major>, __PRETTY_FUNCTION__, file,
                       line);
}

// An accumulator from float memory, row or column major.
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& a, const float* mptr, unsigned ldm, layout_t layout,
                             const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  emulation::load_lane(a.x, mptr, ldm, 2, layout == mem_row_major, "wmma::load_matrix_sync(accumulator)", file, line);
}

inline void store_matrix_sync(float* mptr, const fragment<accumulator, 16, 16, 16, float>& a, unsigned ldm, layout_t layout,
                              const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  namespace em = emulation;
  em::check_access("wmma::store_matrix_sync", mptr, ldm, sizeof(float), file, line);
  em::emu::warp_collective({"wmma::store_matrix_sync", mptr, ldm * 2 + layout, file, line});
  const unsigned lane = em::emu::lane_index();
  for (unsigned e = 0; e < 8; ++e) {
    const unsigned i = em::element(2, lane, e);
    mptr[em::offset(i / 16, i % 16, ldm, layout == mem_row_major)] = a.x[e];
  }
}

// Every element the same value: no lane needs another's, so no collective (the guide: "ordinarily
// called by all threads in the warp with a common value").
template <class Use, class T, class Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& a, const std::type_identity_t<T>& v) {
  for (T& e : a.x) e = v;
}

// d = a b + c, every lane of the warp at once.
template <class LayoutA, class LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c, bool satf = false, const char* file = __builtin_FILE(),
              unsigned line = __builtin_LINE()) {
  namespace em = emulation;
  if (satf) em::emu::device_fail("wmma::mma_sync: satf is not emulated");
  em::emu::warp_rendezvous({__PRETTY_FUNCTION__, nullptr, 0, file, line},
                           {&d, const_cast<void*>(static_cast<const void*>(&a)), const_cast<void*>(static_cast<const void*>(&b)),
                            const_cast<void*>(static_cast<const void*>(&c))},
                           &em::mma<LayoutA, LayoutB>);
}

}  // namespace nvcuda::wmma
