// ZeRO-1 checkpoints across world sizes (io/optimizer_shards.hpp) over the in-process fake: a
// Hybrid optimiser sharded over 2 ranks writes one shard per rank and a manifest; the set loads
// at world 1, 2 and 3 into bitwise the state of an unsharded optimiser trained alike, and the next
// step gives bitwise the parameters of uninterrupted training. A missing, truncated or corrupted
// shard is an error naming the file.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "on_ranks.hpp"
#include "megacpp/dist/in_process.hpp"
#include "megacpp/io/optimizer_shards.hpp"
#include "zero1_model.hpp"

using namespace megacpp;
using testing::on_ranks;
namespace fs = std::filesystem;

namespace {

constexpr int kSavedAt = 3;  // steps before the checkpoint

struct Dir {
  fs::path path;
  explicit Dir(const std::string& name)
      : path(fs::temp_directory_path() / ("megacpp_zero1_ckpt_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
};

// The protocol of a sharded save (examples/train/run_checkpoint.hpp save_sharded_checkpoint):
// every rank writes its shard, the sizes and checksums go to rank 0 (the all-reduce is the
// barrier), rank 0 writes the manifest.
template <class C>
void save_shards(C& comm, const fs::path& dir, optim::Hybrid<float, Cpu>& opt) {
  const int rank = comm.rank(), world = comm.size();
  const io::OptimizerShardFile mine = io::save_optimizer_shard(dir, rank, world, opt);
  std::vector<std::int64_t> digests(2 * static_cast<std::size_t>(world), 0);
  digests[2 * static_cast<std::size_t>(rank)] = static_cast<std::int64_t>(mine.bytes);
  digests[2 * static_cast<std::size_t>(rank) + 1] = static_cast<std::int64_t>(mine.fnv1a64);
  comm.template all_reduce<std::int64_t, Cpu>(digests.data(), 2 * world, dist::ReduceOp::sum);
  if (rank == 0) {
    std::vector<io::OptimizerShardFile> shards;
    for (int r = 0; r < world; ++r)
      shards.push_back({r, io::optimizer_shard_name(r, world), static_cast<std::uint64_t>(digests[2 * static_cast<std::size_t>(r)]),
                        static_cast<std::uint64_t>(digests[2 * static_cast<std::size_t>(r) + 1])});
    io::write_optimizer_manifest(dir, world, shards);
  }
  comm.barrier();
}

// Uninterrupted unsharded training: the parameters and the whole state after kSavedAt steps,
// and the parameters after one more.
struct Reference {
  std::vector<float> params_at_save, params_after;
  optim::OptimizerState<float, Cpu> state_at_save;
};

Reference reference() {
  dist::SingleProcess single;
  zero1_test::Params params;
  auto opt = params.optimizer();
  for (int s = 0; s < kSavedAt; ++s) params.step(opt, single, s);
  Reference r;
  r.params_at_save = params.flat();
  r.state_at_save = optim::save_state(opt);
  params.step(opt, single, kSavedAt);
  r.params_after = params.flat();
  return r;
}

// kSavedAt steps sharded over 2 in-process ranks, then a sharded save into `dir`.
void save_at_world2(const fs::path& dir) {
  on_ranks(2, [&](dist::InProcessComm& comm) {
    zero1_test::Params params;
    auto opt = params.optimizer();
    opt.shard(comm.rank(), comm.size());
    for (int s = 0; s < kSavedAt; ++s) params.step(opt, comm, s);
    save_shards(comm, dir, opt);
  });
}

// Fresh parameters set to `values` (the trained ones: every rank holds them after the all-gather).
void set_params(zero1_test::Params& params, const std::vector<float>& values) {
  std::size_t at = 0;
  for (auto& p : params.store) {
    const auto n = static_cast<std::size_t>(p.shape().numel());
    p.var.mutable_value().assign(Tensor<float, Cpu>::from_host(p.shape(), std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(at),
                                                                                              values.begin() + static_cast<std::ptrdiff_t>(at + n))));
    at += n;
  }
}

void check_same_state(const optim::OptimizerState<float, Cpu>& got, const optim::OptimizerState<float, Cpu>& want) {
  CHECK(got.counters == want.counters);
  REQUIRE(got.tensors.size() == want.tensors.size());
  for (const auto& [name, t] : want.tensors) {
    INFO(name);
    REQUIRE(got.tensors.count(name) == 1);
    CHECK(got.tensors.at(name).to_host() == t.to_host());
  }
}

}  // namespace

TEST_CASE("ZeRO-1 checkpoint: 2 shards + manifest; resumes at world 1, 2 and 3 bitwise", "[dist][zero1][checkpoint]") {
  const Reference ref = reference();
  Dir dir("resume");
  save_at_world2(dir.path);
  CHECK(fs::exists(dir.path / io::kOptimizerManifest));
  CHECK(fs::exists(dir.path / "optimizer.rank00000-of-00002.safetensors"));
  CHECK(fs::exists(dir.path / "optimizer.rank00001-of-00002.safetensors"));
  CHECK_FALSE(fs::exists(dir.path / "optimizer.safetensors"));
  const io::OptimizerManifest m = io::verify_optimizer_shards(dir.path);
  CHECK(m.world_size == 2);
  CHECK(m.owners.size() == ref.state_at_save.tensors.size() + ref.state_at_save.counters.size());
  int owned[2] = {0, 0};
  for (const auto& [name, r] : m.owners) ++owned[r];
  CHECK(owned[0] > 0);
  CHECK(owned[1] > 0);  // both ranks hold a share

  SECTION("world 1") {
    dist::SingleProcess single;
    zero1_test::Params params;
    set_params(params, ref.params_at_save);
    auto opt = params.optimizer();
    io::load_optimizer_shards(dir.path, opt);
    check_same_state(optim::save_state(opt), ref.state_at_save);
    params.step(opt, single, kSavedAt);
    CHECK(params.flat() == ref.params_after);
  }
  for (int world : {2, 3}) {
    DYNAMIC_SECTION("world " << world << ", sharded") {
      // Each rank's state after the load and parameters after the next step, checked here: Catch2's
      // assertions are not thread-safe (tests/dist/on_ranks.hpp).
      const auto ranks = on_ranks(world, [&](dist::InProcessComm& comm) {
        zero1_test::Params params;
        set_params(params, ref.params_at_save);
        auto opt = params.optimizer();
        io::load_optimizer_shards(dir.path, opt);
        auto loaded = optim::save_state(opt);
        opt.shard(comm.rank(), comm.size());
        params.step(opt, comm, kSavedAt);
        return std::make_pair(std::move(loaded), params.flat());
      });
      for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
        INFO("rank " << rank << " of " << world);
        check_same_state(ranks[rank].first, ref.state_at_save);
        CHECK(ranks[rank].second == ref.params_after);
      }
    }
  }
  SECTION("a sharded optimiser is refused: load first, then shard") {
    zero1_test::Params params;
    auto opt = params.optimizer();
    opt.shard(0, 2);
    CHECK_THROWS_WITH(io::load_optimizer_shards(dir.path, opt), Catch::Matchers::Contains("sharded over 2 ranks"));
  }
}

