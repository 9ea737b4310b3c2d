// megacpp/data/shard.hpp: token shards in the modded-nanogpt `.bin` format.
//
// Layout (KellerJordan/modded-nanogpt, data/fineweb.py and train_gpt.py `_load_data_shard`):
//   header: 256 little-endian int32; header[0] = 20240520 (magic), header[1] = version,
//           header[2] = num_tokens; then num_tokens tokens.
//   version 1: uint16 tokens (vocabularies up to 65,536); version 2: uint32 tokens (larger ones).
// The file size must be exactly 1024 + num_tokens * token_bytes. Every field is validated and a
// bad shard is an error naming the file and the value; tokens are memory-mapped, not copied.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/io/atomic_file.hpp"
#include "megacpp/io/mapped_file.hpp"

namespace megacpp::data {

/// header[0] of every shard.
inline constexpr std::int32_t kShardMagic = 20240520;
/// Number of int32 values in a shard header.
inline constexpr std::size_t kShardHeaderInts = 256;
/// Size of a shard header in bytes (1024); the tokens follow it.
inline constexpr std::size_t kShardHeaderBytes = kShardHeaderInts * sizeof(std::int32_t);

/// A read-only, memory-mapped token shard.
class TokenShard {
 public:
  /// Opens and validates `path`.
  explicit TokenShard(const std::filesystem::path& path) : file_(path, "shard") {
    const std::string where = path.string();
    const auto bytes = file_.bytes();
    check(bytes.size() >= kShardHeaderBytes, "shard", where, ": file of ", bytes.size(),
          " bytes is shorter than the ", kShardHeaderBytes, "-byte header");
    std::int32_t header[3];
    std::memcpy(header, bytes.data(), sizeof(header));
    check(header[0] == kShardMagic, "shard", where, ": bad magic ", header[0], " (expected ", kShardMagic,
          "): not a megacpp/modded-nanogpt token shard");
    check(header[1] == 1 || header[1] == 2, "shard", where, ": unsupported version ", header[1],
          " (1 = uint16 tokens, 2 = uint32 tokens)");
    check(header[2] >= 0, "shard", where, ": negative num_tokens ", header[2]);
    version_ = header[1];
    num_tokens_ = header[2];
    const std::uint64_t expected = kShardHeaderBytes + static_cast<std::uint64_t>(num_tokens_) * token_bytes();
    check(bytes.size() >= expected, "shard", where, ": header claims ", num_tokens_, " tokens (", expected,
          " bytes) but the file has ", bytes.size(), " bytes: truncated shard");
    check(bytes.size() == expected, "shard", where, ": ", bytes.size() - expected,
          " trailing bytes after ", num_tokens_, " tokens: corrupt shard");
    tokens_ = bytes.data() + kShardHeaderBytes;
  }

  /// Format version from the header: 1 = uint16 tokens, 2 = uint32 tokens.
  std::int32_t version() const { return version_; }
  /// Number of tokens in the shard.
  index_t size() const { return num_tokens_; }
  /// Bytes per token: 2 for version 1, 4 for version 2.
  std::size_t token_bytes() const { return version_ == 1 ? 2 : 4; }
  /// The shard's file path.
  const std::filesystem::path& path() const { return file_.path(); }

  /// Token i as an unsigned id; throws naming the shard when i is outside [0, size()).
  std::uint32_t token(index_t i) const {
    check(i >= 0 && i < num_tokens_, "shard", path().string(), ": token position ", i, " outside its ", num_tokens_,
          " tokens");
    return token_unchecked(i);
  }

  /// Copies tokens [begin, begin + out.size()) into `out`, checking every id against `vocab`.
  void read(index_t begin, std::span<std::int32_t> out, std::uint32_t vocab) const {
    const index_t n = static_cast<index_t>(out.size());
    // Written without begin + n, which a hostile begin (from a resumed state.json) could overflow.
    check(begin >= 0 && begin <= num_tokens_ && n <= num_tokens_ - begin, "shard", path().string(), ": read of ", n,
          " tokens at position ", begin, " past its ", num_tokens_, " tokens");
    for (index_t i = 0; i < n; ++i) {
      const std::uint32_t t = token_unchecked(begin + i);
      check(t < vocab, "shard", path().string(), ": token id ", t, " at position ", begin + i, " >= vocab ", vocab);
      out[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(t);
    }
  }

 private:
  // Token i, i in [0, size()) (read() checks its whole range once, then reads unchecked).
  std::uint32_t token_unchecked(index_t i) const {
    if (version_ == 1) {
      std::uint16_t t;
      std::memcpy(&t, tokens_ + 2 * i, 2);
      return t;
    }
    std::uint32_t t;
    std::memcpy(&t, tokens_ + 4 * i, 4);
    return t;
  }

  io::MappedFile file_;
  const char* tokens_ = nullptr;
  std::int32_t version_ = 1;
  index_t num_tokens_ = 0;
};

/// Writes `tokens` as a shard (atomically), version 1 when every id fits in uint16, else 2.
inline void write_shard(const std::filesystem::path& path, std::span<const std::uint32_t> tokens) {
  check(tokens.size() <= static_cast<std::size_t>(INT32_MAX), "write_shard", path.string(), ": ", tokens.size(),
        " tokens exceed the header's int32 count");
  std::uint32_t max_id = 0;
  for (const std::uint32_t t : tokens) max_id = t > max_id ? t : max_id;
  const int version = max_id < 65536 ? 1 : 2;
  std::vector<std::int32_t> header(kShardHeaderInts, 0);
  header[0] = kShardMagic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::vector<char> body;
  if (version == 1) {
    std::vector<std::uint16_t> narrow(tokens.begin(), tokens.end());
    body.resize(narrow.size() * 2);
    if (!narrow.empty()) std::memcpy(body.data(), narrow.data(), body.size());
  } else {
    body.resize(tokens.size() * 4);
    if (!tokens.empty()) std::memcpy(body.data(), tokens.data(), body.size());
  }
  const std::span<const char> chunks[] = {
      std::span<const char>(reinterpret_cast<const char*>(header.data()), kShardHeaderBytes), std::span<const char>(body)};
  io::atomic_write(path, std::span<const std::span<const char>>(chunks));
}

}  // namespace megacpp::data
