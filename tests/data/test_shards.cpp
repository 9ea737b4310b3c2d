// .bin token shards and the packed-row loader: format, validation, rank slicing, resume.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <numeric>
#include <vector>

#include "data/temp_dir.hpp"
#include "megacpp/data.hpp"
#include "megacpp/megacpp.hpp"

using namespace megacpp;
using megacpp::testing::TempDir;
using Catch::Matchers::Contains;

namespace {
std::vector<std::uint32_t> iota_tokens(std::size_t n, std::uint32_t start = 0) {
  std::vector<std::uint32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}
void write_raw(const std::filesystem::path& p, std::vector<std::int32_t> header, std::size_t token_bytes) {
  header.resize(256, 0);
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  const std::string body(token_bytes, '\0');
  out.write(body.data(), static_cast<std::streamsize>(body.size()));
}
}  // namespace

TEST_CASE("shards: version 1 (uint16) and version 2 (uint32) round trips", "[data]") {
  TempDir dir;
  data::write_shard(dir / "a.bin", iota_tokens(1000, 65000));
  data::TokenShard small(dir / "a.bin");
  CHECK(small.version() == 2);  // ids reach 65999
  CHECK(small.size() == 1000);
  CHECK(small.token(999) == 65999);
  CHECK_THROWS_WITH(small.token(1000), Contains("token position 1000 outside its 1000 tokens"));
  CHECK_THROWS_WITH(small.token(-1), Contains("token position -1"));
  data::write_shard(dir / "b.bin", iota_tokens(300));
  data::TokenShard b(dir / "b.bin");
  CHECK(b.version() == 1);
  CHECK(std::filesystem::file_size(dir / "b.bin") == 1024 + 600);
  std::vector<std::int32_t> out(5);
  b.read(10, out, 1000);
  CHECK(out == std::vector<std::int32_t>{10, 11, 12, 13, 14});
}

TEST_CASE("shards: bad files are errors naming the file and the value", "[data][errors]") {
  TempDir dir;
  write_raw(dir / "magic.bin", {12345, 1, 0}, 0);
  CHECK_THROWS_WITH(data::TokenShard(dir / "magic.bin"), Contains("bad magic 12345 (expected 20240520)"));
  write_raw(dir / "version.bin", {20240520, 3, 0}, 0);
  CHECK_THROWS_WITH(data::TokenShard(dir / "version.bin"), Contains("unsupported version 3"));
  write_raw(dir / "trunc.bin", {20240520, 1, 100}, 150);
  CHECK_THROWS_WITH(data::TokenShard(dir / "trunc.bin"), Contains("header claims 100 tokens (1224 bytes) but the file has 1174 bytes: truncated"));
  write_raw(dir / "trailing.bin", {20240520, 1, 10}, 24);
  CHECK_THROWS_WITH(data::TokenShard(dir / "trailing.bin"), Contains("4 trailing bytes"));
  std::ofstream(dir / "tiny.bin") << "x";
  CHECK_THROWS_WITH(data::TokenShard(dir / "tiny.bin"), Contains("shorter than the 1024-byte header"));
  data::write_shard(dir / "ok.bin", iota_tokens(100));
  std::vector<std::int32_t> out(10);
  CHECK_THROWS_WITH(data::TokenShard(dir / "ok.bin").read(90, out, 95), Contains("token id 95 at position 95 >= vocab 95"));
  TempDir empty;
  CHECK_THROWS_WITH(data::list_shards(empty.path), Contains("no .bin shards in"));
  CHECK_THROWS_WITH(data::list_shards(empty / "nope"), Contains("does not exist"));
}

