// megacpp/data/shard_meta.hpp: what a directory of token shards was tokenized with.
//
// A shard holds bare token ids; which id begins a document (BOS) or marks a fill-in-the-middle
// sentinel depends on the tokenizer that wrote it (the byte tokenizer's BOS is 256, StarCoder's
// BPE has an ordinary token at 256). Document masking derives doc_ids from BOS, so a reader that
// guessed the ids would silently merge or split documents. megacpp-prepare therefore writes
// DIR/shards.json beside the shards:
//
//   {"format": 1, "tokenizer": "byte" | "bpe", "tokenizer_hash": "byte" | "fnv1a64:<16 hex>",
//    "vocab_size": 261, "bos": 256, "eos": 257, "fim_prefix": 258, "fim_suffix": 259,
//    "fim_middle": 260}
//
// and a reader takes the special ids from it. read_shard_metadata() validates every field, and
// check_vocabulary() refuses shards whose vocabulary a model cannot embed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <span>
#include <string_view>
#include <utility>

#include "megacpp/core/error.hpp"
#include "megacpp/data/tokenizer.hpp"
#include "megacpp/io/atomic_file.hpp"
#include "megacpp/io/json_value.hpp"

namespace megacpp::data {

/// Name of the metadata file in a shard directory.
inline constexpr const char* kShardMetadataFile = "shards.json";

/// The tokenizer a shard directory was written with.
struct ShardMetadata {
  std::string tokenizer = "byte";        ///< "byte" (ByteTokenizer) or "bpe" (a tokenizer.json)
  std::string tokenizer_hash = "byte";   ///< "byte", or "fnv1a64:" + 16 hex digits of the tokenizer.json bytes
  std::int32_t vocab_size = ByteTokenizer::kVocab;  ///< every token id in the shards is below this
  SpecialTokens special;                 ///< BOS, EOS and the FIM sentinels
  /// Equal when every field is equal.
  friend bool operator==(const ShardMetadata& a, const ShardMetadata& b) {
    return a.tokenizer == b.tokenizer && a.tokenizer_hash == b.tokenizer_hash && a.vocab_size == b.vocab_size &&
           a.special.bos == b.special.bos && a.special.eos == b.special.eos &&
           a.special.fim_prefix == b.special.fim_prefix && a.special.fim_suffix == b.special.fim_suffix &&
           a.special.fim_middle == b.special.fim_middle;
  }
};

/// FNV-1a, 64 bit (Fowler, Noll, Vo): a fingerprint of a tokenizer file, not a security hash.
inline std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

/// "fnv1a64:" + the hash of `bytes` as 16 hex digits.
inline std::string tokenizer_fingerprint(std::string_view bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(fnv1a64(bytes)));
  return buf;
}

/// The metadata of shards written with the byte tokenizer.
inline ShardMetadata byte_shard_metadata() { return ShardMetadata{}; }

/// Checks the fields agree with each other: a known tokenizer, a positive vocabulary, every
/// special id inside it and all five distinct. `where` names the file in the message.
inline void validate(const ShardMetadata& m, const std::string& where) {
  check(m.tokenizer == "byte" || m.tokenizer == "bpe", "shards", where, ": tokenizer \"", m.tokenizer,
        "\" is neither \"byte\" nor \"bpe\"");
  check(m.vocab_size > 0, "shards", where, ": vocab_size ", m.vocab_size, " is not positive");
  const std::pair<const char*, std::int32_t> ids[] = {{"bos", m.special.bos},
                                                      {"eos", m.special.eos},
                                                      {"fim_prefix", m.special.fim_prefix},
                                                      {"fim_suffix", m.special.fim_suffix},
                                                      {"fim_middle", m.special.fim_middle}};
  for (std::size_t i = 0; i < 5; ++i) {
    check(ids[i].second >= 0 && ids[i].second < m.vocab_size, "shards", where, ": ", ids[i].first, " id ", ids[i].second,
          " is outside the vocabulary [0, ", m.vocab_size, ")");
    for (std::size_t j = 0; j < i; ++j)
      check(ids[i].second != ids[j].second || (i == 1 && j == 0), "shards", where, ": ", ids[i].first, " and ",
            ids[j].first, " share id ", ids[i].second);
  }
  if (m.tokenizer == "byte")
    check(m == byte_shard_metadata(), "shards", where, ": tokenizer \"byte\" with ids other than the byte tokenizer's");
}

