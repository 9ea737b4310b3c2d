// MpiComm under `mpirun -np 2` (tests/dist/run_mpi.sh): every collective and element type that data
// parallelism and distributed Muon use, blocking and not; and data parallelism over MPI giving
// bitwise the result of one process accumulating two micro-batches. Both ranks run every test
// case, in the same order (collectives must match).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "dp_model.hpp"
#include "megacpp/dist/mpi.hpp"
#include "zero1_model.hpp"

using namespace megacpp;
using dist::ReduceOp;

namespace {
dist::MpiComm* world_comm = nullptr;

template <class T>
std::vector<T> rank_values(int rank, int n) {  // rank r: r * 10 + i
  std::vector<T> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<T>(rank * 10 + i);
  return v;
}

template <class T>
void check_all_reduce(dist::MpiComm& comm, ReduceOp op, bool non_blocking) {
  const int world = comm.size(), n = 5;
  auto v = rank_values<T>(comm.rank(), n);
  if (non_blocking) {
    auto h = comm.iall_reduce<T, Cpu>(v.data(), n, op);
    while (!h.test()) {
    }
    h.wait();
  } else {
    comm.all_reduce<T, Cpu>(v.data(), n, op);
  }
  const double ranks_sum = world * (world - 1) / 2.0;
  for (int i = 0; i < n; ++i) {
    const double sum = 10 * ranks_sum + world * i;
    const double expected = op == ReduceOp::sum ? sum : op == ReduceOp::avg ? sum / world : (world - 1) * 10 + i;
    CHECK(static_cast<double>(v[static_cast<std::size_t>(i)]) == Approx(expected));
  }
}
}  // namespace

static_assert(dist::Comm<dist::MpiComm, float, Cpu>);

TEST_CASE("MpiComm: the world of mpirun -np 2", "[mpi]") {
  CHECK(world_comm->size() == 2);
  CHECK(world_comm->rank() >= 0);
  CHECK(dist::launched_by_mpi());
}

TEST_CASE("MpiComm: all_reduce sum / avg / max on float, double, int32, int64, blocking and not", "[mpi]") {
  dist::MpiComm& comm = *world_comm;
  for (bool nb : {false, true}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      check_all_reduce<float>(comm, op, nb);
      check_all_reduce<double>(comm, op, nb);
      check_all_reduce<std::int32_t>(comm, op, nb);
      check_all_reduce<std::int64_t>(comm, op, nb);
    }
  }
}

TEST_CASE("MpiComm: reduce_scatter, all_gather, broadcast, barrier", "[mpi]") {
  dist::MpiComm& comm = *world_comm;
  const int world = comm.size(), rank = comm.rank(), n = 3;
  const double ranks_sum = world * (world - 1) / 2.0;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    auto send = rank_values<float>(rank, n * world);
    std::vector<float> recv(static_cast<std::size_t>(n));
    comm.reduce_scatter<float, Cpu>(send.data(), recv.data(), n, op);
    for (int i = 0; i < n; ++i) {
      const double sum = 10 * ranks_sum + world * (rank * n + i);
      CHECK(recv[static_cast<std::size_t>(i)] == Approx(op == ReduceOp::sum ? sum : sum / world));
    }
  }
  for (bool nb : {false, true}) {
    auto mine = rank_values<float>(rank, n);
    std::vector<float> all(static_cast<std::size_t>(n * world));
    if (nb) comm.iall_gather<float, Cpu>(mine.data(), n, all.data()).wait();
    else comm.all_gather<float, Cpu>(mine.data(), n, all.data());
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < n; ++i) CHECK(all[static_cast<std::size_t>(r * n + i)] == static_cast<float>(r * 10 + i));
    auto b = rank_values<double>(rank, n);
    if (nb) comm.ibroadcast<double, Cpu>(b.data(), n, world - 1).wait();
    else comm.broadcast<double, Cpu>(b.data(), n, world - 1);
    CHECK(b == rank_values<double>(world - 1, n));
    auto bytes = rank_values<std::uint8_t>(rank, n);
    comm.broadcast<std::uint8_t, Cpu>(bytes.data(), n, 0);
    CHECK(bytes == rank_values<std::uint8_t>(0, n));
  }
  comm.barrier();
}

