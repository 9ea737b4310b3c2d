// tests/cuda_emulation/test_ptx.cpp: the emulated PTX wrappers (shim/.../detail/ptx.cuh) on small
// kernels written here: ldmatrix.x4, plain and .trans, and mma.m16n8k16 put every element where
// the PTX ISA says ("Matrix Fragments for mma.m16n8k16 with floating point type"; "ldmatrix"), and
// each rule the shim enforces, broken on purpose, is an EmulationError (never a hang, never a
// silent pass). The attention tests use these too, but a misplaced element there is one small error
// among many; here it changes an exact result.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "emulator/launch.hpp"
#include "megacpp/core/random.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // the PTX wrappers are backend-internal, as the real header's guard says
#include "megacpp/backends/cuda/detail/ptx.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

using Catch::Matchers::Contains;
namespace emu = megacpp::cuda_emulation;
namespace ptx = megacpp::cuda::ptx;

// Kernels with dynamic shared memory name it as the bf16 attention does (emulator/shared_memory.hpp).
namespace megacpp::cuda::flash::tensor_core {

// bf16 per shared row: 48 bytes, so rows are 16-byte aligned (ldmatrix's rule) but not adjacent,
// and the 8 columns past each 16 keep the NaN fill: a fragment that reads them shows. (Not inline:
// internal linkage, so no clash with a name the device headers may give this namespace.)
constexpr unsigned kPtxTestLd = 24;

// D = C + A B by one warp (16 x 16, row-major in global memory): A [m][k] and B, stored [n][k] or
// (b_kn) [k][n], staged in shared memory, loaded by ldmatrix.x4 as the attention loads them (the
// real detail/ptx.cuh's comment), multiplied as two 16 x 8 n-tiles by mma.m16n8k16.
static void ldmatrix_mma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, bool b_kn, const float* c, float* d) {
  extern __shared__ __align__(128) unsigned char tile_memory[];
  auto* sa = reinterpret_cast<__nv_bfloat16*>(tile_memory);
  __nv_bfloat16* sb = sa + 16 * kPtxTestLd;
  const unsigned l = threadIdx.x % 32;
  for (unsigned i = l; i < 256; i += 32) {
    sa[i / 16 * kPtxTestLd + i % 16] = a[i];
    sb[i / 16 * kPtxTestLd + i % 16] = b[i];
  }
  __syncwarp();  // ldmatrix reads rows other lanes wrote
  // Lanes 8i..8i+7 address matrix i. A: rows 0-7 | 8-15 first, then columns 0-7 | 8-15, so r is
  // a[0..3]. B: k halves first, then n-tiles, so r = {b0, b1 of n-tile 0, b0, b1 of n-tile 1}.
  std::uint32_t fa[4], fb[4];
  ptx::ldmatrix_x4(fa, sa + (l % 8 + 8 * (l / 8 % 2)) * kPtxTestLd + 8 * (l / 16));
  if (b_kn)
    ptx::ldmatrix_x4_trans(fb, sb + (l % 8 + 8 * (l / 8 % 2)) * kPtxTestLd + 8 * (l / 16));  // row k, column n
  else
    ptx::ldmatrix_x4(fb, sb + (l % 8 + 8 * (l / 16)) * kPtxTestLd + 8 * (l / 8 % 2));  // row n, column k
  const unsigned g = l / 4, t = l % 4;
  for (unsigned n = 0; n < 2; ++n) {
    float acc[4];  // C, D: acc[e] = element (g + 8 (e / 2), 2t + e % 2) of n-tile n
    for (unsigned e = 0; e < 4; ++e) acc[e] = c[(g + 8 * (e / 2)) * 16 + 8 * n + 2 * t + e % 2];
    const std::uint32_t fbn[2] = {fb[2 * n], fb[2 * n + 1]};
    ptx::mma_bf16_16x8x16(acc, fa, fbn);
    for (unsigned e = 0; e < 4; ++e) d[(g + 8 * (e / 2)) * 16 + 8 * n + 2 * t + e % 2] = acc[e];
  }
}

// Lane l gives row l % 8 of matrix l / 8 at `base` (the dynamic shared memory if null) + offset + 16 l.
static void ldmatrix_at(const unsigned char* base, unsigned offset) {
  extern __shared__ __align__(128) unsigned char tile_memory[];
  std::uint32_t r[4];
  ptx::ldmatrix_x4(r, (base ? base : tile_memory) + offset + 16 * (threadIdx.x % 32));
}

