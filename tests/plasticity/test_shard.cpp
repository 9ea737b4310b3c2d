// Shards: base-plus-remainder row ranges, and FIRE, DASH and ReDo on a world of 2 (threads of an
// in-process communicator) against a world of 1.
#include "plasticity_testing.hpp"

using namespace megacpp;
using namespace megacpp::plasticity;
using megacpp::testing::host_rows;
using megacpp::testing::random_matrix;
using megacpp::testing::run_ranks;

TEST_CASE("shard0_bounds: base plus remainder, the first ranks one row more, covering every row once", "[plasticity][shard]") {
  CHECK(shard0_bounds(10, 0, 3) == RowRange{0, 4});
  CHECK(shard0_bounds(10, 1, 3) == RowRange{4, 7});
  CHECK(shard0_bounds(10, 2, 3) == RowRange{7, 10});
  CHECK(shard0_bounds(2, 2, 3) == RowRange{2, 2});  // more ranks than rows: an empty range
  for (index_t rows : {1, 7, 64, 65})
    for (int world : {1, 2, 3, 5}) {
      index_t next = 0;
      for (int r = 0; r < world; ++r) {
        const RowRange range = shard0_bounds(rows, r, world);
        CHECK(range.begin == next);
        CHECK(range.size() >= rows / world);
        CHECK(range.size() <= rows / world + 1);
        next = range.end;
      }
      CHECK(next == rows);
    }
  CHECK_THROWS_WITH(shard0_bounds(10, 3, 3), Catch::Contains("rank 3 out of range for world size 3"));
}

TEST_CASE("FIRE at world 2 (uneven rows) equals world 1", "[plasticity][shard][fire]") {
  for (const auto& size : std::vector<std::pair<index_t, index_t>>{{37, 16}, {9, 24}, {64, 64}}) {
    const index_t rows = size.first, cols = size.second;  // not a structured binding: the lambda below uses them
    CAPTURE(rows, cols);
    auto whole = random_matrix<float>(rows, cols, static_cast<std::uint64_t>(rows + cols), 0.1);
    const std::vector<float> start = whole.to_host();
    const FireResult one = fire_matrix(whole);
    const std::vector<float> expected = whole.to_host();
    std::vector<std::vector<float>> parts(2);
    std::vector<FireResult> results(2);
    run_ranks(2, [&](dist::InProcessComm& comm) {
      const RowRange range = shard0_bounds(rows, comm.rank(), comm.size());
      auto local = Tensor<float, Cpu>::from_host(Shape{range.size(), cols}, host_rows(start, cols, range.begin, range.end));
      results[static_cast<std::size_t>(comm.rank())] = fire_rows<float, Cpu>(local, rows, range, comm);
      parts[static_cast<std::size_t>(comm.rank())] = local.to_host();
    });
    std::vector<float> joined = parts[0];
    joined.insert(joined.end(), parts[1].begin(), parts[1].end());
    REQUIRE(joined.size() == expected.size());
    // The same arithmetic except the order of the Gram's sum over ranks: equal to fp32 rounding.
    for (std::size_t i = 0; i < joined.size(); ++i) CHECK(joined[i] == Approx(expected[i]).margin(2e-6 * one.scale));
    CHECK(results[0].steps == results[1].steps);
    CHECK(results[0].scale == Approx(one.scale).epsilon(1e-12));
    CHECK(megacpp::testing::orthogonality_error(joined, rows, cols, results[0].scale) <= 1e-4);
  }
}