TEST_CASE("MpiComm: reduce_scatter_v with unequal and empty blocks, blocking and not", "[mpi]") {
  dist::MpiComm& comm = *world_comm;
  const int world = comm.size(), rank = comm.rank();
  for (index_t first : {index_t{0}, index_t{2}, index_t{7}}) {
    std::vector<index_t> counts(static_cast<std::size_t>(world), 3);
    counts[0] = first;
    index_t total = 0, at = 0;
    for (index_t c : counts) total += c;
    for (int r = 0; r < rank; ++r) at += counts[static_cast<std::size_t>(r)];
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      for (bool nb : {false, true}) {
        const auto send = rank_values<float>(rank, static_cast<int>(total));
        std::vector<float> recv(static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)]) + 1, -1.0f);
        if (nb) {
          auto h = comm.ireduce_scatter_v<float, Cpu>(send.data(), recv.data(), std::vector<index_t>(counts), op);
          h.wait();  // the count vector above is gone: the handle keeps MPI's copy
        } else {
          comm.reduce_scatter_v<float, Cpu>(send.data(), recv.data(), counts, op);
        }
        INFO("first block " << first << ", rank " << rank << ", non-blocking " << nb);
        for (index_t i = 0; i < counts[static_cast<std::size_t>(rank)]; ++i) {
          const double sum = 10 * world * (world - 1) / 2.0 + world * static_cast<double>(at + i);
          CHECK(recv[static_cast<std::size_t>(i)] == Approx(op == ReduceOp::sum ? sum : sum / world));
        }
        CHECK(recv.back() == -1.0f);  // nothing written past this rank's block
      }
  }
  float x = 0;
  CHECK_THROWS_WITH((comm.reduce_scatter_v<float, Cpu>(&x, &x, std::vector<index_t>{1}, ReduceOp::sum)),
                    Catch::Matchers::Contains("counts has 1 entries for 2 ranks"));
}

TEST_CASE("MpiComm: a collective another rank does not join times out with an error naming it", "[mpi]") {
  // Its own communicator, so the abandoned collective cannot disturb world_comm's; rank 1 joins
  // only after rank 0 gave up, and rank 0's MPI calls (the barriers) then complete it: the
  // buffer it may still write is static.
  static float value[1] = {1.0f};
  dist::MpiComm side;
  CHECK_THROWS_WITH(side.set_timeout(-1), Catch::Matchers::Contains("seconds must be finite and >= 0, got -1"));
  if (side.rank() == 0) {
    side.set_timeout(0.5);
    CHECK_THROWS_WITH((side.all_reduce<float, Cpu>(value, 1, ReduceOp::sum)),
                      Catch::Matchers::Contains("MpiComm::all_reduce") && Catch::Matchers::Contains("no completion after 0.5 s"));
  }
  world_comm->barrier();
  if (side.rank() == 1) side.all_reduce<float, Cpu>(value, 1, ReduceOp::sum);  // no timeout: rank 0's progress ends it
  world_comm->barrier();
  CHECK(side.timeout() == (side.rank() == 0 ? 0.5 : 0.0));
}

TEST_CASE("MpiComm: bad arguments are errors, not aborts", "[mpi]") {
  dist::MpiComm& comm = *world_comm;
  float x = 1;
  CHECK_THROWS_WITH((comm.broadcast<float, Cpu>(&x, 1, 5)), Catch::Matchers::Contains("root 5 out of range"));
  CHECK_THROWS_WITH((comm.all_reduce<float, Cpu>(&x, -1, ReduceOp::sum)), Catch::Matchers::Contains("count -1"));
}

TEST_CASE("DataParallel over MPI: world 2 x micro b == world 1 x accumulation 2 x micro b, bitwise", "[mpi][data_parallel]") {
  dist::SingleProcess single;
  const dp_test::Result one = dp_test::train(single, 5, 2, 8, 1 << 20);
  for (std::size_t bucket_bytes : {std::size_t{64}, std::size_t{25} << 20}) {
    const dp_test::Result two = dp_test::train(*world_comm, 5, 1, 8, bucket_bytes);
    INFO("rank " << world_comm->rank() << ", bucket bytes " << bucket_bytes);
    CHECK(two.losses == one.losses);
    CHECK(two.params == one.params);
  }
}