TEST_CASE("ZeRO-1 checkpoint: a missing, truncated or corrupted shard is an error naming the file", "[dist][zero1][checkpoint]") {
  Dir dir("damaged");
  save_at_world2(dir.path);
  const fs::path shard0 = dir.path / "optimizer.rank00000-of-00002.safetensors";
  const fs::path shard1 = dir.path / "optimizer.rank00001-of-00002.safetensors";
  zero1_test::Params params;
  auto opt = params.optimizer();
  const auto before = optim::save_state(opt);
  using Catch::Matchers::Contains;

  SECTION("missing") {
    fs::remove(shard1);
    CHECK_THROWS_WITH(io::load_optimizer_shards(dir.path, opt),
                      Contains(shard1.string()) && Contains("is missing") && Contains("incomplete"));
  }
  SECTION("truncated") {
    const auto size = fs::file_size(shard0);
    fs::resize_file(shard0, size - 5);
    CHECK_THROWS_WITH(io::load_optimizer_shards(dir.path, opt), Contains(shard0.string()) && Contains("(truncated)"));
  }
  SECTION("one flipped byte") {
    const auto size = fs::file_size(shard1);
    std::fstream f(shard1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size - 3));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(size - 3));
    f.write(&c, 1);
    f.close();
    CHECK_THROWS_WITH(io::load_optimizer_shards(dir.path, opt), Contains(shard1.string()) && Contains("corrupted"));
  }
  SECTION("no manifest") {
    fs::remove(dir.path / io::kOptimizerManifest);
    CHECK_THROWS_WITH(io::load_optimizer_shards(dir.path, opt), Contains(io::kOptimizerManifest));
  }
  SECTION("a manifest that gives a shard's state to another rank") {
    const fs::path manifest = dir.path / io::kOptimizerManifest;
    std::string text;
    {
      std::ifstream in(manifest);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    const auto at = text.find("\"exp_avg.embed\": ");
    REQUIRE(at != std::string::npos);
    const std::size_t digit = at + std::string("\"exp_avg.embed\": ").size();
    text[digit] = text[digit] == '0' ? '1' : '0';
    std::ofstream(manifest, std::ios::trunc) << text;
    CHECK_THROWS_WITH(io::load_optimizer_shards(dir.path, opt), Contains("exp_avg.embed") && Contains("does not give to rank"));
  }
  check_same_state(optim::save_state(opt), before);  // a failed load changes nothing
}
