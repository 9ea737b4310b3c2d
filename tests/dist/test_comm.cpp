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

// What one rank of the collectives test ends with.
struct Collected {
  std::vector<float> f, scattered, gathered;
  std::vector<double> d;
  std::vector<std::int64_t> m;
  std::vector<std::int32_t> broadcast;
};

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
    const auto ranks = on_ranks(world, [world](dist::InProcessComm& comm) {
      const int rank = comm.rank(), n = 4;
      Collected c;
      // all_reduce sum / avg / max on float, double and int64
      c.f = rank_values<float>(rank, n);
      comm.all_reduce<float, Cpu>(c.f.data(), n, ReduceOp::sum);
      c.d = rank_values<double>(rank, n);
      auto h = comm.iall_reduce<double, Cpu>(c.d.data(), n, ReduceOp::avg);
      h.wait();
      c.m = rank_values<std::int64_t>(rank, n);
      comm.all_reduce<std::int64_t, Cpu>(c.m.data(), n, ReduceOp::max);
      // reduce_scatter: block r of rank q is q*10 + r*n + i; rank r gets sum_q (q*10) + world*(r*n + i)
      auto send = rank_values<float>(rank, n * world);
      c.scattered.resize(static_cast<std::size_t>(n));
      comm.ireduce_scatter<float, Cpu>(send.data(), c.scattered.data(), n, ReduceOp::sum).wait();
      // all_gather
      auto mine = rank_values<float>(rank, n);
      c.gathered.resize(static_cast<std::size_t>(n * world));
      comm.iall_gather<float, Cpu>(mine.data(), n, c.gathered.data()).wait();
      // broadcast from the last rank
      c.broadcast = rank_values<std::int32_t>(rank, n);
      comm.ibroadcast<std::int32_t, Cpu>(c.broadcast.data(), n, world - 1).wait();
      comm.barrier();
      return c;
    });
    const int n = 4;
    const double ranks_sum = world * (world - 1) / 2.0;
    for (int rank = 0; rank < world; ++rank) {
      INFO("world " << world << ", rank " << rank);
      const Collected& c = ranks[static_cast<std::size_t>(rank)];
      for (int i = 0; i < n; ++i) {
        const auto at = static_cast<std::size_t>(i);
        CHECK(c.f[at] == static_cast<float>(10 * ranks_sum + world * i));
        CHECK(c.d[at] == Approx((10 * ranks_sum + world * i) / world));
        CHECK(c.m[at] == (world - 1) * 10 + i);
        CHECK(c.scattered[at] == static_cast<float>(10 * ranks_sum + world * (rank * n + i)));
      }
      for (int r = 0; r < world; ++r)
        for (int i = 0; i < n; ++i) CHECK(c.gathered[static_cast<std::size_t>(r * n + i)] == static_cast<float>(r * 10 + i));
      CHECK(c.broadcast == rank_values<std::int32_t>(world - 1, n));
    }
  }
}

TEST_CASE("reduce_scatter_v: blocks of unequal size (some empty) over 1, 2 and 3 ranks", "[dist][comm]") {
  // Block r holds counts[r] elements starting after the blocks before it; rank r receives the
  // reduction of its block. Every rank sends rank_values(rank, total): rank q's element j is q*10 + j.
  const auto expected = [](int world, const std::vector<index_t>& counts, int rank, ReduceOp op) {
    index_t at = 0;
    for (int r = 0; r < rank; ++r) at += counts[static_cast<std::size_t>(r)];
    std::vector<float> out;
    for (index_t i = 0; i < counts[static_cast<std::size_t>(rank)]; ++i) {
      double sum = 0;
      for (int q = 0; q < world; ++q) sum += q * 10 + static_cast<double>(at + i);
      out.push_back(static_cast<float>(op == ReduceOp::avg ? sum / world : sum));
    }
    return out;
  };
  dist::SingleProcess single;
  const std::vector<index_t> one{4};
  std::vector<float> send1 = rank_values<float>(0, 4), recv1(4);
  single.ireduce_scatter_v<float, Cpu>(send1.data(), recv1.data(), one, ReduceOp::avg).wait();
  CHECK(recv1 == send1);
  CHECK_THROWS_WITH((single.reduce_scatter_v<float, Cpu>(send1.data(), recv1.data(), std::vector<index_t>{2, 2},
                                                          ReduceOp::sum)),
                    Catch::Matchers::Contains("counts has 2 entries for 1 rank"));
  for (const std::vector<index_t>& counts : {std::vector<index_t>{2, 5}, std::vector<index_t>{0, 3}, std::vector<index_t>{3, 0, 5}}) {
    const int world = static_cast<int>(counts.size());
    index_t total = 0;
    for (index_t c : counts) total += c;
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      const auto got = on_ranks(world, [&](dist::InProcessComm& comm) {
        const auto send = rank_values<float>(comm.rank(), static_cast<int>(total));
        std::vector<float> recv(static_cast<std::size_t>(counts[static_cast<std::size_t>(comm.rank())]));
        comm.ireduce_scatter_v<float, Cpu>(send.data(), recv.data(), counts, op).wait();
        return recv;
      });
      for (int r = 0; r < world; ++r) {
        INFO("world " << world << ", rank " << r);
        CHECK(got[static_cast<std::size_t>(r)] == expected(world, counts, r, op));
      }
    }
  }
}

TEST_CASE("InProcessComm: ranks disagreeing on a count all get an error, none hangs", "[dist][comm]") {
  CHECK_THROWS_WITH(on_ranks(2, [](dist::InProcessComm& comm) {
                      std::vector<float> v(4, 1.0f);
                      comm.all_reduce<float, Cpu>(v.data(), comm.rank() == 0 ? 4 : 3, ReduceOp::sum);
                    }),
                    Catch::Matchers::Contains("different count"));
}
