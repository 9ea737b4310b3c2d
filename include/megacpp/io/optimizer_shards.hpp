// megacpp/io/optimizer_shards.hpp: optimizer state written as one file per rank (ZeRO-1), with a
// manifest that makes a partial or damaged set detectable.
//
// A sharded optimizer (optim::Hybrid after shard(rank, world)) visits only the state of the
// parameters its rank owns (for_each_state). Each rank writes that state with save_optimizer()
// as its own file, "optimizer.rank<r>-of-<world>.safetensors" (5-digit numbers, atomically:
// io/atomic_file.hpp), and rank 0 writes "optimizer.manifest.json" once every shard is complete:
//
//   {"format": 1, "world_size": 2,
//    "shards": [{"rank": 0, "file": "optimizer.rank00000-of-00002.safetensors",
//                "bytes": 123456, "fnv1a64": "cbf29ce484222325"}, ...],
//    "owners": {"exp_avg.embedding.weight": 0, "counter.step.embedding.weight": 0,
//               "momentum_buffer.blocks.0.mixer.in_proj.weight": 1, ...}}
//
// "owners" names the rank (the shard) holding every state tensor and step counter (counters
// under "counter.<name>", as in the shard files' metadata). The checksum is 64-bit FNV-1a
// (Fowler, Noll, Vo; http://www.isthe.com/chongo/tech/comp/fnv/) over the file's bytes.
//
// Loading verifies the whole set first (every shard present, its size and checksum those of the
// manifest, its header listing exactly the state the manifest gives it), so a missing,
// truncated or corrupted shard is an Error naming the file, never a partly loaded optimizer.
// The shards are then read into an unsharded optimizer, whole: which rank wrote which state
// does not matter, so a set written by any number of ranks loads at any world size, and
// shard(rank, world) afterwards keeps the resuming rank's share.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "megacpp/core/error.hpp"
#include "megacpp/io/atomic_file.hpp"
#include "megacpp/io/checkpoint.hpp"
#include "megacpp/io/json_value.hpp"
#include "megacpp/io/mapped_file.hpp"
#include "megacpp/io/safetensors.hpp"