/// Writes `m` as DIR/shards.json (atomically).
inline void write_shard_metadata(const std::filesystem::path& dir, const ShardMetadata& m) {
  validate(m, (dir / kShardMetadataFile).string());
  std::ostringstream os;
  os << "{\"format\": 1, \"tokenizer\": " << io::json_quote(m.tokenizer)
     << ", \"tokenizer_hash\": " << io::json_quote(m.tokenizer_hash) << ", \"vocab_size\": " << m.vocab_size
     << ", \"bos\": " << m.special.bos << ", \"eos\": " << m.special.eos << ", \"fim_prefix\": " << m.special.fim_prefix
     << ", \"fim_suffix\": " << m.special.fim_suffix << ", \"fim_middle\": " << m.special.fim_middle << "}\n";
  const std::string text = os.str();
  io::atomic_write(dir / kShardMetadataFile, std::span<const char>(text.data(), text.size()));
}

/// Reads DIR/shards.json; throws naming the file and the field when it is missing or wrong.
inline ShardMetadata read_shard_metadata(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / kShardMetadataFile;
  const std::string where = file.string();
  check(std::filesystem::is_regular_file(file), "shards", "no ", kShardMetadataFile, " in ", dir.string(),
        ": the shards do not say which tokenizer wrote them (BOS and FIM ids); write them with megacpp-prepare, "
        "or call data::write_shard_metadata beside shards of your own");
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  check(!in.bad(), "shards", "cannot read ", where);
  const io::JsonValue j = io::parse_json(text.str(), where);
  check(j.kind == io::JsonValue::Kind::object, "shards", where, ": expected a JSON object");
  auto integer = [&](const char* key, std::int64_t lo, std::int64_t hi) {
    const io::JsonValue& v = j.at(key, where);
    check(v.kind == io::JsonValue::Kind::integer, "shards", where, ": field \"", key, "\" is not an integer");
    check(v.integer >= lo && v.integer <= hi, "shards", where, ": field \"", key, "\" = ", v.integer, " outside [", lo,
          ", ", hi, "]");
    return static_cast<std::int32_t>(v.integer);
  };
  auto string = [&](const char* key) {
    const io::JsonValue& v = j.at(key, where);
    check(v.kind == io::JsonValue::Kind::string, "shards", where, ": field \"", key, "\" is not a string");
    return v.string;
  };
  check(integer("format", 0, INT32_MAX) == 1, "shards", where, ": unknown format ", j.at("format", where).integer,
        " (this build reads format 1)");
  ShardMetadata m;
  m.tokenizer = string("tokenizer");
  m.tokenizer_hash = string("tokenizer_hash");
  m.vocab_size = integer("vocab_size", 1, INT32_MAX);
  m.special.bos = integer("bos", 0, INT32_MAX);
  m.special.eos = integer("eos", 0, INT32_MAX);
  m.special.fim_prefix = integer("fim_prefix", 0, INT32_MAX);
  m.special.fim_suffix = integer("fim_suffix", 0, INT32_MAX);
  m.special.fim_middle = integer("fim_middle", 0, INT32_MAX);
  validate(m, where);
  return m;
}

/// Refuses shards a model with `model_vocab` embeddings cannot train on: their vocabulary is
/// larger than the model's (ids past the embedding table).
inline void check_vocabulary(const ShardMetadata& m, std::int64_t model_vocab, const std::string& where) {
  check(m.vocab_size <= model_vocab, "shards", where, ": the shards' ", m.tokenizer, " tokenizer has ", m.vocab_size,
        " token ids but the model's vocabulary is ", model_vocab,
        ": tokenize with a tokenizer that fits, or train a model with a larger vocab");
}

}  // namespace megacpp::data
