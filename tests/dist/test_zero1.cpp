// ZeRO-1 over the in-process fake (2 and 3 ranks): sharded Hybrid (Muon momentum, AdamW moments)
// gives bitwise the parameters of the unsharded single-process optimiser after 5 steps, holds
// its share of the state, and refuses a mismatched communicator; DataParallel with sharded AdamW
// equals one process accumulating the micro-batches.
#include <catch2/catch.hpp>

#include <exception>
#include <thread>
#include <vector>

#include "dp_model.hpp"
#include "on_ranks.hpp"
#include "megacpp/dist/in_process.hpp"
#include "zero1_model.hpp"

using namespace megacpp;
using testing::on_ranks;

TEST_CASE("balanced_owners: largest first to the least-loaded rank", "[dist][zero1]") {
  CHECK(optim::balanced_owners({10, 40, 30, 20}, 2) == std::vector<int>{0, 0, 1, 1});  // 40, 30, 20 -> 1, 10 -> 0: 50, 50
  CHECK(optim::balanced_owners({5, 5, 5}, 3) == std::vector<int>{0, 1, 2});
  CHECK(optim::balanced_owners({7, 3}, 1) == std::vector<int>{0, 0});
  CHECK_THROWS_WITH(optim::balanced_owners({1}, 0), Catch::Matchers::Contains("world size must be >= 1, got 0"));
}

TEST_CASE("ZeRO-1 Hybrid == unsharded after 5 steps, bitwise, over 2 and 3 in-process ranks", "[dist][zero1]") {
  dist::SingleProcess single;
  const zero1_test::Result one = zero1_test::train(single, 5, false);
  CHECK(one.state_bytes == one.unsharded_bytes);
  for (int world : {2, 3}) {
    const auto ranks = on_ranks(world, [](dist::InProcessComm& comm) { return zero1_test::train(comm, 5, true); });
    std::vector<std::size_t> bytes;
    for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
      const zero1_test::Result& sharded = ranks[rank];
      INFO("world " << world << ", rank " << rank);
      CHECK(sharded.params == one.params);
      CHECK(sharded.unsharded_bytes == one.unsharded_bytes);
      CHECK(sharded.state_bytes < one.unsharded_bytes);
      bytes.push_back(sharded.state_bytes);
      // unshard: every rank then holds the unsharded optimiser's state, bit for bit
      CHECK(sharded.full_state == one.full_state);
    }
    std::size_t total = 0;
    for (std::size_t b : bytes) total += b;
    CHECK(total == one.unsharded_bytes);  // every byte of state is held exactly once
  }
}

TEST_CASE("ZeRO-1 DataParallel + sharded AdamW == world 1 x accumulation 2, bitwise", "[dist][zero1][data_parallel]") {
  dist::SingleProcess single;
  const dp_test::Result one = dp_test::train(single, 5, 2, 8, 1 << 20);
  const auto ranks =
      on_ranks(2, [](dist::InProcessComm& comm) { return dp_test::train(comm, 5, 1, 8, 1 << 20, /*zero1=*/true); });
  for (const dp_test::Result& two : ranks) {
    CHECK(two.losses == one.losses);
    CHECK(two.params == one.params);
  }
}

TEST_CASE("ZeRO-1: a sharded optimiser refuses a step without the communicator it was sharded for", "[dist][zero1]") {
  Rng rng(3);
  auto w = Param<float, Cpu>::normal({4, 4}, Role::matrix, rng, 1.0);
  auto g = Param<float, Cpu>::normal({4}, Role::norm_gain, rng, 1.0);
  optim::Hybrid<float, Cpu> opt({optim::make_param_ref("w", w), optim::make_param_ref("g", g)});
  CHECK_THROWS_WITH(opt.shard(2, 2), Catch::Matchers::Contains("rank 2 of 2 is out of range"));
  opt.shard(1, 2);
  CHECK(opt.state_bytes() == 0);  // w is Muon's parameter 0 (rank 0's), g AdamW's only one (balanced: rank 0's)
  w.var.grad_buffer().assign(randn<float, Cpu>(w.shape(), rng, 1.0));
  g.var.grad_buffer().assign(randn<float, Cpu>(g.shape(), rng, 1.0));
  CHECK_THROWS_WITH(opt.step(), Catch::Matchers::Contains("sharded for rank 1 of 2"));
  dist::SingleProcess single;
  CHECK_THROWS_WITH(opt.step(single), Catch::Matchers::Contains("but the communicator is rank 0 of 1"));
  opt.shard(0, 1);  // back to unsharded: every moment held again (zeros for the ones dropped)
  CHECK(opt.state_bytes() == opt.unsharded_state_bytes());
  opt.step();
}
