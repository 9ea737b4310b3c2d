// core/shape.hpp: element counts that overflow index_t are an Error naming the shape, never UB.
#include <catch2/catch.hpp>

#include <cstdint>

#include "megacpp/megacpp.hpp"

using namespace megacpp;
using Catch::Matchers::Contains;

TEST_CASE("Shape::numel and prod refuse products beyond index_t, naming the shape", "[io][shape][errors]") {
  const index_t big = index_t{1} << 62;
  CHECK(Shape{big}.numel() == big);
  CHECK(Shape{big, 1, 1}.numel() == big);
  CHECK(Shape{INT64_MAX}.numel() == INT64_MAX);
  CHECK(Shape{3037000499, 3037000499}.numel() == 3037000499LL * 3037000499LL);  // just below 2^63
  CHECK_THROWS_WITH(Shape({big, 2}).numel(), Contains("Shape: the product of dims [0, 2) of shape (4611686018427387904, 2) "
                                                       "overflows the 64-bit element count"));
  CHECK_THROWS_WITH(Shape({3037000500, 3037000500}).numel(), Contains("shape (3037000500, 3037000500) overflows"));
  CHECK_THROWS_WITH(Shape({2, 4, big}).prod(1, 3), Contains("the product of dims [1, 3) of shape (2, 4, 4611686018427387904)"));
  CHECK(Shape({2, 4, big}).prod(0, 2) == 8);
  // A zero dim does not hide an overflowing product of the others, whatever its position.
  CHECK_THROWS_AS(Shape({0, big, 4}).numel(), Error);
  CHECK_THROWS_AS(Shape({big, 4, 0}).numel(), Error);
  CHECK(Shape{0, big}.numel() == 0);
  CHECK(Shape{7, 0, 3}.numel() == 0);
  CHECK(Shape{}.numel() == 1);
}

TEST_CASE("Tensor refuses shapes whose bytes overflow size_t before allocating", "[io][shape][errors]") {
  // 2^62 floats is 2^64 bytes: unchecked, the allocation size wrapped to 0.
  CHECK_THROWS_WITH(CpuTensor<float>(Shape{index_t{1} << 62}),
                    Contains("Tensor: shape (4611686018427387904) of 4-byte elements needs more than 2^64 bytes"));
  CHECK_THROWS_AS(CpuTensor<double>(Shape{index_t{1} << 40, index_t{1} << 30}), Error);  // numel itself overflows
  const auto empty = CpuTensor<float>::from_host(Shape{0, 3}, std::span<const float>());
  CHECK(empty.numel() == 0);
  CHECK(empty.to_host().empty());
}

TEST_CASE("Shape::set checks the value and the axis (there is no writable reference that skips them)", "[shape][errors]") {
  Shape s{2, 3, 4};
  s.set(-1, 5);
  CHECK(s == Shape{2, 3, 5});
  CHECK_THROWS_WITH(s.set(0, -1), Contains("set to negative -1"));
  CHECK_THROWS_WITH(s.set(3, 1), Contains("axis 3 out of range for shape (2, 3, 5)"));
  CHECK(s == Shape{2, 3, 5});
  CHECK_THROWS_WITH(s.with(1, -2), Contains("set to negative -2"));
}
