// What the tool tests share: the executables, a small corpus of byte-tokenizer shards (with their
// shards.json), the arguments of a run that takes about a second, and running a tool with a log.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "megacpp/core/random.hpp"
#include "megacpp/data.hpp"
#include "train/process.hpp"

namespace megacpp::testing {

inline const std::string kTrain = MEGACPP_TRAIN_EXE;
inline const std::string kGenerate = MEGACPP_GENERATE_EXE;
inline const std::string kPrepare = MEGACPP_PREPARE_EXE;

// C-like documents (BOS text EOS), deterministic: enough structure for the loss to fall.
inline std::vector<std::uint32_t> corpus_tokens(std::size_t n, std::uint64_t seed) {
  const data::ByteTokenizer tok;
  Rng rng(seed);
  const char* names[] = {"alpha", "beta", "gamma", "delta", "size", "count", "index", "value"};
  std::vector<std::uint32_t> out;
  while (out.size() < n) {
    std::string doc;
    const int lines = 2 + static_cast<int>(rng.below(6));
    for (int l = 0; l < lines; ++l)
      doc += std::string("int ") + names[rng.below(8)] + " = " + std::to_string(rng.below(100)) + ";\n";
    for (const std::int32_t t : tok.encode_document(doc)) out.push_back(static_cast<std::uint32_t>(t));
  }
  out.resize(n);
  return out;
}

// A train and a val shard of byte-tokenizer documents, with the shards.json megacpp-prepare writes.
struct Corpus {
  TempDir dir;
  Corpus() {
    data::write_shard(dir / "train_000000.bin", corpus_tokens(40000, 1));
    data::write_shard(dir / "val_000000.bin", corpus_tokens(6000, 2));
    data::write_shard_metadata(dir.path, data::byte_shard_metadata());
  }
};

// A tiny-model run of 8 steps (seq 32, global batch 128 tokens). A flag in `extra` replaces the
// default's value (program_options refuses a flag given twice); others are appended.
inline std::vector<std::string> small_run(const std::filesystem::path& data, const std::filesystem::path& out,
                                          std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"--data", data.string(), "--out", out.string(), "--seq_len", "32", "--micro_batch", "2",
                                "--total_batch_size", "128", "--steps", "8", "--warmup_steps", "2", "--eval_every", "4",
                                "--val_tokens", "256", "--sample_tokens", "0"};
  for (std::size_t i = 0; i < extra.size(); ++i) {
    const bool has_value = i + 1 < extra.size() && extra[i + 1].rfind("--", 0) != 0;
    const auto it = std::find(args.begin(), args.end(), extra[i]);
    if (it != args.end() && has_value) *(it + 1) = extra[i + 1];
    else {
      args.push_back(extra[i]);
      if (has_value) args.push_back(extra[i + 1]);
    }
    if (has_value) ++i;
  }
  return args;
}

// Runs `exe args...` to the end with its output in `dir`/`log`.
inline ProcessResult run(const std::string& exe, const std::vector<std::string>& args, const TempDir& dir,
                         const char* log) {
  return run_process(exe, args, dir / log);
}

}  // namespace megacpp::testing
