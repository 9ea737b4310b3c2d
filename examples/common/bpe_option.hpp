// examples/common/bpe_option.hpp: the tools' --tokenizer / --special_tokens options for a
// byte-level BPE tokenizer.json (megacpp-prepare writes shards with it; megacpp-generate and
// megacpp-train's end-of-run sample encode the prompt and decode samples with it, after checking
// it is the file the shards were made with).
#pragma once

#include <filesystem>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "megacpp/data/bpe_tokenizer.hpp"
#include "megacpp/data/shard_meta.hpp"
#include "megacpp/data/tokenizer.hpp"

namespace megacpp::examples {

/// The five names of --special_tokens ("BOS,EOS,PRE,SUF,MID"); a flag error otherwise.
inline data::BpeSpecialNames parse_special_token_names(const std::string& tool, const std::string& text) {
  std::vector<std::string> names;
  std::stringstream list(text);
  for (std::string name; std::getline(list, name, ',');) names.push_back(name);
  check_flag(names.size() == 5, tool, "special_tokens", "needs 5 comma-separated names (BOS,EOS,PRE,SUF,MID), got ",
             names.size(), ": ", text);
  return {names[0], names[1], names[2], names[3], names[4]};
}

/// The bytes of the file given to `--flag`; throws naming the tool, the flag and the path.
inline std::string read_flag_file(const std::string& tool, const char* flag, const std::filesystem::path& path) {
  check(std::filesystem::is_regular_file(path), tool, flag, " ", path.string(), " is not a regular file");
  std::ifstream in(path, std::ios::binary);
  check(in.is_open(), tool, "cannot open ", flag, " ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  check(!in.bad(), tool, "cannot read ", flag, " ", path.string());
  return text.str();
}

/// The tokenizer.json at `path`, checked against the shards a model was trained on: the same file
/// (fingerprint), the same vocabulary size and the same special-token ids.
inline data::BpeTokenizer load_shards_tokenizer(const std::string& tool, const std::filesystem::path& path,
                                                const data::BpeSpecialNames& names, const data::ShardMetadata& shards) {
  const std::string bytes = read_flag_file(tool, "--tokenizer", path);
  const std::string fingerprint = data::tokenizer_fingerprint(bytes);
  check(fingerprint == shards.tokenizer_hash, tool, "--tokenizer ", path.string(), " is not the tokenizer the model's "
        "shards were written with: its fingerprint is ", fingerprint, ", the shards' is ", shards.tokenizer_hash);
  data::BpeTokenizer tokenizer = data::BpeTokenizer::from_json(bytes, names, path.string());
  const data::SpecialTokens& got = tokenizer.special();
  const data::SpecialTokens& want = shards.special;
  check(got.bos == want.bos && got.eos == want.eos && got.fim_prefix == want.fim_prefix &&
            got.fim_suffix == want.fim_suffix && got.fim_middle == want.fim_middle,
        tool, "--special_tokens name ids (BOS ", got.bos, ", EOS ", got.eos, ") other than the shards' (BOS ", want.bos,
        ", EOS ", want.eos, "): pass the --special_tokens given to megacpp-prepare");
  return tokenizer;
}

/// The tokenizer a model's samples are encoded and printed with: the byte tokenizer for byte
/// shards, or for BPE shards their tokenizer.json given as `path` (checked to be that file). With
/// BPE shards and no `path` there is none (available() is false). A sampled token is printed as
/// its bytes: a UTF-8 character split across tokens completes when its last byte arrives.
class SampleCodec {
 public:
  SampleCodec(const std::string& tool, const std::string& path, const std::string& special_names,
              const data::ShardMetadata& shards) {
    if (shards.tokenizer == "byte") {
      check_flag(path.empty(), tool, "tokenizer", path, " given, but the shards were written with the byte tokenizer");
      return;
    }
    check(shards.tokenizer == "bpe", tool, "shards written with the \"", shards.tokenizer,
          "\" tokenizer, which this tool does not know");
    available_ = !path.empty();
    if (available_) bpe_ = load_shards_tokenizer(tool, path, parse_special_token_names(tool, special_names), shards);
  }
  /// False for BPE shards without their tokenizer.json.
  bool available() const { return available_; }
  /// BOS + the prompt's tokens.
  std::vector<std::int32_t> prompt(const std::string& text) const {
    return bpe_ ? bpe_->encode_document(text, false) : data::ByteTokenizer().encode_document(text, false);
  }
  /// The bytes of token `t` (an id without a token, such as the model's padding ids, as "<id>").
  std::string text(std::int32_t t) const {
    const std::int32_t vocab = bpe_ ? bpe_->vocab_size() : data::ByteTokenizer::kVocab;
    if (t < 0 || t >= vocab || (bpe_ && !bpe_->has_token(t))) return "<" + std::to_string(t) + ">";
    return bpe_ ? bpe_->decode({t}) : data::ByteTokenizer().decode({t});
  }
  /// Prints token `t` as text() gives it.
  void print(std::int32_t t) const {
    std::fputs(text(t).c_str(), stdout);
    std::fflush(stdout);
  }

 private:
  bool available_ = true;
  std::optional<data::BpeTokenizer> bpe_;
};

}  // namespace megacpp::examples
