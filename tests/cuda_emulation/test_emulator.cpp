// tests/cuda_emulation/test_emulator.cpp: the emulator itself, on small kernels written here: bf16
// rounding bit for bit, WMMA products in every layout, shuffles, barriers, per-block shared
// memory; and each rule it enforces, broken on purpose, reported as an EmulationError (never a
// hang, never a silent pass).
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "emulator/launch.hpp"
#include "emulator/options.hpp"
#include "emulator/sanitizer.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/random.hpp"

using Catch::Matchers::Contains;
namespace emu = megacpp::cuda_emulation;
namespace wmma = nvcuda::wmma;

// Test kernels that use dynamic shared memory name it as the bf16 attention does, so that it is
// the emulator's array of that name (emulator/shared_memory.hpp).
// (Not in an unnamed namespace: the block-scope extern would then name an array of that one.)
namespace megacpp::cuda::flash::tensor_core {

static void write_shared_byte(unsigned at) {
  extern __shared__ __align__(128) unsigned char tile_memory[];
  if (threadIdx.x == 0) tile_memory[at] = 1;
}

// Each thread writes its slot, then (if `barrier`) waits for the block, then reads its neighbour's.
static void neighbour_kernel(float* out, bool barrier) {
  extern __shared__ __align__(128) unsigned char tile_memory[];
  float* slots = reinterpret_cast<float*>(tile_memory);
  slots[threadIdx.x] = static_cast<float>(blockIdx.x * 1000 + threadIdx.x);
  if (barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}

}  // namespace megacpp::cuda::flash::tensor_core

namespace {

using Bf16 = __nv_bfloat16;

template <class LayoutA, class LayoutB>
void product_kernel(const Bf16* a, unsigned lda, const Bf16* b, unsigned ldb, float* c, unsigned ldc) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, LayoutB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  wmma::load_matrix_sync(fc, c, ldc, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, ldc, wmma::mem_row_major);
}

struct alignas(32) Operands {
  Bf16 a[16 * 24], b[16 * 24];
  float c[16 * 20];
};

// c = a b + c by one warp, and the double-precision product of the same bf16 values.
template <class LayoutA, class LayoutB>
void check_product(unsigned mapping) {
  constexpr bool a_rows = std::is_same_v<LayoutA, wmma::row_major>, b_rows = std::is_same_v<LayoutB, wmma::row_major>;
  megacpp::Rng rng(7);
  Operands m{};
  for (Bf16& x : m.a) x = __float2bfloat16_rn(static_cast<float>(rng.normal()));
  for (Bf16& x : m.b) x = __float2bfloat16_rn(static_cast<float>(rng.normal()));
  for (float& x : m.c) x = static_cast<float>(rng.normal());
  const Operands before = m;
  std::vector<double> want(256);
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j) {
      double sum = m.c[i * 20 + j];
      for (unsigned k = 0; k < 16; ++k)
        sum += static_cast<double>(__bfloat162float(m.a[a_rows ? i * 24 + k : i + k * 24])) *
               __bfloat162float(m.b[b_rows ? k * 24 + j : k + j * 24]);
      want[i * 16 + j] = sum;
    }
  emu::Options o;
  o.fragment_mapping = mapping;
  const emu::OptionsScope scope(o);
  emu::launch(product_kernel<LayoutA, LayoutB>, {dim3(1), dim3(32), 0}, m.a, 24u, m.b, 24u, m.c, 20u);
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j) CHECK(m.c[i * 20 + j] == Approx(want[i * 16 + j]).margin(1e-5));
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 16; j < 20; ++j) CHECK(m.c[i * 20 + j] == before.c[i * 20 + j]);  // past 16 columns: untouched
}

void shuffle_kernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  out[threadIdx.x] = __shfl_xor_sync(0xFFFFFFFFu, lane * 10, 5);
}
void lane_skips_syncwarp() {
  if (threadIdx.x % 32 != 5) __syncwarp();
}
void divergent_collectives(int* out) {
  if (threadIdx.x % 32 < 16) __syncwarp();
  else out[threadIdx.x] = __shfl_xor_sync(0xFFFFFFFFu, 1, 1);
}
void half_block_barrier() {
  if (threadIdx.x < 64) __syncthreads();
}
void two_barriers() {
  if (threadIdx.x < 64) __syncthreads();
  else __syncthreads();
}
void misaligned_load(const Bf16* a, unsigned ldm) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, a, ldm);
}
void store_with_ldm(float* c, unsigned ldm) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 1.0f);
  wmma::store_matrix_sync(c, fc, ldm, wmma::mem_row_major);
}
void indices_kernel(unsigned* out) {
  const unsigned t = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
  out[t] = t;
}

}  // namespace