TEST_CASE("loader: rows are consecutive stream windows, targets shifted by one", "[data]") {
  TempDir dir;
  data::write_shard(dir / "s0.bin", iota_tokens(100));
  data::ShardLoader loader(data::list_shards(dir.path), /*batch=*/2, /*seq=*/4, /*vocab=*/1000);
  auto b0 = loader.next<float, Cpu>();
  CHECK(b0.input_ids_host == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(b0.target_ids_host == std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(b0.input_ids.ids().shape() == Shape{2, 4});
  CHECK(b0.input_ids.ids().to_host() == b0.input_ids_host);
  CHECK(b0.target_ids.ids().to_host() == b0.target_ids_host);
  CHECK(b0.input_ids.bound() == 1000);
  CHECK(b0.loss_mask.weights().to_host() == std::vector<float>(8, 1.0f));
  CHECK(b0.loss_mask.sum() == 8.0);
  auto b1 = loader.next<float, Cpu>();
  CHECK(b1.input_ids_host[0] == 8);
}

TEST_CASE("PackedBatch::upload checks every id and mask weight on the host, naming the bad one", "[data][errors]") {
  data::PackedBatch<float, Cpu> b;
  b.batch = 1;
  b.seq = 3;
  b.input_ids_host = {0, 4, 2};
  b.target_ids_host = {4, 2, 1};
  b.loss_mask_host = {1, 0, 1};
  b.upload(5);
  CHECK(b.target_ids.bound() == 5);
  CHECK(b.loss_mask.sum() == 2.0);
  CHECK_THROWS_WITH(b.upload(4), Contains("PackedBatch::upload: token id 4 at [1] is outside [0, 4)"));
  b.loss_mask_host[2] = -1;
  CHECK_THROWS_WITH(b.upload(5), Contains("PackedBatch::upload: loss_mask weight -1 at [2] is not a finite value >= 0"));
}

TEST_CASE("loader: ranks read disjoint slices that together equal world size 1", "[data]") {
  TempDir dir;
  data::write_shard(dir / "s0.bin", iota_tokens(200));
  data::ShardLoader whole(data::list_shards(dir.path), 4, 5, 1000);
  data::ShardLoader r0(data::list_shards(dir.path), 2, 5, 1000, 0, 2), r1(data::list_shards(dir.path), 2, 5, 1000, 1, 2);
  for (int step = 0; step < 3; ++step) {
    const auto w = whole.next<float, Cpu>(), a = r0.next<float, Cpu>(), b = r1.next<float, Cpu>();
    std::vector<std::int32_t> joined = a.input_ids_host;
    joined.insert(joined.end(), b.input_ids_host.begin(), b.input_ids_host.end());
    CHECK(joined == w.input_ids_host);
  }
}

TEST_CASE("loader: moves to the next shard, wraps into a new epoch, and resumes exactly", "[data]") {
  TempDir dir;
  data::write_shard(dir / "s0.bin", iota_tokens(30));
  data::write_shard(dir / "s1.bin", iota_tokens(30, 1000));
  data::ShardLoader loader(data::list_shards(dir.path), 2, 6, 5000);  // 13 tokens a step
  std::vector<std::int32_t> firsts;
  for (int i = 0; i < 5; ++i) firsts.push_back(loader.next<float, Cpu>().input_ids_host[0]);
  CHECK(firsts == std::vector<std::int32_t>{0, 12, 1000, 1012, 0});
  CHECK(loader.position().epoch == 1);
  const data::LoaderPosition saved = loader.position();
  const auto expected = loader.next<float, Cpu>().input_ids_host;
  data::ShardLoader resumed(data::list_shards(dir.path), 2, 6, 5000);
  resumed.seek(saved);
  CHECK(resumed.next<float, Cpu>().input_ids_host == expected);
  CHECK_THROWS_WITH((data::ShardLoader(data::list_shards(dir.path), 4, 8, 5000)), Contains("fewer than one step needs (33"));
  CHECK_THROWS_WITH((resumed.seek({7, 0, 0})), Contains("resume shard index 7 >= 2 shards"));
}

TEST_CASE("shards and loader: hostile sizes and positions are errors, never overflow", "[data][errors]") {
  TempDir dir;
  data::write_shard(dir / "s0.bin", iota_tokens(30));
  const data::TokenShard shard(dir / "s0.bin");
  std::vector<std::int32_t> out(10);
  // begin + n would overflow int64: the check is written without that sum.
  CHECK_THROWS_WITH(shard.read(INT64_MAX - 2, out, 100), Contains("read of 10 tokens at position 9223372036854775805 past its 30 tokens"));
  CHECK_THROWS_WITH(shard.read(25, out, 100), Contains("read of 10 tokens at position 25 past its 30 tokens"));
  CHECK_THROWS_WITH(shard.read(-1, out, 100), Contains("at position -1"));
  std::vector<std::int32_t> none;
  shard.read(30, none, 100);  // an empty read at the end is in range
  // world x batch x seq + 1 overflowing int64 (--micro_batch 2^62 --seq_len 4) is refused by name.
  const auto shards = data::list_shards(dir.path);
  CHECK_THROWS_WITH((data::ShardLoader(shards, index_t{1} << 62, 4, 100)),
                    Contains("a step of world 1 x batch 4611686018427387904 x seq 4 + 1 tokens overflows"));
  CHECK_THROWS_WITH((data::ShardLoader(shards, INT64_MAX, 1, 100)), Contains("overflows a 64-bit token count"));
  // A resume position from a hostile state.json: p.token + step would overflow.
  data::ShardLoader loader(shards, 2, 6, 100);  // 13 tokens a step
  CHECK_THROWS_WITH(loader.seek({0, INT64_MAX - 5, 0}),
                    Contains("resume position 9223372036854775802 does not leave a step of 13 tokens"));
  CHECK_THROWS_WITH(loader.seek({0, 18, 0}), Contains("resume position 18 does not leave a step of 13 tokens"));
  CHECK_THROWS_WITH(loader.seek({0, -1, 0}), Contains("resume position -1"));
  loader.seek({0, 17, 0});  // the last position that leaves a whole step
  CHECK(loader.next<float, Cpu>().input_ids_host[0] == 17);
}

TEST_CASE("shards: a shard path that is a directory is an Error naming it", "[data][errors]") {
  TempDir dir;
  std::filesystem::create_directory(dir / "dir.bin");
  CHECK_THROWS_WITH(data::TokenShard(dir / "dir.bin"), Contains("dir.bin is not a regular file (it is a directory)"));
}
