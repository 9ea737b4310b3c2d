// ZeRO-1 over the in-process fake (2 and 3 ranks): sharded Hybrid (Muon momentum, AdamW moments)
// gives bitwise the parameters of the unsharded single-process optimiser after 5 steps, holds
// its share of the state, and refuses a mismatched communicator; DataParallel with sharded AdamW
// equals one process accumulating the micro-batches.
#include <catch2/catch.hpp>

#include <exception>
#include <limits>
#include <string>
#include <utility>
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
  REQUIRE(one.clipped > 0);  // the clip is exercised
  const auto ranks =
      on_ranks(2, [](dist::InProcessComm& comm) { return dp_test::train(comm, 5, 1, 8, 1 << 20, dp_test::Zero::state); });
  for (const dp_test::Result& two : ranks) {
    CHECK(two.losses == one.losses);
    CHECK(two.params == one.params);
  }
}

TEST_CASE("ZeRO-1 reduce-scatter of gradients to their owners + the sharded clip == world 1, bitwise",
          "[dist][zero1][data_parallel]") {
  // World 2 against world 1 x accumulation 2; world 3 against world 3 with all-reduced
  // gradients (a third is not exact in binary, so scaling each micro-batch's loss by 1/3 and
  // averaging three ranks round differently). 64-byte buckets put each parameter alone (blocks
  // of one owner and empty ones), 1 MB buckets hold all three (an unequal block per owner).
  for (int world : {2, 3}) {
    dist::SingleProcess single;
    const dp_test::Result one =
        world == 2 ? dp_test::train(single, 5, world, 8, 1 << 20)
                   : on_ranks(world, [](dist::InProcessComm& comm) { return dp_test::train(comm, 5, 1, 8, 1 << 20); })[0];
    REQUIRE(one.clipped > 0);
    for (std::size_t bucket_bytes : {std::size_t{64}, std::size_t{1} << 20}) {
      const auto ranks = on_ranks(world, [bucket_bytes](dist::InProcessComm& comm) {
        return dp_test::train(comm, 5, 1, 8, bucket_bytes, dp_test::Zero::reduce_scatter);
      });
      for (const dp_test::Result& r : ranks) {
        INFO("world " << world << ", bucket bytes " << bucket_bytes);
        CHECK(r.losses == one.losses);
        CHECK(r.params == one.params);
        CHECK(r.clipped == one.clipped);
      }
    }
  }
}

TEST_CASE("ZeRO-1 reduce-scatter: only the owned gradients are averaged; half the all-reduce's volume",
          "[dist][zero1][data_parallel]") {
  const auto ranks = on_ranks(2, [](dist::InProcessComm& comm) {
    dp_test::Net net(7);
    const auto [x, y] = dp_test::batch(comm.rank(), 8);  // each rank its own rows
    // owners: w1 -> 0, w2 and bias -> 1
    dist::DataParallel<float, Cpu, dist::InProcessComm> all(comm, net.params());
    backward(net.loss(x, y));
    all.finish();
    std::vector<std::vector<float>> averaged;
    for (const auto& p : net.params()) averaged.push_back(p.grad().to_host());
    for (auto& p : net.params()) p.zero_grad();
    std::vector<std::vector<float>> local;
    backward(net.loss(x, y));
    for (const auto& p : net.params()) local.push_back(p.grad().to_host());
    const double all_sent = all.ring_elements_sent();
    {
      dist::DataParallel<float, Cpu, dist::InProcessComm> scatter(comm, net.params(), {.owners = {0, 1, 1}});
      CHECK(scatter.reduce_scatters());
      CHECK(scatter.ring_elements_sent() == all_sent / 2);
      for (auto& p : net.params()) p.zero_grad();
      backward(net.loss(x, y));
      scatter.finish();
    }
    const std::vector<int> owners{0, 1, 1};
    std::vector<bool> ok;
    for (std::size_t k = 0; k < 3; ++k)
      ok.push_back(net.params()[k].grad().to_host() == (owners[k] == comm.rank() ? averaged[k] : local[k]));
    return ok;
  });
  for (const auto& ok : ranks) CHECK(ok == std::vector<bool>{true, true, true});
}

