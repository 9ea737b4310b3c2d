// The communicators' collectives: SingleProcess (world 1) and the in-process fake of world 2 and
// 3, every operation and element type data parallelism and distributed Muon use.
#include <catch2/catch.hpp>

#include <cstdint>
#include <thread>
#include <vector>

#include "megacpp/megacpp.hpp"
#include "on_ranks.hpp"

using namespace megacpp;
using testing::on_ranks;
using dist::ReduceOp;

namespace {

template <class T>
std::vector<T> rank_values(int rank, int n) {  // rank r: r * 10 + i
  std::vector<T> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<T>(rank * 10 + i);
  return v;
}

}  // namespace

static_assert(dist::Comm<dist::SingleProcess, float, Cpu>);
static_assert(dist::Comm<dist::InProcessComm, double, Cpu>);
static_assert(dist::Comm<dist::InProcessComm, std::int64_t, Cpu>);

TEST_CASE("SingleProcess: reductions keep the data, gathers and scatters copy", "[dist][comm]") {
  dist::SingleProcess comm;
  std::vector<float> a{1, 2, 3}, b(3);
  comm.all_reduce<float, Cpu>(a.data(), 3, ReduceOp::avg);
  CHECK(a == std::vector<float>{1, 2, 3});
  comm.iall_gather<float, Cpu>(a.data(), 3, b.data()).wait();
  CHECK(b == a);
  std::vector<float> c(3);
  comm.ireduce_scatter<float, Cpu>(a.data(), c.data(), 3, ReduceOp::sum).wait();
  CHECK(c == a);
  comm.broadcast<float, Cpu>(a.data(), 3, 0);
  comm.barrier();
}

TEST_CASE("InProcessComm: every collective over 2 and 3 ranks", "[dist][comm]") {
  for (int world : {2, 3}) {
    on_ranks(world, [world](dist::InProcessComm& comm) {
      const int rank = comm.rank(), n = 4;
      // all_reduce sum / avg / max on float, double and int64
      auto f = rank_values<float>(rank, n);
      comm.all_reduce<float, Cpu>(f.data(), n, ReduceOp::sum);
      auto d = rank_values<double>(rank, n);
      auto h = comm.iall_reduce<double, Cpu>(d.data(), n, ReduceOp::avg);
      h.wait();
      auto m = rank_values<std::int64_t>(rank, n);
      comm.all_reduce<std::int64_t, Cpu>(m.data(), n, ReduceOp::max);
      const double ranks_sum = world * (world - 1) / 2.0;
      for (int i = 0; i < n; ++i) {
        CHECK(f[static_cast<std::size_t>(i)] == static_cast<float>(10 * ranks_sum + world * i));
        CHECK(d[static_cast<std::size_t>(i)] == Approx((10 * ranks_sum + world * i) / world));
        CHECK(m[static_cast<std::size_t>(i)] == (world - 1) * 10 + i);
      }
      // reduce_scatter: block r of rank q is q*10 + r*n + i; rank r gets sum_q (q*10) + world*(r*n + i)
      auto send = rank_values<float>(rank, n * world);
      std::vector<float> recv(static_cast<std::size_t>(n));
      comm.ireduce_scatter<float, Cpu>(send.data(), recv.data(), n, ReduceOp::sum).wait();
      for (int i = 0; i < n; ++i)
        CHECK(recv[static_cast<std::size_t>(i)] == static_cast<float>(10 * ranks_sum + world * (rank * n + i)));
      // all_gather
      auto mine = rank_values<float>(rank, n);
      std::vector<float> all(static_cast<std::size_t>(n * world));
      comm.iall_gather<float, Cpu>(mine.data(), n, all.data()).wait();
      for (int r = 0; r < world; ++r)
        for (int i = 0; i < n; ++i) CHECK(all[static_cast<std::size_t>(r * n + i)] == static_cast<float>(r * 10 + i));
      // broadcast from the last rank
      auto b = rank_values<std::int32_t>(rank, n);
      comm.ibroadcast<std::int32_t, Cpu>(b.data(), n, world - 1).wait();
      CHECK(b == rank_values<std::int32_t>(world - 1, n));
      comm.barrier();
    });
  }
}

TEST_CASE("InProcessComm: ranks disagreeing on a count all get an error, none hangs", "[dist][comm]") {
  CHECK_THROWS_WITH(on_ranks(2, [](dist::InProcessComm& comm) {
                      std::vector<float> v(4, 1.0f);
                      comm.all_reduce<float, Cpu>(v.data(), comm.rank() == 0 ? 4 : 3, ReduceOp::sum);
                    }),
                    Catch::Matchers::Contains("different count"));
}