namespace megacpp::io {

/// File name of the manifest of a sharded optimizer state.
inline constexpr const char* kOptimizerManifest = "optimizer.manifest.json";

/// 64-bit FNV-1a of `bytes`, continuing from `hash` (the FNV offset basis by default).
inline std::uint64_t fnv1a64(std::span<const char> bytes, std::uint64_t hash = 0xcbf29ce484222325ull) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

/// One shard file of a sharded optimizer state, as the manifest records it.
struct OptimizerShardFile {
  int rank = 0;              ///< the rank that wrote it
  std::string file;          ///< its name inside the checkpoint directory
  std::uint64_t bytes = 0;   ///< its size
  std::uint64_t fnv1a64 = 0; ///< 64-bit FNV-1a of its bytes
};

/// What optimizer.manifest.json holds.
struct OptimizerManifest {
  int world_size = 1;                      ///< ranks that wrote the set
  std::vector<OptimizerShardFile> shards;  ///< one per rank, in rank order
  std::map<std::string, int> owners;       ///< state name (a step counter as `counter.NAME`) -> rank of its shard
};

/// "optimizer.rank00003-of-00008.safetensors": the shard file of `rank` of `world`.
inline std::string optimizer_shard_name(int rank, int world) {
  check(world >= 1 && rank >= 0 && rank < world, "optimizer_shard_name", "rank ", rank, " of ", world, " is out of range");
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer.rank%05d-of-%05d.safetensors", rank, world);
  return buf;
}

/// Size and FNV-1a checksum of the file `path` (name, rank and file left to the caller).
inline OptimizerShardFile file_digest(const std::filesystem::path& path) {
  const MappedFile file(path, "optimizer shards");
  OptimizerShardFile d;
  d.bytes = file.size();
  d.fnv1a64 = fnv1a64(file.bytes());
  return d;
}

/// Writes the state `opt` holds on this rank (for_each_state: a sharded optimizer's share) to
/// `dir`/optimizer_shard_name(rank, world), atomically, with `metadata`; returns its record for
/// the manifest. Every rank of the set calls it with its own rank.
template <class Opt>
OptimizerShardFile save_optimizer_shard(const std::filesystem::path& dir, int rank, int world, Opt& opt,
                                        const std::map<std::string, std::string>& metadata = {}) {
  const std::string name = optimizer_shard_name(rank, world);
  auto meta = metadata;
  meta["megacpp.shard"] = std::to_string(rank) + " of " + std::to_string(world);
  save_optimizer(dir / name, opt, meta);
  OptimizerShardFile d = file_digest(dir / name);
  d.rank = rank;
  d.file = name;
  return d;
}

namespace detail {
// The state names a shard file holds: its tensors, and its counters as "counter.<name>".
inline std::vector<std::string> shard_state_names(const SafetensorsReader& reader) {
  std::vector<std::string> names(reader.names().begin(), reader.names().end());
  for (const auto& [k, v] : reader.metadata())
    if (k.rfind("counter.", 0) == 0) names.push_back(k);
  return names;
}

inline std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace detail

/// Writes `dir`/optimizer.manifest.json (atomically) for the `shards` of a set written by
/// `world` ranks (one record per rank, from save_optimizer_shard; call once every shard is
/// complete). The owners are read from the shards' headers; throws when a shard is missing,
/// differs in size from its record, or holds state another shard holds too.
inline void write_optimizer_manifest(const std::filesystem::path& dir, int world, const std::vector<OptimizerShardFile>& shards) {
  check(world >= 1 && shards.size() == static_cast<std::size_t>(world), "write_optimizer_manifest", "expected ", world,
        " shard records, got ", shards.size());
  std::map<std::string, int> owners;
  std::string text = "{\n  \"format\": 1,\n  \"world_size\": " + std::to_string(world) + ",\n  \"shards\": [";
  for (int r = 0; r < world; ++r) {
    const OptimizerShardFile& s = shards[static_cast<std::size_t>(r)];
    check(s.rank == r && s.file == optimizer_shard_name(r, world), "write_optimizer_manifest", "record ", r, " is rank ",
          s.rank, "'s file ", s.file, ", expected ", optimizer_shard_name(r, world));
    const std::filesystem::path path = dir / s.file;
    const SafetensorsReader reader(path);
    const std::uintmax_t size = std::filesystem::file_size(path);
    check(size == s.bytes, "write_optimizer_manifest", path.string(), " is ", size, " bytes, its rank wrote ", s.bytes);
    for (const std::string& name : detail::shard_state_names(reader)) {
      const auto [it, fresh] = owners.emplace(name, r);
      check(fresh, "write_optimizer_manifest", "state \"", name, "\" is in the shards of rank ", it->second, " and rank ", r);
    }
    text += std::string(r ? "," : "") + "\n    {\"rank\": " + std::to_string(r) + ", \"file\": " + json_quote(s.file) +
            ", \"bytes\": " + std::to_string(s.bytes) + ", \"fnv1a64\": \"" + detail::hex64(s.fnv1a64) + "\"}";
  }
  text += "\n  ],\n  \"owners\": {";
  bool first = true;
  for (const auto& [name, r] : owners) {
    text += std::string(first ? "" : ",") + "\n    " + json_quote(name) + ": " + std::to_string(r);
    first = false;
  }
  text += "\n  }\n}\n";
  atomic_write(dir / kOptimizerManifest, std::span<const char>(text.data(), text.size()));
}

/// Parses `dir`/optimizer.manifest.json strictly (types, ranges, one shard per rank with the
/// expected name, owners within the world); throws naming the file and the problem.
inline OptimizerManifest read_optimizer_manifest(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / kOptimizerManifest;
  const std::string file = path.string();
  const MappedFile mapped(path, "optimizer manifest");
  const JsonValue j = parse_json(std::string_view(mapped.bytes().data(), mapped.bytes().size()), file);
  using K = JsonValue::Kind;
  const std::string ctx = "optimizer manifest " + file + ": ";
  const auto integer = [&](const JsonValue& v, const char* key, std::int64_t lo, std::int64_t hi) {
    const JsonValue& x = v.at(key, ctx);
    check(x.kind == K::integer && x.integer >= lo && x.integer <= hi, "optimizer manifest", file, ": \"", key,
          "\" must be an integer in [", lo, ", ", hi, "]");
    return x.integer;
  };
  check(integer(j, "format", 0, INT32_MAX) == 1, "optimizer manifest", file, ": unknown format");
  OptimizerManifest m;
  m.world_size = static_cast<int>(integer(j, "world_size", 1, 99999));
  const JsonValue& shards = j.at("shards", ctx);
  check(shards.kind == K::array && shards.array.size() == static_cast<std::size_t>(m.world_size), "optimizer manifest",
        file, ": \"shards\" must list one file per rank (", m.world_size, ")");
  for (const JsonValue& s : shards.array) {
    OptimizerShardFile f;
    f.rank = static_cast<int>(integer(s, "rank", 0, m.world_size - 1));
    check(f.rank == static_cast<int>(m.shards.size()), "optimizer manifest", file, ": shard ", m.shards.size(), " is rank ",
          f.rank, " (shards must be in rank order)");
    const JsonValue& name = s.at("file", ctx);
    f.file = optimizer_shard_name(f.rank, m.world_size);
    check(name.kind == K::string && name.string == f.file, "optimizer manifest", file, ": rank ", f.rank,
          "'s file must be \"", f.file, "\"");
    f.bytes = static_cast<std::uint64_t>(integer(s, "bytes", 8, INT64_MAX));
    const JsonValue& hash = s.at("fnv1a64", ctx);
    bool hex = hash.kind == K::string && hash.string.size() == 16;
    for (std::size_t i = 0; hex && i < 16; ++i) {
      const char c = hash.string[i];
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      hex = digit >= 0;
      f.fnv1a64 = (f.fnv1a64 << 4) | static_cast<std::uint64_t>(digit < 0 ? 0 : digit);
    }
    check(hex, "optimizer manifest", file, ": rank ", f.rank, "'s \"fnv1a64\" must be 16 lowercase hex digits");
    m.shards.push_back(std::move(f));
  }
  const JsonValue& owners = j.at("owners", ctx);
  check(owners.kind == K::object, "optimizer manifest", file, ": \"owners\" must be an object");
  for (const auto& [name, r] : owners.object) {
    check(r.kind == K::integer && r.integer >= 0 && r.integer < m.world_size, "optimizer manifest", file, ": owner of \"",
          name, "\" must be a rank in [0, ", m.world_size, ")");
    m.owners[name] = static_cast<int>(r.integer);
  }
  return m;
}

/// Reads the manifest of `dir` and checks every shard against it: present, a regular file, of
/// the recorded size and FNV-1a checksum. Throws naming the file and what is wrong (missing,
/// truncated or grown, corrupted); returns the manifest.
inline OptimizerManifest verify_optimizer_shards(const std::filesystem::path& dir) {
  OptimizerManifest m = read_optimizer_manifest(dir);
  for (const OptimizerShardFile& s : m.shards) {
    const std::filesystem::path path = dir / s.file;
    check(std::filesystem::exists(path), "optimizer shards", path.string(), " is missing (rank ", s.rank, " of ",
          m.world_size, " in ", kOptimizerManifest, "): the set is incomplete");
    const OptimizerShardFile d = file_digest(path);
    check(d.bytes == s.bytes, "optimizer shards", path.string(), " is ", d.bytes, " bytes, the manifest records ", s.bytes,
          d.bytes < s.bytes ? " (truncated)" : " (grown)");
    check(d.fnv1a64 == s.fnv1a64, "optimizer shards", path.string(), " is corrupted: FNV-1a checksum ",
          detail::hex64(d.fnv1a64), ", the manifest records ", detail::hex64(s.fnv1a64));
  }
  return m;
}

/// Reads the sharded optimizer state of `dir` (verify_optimizer_shards first) into `opt`,
/// which must be unsharded (load, then shard(rank, world) for the resuming world). Every state
/// tensor and counter of `opt` must be in the set with its shape, and the set must hold nothing
/// else; throws naming the file and the problem before any state changes.
template <class Opt>
void load_optimizer_shards(const std::filesystem::path& dir, Opt& opt) {
  using T = typename Opt::value_type;
  using B = typename Opt::backend_type;
  if constexpr (requires { opt.shard_world(); })
    check(opt.shard_world() == 1, "load_optimizer_shards", "the optimizer is sharded over ", opt.shard_world(),
          " ranks: load into the unsharded optimizer, then shard it");
  const OptimizerManifest m = verify_optimizer_shards(dir);
  std::deque<SafetensorsReader> readers;
  for (const OptimizerShardFile& s : m.shards) {
    readers.emplace_back(dir / s.file);
    std::size_t held = 0;
    for (const std::string& name : detail::shard_state_names(readers.back())) {
      const auto it = m.owners.find(name);
      check(it != m.owners.end() && it->second == s.rank, "load_optimizer_shards", (dir / s.file).string(),
            " holds state \"", name, "\", which ", kOptimizerManifest, " does not give to rank ", s.rank);
      ++held;
    }
    std::size_t expected = 0;
    for (const auto& [name, r] : m.owners) expected += r == s.rank;
    check(held == expected, "load_optimizer_shards", (dir / s.file).string(), " holds ", held, " state entries, ",
          kOptimizerManifest, " gives rank ", s.rank, " ", expected);
  }
  const auto owner = [&](const std::string& key) -> std::size_t {
    const auto it = m.owners.find(key);
    check(it != m.owners.end(), "load_optimizer_shards", "the optimizer shards in ", dir.string(), " hold no state \"", key,
          "\" (another model or optimizer configuration?)");
    return static_cast<std::size_t>(it->second);
  };
  std::vector<std::pair<Tensor<T, B>*, Tensor<T, B>>> tensors;
  std::vector<std::pair<std::int64_t*, std::int64_t>> counters;
  opt.for_each_state([&](const std::string& name, auto& item) {
    if constexpr (std::is_same_v<std::decay_t<decltype(item)>, std::int64_t>) {
      const std::size_t r = owner("counter." + name);
      counters.emplace_back(&item, detail::parse_counter(readers[r].metadata(), name, (dir / m.shards[r].file).string()));
    } else {
      const Shape shape = item.shape();
      tensors.emplace_back(&item, readers[owner(name)].template read<T, B>(name, &shape));
    }
  });
  check(tensors.size() + counters.size() == m.owners.size(), "load_optimizer_shards", "the optimizer shards in ",
        dir.string(), " hold ", m.owners.size(), " state entries, this optimizer has ", tensors.size() + counters.size(),
        " (another model or optimizer configuration?)");
  for (auto& [dst, value] : tensors) dst->assign(value);
  for (auto& [dst, value] : counters) *dst = value;
}

}  // namespace megacpp::io
