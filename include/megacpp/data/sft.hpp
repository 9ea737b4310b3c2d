/// \file
/// megacpp/data/sft.hpp: supervised fine-tuning (SFT) examples and their packed, masked rows.
///
/// An SFT file is JSON Lines, one example per line, in one of two shapes (docs/recipe.md, "SFT"):
///   instruction / response  {"prompt": P, "response": R}   ("instruction" for "prompt" and
///                           "completion" for "response" are accepted too, so HumanEval-style
///                           prompt/completion pairs load as they are); other keys are ignored.
///   pre/post edit           {"instruction": I, "before": B, "after": A} or {..., "diff": D}: a
///                           change to code, rendered as C++ comments around the code
///                             P = "// Before:\n" B "\n// Instruction: " I "\n// After:\n"
///                             R = A   (or "// Diff:\n" in P and R = D for a unified diff)
///                           so a code model reads the prompt as code (each part ends with a
///                           newline added when missing).
/// Each example becomes BOS + tokens(P) + tokens(R) + EOS. The loss learns the response and the
/// EOS only: a target is learned when it lies after the prompt (the prompt is the user's input,
/// which the model must condition on, not imitate; Ouyang et al. 2022, "Training language models
/// to follow instructions with human feedback", sec. 3.5 trains on the demonstrations only).
///
/// SftPacker packs whole examples into rows of seq + 1 tokens (inputs are the first seq, targets
/// the last seq), in an order shuffled anew every epoch from the seed; a row ends when the next
/// example does not fit and the rest is EOS padding with no loss. Packed examples stay separate
/// documents because each starts with BOS (core/kernels/documents.hpp). An example longer than a
/// row is cut at the row's end (counted in truncated(): the caller reports it); one whose prompt
/// alone fills the row has nothing to learn and is refused. The packer's whole state is its
/// SftPosition (epoch, next example), so a checkpoint resumes the exact rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "megacpp/core/error.hpp"
#include "megacpp/core/random.hpp"
#include "megacpp/core/config.hpp"
#include "megacpp/data/tokenizer.hpp"
#include "megacpp/io/json_value.hpp"

namespace megacpp::data {

/// One SFT example as text: what the model is given and what it must answer.
struct SftRecord {
  std::string prompt;    ///< the input, not learned
  std::string response;  ///< the answer, learned
};

namespace detail {
inline std::string with_newline(std::string s) {
  if (s.empty() || s.back() != '\n') s += '\n';
  return s;
}
inline const std::string* sft_string(const io::JsonValue& line, const char* key, const std::string& where) {
  const auto it = line.object.find(key);
  if (it == line.object.end()) return nullptr;
  check(it->second.kind == io::JsonValue::Kind::string, "SFT", where, ": \"", key, "\" is not a string");
  return &it->second.string;
}
}  // namespace detail

/// The SftRecord of one parsed JSONL line (the shapes in the file comment); `where` names the
/// file and line in errors. Throws unless the line is an object of one known shape with a
/// non-empty response.
inline SftRecord sft_record(const io::JsonValue& line, const std::string& where) {
  check(line.kind == io::JsonValue::Kind::object, "SFT", where, ": not a JSON object");
  const auto* prompt = detail::sft_string(line, "prompt", where);
  const auto* instruction = detail::sft_string(line, "instruction", where);
  const auto* response = detail::sft_string(line, "response", where);
  const auto* completion = detail::sft_string(line, "completion", where);
  const auto* before = detail::sft_string(line, "before", where);
  const auto* after = detail::sft_string(line, "after", where);
  const auto* diff = detail::sft_string(line, "diff", where);
  SftRecord r;
  if (before) {
    check(instruction && (after != nullptr) != (diff != nullptr), "SFT", where,
          ": an edit example needs \"instruction\", \"before\" and one of \"after\" or \"diff\"");
    r.prompt = "// Before:\n" + detail::with_newline(*before) + "// Instruction: " + detail::with_newline(*instruction) +
               (after ? "// After:\n" : "// Diff:\n");
    r.response = after ? *after : *diff;
  } else {
    check((prompt != nullptr) != (instruction != nullptr), "SFT", where,
          ": needs exactly one of \"prompt\" or \"instruction\" (or the edit shape: instruction, before, after or diff)");
    check((response != nullptr) != (completion != nullptr), "SFT", where,
          ": needs exactly one of \"response\" or \"completion\"");
    r.prompt = prompt ? *prompt : *instruction;
    r.response = response ? *response : *completion;
  }
  check(!r.response.empty(), "SFT", where, ": the response is empty (nothing to learn)");
  return r;
}

/// Every example of the SFT JSON Lines file `path` (blank lines skipped); throws naming the file,
/// the line and the problem for a line that is not strict JSON (io/json_value.hpp) or not an
/// example, and for a file without any.
inline std::vector<SftRecord> read_sft_file(const std::filesystem::path& path) {
  const io::MappedFile file(path, "SFT");
  const std::string_view text(file.bytes().data(), file.bytes().size());
  std::vector<SftRecord> out;
  std::size_t line_number = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    ++line_number;
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(line_number);
    out.push_back(sft_record(io::parse_json(line, where), where));
  }
  check(!out.empty(), "SFT", path.string(), " holds no example");
  return out;
}

/// One example as tokens: BOS, the prompt's tokens, the response's tokens, EOS.
struct SftExample {
  std::vector<std::int32_t> tokens;  ///< BOS + prompt + response + EOS
  index_t prompt_tokens = 0;         ///< BOS + prompt: tokens[i] with i >= this are learned as targets
};

