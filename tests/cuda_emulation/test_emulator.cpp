// tests/cuda_emulation/test_emulator.cpp: the emulator itself, on small kernels written here: bf16
// rounding bit for bit, the tensor-core products of attention_mma_tiles.cuh (cp.async, ldmatrix,
// mma.sync) in both operand layouts, cp.async landing at the wait (the raw PTX wrappers' element
// placement and rules: test_ptx.cpp), shuffles, barriers, per-block
// shared memory; and each rule it enforces, broken on purpose, reported as an EmulationError
// (never a hang, never a silent pass).
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "emulator/launch.hpp"
#include "emulator/options.hpp"
#include "emulator/sanitizer.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/random.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as device_code.hpp: the product helpers under test
#include "megacpp/backends/cuda/detail/attention_mma_tiles.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

using Catch::Matchers::Contains;
namespace emu = megacpp::cuda_emulation;

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

using Bf16 = __nv_bfloat16;

// One warp: C (16 x 16, row-major in c) += A (16 x 32) B (32 x 16) by strip_product, the operands
// copied into shared memory by cp.async from row-major a (16 x 32) and b (B itself, 32 x 16, when
// Kind is rows_are_k; B's transpose, 16 x 32, when rows_are_n).
template <BTile Kind>
static void strip_product_kernel(const Bf16* a, const Bf16* b, float* c) {
  extern __shared__ __align__(128) unsigned char tile_memory[];
  using ATile = Bf16Tile<16, 32>;
  constexpr int kBRows = Kind == BTile::rows_are_k ? 32 : 16, kBCols = 512 / kBRows;
  using BTileShape = Bf16Tile<kBRows, kBCols>;
  Bf16* sa = reinterpret_cast<Bf16*>(tile_memory);
  Bf16* sb = sa + ATile::kBytes / sizeof(Bf16);
  for (int piece = static_cast<int>(threadIdx.x); piece < 64; piece += 32) {  // 16-byte pieces: 4 a row, 2 or 4 b
    ptx::cp_async_16(sa + piece / 4 * ATile::kLd + piece % 4 * 8, a + piece * 8);
    const int per_row = kBCols / 8;
    ptx::cp_async_16(sb + piece / per_row * BTileShape::kLd + piece % per_row * 8, b + piece * 8);
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  const FragmentPlace at;
  Strip<16> acc;
  for (int n = 0; n < 2; ++n)
    for (int e = 0; e < 4; ++e) acc[n][e] = c[(at.g + 8 * (e / 2)) * 16 + 8 * n + 2 * at.t + e % 2];
  strip_product<16, 32, Kind>(acc, sa, ATile::kLd, sb, BTileShape::kLd);
  for (int n = 0; n < 2; ++n)
    for (int e = 0; e < 4; ++e) c[(at.g + 8 * (e / 2)) * 16 + 8 * n + 2 * at.t + e % 2] = acc[n][e];
}

// Copies 16 bytes into shared memory by cp.async and reads them back before (`wait` false) or after the wait.
static void async_copy_kernel(const float* src, float* out, bool wait) {
  extern __shared__ __align__(128) unsigned char tile_memory[];
  float* slot = reinterpret_cast<float*>(tile_memory);
  if (threadIdx.x == 0) ptx::cp_async_16(slot, src);
  ptx::cp_async_commit();
  if (wait) ptx::cp_async_wait<0>();
  if (threadIdx.x == 0) out[0] = slot[0];
  ptx::cp_async_wait<0>();
}

static void async_copy_past(unsigned offset, const float* src) {
  extern __shared__ __align__(128) unsigned char tile_memory[];
  ptx::cp_async_16(tile_memory + offset, src);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
}

}  // namespace megacpp::cuda::flash::tensor_core

namespace {

using Bf16 = __nv_bfloat16;

// C += A B by strip_product (one warp) against the exact product: small integers, so every sum is exact.
template <megacpp::cuda::flash::tensor_core::BTile Kind>
void check_strip_product() {
  namespace tc = megacpp::cuda::flash::tensor_core;
  megacpp::Rng rng(7);
  auto small = [&] { return static_cast<float>(static_cast<int>(rng.below(9)) - 4); };
  std::vector<Bf16> a(16 * 32), b(32 * 16);
  std::vector<float> c(16 * 16);
  for (Bf16& x : a) x = __float2bfloat16_rn(small());
  for (Bf16& x : b) x = __float2bfloat16_rn(small());
  for (float& x : c) x = small();
  auto b_at = [&](unsigned k, unsigned n) {  // B(k, n) as b stores it
    return __bfloat162float(Kind == tc::BTile::rows_are_k ? b[k * 16 + n] : b[n * 32 + k]);
  };
  std::vector<float> want = c;
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j)
      for (unsigned k = 0; k < 32; ++k) want[i * 16 + j] += __bfloat162float(a[i * 32 + k]) * b_at(k, j);
  const std::size_t shared = tc::Bf16Tile<16, 32>::kBytes + tc::Bf16Tile<32, 16>::kBytes;
  emu::launch(tc::strip_product_kernel<Kind>, {dim3(1), dim3(32), shared}, a.data(), b.data(), c.data());
  for (unsigned e = 0; e < 256; ++e) CHECK(c[e] == want[e]);
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

TEST_CASE("strip products (cp.async, ldmatrix, mma.sync) equal the exact product in both B layouts", "[emulator]") {
  check_strip_product<megacpp::cuda::flash::tensor_core::BTile::rows_are_k>();
  check_strip_product<megacpp::cuda::flash::tensor_core::BTile::rows_are_n>();
}

TEST_CASE("a cp.async copy lands when its thread waits for it, not before", "[emulator]") {
  namespace tc = megacpp::cuda::flash::tensor_core;
  alignas(16) const float src[4] = {1.5f, 2.5f, 3.5f, 4.5f};
  float out = 0.0f;
  emu::launch(tc::async_copy_kernel, {dim3(1), dim3(32), 64}, src, &out, true);
  CHECK(out == 1.5f);
  emu::launch(tc::async_copy_kernel, {dim3(1), dim3(32), 64}, src, &out, false);
  CHECK(std::isnan(out));  // the NaN fill: the copy had not landed
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
  // cp.async's rules (ldmatrix's and mma's: test_ptx.cpp).
  alignas(16) const float src[8] = {};
  CHECK_THROWS_WITH(emu::launch(tc::async_copy_past, {dim3(1), dim3(32), 248}, 240u, src), Contains("run past"));
  CHECK_THROWS_WITH(emu::launch(tc::async_copy_past, {dim3(1), dim3(32), 256}, 4u, src), Contains("not 16-byte aligned"));
}