TEST_CASE("bf16 conversion rounds to nearest even, bit for bit", "[emulator]") {
  auto bits = [](float f) { return __float2bfloat16_rn(f).__x; };
  CHECK(bits(1.0f + 0x1p-8f) == 0x3F80);              // a tie: to the even 1.0
  CHECK(bits(1.0f + 3 * 0x1p-8f) == 0x3F82);          // a tie: to the even 1 + 2^-6
  CHECK(bits(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81);   // above the tie: up
  CHECK(bits(std::numeric_limits<float>::max()) == 0x7F80);  // overflow: infinity
  CHECK(bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(bits(std::numeric_limits<float>::quiet_NaN()) == 0x7FFF);
  CHECK(bits(0x1p-130f) == 0x0008);  // subnormals kept: 2^-130 = 8 x 2^-133, the smallest bf16 step
  CHECK(__bfloat162float(__float2bfloat16_rn(-2.5f)) == -2.5f);
  // megacpp::bf16 (the host storage type, also round to nearest even) agrees on random values.
  megacpp::Rng rng(3);
  for (int i = 0; i < 100000; ++i) {
    const float f = static_cast<float>(rng.normal() * std::exp(10 * rng.normal()));
    REQUIRE(__bfloat162float(__float2bfloat16_rn(f)) == static_cast<float>(megacpp::bf16(f)));
  }
}

TEST_CASE("WMMA products equal a double-precision product in every layout and fragment mapping", "[emulator]") {
  for (unsigned mapping : {0u, 1u}) {
    check_product<wmma::row_major, wmma::row_major>(mapping);
    check_product<wmma::row_major, wmma::col_major>(mapping);
    check_product<wmma::col_major, wmma::row_major>(mapping);
    check_product<wmma::col_major, wmma::col_major>(mapping);
  }
}

TEST_CASE("shuffles exchange lanes, indices follow the launch", "[emulator]") {
  std::vector<int> out(64);
  emu::launch(shuffle_kernel, {dim3(1), dim3(64), 0}, out.data());
  for (int t = 0; t < 64; ++t) CHECK(out[static_cast<std::size_t>(t)] == ((t % 32) ^ 5) * 10);
  std::vector<unsigned> ids(3 * 2 * 96, 0u);
  emu::launch(indices_kernel, {dim3(3, 2), dim3(96), 0}, ids.data());
  for (unsigned t = 0; t < ids.size(); ++t) CHECK(ids[t] == t);
}

TEST_CASE("shared memory is per block, starts as NaN bytes, and a barrier orders it", "[emulator]") {
  namespace tc = megacpp::cuda::flash::tensor_core;
  std::vector<float> out(2 * 128);
  emu::launch(tc::neighbour_kernel, {dim3(2), dim3(128), 128 * sizeof(float)}, out.data(), true);
  for (unsigned b = 0; b < 2; ++b)
    for (unsigned t = 0; t < 128; ++t) CHECK(out[b * 128 + t] == static_cast<float>(b * 1000 + (t + 1) % 128));
  // Without the barrier, thread t reads slot t + 1 before its thread ran: still the NaN fill.
  emu::launch(tc::neighbour_kernel, {dim3(2), dim3(128), 128 * sizeof(float)}, out.data(), false);
  CHECK(std::isnan(out[0]));
}

TEST_CASE("broken rules are errors, not hangs", "[emulator]") {
  namespace tc = megacpp::cuda::flash::tensor_core;
  CHECK_THROWS_WITH(emu::launch(lane_skips_syncwarp, {dim3(1), dim3(64), 0}),
                    Contains("deadlock") && Contains("__syncwarp") && Contains("threads 5-5: exited"));
  std::vector<int> out(32);
  CHECK_THROWS_WITH(emu::launch(divergent_collectives, {dim3(1), dim3(32), 0}, out.data()), Contains("divergent"));
  CHECK_THROWS_WITH(emu::launch(half_block_barrier, {dim3(1), dim3(128), 0}),
                    Contains("deadlock") && Contains("threads 64-127: exited"));
  CHECK_THROWS_WITH(emu::launch(two_barriers, {dim3(1), dim3(128), 0}), Contains("different __syncthreads"));
#if !defined(MEGACPP_EMULATION_ASAN)  // under ASan the bytes past the request are poisoned: it aborts at the write
  CHECK_THROWS_WITH(emu::launch(tc::write_shared_byte, {dim3(1), dim3(32), 256}, 256u),
                    Contains("wrote byte 256") && Contains("past the 256 bytes"));
#endif
  emu::launch(tc::write_shared_byte, {dim3(1), dim3(32), 256}, 255u);  // the last requested byte is fine
  Operands m{};
  CHECK_THROWS_WITH(emu::launch(misaligned_load, {dim3(1), dim3(32), 0}, m.a + 8, 16u), Contains("not 256-bit"));
  CHECK_THROWS_WITH(emu::launch(misaligned_load, {dim3(1), dim3(32), 0}, m.a, 12u), Contains("not a multiple of 8"));
  CHECK_THROWS_WITH(emu::launch(store_with_ldm, {dim3(1), dim3(32), 0}, m.c, 18u), Contains("not a multiple of 4"));
  CHECK_NOTHROW(emu::launch(store_with_ldm, {dim3(1), dim3(32), 0}, m.c, 16u));
}