/// `record` encoded with `encode` (text -> ids without BOS/EOS: the bytes for the byte tokenizer,
/// BpeTokenizer::encode_ordinary for BPE). Prompt and response are encoded apart, so a BPE merge never
/// straddles the boundary between what is given and what is learned.
template <class Encode>
SftExample make_sft_example(const SftRecord& record, const Encode& encode, const SpecialTokens& special) {
  SftExample e;
  e.tokens.push_back(special.bos);
  for (const std::int32_t t : encode(record.prompt)) e.tokens.push_back(t);
  e.prompt_tokens = static_cast<index_t>(e.tokens.size());
  for (const std::int32_t t : encode(record.response)) e.tokens.push_back(t);
  e.tokens.push_back(special.eos);
  return e;
}

/// Where an SftPacker is: the epoch (each has its own shuffled order) and the next example of it.
struct SftPosition {
  std::uint64_t epoch = 0;  ///< completed passes over the examples
  std::size_t next = 0;     ///< index into this epoch's order of the next example to pack
  /// Equal when both members are.
  friend bool operator==(const SftPosition&, const SftPosition&) = default;
};

/// Packs SftExamples into rows of (input, target, loss mask), deterministically from a seed.
class SftPacker {
 public:
  /// Rows of `seq` positions over `examples`, shuffled per epoch from `seed` (or in file order when
  /// `shuffle` is false, as a validation pass wants). Throws when there is no example or one has
  /// no learned target within a row (its prompt fills seq + 1 tokens).
  SftPacker(std::vector<SftExample> examples, index_t seq, std::uint64_t seed, bool shuffle = true)
      : examples_(std::move(examples)), seq_(seq), seed_(seed), shuffle_(shuffle) {
    check(seq >= 2, "SftPacker", "seq must be >= 2, got ", seq);
    check(!examples_.empty(), "SftPacker", "no example to pack");
    for (std::size_t i = 0; i < examples_.size(); ++i) {
      const SftExample& e = examples_[i];
      check(e.prompt_tokens >= 1 && e.prompt_tokens < static_cast<index_t>(e.tokens.size()), "SftPacker", "example ", i,
            " has ", e.tokens.size(), " tokens with a prompt of ", e.prompt_tokens, ": nothing to learn");
      check(e.prompt_tokens < seq + 1, "SftPacker", "example ", i, ": its prompt alone is ", e.prompt_tokens,
            " tokens (BOS included), so a row of ", seq, " positions leaves nothing of the response to learn");
      if (static_cast<index_t>(e.tokens.size()) > seq + 1) ++truncated_;
    }
    reorder();
  }

  /// Examples longer than a row (cut at its end; their tail is not learned).
  std::size_t truncated() const { return truncated_; }
  /// Number of examples.
  std::size_t size() const { return examples_.size(); }
  /// Where the next row starts (save it in a checkpoint; restore it with seek()).
  const SftPosition& position() const { return position_; }
  /// Continues from `p` (a position() of a packer over the same examples and seed).
  void seek(const SftPosition& p) {
    check(p.next < examples_.size(), "SftPacker", "resume position ", p.next, " is past the ", examples_.size(),
          " examples: resume on the same SFT file");
    position_ = p;
    reorder();
  }

  /// Fills one row: input[seq], target[seq] and mask[seq] (1 = learn this target).
  template <class T>
  void next_row(std::int32_t* input, std::int32_t* target, T* mask, std::int32_t pad_id) {
    std::vector<std::int32_t> row;
    std::vector<T> learned;  // learned[i]: row[i] is a learned target
    row.reserve(static_cast<std::size_t>(seq_ + 1));
    while (true) {
      const SftExample& e = examples_[order_[position_.next]];
      const auto room = static_cast<std::size_t>(seq_ + 1) - row.size();
      if (!row.empty() && e.tokens.size() > room) break;  // the next row starts with it
      const std::size_t take = std::min(e.tokens.size(), room);
      for (std::size_t i = 0; i < take; ++i) {
        row.push_back(e.tokens[i]);
        learned.push_back(static_cast<index_t>(i) >= e.prompt_tokens ? T(1) : T(0));
      }
      if (++position_.next == examples_.size()) {
        position_.next = 0;
        ++position_.epoch;
        reorder();
      }
      if (row.size() == static_cast<std::size_t>(seq_ + 1)) break;
    }
    row.resize(static_cast<std::size_t>(seq_ + 1), pad_id);
    learned.resize(row.size(), T(0));
    for (index_t i = 0; i < seq_; ++i) {
      input[i] = row[static_cast<std::size_t>(i)];
      target[i] = row[static_cast<std::size_t>(i + 1)];
      mask[i] = learned[static_cast<std::size_t>(i + 1)];
    }
  }

 private:
  // This epoch's order: a Fisher-Yates shuffle from an Rng seeded by (seed, epoch), or the identity.
  void reorder() {
    order_.resize(examples_.size());
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    if (!shuffle_) return;
    Rng rng(seed_ ^ (0xD1B54A32D192ED03ull * (position_.epoch + 1)));
    for (std::size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng.next_u64() % i]);
  }

  std::vector<SftExample> examples_;
  index_t seq_;
  std::uint64_t seed_;
  bool shuffle_;
  std::size_t truncated_ = 0;
  SftPosition position_;
  std::vector<std::size_t> order_;
};

}  // namespace megacpp::data