TEST_CASE("Distributed Muon over MPI (overlapped all-gathers) equals single-process Muon bitwise", "[mpi][muon]") {
  // Five matrices of different shapes: chunks of two, the last one alone, padding in the gather.
  const std::vector<std::pair<index_t, index_t>> shapes{{32, 16}, {16, 48}, {24, 24}, {8, 40}, {40, 8}};
  const auto train = [&shapes](auto& comm) {
    Rng rng(9);
    std::vector<Param<float, Cpu>> store;
    for (const auto& shape : shapes) store.push_back(Param<float, Cpu>::normal({shape.first, shape.second}, Role::matrix, rng, 0.5));
    std::vector<optim::ParamRef<float, Cpu>> refs;
    for (std::size_t i = 0; i < store.size(); ++i) refs.push_back(optim::make_param_ref("m" + std::to_string(i), store[i]));
    optim::Muon<float, Cpu> muon(refs, {.weight_decay = 0.01});
    for (std::uint64_t s = 0; s < 3; ++s) {
      Rng grads(500 + s);  // every rank sees the same (all-reduced) gradients
      for (auto& p : store) p.var.grad_buffer().assign(randn<float, Cpu>(p.shape(), grads, 1.0));
      muon.step(comm);
    }
    std::vector<float> values;
    for (const auto& p : store)
      for (float v : p.value().to_host()) values.push_back(v);
    return values;
  };
  dist::SingleProcess one;
  const std::vector<float> single = train(one);
  CHECK(train(*world_comm) == single);
}

TEST_CASE("ZeRO-1 over MPI: sharded Hybrid == unsharded single-process Hybrid after 5 steps, bitwise", "[mpi][zero1]") {
  dist::SingleProcess single;
  const zero1_test::Result one = zero1_test::train(single, 5, false);
  const zero1_test::Result two = zero1_test::train(*world_comm, 5, true);
  INFO("rank " << world_comm->rank());
  CHECK(two.params == one.params);
  auto total = static_cast<std::int64_t>(two.state_bytes);
  world_comm->all_reduce<std::int64_t, Cpu>(&total, 1, ReduceOp::sum);
  CHECK(total == static_cast<std::int64_t>(one.unsharded_bytes));  // every byte of state held exactly once
  CHECK(two.state_bytes < one.unsharded_bytes);
  CHECK(two.full_state == one.full_state);  // unshard(): the unsharded optimiser's state, bit for bit
}

TEST_CASE("ZeRO-1 over MPI: DataParallel + sharded AdamW == world 1 x accumulation 2, bitwise", "[mpi][zero1][data_parallel]") {
  dist::SingleProcess single;
  const dp_test::Result one = dp_test::train(single, 5, 2, 8, 1 << 20);
  const dp_test::Result two = dp_test::train(*world_comm, 5, 1, 8, 1 << 20, dp_test::Zero::state);
  CHECK(two.losses == one.losses);
  CHECK(two.params == one.params);
}

TEST_CASE("ZeRO-1 over MPI: gradients reduce-scattered to their owners + sharded clip == world 1, bitwise",
          "[mpi][zero1][data_parallel]") {
  dist::SingleProcess single;
  const dp_test::Result one = dp_test::train(single, 5, 2, 8, 1 << 20);
  REQUIRE(one.clipped > 0);
  for (std::size_t bucket_bytes : {std::size_t{64}, std::size_t{1} << 20}) {
    const dp_test::Result two = dp_test::train(*world_comm, 5, 1, 8, bucket_bytes, dp_test::Zero::reduce_scatter);
    INFO("rank " << world_comm->rank() << ", bucket bytes " << bucket_bytes);
    CHECK(two.losses == one.losses);
    CHECK(two.params == one.params);
    CHECK(two.clipped == one.clipped);
  }
}

int main(int argc, char** argv) {
  dist::MpiEnvironment env(&argc, &argv);
  int status = 0;
  {
    dist::MpiComm comm;
    world_comm = &comm;
    status = Catch::Session().run(argc, argv);
    // Every rank's verdict: a failure on either rank fails the job.
    comm.all_reduce<int, Cpu>(&status, 1, ReduceOp::max);
    world_comm = nullptr;
  }
  return status;
}