TEST_CASE("ZeRO-1 sharded clip: every rank learns which owned gradient is not finite", "[dist][zero1]") {
  const auto ranks = on_ranks(2, [](dist::InProcessComm& comm) {
    dp_test::Net net(7);
    const std::vector<optim::ParamRef<float, Cpu>> refs{optim::ParamRef<float, Cpu>{"w1", net.w1, Role::matrix, {}},
                                                        optim::ParamRef<float, Cpu>{"w2", net.w2, Role::matrix, {}},
                                                        optim::ParamRef<float, Cpu>{"bias", net.bias, Role::bias, {}}};
    for (const auto& p : refs) p.var.grad_buffer().fill(1.0f);
    // w2 is rank 1's: only rank 1's copy of its gradient counts, and only rank 1 holds the NaN
    if (comm.rank() == 1) net.w2.grad_buffer().data()[5] = std::numeric_limits<float>::quiet_NaN();
    std::pair<optim::ClipResult, std::string> out;  // checked on the main thread (Catch2 is not thread-safe)
    out.first = optim::clip_grad_norm(refs, comm, {0, 1, 1}, 1.0, optim::NonFinitePolicy::skip);
    try {
      (void)optim::clip_grad_norm(refs, comm, {0, 1, 1}, 1.0);
    } catch (const Error& e) {
      out.second = e.what();
    }
    return out;
  });
  for (const auto& [r, error] : ranks) {
    CHECK(r.skip_step());
    CHECK(r.non_finite == std::vector<std::string>{"w2"});
    CHECK_THAT(error, Catch::Matchers::Contains("non-finite gradients in 'w2'"));
  }
}

TEST_CASE("ZeRO-1 reduce-scatter: owners that do not fit are refused", "[dist][zero1][data_parallel]") {
  dp_test::Net net(7);
  dist::SingleProcess comm;
  using DP = dist::DataParallel<float, Cpu, dist::SingleProcess>;
  CHECK_THROWS_WITH(DP(comm, net.params(), {.owners = {0, 0}}), Catch::Matchers::Contains("owners has 2 entries for 3"));
  CHECK_THROWS_WITH(DP(comm, net.params(), {.owners = {0, 1, 0}}),
                    Catch::Matchers::Contains("owner 1 of parameter 1 is out of range for world size 1"));
  std::vector<optim::ParamRef<float, Cpu>> refs{optim::ParamRef<float, Cpu>{"w1", net.w1, Role::matrix, {}}};
  CHECK_THROWS_WITH(optim::clip_grad_norm(refs, comm, {0, 0}), Catch::Matchers::Contains("owners has 2 entries for 1"));
}

TEST_CASE("Hybrid::owner: Muon's round-robin, AdamW's balanced owners, 0 unsharded", "[dist][zero1]") {
  zero1_test::Params params;
  optim::Hybrid<float, Cpu> opt = params.optimizer();
  for (const auto& [name, role] : params.names) CHECK(opt.owner(name) == 0);
  opt.shard(1, 3);
  for (int m = 0; m < 5; ++m) CHECK(opt.owner("m" + std::to_string(m)) == m % 3);  // Muon's parameter i: rank i % 3
  const std::vector<int> adamw = optim::balanced_owners({50 * 16, 16 * 50, 16, 48, 24, 7}, 3);
  for (std::size_t i = 0; i < adamw.size(); ++i) CHECK(opt.owner(params.names[5 + i].first) == adamw[i]);
  CHECK_THROWS_WITH(opt.owner("nope"), Catch::Matchers::Contains("no parameter named 'nope'"));
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
