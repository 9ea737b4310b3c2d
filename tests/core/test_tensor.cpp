// Tensor<T, Cpu>: construction, views, copies, conversions, memory accounting, shapes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <vector>

#include "megacpp/megacpp.hpp"

using namespace megacpp;
using Catch::Matchers::Contains;

TEST_CASE("Shape: numel, negative axes, suffix/prefix, printing", "[tensor]") {
  const Shape s{2, 3, 4};
  CHECK(s.rank() == 3);
  CHECK(s.numel() == 24);
  CHECK(s[-1] == 4);
  CHECK(s.without(1) == Shape{2, 4});
  CHECK(s.with(0, 5) == Shape{5, 3, 4});
  CHECK(s.suffix(2) == Shape{3, 4});
  CHECK(s.prefix(1) == Shape{2});
  CHECK(s.to_string() == "(2, 3, 4)");
  CHECK(Shape{}.numel() == 1);
  CHECK_THROWS_WITH(s[3], Contains("axis 3 out of range for shape (2, 3, 4)"));
  CHECK_THROWS_WITH((Shape{2, -1}), Contains("negative dimension -1"));
}

TEST_CASE("Tensor: from_host, views share storage, clone copies", "[tensor]") {
  auto t = CpuTensor<float>::from_host({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(t.shape() == Shape{2, 3});
  auto r = t.reshape({3, -1});
  CHECK(r.shape() == Shape{3, 2});
  r.data()[0] = 10;
  CHECK(t.data()[0] == 10);  // same storage
  auto c = t.clone();
  c.data()[1] = -1;
  CHECK(t.data()[1] == 2);  // independent storage
  auto row = t.rows(1, 2);
  CHECK(row.shape() == Shape{1, 3});
  CHECK(row.to_host() == std::vector<float>{4, 5, 6});
  CHECK(CpuTensor<double>::full({2}, 2.5).to_host() == std::vector<double>{2.5, 2.5});
  CHECK(CpuTensor<float>::scalar(3).item() == 3);
  CHECK_FALSE(CpuTensor<float>().defined());
  CHECK(CpuTensor<float>(Shape{0}).defined());
}

TEST_CASE("Tensor: element type conversion rounds to nearest even", "[tensor]") {
  auto t = CpuTensor<float>::from_host({3}, {1.0f, 1.00390625f, 1.01171875f});
  auto b = t.to<bf16>();
  auto back = b.to<float>().to_host();
  CHECK(back == std::vector<float>{1.0f, 1.0f, 1.015625f});
  auto h = t.to<f16>().to<double>().to_host();
  CHECK(h[0] == 1.0);
}

TEST_CASE("Tensor: memory accounting tracks current and peak bytes", "[tensor]") {
  Cpu::reset_peak_memory();
  const auto before = Cpu::memory_stats();
  {
    CpuTensor<float> t(Shape{1024, 256});  // 1 MiB
    CHECK(Cpu::memory_stats().current_bytes == before.current_bytes + 1024 * 256 * 4);
  }
  CHECK(Cpu::memory_stats().current_bytes == before.current_bytes);
  CHECK(Cpu::memory_stats().peak_bytes >= before.current_bytes + 1024 * 256 * 4);
}

TEST_CASE("Cpu::allocate: a size whose byte count wraps is an error, not a small block", "[tensor][memory]") {
  const auto before = Cpu::memory_stats();
  const std::size_t wraps = std::numeric_limits<std::size_t>::max() / 4 + 1;  // * sizeof(float) wraps to 0
  CHECK_THROWS_WITH(Cpu::allocate<float>(wraps), Contains("does not fit in the address space"));
  CHECK(Cpu::memory_stats().current_bytes == before.current_bytes);
}

TEST_CASE("Cpu block cache: a freed large block is reused for the same size, outside memory_stats", "[tensor][memory]") {
  Cpu::empty_cache();
  const auto before = Cpu::memory_stats();
  const std::size_t bytes = cpu::aligned_bytes(1000 * 257 * 4);  // ~1 MiB, keyed by exact (64-byte rounded) size
  const float* first = nullptr;
  {
    CpuTensor<float> t(Shape{1000, 257});
    first = t.data();
  }
  CHECK(Cpu::memory_stats().current_bytes == before.current_bytes);
  if (cpu::cache_limit_bytes() == 0) {  // MEGACPP_CPU_CACHE_MB=0, or an AddressSanitizer build
    CHECK(Cpu::cached_bytes() == 0);
    return;
  }
  CHECK(Cpu::cached_bytes() == bytes);
  {
    CpuTensor<float> again(Shape{257, 1000});  // same byte size, other shape
    CHECK(again.data() == first);
    CHECK(Cpu::cached_bytes() == 0);
    CHECK(Cpu::memory_stats().current_bytes == before.current_bytes + bytes);
    CpuTensor<float> small(Shape{1000});  // below the cached size: malloc's business
  }
  CHECK(Cpu::cached_bytes() == bytes);
  Cpu::empty_cache();
  CHECK(Cpu::cached_bytes() == 0);
}

TEST_CASE("Cpu block cache: held bytes (live + cached) stay under twice the high-water mark of live bytes",
          "[tensor][memory]") {
  if (cpu::cache_limit_bytes() == 0) return;  // caching off (MEGACPP_CPU_CACHE_MB=0 or AddressSanitizer)
  Cpu::empty_cache();
  const std::size_t live = Cpu::memory_stats().current_bytes;
  const std::size_t mark = cpu::block_cache().high_water_bytes();
  // Blocks of ever-growing distinct sizes, each freed before the next: exact-size reuse never
  // applies, so without a bound the cache would keep all of them.
  const std::size_t base = std::max({std::size_t{16} << 20, mark, live + (std::size_t{1} << 20)});
  std::size_t allocated = 0;
  for (index_t i = 0; i < 6; ++i) {
    const index_t elements = static_cast<index_t>(base / 4) + 1024 * i;
    { CpuTensor<float> t(Shape{elements}); }
    allocated += cpu::aligned_bytes(static_cast<std::size_t>(elements) * 4);
    INFO("block " << i);
    CHECK(Cpu::memory_stats().current_bytes + Cpu::cached_bytes() <= cpu::kCacheSlack * cpu::block_cache().high_water_bytes());
  }
  CHECK(Cpu::cached_bytes() < allocated);  // some were returned to the system
  CHECK(Cpu::cached_bytes() > 0);
  Cpu::empty_cache();
}

TEST_CASE("Tensor: bad construction and views are errors naming the values", "[tensor]") {
  CHECK_THROWS_AS((CpuTensor<float>::from_host({2, 2}, {1, 2, 3})), Error);
  CHECK_THROWS_WITH((CpuTensor<float>::from_host({2, 2}, {1, 2, 3})), Contains("shape (2, 2) needs 4 values, got 3"));
  auto t = CpuTensor<float>::zeros({2, 3});
  CHECK_THROWS_WITH((t.reshape({4, 2})), Contains("cannot view shape (2, 3)"));
  CHECK_THROWS_WITH(t.rows(1, 3), Contains("range [1, 3) invalid for shape (2, 3)"));
  CHECK_THROWS_WITH(t.item(), Contains("exactly one element"));
}

TEST_CASE("Rng: deterministic streams", "[tensor]") {
  Rng a(42), b(42);
  for (int i = 0; i < 100; ++i) REQUIRE(a.next_u64() == b.next_u64());
  Rng c(5);
  auto x = randn<float, Cpu>({1000}, c).to_host();
  double mean = 0;
  for (float v : x) mean += v;
  CHECK(std::abs(mean / 1000) < 0.1);
}