TEST_CASE("DASH at world 2 equals world 1 bitwise, and a mismatched gradient slice is refused", "[plasticity][shard][dash]") {
  const index_t rows = 13, cols = 8;
  const auto w0 = random_matrix<float>(rows, cols, 4).to_host();
  std::vector<float> g0 = random_matrix<float>(rows, cols, 5).to_host();
  for (std::size_t i = 0; i < g0.size(); i += 3) g0[i] += w0[i];  // some rows aligned with their gradient
  auto whole = Tensor<float, Cpu>::from_host(Shape{rows, cols}, w0);
  const auto shrunk = dash_rows(whole, Tensor<float, Cpu>::from_host(Shape{rows, cols}, g0), all_rows(rows));
  std::vector<std::vector<float>> parts(2);
  std::vector<std::vector<index_t>> shrunk_parts(2);
  run_ranks(2, [&](dist::InProcessComm& comm) {
    const RowRange range = shard0_bounds(rows, comm.rank(), comm.size());
    auto w = Tensor<float, Cpu>::from_host(Shape{range.size(), cols}, host_rows(w0, cols, range.begin, range.end));
    const auto g = Tensor<float, Cpu>::from_host(Shape{range.size(), cols}, host_rows(g0, cols, range.begin, range.end));
    shrunk_parts[static_cast<std::size_t>(comm.rank())] = dash_rows(w, g, range);
    parts[static_cast<std::size_t>(comm.rank())] = w.to_host();
  });
  std::vector<float> joined = parts[0];
  joined.insert(joined.end(), parts[1].begin(), parts[1].end());
  CHECK(megacpp::testing::bitwise_equal(joined, whole.to_host()));
  std::vector<index_t> all = shrunk_parts[0];
  all.insert(all.end(), shrunk_parts[1].begin(), shrunk_parts[1].end());
  CHECK(all == shrunk);
  CHECK_FALSE(shrunk.empty());
  // rank 0's weight rows with rank 1's gradient rows: 7 rows against 6
  auto w = Tensor<float, Cpu>::from_host(Shape{7, cols}, host_rows(w0, cols, 0, 7));
  const auto g = Tensor<float, Cpu>::from_host(Shape{6, cols}, host_rows(g0, cols, 7, 13));
  CHECK_THROWS_WITH(dash_rows(w, g, RowRange{0, 7}), Catch::Contains("does not describe the weight's owned rows"));
}

TEST_CASE("ReDo at world 2 equals world 1 bitwise: averaged statistics, owned rows, per-unit draws", "[plasticity][shard][redo]") {
  const index_t hidden = 11, d = 6;
  const auto in0 = random_matrix<float>(hidden, d, 6).to_host();
  const auto out0 = random_matrix<float>(d, hidden, 7).to_host();
  // each rank saw different batches; world 1 sees their average
  const std::vector<std::vector<double>> ema{{0.0, 1, 2, 1, 0.01, 1, 1, 3, 1, 0.02, 1}, {0.0, 1, 1, 1, 0.03, 2, 1, 1, 1, 0.0, 1}};
  std::vector<double> mean(ema[0].size());
  for (std::size_t i = 0; i < mean.size(); ++i) mean[i] = (ema[0][i] + ema[1][i]) / 2;
  dist::SingleProcess single;
  const auto units = dormant_units<Cpu>(mean, 0.025, single);
  CHECK(units == std::vector<index_t>{0, 4, 9});
  auto in = Tensor<float, Cpu>::from_host(Shape{hidden, d}, in0);
  auto out = Tensor<float, Cpu>::from_host(Shape{d, hidden}, out0);
  recycle_units(in, all_rows(hidden), out, static_cast<Tensor<float, Cpu>*>(nullptr), units, 0.4, 0.1, 42);
  std::vector<std::vector<float>> in_parts(2), out_parts(2);
  run_ranks(2, [&](dist::InProcessComm& comm) {
    const int r = comm.rank();
    const auto mine = dormant_units<Cpu>(ema[static_cast<std::size_t>(r)], 0.025, comm);
    CHECK(mine == units);
    const RowRange in_range = shard0_bounds(hidden, r, 2), out_range = shard0_bounds(d, r, 2);
    auto in_local = Tensor<float, Cpu>::from_host(Shape{in_range.size(), d}, host_rows(in0, d, in_range.begin, in_range.end));
    auto out_local =
        Tensor<float, Cpu>::from_host(Shape{out_range.size(), hidden}, host_rows(out0, hidden, out_range.begin, out_range.end));
    recycle_units(in_local, in_range, out_local, static_cast<Tensor<float, Cpu>*>(nullptr), mine, 0.4, 0.1, 42);
    in_parts[static_cast<std::size_t>(r)] = in_local.to_host();
    out_parts[static_cast<std::size_t>(r)] = out_local.to_host();
  });
  std::vector<float> in_joined = in_parts[0], out_joined = out_parts[0];
  in_joined.insert(in_joined.end(), in_parts[1].begin(), in_parts[1].end());
  out_joined.insert(out_joined.end(), out_parts[1].begin(), out_parts[1].end());
  CHECK(megacpp::testing::bitwise_equal(in_joined, in.to_host()));
  CHECK(megacpp::testing::bitwise_equal(out_joined, out.to_host()));
}