// Lane `skip` issues nothing; with `mixed`, lanes 16-31 issue the .trans form.
static void ldmatrix_lanes(unsigned skip, bool mixed) {
  extern __shared__ __align__(128) unsigned char tile_memory[];
  const unsigned l = threadIdx.x % 32;
  if (l == skip) return;
  std::uint32_t r[4];
  const unsigned char* row = tile_memory + 16 * l;
  // One line, one call site: only the collective's op string tells the two forms apart.
  mixed && l >= 16 ? ptx::ldmatrix_x4_trans(r, row) : ptx::ldmatrix_x4(r, row);
}

}  // namespace megacpp::cuda::flash::tensor_core

namespace {

using Bf16 = __nv_bfloat16;

void mma_lane_skips(unsigned skip) {
  float d[4] = {};
  const std::uint32_t a[4] = {}, b[2] = {};
  if (threadIdx.x % 32 != skip) ptx::mma_bf16_16x8x16(d, a, b);
}

}  // namespace

TEST_CASE("ldmatrix.x4 (plain and .trans) and mma.m16n8k16 give D = C + A B exactly on small integers", "[emulator]") {
  namespace tc = megacpp::cuda::flash::tensor_core;
  // Integers in [-16, 16]: exact in bf16, every product and sum exact in float, so D must equal
  // the double product exactly, and any misplaced fragment element changes it.
  megacpp::Rng rng(5);
  auto small = [&] { return __float2bfloat16_rn(static_cast<float>(std::floor(rng.uniform(-16.0, 17.0)))); };
  std::vector<Bf16> a(256), b_nk(256), b_kn(256);
  std::vector<float> c(256), want(256);
  for (Bf16& x : a) x = small();
  for (unsigned k = 0; k < 16; ++k)
    for (unsigned n = 0; n < 16; ++n) b_nk[n * 16 + k] = b_kn[k * 16 + n] = small();
  for (float& x : c) x = __bfloat162float(small());
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j) {
      double sum = c[i * 16 + j];
      for (unsigned k = 0; k < 16; ++k)
        sum += static_cast<double>(__bfloat162float(a[i * 16 + k])) * __bfloat162float(b_kn[k * 16 + j]);
      want[i * 16 + j] = static_cast<float>(sum);
    }
  for (const bool transposed : {false, true}) {
    INFO((transposed ? "B stored [k][n], ldmatrix.x4.trans" : "B stored [n][k], ldmatrix.x4"));
    std::vector<float> d(256, std::numeric_limits<float>::quiet_NaN());
    emu::launch(tc::ldmatrix_mma_kernel, {dim3(1), dim3(32), 2 * 16 * tc::kPtxTestLd * sizeof(Bf16)}, a.data(),
                (transposed ? b_kn : b_nk).data(), transposed, c.data(), d.data());
    for (unsigned i = 0; i < 256; ++i) CHECK(d[i] == want[i]);
  }
}

TEST_CASE("broken ldmatrix and mma rules are errors, not hangs", "[emulator]") {
  namespace tc = megacpp::cuda::flash::tensor_core;
  const unsigned char* shared = nullptr;  // the kernel's dynamic shared memory
  CHECK_NOTHROW(emu::launch(tc::ldmatrix_at, {dim3(1), dim3(32), 512}, shared, 0u));
  // Row addresses 16-byte aligned (PTX ISA, "ldmatrix").
  CHECK_THROWS_WITH(emu::launch(tc::ldmatrix_at, {dim3(1), dim3(32), 1024}, shared, 8u),
                    Contains("ldmatrix.x4") && Contains("is not 16-byte aligned"));
  // ldmatrix reads .shared only: a global pointer is an error, not a read.
  alignas(16) static unsigned char global_rows[512] = {};
  CHECK_THROWS_WITH(emu::launch(tc::ldmatrix_at, {dim3(1), dim3(32), 1024}, +global_rows, 0u),
                    Contains("not in shared memory"));
  // Lane 31's row is bytes 496-511: a request one byte short of them is overrun.
  CHECK_THROWS_WITH(emu::launch(tc::ldmatrix_at, {dim3(1), dim3(32), 511}, shared, 0u),
                    Contains("run past the dynamic shared memory"));
  // .sync.aligned: every lane of the warp executes the same ldmatrix / mma.
  CHECK_THROWS_WITH(emu::launch(tc::ldmatrix_lanes, {dim3(1), dim3(32), 512}, 5u, false),
                    Contains("deadlock") && Contains("ldmatrix.x4") && Contains("threads 5-5: exited"));
  CHECK_THROWS_WITH(emu::launch(tc::ldmatrix_lanes, {dim3(1), dim3(32), 512}, 32u, true),
                    Contains("divergent") && Contains("ldmatrix.x4.trans"));
  CHECK_THROWS_WITH(emu::launch(mma_lane_skips, {dim3(1), dim3(32), 0}, 7u),
                    Contains("deadlock") && Contains("mma.m16n8k16") && Contains("threads 7-7: exited"));
}
