/// \file
/// megacpp/data/bpe_tokenizer.hpp: byte-level BPE loaded from a HuggingFace `tokenizer.json`.
///
/// OPTIONAL COMPONENT: needs nlohmann_json and PCRE2 (Debian: nlohmann-json3-dev, libpcre2-dev;
/// CMake: megacpp_link_bpe_tokenizer, or nlohmann_json::nlohmann_json and pkg-config libpcre2-8).
/// Not included by megacpp/data.hpp or megacpp/megacpp.hpp: include it where BPE is wanted.
///
/// What it reads (HF tokenizers, "The tokenization pipeline" and the `tokenizer.json` that
/// `Tokenizer.save` writes): `model` with `type` "BPE", `vocab` (token -> id) and `merges`
/// (rank order, as "a b" strings or [a, b] arrays); `added_tokens` (matched literally in the
/// input before BPE, leftmost-longest, as HF's AddedVocabulary does); and the ByteLevel
/// convention of GPT-2, Llama-3 and StarCoder: every vocab string is written in the alphabet of
/// GPT-2's bytes_to_unicode (openai/gpt-2 src/encoder.py), so "Ġint" is the bytes " int".
///
/// Encoding, per run of text between added tokens: the file's `pre_tokenizer` run as written
/// (megacpp/data/pre_tokenizer.hpp, GPT-2's and Llama-3's regexes alike), then BPE on each piece: the adjacent pair with the lowest merge rank
/// merges first (leftmost on ties), until no pair has a merge (Sennrich et al. 2016, arXiv
/// 1508.07909; the priority queue of HF models/bpe/word.rs). BPE `ignore_merges` (Llama-3: a piece
/// that is a whole vocab token is taken as it is) is honoured.
///
/// Exact or refused: what this class cannot reproduce token for token is an error naming it (a
/// `normalizer`, other pre-tokenizer steps, BPE `dropout`, lstrip/rstrip/single_word added tokens,
/// non-BPE models); `post_processor`, `truncation` and `padding` are not part of encoding.
/// tests/data/test_bpe_agreement.cpp: agreement with HF `tokenizers` (scripts/tokenizer-goldens.py).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ios>
#include <iterator>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/core/error.hpp"
#include "megacpp/data/bpe_pieces.hpp"
#include "megacpp/data/pre_tokenizer.hpp"
#include "megacpp/data/tokenizer.hpp"
#include "megacpp/io/json_value.hpp"

namespace megacpp::data {

/// Contents of the added tokens that play the SpecialTokens roles. The defaults are StarCoder's
/// (bigcode/starcoder `tokenizer.json`): one `<|endoftext|>` both begins and ends documents.
/// GPT-2 has `<|endoftext|>` but no FIM sentinels; Llama-3 has `<|begin_of_text|>`,
/// `<|end_of_text|>` and no FIM sentinels either (name three `<|reserved_special_token_N|>`).
struct BpeSpecialNames {
  std::string bos = "<|endoftext|>";       ///< begins every document (doc_ids derive from it)
  std::string eos = "<|endoftext|>";       ///< ends a document (or a FIM middle)
  std::string fim_prefix = "<fim_prefix>";  ///< FIM sentinel: the prefix follows
  std::string fim_suffix = "<fim_suffix>";  ///< FIM sentinel: the suffix follows
  std::string fim_middle = "<fim_middle>";  ///< FIM sentinel: the middle follows
};

/// Byte-level BPE tokenizer read from a HuggingFace `tokenizer.json` (GPT-2, Llama-3, StarCoder).
///
/// decode(encode(text)) == text for every byte string when the vocab has all 256 byte tokens
/// (every byte-level vocab does), `add_prefix_space` is off and no Split step removes text
/// (drops_text()). encode() keeps a per-word cache, so one instance must not be used by two
/// threads at once: copy it per thread.
class BpeTokenizer {
 public:
  /// Largest vocabulary accepted: ids must lie in [0, kMaxVocab). Real vocabularies are at most a
  /// few hundred thousand; the bound keeps a corrupt id from allocating gigabytes.
  static constexpr std::int32_t kMaxVocab = 1 << 24;
  /// Words kept in the encode cache before it is cleared (bounds memory on an endless corpus).
  static constexpr std::size_t kCacheWords = 1 << 16;

  /// Reads and validates `path`; `names` say which added tokens are BOS, EOS and the FIM sentinels.
  static BpeTokenizer from_file(const std::filesystem::path& path, const BpeSpecialNames& names = {}) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    check(std::filesystem::exists(status), "BpeTokenizer", "cannot open tokenizer file ", path.string(), ": ",
          ec ? ec.message() : "no such file");
    // A directory opens as an ifstream and then throws std::ios_base::failure from the first read.
    check(std::filesystem::is_regular_file(status), "BpeTokenizer", "tokenizer file ", path.string(),
          " is not a regular file", std::filesystem::is_directory(status) ? " (it is a directory)" : "");
    std::string text;
    try {
      std::ifstream in(path, std::ios::binary);
      check(static_cast<bool>(in), "BpeTokenizer", "cannot open tokenizer file ", path.string());
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      check(!in.bad(), "BpeTokenizer", "error reading tokenizer file ", path.string());
    } catch (const std::ios_base::failure& e) {
      fail("BpeTokenizer", "error reading tokenizer file ", path.string(), ": ", e.what());
    }
    return parse(text, names, path.string());
  }

  /// Parses and validates the text of a `tokenizer.json`; errors name it `where` (e.g. its path).
  static BpeTokenizer from_json(std::string_view json_text, const BpeSpecialNames& names = {},
                                const std::string& where = "tokenizer JSON") {
    return parse(json_text, names, where);
  }

  /// Splits `text` as the GPT-2 pre-tokenizer does (ByteLevel with its regex); the pieces tile it.
  static std::vector<std::string> pre_tokenize(std::string_view text) {
    std::vector<std::string> pieces;
    PreTokenizer::gpt2().split(text, pieces);
    return pieces;
  }

  /// True when the pre_tokenizer has a Split step with behavior Removed: the text it matches is
  /// not encoded, so decode(encode(text)) lacks it (as with Hugging Face).
  bool drops_text() const { return pre_tokenizer_.drops_text(); }

  /// Splits `text` as this tokenizer's own pre_tokenizer does.
  std::vector<std::string> pieces(std::string_view text) const {
    std::vector<std::string> out;
    pre_tokenizer_.split(text, out);
    return out;
  }

  /// Token ids of `text`; every added token (special or not) in it is matched literally first.
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids;
    encode_into(text, /*match_special=*/true, ids);
    return ids;
  }

  /// Token ids of `text` treating special added tokens as plain text (tiktoken's
  /// `encode_ordinary`): a source file that spells `<|endoftext|>` cannot end its document.
  /// Added tokens with `"special": false` are still matched.
  std::vector<std::int32_t> encode_ordinary(std::string_view text) const {
    std::vector<std::int32_t> ids;
    encode_into(text, /*match_special=*/false, ids);
    return ids;
  }

  /// BOS + encode_ordinary(text) (+ EOS when `with_eos`), as ByteTokenizer::encode_document:
  /// special tokens come from the pipeline, never from the document's text.
  std::vector<std::int32_t> encode_document(std::string_view text, bool with_eos = true) const {
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() / 3 + 2);
    ids.push_back(special_.bos);
    encode_into(text, /*match_special=*/false, ids);
    if (with_eos) ids.push_back(special_.eos);
    return ids;
  }

  /// The bytes the ids stand for; added tokens decode to their content (`<|endoftext|>`).
  std::string decode(const std::vector<std::int32_t>& ids) const {
    std::string out;
    for (const std::int32_t id : ids) {
      if (id < 0 || id >= vocab_size_) fail("BpeTokenizer", "id ", id, " outside the vocabulary of ", vocab_size_);
      const auto slot = static_cast<std::size_t>(id);
      if (!has_token_[slot]) fail("BpeTokenizer", "id ", id, " has no token (a gap in the vocabulary)");
      out += token_bytes_[slot];
    }
    return out;
  }

  /// Number of token ids: the largest id + 1 (an embedding needs this many rows).
  std::int32_t vocab_size() const { return vocab_size_; }
  /// The ids of BOS, EOS and the FIM sentinels, resolved from BpeSpecialNames at load time.
  const SpecialTokens& special() const { return special_; }
  /// True when `id` is a token (in [0, vocab_size()) and not a gap in the ids).
  bool has_token(std::int32_t id) const { return id >= 0 && id < vocab_size_ && has_token_[static_cast<std::size_t>(id)]; }
  /// Number of merge rules.
  std::size_t num_merges() const { return merges_.size(); }
  /// Number of added tokens (`added_tokens` in the file).
  std::size_t num_added_tokens() const { return added_.size(); }

  /// The id of a token as HF's `token_to_id` finds it: an added token's content, else a vocab
  /// string in its ByteLevel form ("Ġint"); nullopt when there is none.
  std::optional<std::int32_t> token_to_id(std::string_view token) const {
    for (const AddedToken& a : added_)
      if (a.content == token) return a.id;
    const auto it = vocab_strings_.find(token);
    if (it != vocab_strings_.end()) return it->second;
    return std::nullopt;
  }

 private:
  struct AddedToken {
    std::string content;
    std::int32_t id = 0;
    bool special = false;
  };

  // append() rather than `"..." + std::string`: GCC 12 -O3 reports a false -Wrestrict on the latter.
  static std::string quoted(std::string_view s) { return std::string("\"").append(s).append("\""); }

  // A JSON value that must be a token id: an integer in [0, kMaxVocab). `what` names its owner in
  // an error. (Hot loops use `if (!ok) fail(...)`: check() would build its message parts every time.)
  template <class What>
  static std::int32_t read_id(const nlohmann::json& value, const std::string& where, const What& what) {
    if (!value.is_number_integer())
      fail("BpeTokenizer", where, ": ", what(), " has id ", value.dump(), ", not an integer");
    const bool in_range = value.is_number_unsigned()
                              ? value.get<std::uint64_t>() < static_cast<std::uint64_t>(kMaxVocab)
                              : value.get<std::int64_t>() >= 0 && value.get<std::int64_t>() < kMaxVocab;
    if (!in_range)
      fail("BpeTokenizer", where, ": ", what(), " has id ", value.dump(), " out of range [0, ", kMaxVocab, ")");
    return static_cast<std::int32_t>(value.get<std::int64_t>());
  }

  // Whether a pre_tokenizer or decoder node is ByteLevel, alone or inside a Sequence.
  static bool is_byte_level(const nlohmann::json& node) {
    if (!node.is_object()) return false;
    const auto type = node.find("type");
    if (type == node.end() || !type->is_string()) return false;
    if (*type == "ByteLevel") return true;
    if (*type != "Sequence") return false;
    for (const char* key : {"pretokenizers", "decoders"}) {
      const auto list = node.find(key);
      if (list != node.end() && list->is_array())
        for (const auto& child : *list)
          if (is_byte_level(child)) return true;
    }
    return false;
  }

  static std::string type_of(const nlohmann::json& root, const char* key) {
    const auto node = root.find(key);
    if (node == root.end() || node->is_null()) return "null";
    const auto type = node->is_object() ? node->find("type") : node->end();
    const bool named = node->is_object() && type != node->end() && type->is_string();
    return named ? quoted(type->get<std::string>()) : node->dump();
  }

  static BpeTokenizer parse(std::string_view text, const BpeSpecialNames& names, const std::string& where) {
    // The strict reader first: RFC 8259 grammar, UTF-8, duplicate keys (nlohmann keeps the last one
    // silently) and nesting at most io::kJsonMaxDepth deep. nlohmann parses 200,000 levels without
    // complaint, but copying or dumping such a value recurses once per level and overflows the stack.
    io::validate_json(text, "BpeTokenizer " + where);
    nlohmann::json root;
    try {
      root = nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::exception& e) {
      fail("BpeTokenizer", where, ": not valid JSON: ", e.what());
    }
    try {
      return from_parsed(root, names, where);
    } catch (const nlohmann::json::exception& e) {  // a type the checks below did not foresee
      fail("BpeTokenizer", where, ": malformed tokenizer.json: ", e.what());
    }
  }

  static BpeTokenizer from_parsed(const nlohmann::json& root, const BpeSpecialNames& names, const std::string& where) {
    check(root.is_object(), "BpeTokenizer", where, ": the top level is ", root.type_name(), ", not an object");
    const auto model_it = root.find("model");
    check(model_it != root.end() && model_it->is_object(), "BpeTokenizer", where, ": missing \"model\" object");
    const nlohmann::json& model = *model_it;
    const auto type = model.find("type");
    check(type != model.end() && type->is_string(), "BpeTokenizer", where, ": model.type is missing");
    check(*type == "BPE", "BpeTokenizer", where, ": model.type is ", quoted(type->get<std::string>()),
          "; only \"BPE\" is supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const auto opt = model.find(key);
      const bool unset = opt == model.end() || opt->is_null() || (opt->is_string() && opt->get<std::string>().empty());
      if (!unset)
        fail("BpeTokenizer", where, ": model.", key, " = ", opt->dump(), " is not supported (byte-level BPE has none)");
    }
    const auto normalizer = root.find("normalizer");
    check(normalizer == root.end() || normalizer->is_null(), "BpeTokenizer", where, ": normalizer ",
          type_of(root, "normalizer"), " is not supported (megacpp reproduces tokenizers without one exactly and "
          "refuses the others rather than tokenize differently)");
    BpeTokenizer tok;
    tok.pre_tokenizer_ = PreTokenizer::from_json(root.value("pre_tokenizer", nlohmann::json()), where);
    // Encoding needs the ByteLevel step; decoding is this class's own ByteLevel inverse, so the
    // decoder may be absent but not another kind (Metaspace, ByteFallback: another vocabulary).
    const nlohmann::json decoder = root.value("decoder", nlohmann::json());
    check(tok.pre_tokenizer_.has_byte_level() && (decoder.is_null() || is_byte_level(decoder)), "BpeTokenizer", where,
          ": not a byte-level BPE: pre_tokenizer is ", type_of(root, "pre_tokenizer"), " and decoder is ",
          type_of(root, "decoder"), "; the ByteLevel convention (GPT-2, Llama-3, StarCoder) needs a ByteLevel "
          "pre-tokenizer step and a ByteLevel decoder or none");
    const auto dropout = model.find("dropout");
    check(dropout == model.end() || dropout->is_null(), "BpeTokenizer", where, ": model.dropout = ", 
          dropout == model.end() ? std::string() : dropout->dump(), " is not supported (BPE-dropout samples a tokenization)");
    const auto ignore_merges = model.find("ignore_merges");
    tok.ignore_merges_ = ignore_merges != model.end() && ignore_merges->is_boolean() && ignore_merges->get<bool>();

    // Vocab: ByteLevel strings -> ids.
    const auto vocab = model.find("vocab");
    check(vocab != model.end() && vocab->is_object(), "BpeTokenizer", where, ": missing model.vocab object");
    std::vector<std::pair<std::string, std::int32_t>> entries;
    entries.reserve(vocab->size());
    // Named references, not a structured binding: a lambda may not capture a structured binding
    // before C++20 (P1091), and clang accepts it only from version 16, never inside OpenMP code.
    for (const auto& item : vocab->items()) {
      const std::string& token = item.key();
      entries.emplace_back(token, read_id(item.value(), where, [&] { return "vocab token " + quoted(token); }));
      tok.vocab_strings_.emplace(token, entries.back().second);
    }

    // Added tokens: matched literally; decoded as their content.
    const auto added = root.find("added_tokens");
    if (added != root.end() && !added->is_null()) {
      check(added->is_array(), "BpeTokenizer", where, ": added_tokens is ", added->type_name(), ", not an array");
      for (const auto& a : *added) {
        if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string())
          fail("BpeTokenizer", where, ": added token ", a.dump(), " lacks an integer id and a string content");
        const auto what = [&] { return "added token " + a["content"].dump(); };
        AddedToken t{a["content"].get<std::string>(), read_id(a["id"], where, what), a.value("special", false)};
        check(!t.content.empty(), "BpeTokenizer", where, ": added token id ", t.id, " has empty content");
        for (const char* option : {"lstrip", "rstrip", "single_word"})
          if (a.contains(option) && a[option].is_boolean() && a[option].get<bool>())
            fail("BpeTokenizer", where, ": added token ", quoted(t.content), " has ", option,
                 " = true, which is not supported (its matches would differ from Hugging Face's)");
        const auto in_vocab = tok.vocab_strings_.find(t.content);
        if (in_vocab != tok.vocab_strings_.end() && in_vocab->second != t.id)
          fail("BpeTokenizer", where, ": added token ", quoted(t.content), " has id ", t.id, " but the vocab gives it id ",
               in_vocab->second);
        for (const AddedToken& other : tok.added_) {
          if (other.content == t.content)
            fail("BpeTokenizer", where, ": added token ", quoted(t.content), " appears twice");
          if (other.id == t.id)
            fail("BpeTokenizer", where, ": duplicate id ", t.id, ": added tokens ", quoted(other.content), " and ",
                 quoted(t.content));
        }
        tok.added_.push_back(std::move(t));
      }
    }

    std::int32_t max_id = -1;
    for (const auto& e : entries) max_id = std::max(max_id, e.second);
    for (const auto& a : tok.added_) max_id = std::max(max_id, a.id);
    check(max_id >= 0, "BpeTokenizer", where, ": the vocabulary is empty");
    tok.vocab_size_ = max_id + 1;
    tok.token_bytes_.assign(static_cast<std::size_t>(tok.vocab_size_), std::string());
    tok.has_token_.assign(static_cast<std::size_t>(tok.vocab_size_), 0);
    std::vector<const std::string*> owner(static_cast<std::size_t>(tok.vocab_size_), nullptr);  // for error messages
    for (const AddedToken& a : tok.added_) {
      const auto slot = static_cast<std::size_t>(a.id);
      tok.token_bytes_[slot] = a.content;
      tok.has_token_[slot] = 1;
      owner[slot] = &a.content;
    }
    for (const auto& [token, id] : entries) {
      const auto slot = static_cast<std::size_t>(id);
      if (owner[slot] != nullptr) {
        if (*owner[slot] == token) continue;  // an added token that the vocab lists too (GPT-2's `<|endoftext|>`)
        fail("BpeTokenizer", where, ": duplicate id ", id, ": tokens ", quoted(*owner[slot]), " and ", quoted(token));
      }
      owner[slot] = &token;
      auto bytes = detail::byte_level_to_bytes(token);
      if (!bytes)
        fail("BpeTokenizer", where, ": vocab token ", quoted(token), " (id ", id,
             ") has a character outside the ByteLevel alphabet: not a byte-level BPE vocabulary");
      tok.has_token_[slot] = 1;
      tok.token_bytes_[slot] = *bytes;
      tok.bytes_to_id_.emplace(std::move(*bytes), id);
    }
    tok.byte_id_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const auto it = tok.bytes_to_id_.find(std::string(1, static_cast<char>(b)));
      if (it != tok.bytes_to_id_.end()) tok.byte_id_[static_cast<std::size_t>(b)] = it->second;
    }

    // Merges, in rank order: "a b" strings (older files) or [a, b] arrays (tokenizers >= 0.20).
    const auto merges = model.find("merges");
    check(merges != model.end() && merges->is_array(), "BpeTokenizer", where, ": missing model.merges array");
    tok.merges_.reserve(merges->size());
    std::int32_t rank = 0;
    for (const auto& m : *merges) {
      std::string left, right;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const auto space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          fail("BpeTokenizer", where, ": merge ", rank, " ", quoted(s), " is not two tokens separated by one space");
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else {
        if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string())
          fail("BpeTokenizer", where, ": merge ", rank, " ", m.dump(), " is neither \"a b\" nor [\"a\", \"b\"]");
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      }
      const auto lookup = [&](const std::string& token, const char* role) {
        const auto it = tok.vocab_strings_.find(token);
        if (it == tok.vocab_strings_.end())
          fail("BpeTokenizer", where, ": merge ", rank, " (", quoted(left), ", ", quoted(right), "): ", role, " ",
               quoted(token), " is not in the vocab");
        return it->second;
      };
      const std::int32_t a = lookup(left, "left token"), b = lookup(right, "right token");
      const std::int32_t ab = lookup(left + right, "result");
      if (!tok.merges_.emplace(detail::bpe_pair_key(a, b), detail::BpeMerge{rank, ab}).second)
        fail("BpeTokenizer", where, ": merge ", rank, " (", quoted(left), ", ", quoted(right), ") is listed twice");
      ++rank;
    }

    // Added tokens by first byte, longest first: leftmost-longest literal matching.
    for (std::size_t i = 0; i < tok.added_.size(); ++i)
      tok.added_by_first_byte_[static_cast<unsigned char>(tok.added_[i].content[0])].push_back(i);
    for (auto& list : tok.added_by_first_byte_)
      std::stable_sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) {
        return tok.added_[x].content.size() > tok.added_[y].content.size();
      });

    const auto resolve = [&](const std::string& name, const char* role) {
      const auto id = tok.token_to_id(name);
      if (!id)
        fail("BpeTokenizer", where, ": special token ", role, " = ", quoted(name),
             " is neither an added token nor in the vocab (set BpeSpecialNames::", role, ")");
      return *id;
    };
    tok.special_.bos = resolve(names.bos, "bos");
    tok.special_.eos = resolve(names.eos, "eos");
    tok.special_.fim_prefix = resolve(names.fim_prefix, "fim_prefix");
    tok.special_.fim_suffix = resolve(names.fim_suffix, "fim_suffix");
    tok.special_.fim_middle = resolve(names.fim_middle, "fim_middle");
    return tok;
  }

  // The added token that starts at text[i] (the longest one), or nullptr.
  const AddedToken* match_added(std::string_view text, std::size_t i, bool match_special) const {
    for (const std::size_t k : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& a = added_[k];
      if ((match_special || !a.special) && text.substr(i).starts_with(a.content)) return &a;
    }
    return nullptr;
  }

  void encode_into(std::string_view text, bool match_special, std::vector<std::int32_t>& ids) const {
    std::size_t start = 0;
    for (std::size_t i = 0; i < text.size();) {
      const AddedToken* hit = added_.empty() ? nullptr : match_added(text, i, match_special);
      if (hit == nullptr) {
        ++i;
        continue;
      }
      encode_run(text.substr(start, i - start), ids);
      ids.push_back(hit->id);
      i += hit->content.size();
      start = i;
    }
    encode_run(text.substr(start), ids);
  }

  // Text between added tokens: the pre-tokenizer's pieces, BPE on each.
  void encode_run(std::string_view run, std::vector<std::int32_t>& ids) const {
    if (run.empty()) return;
    pre_tokenizer_.split(run, [&](std::string_view word) { encode_word(word, ids); });
  }

  void encode_word(std::string_view word, std::vector<std::int32_t>& ids) const {
    if (ignore_merges_) {  // Llama-3: a word that is a whole vocab token is that token
      const auto it = bytes_to_id_.find(word);
      if (it != bytes_to_id_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    const auto cached = cache_.find(word);
    if (cached != cache_.end()) {
      ids.insert(ids.end(), cached->second.begin(), cached->second.end());
      return;
    }
    std::vector<std::int32_t> pieces;
    pieces.reserve(word.size());
    for (const char c : word) {
      const auto b = static_cast<unsigned char>(c);
      const std::int32_t id = byte_id_[b];
      if (id < 0) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(b));
        fail("BpeTokenizer", "byte ", hex, " (ByteLevel ", quoted(detail::bytes_to_byte_level(std::string(1, c))),
             ") has no token in the vocab: this vocabulary cannot encode it");
      }
      pieces.push_back(id);
    }
    detail::bpe_merge_word(pieces, merges_);
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    if (cache_.size() >= kCacheWords) cache_.clear();
    cache_.emplace(std::string(word), std::move(pieces));
  }

  using StringMap = std::unordered_map<std::string, std::int32_t, detail::StringViewHash, std::equal_to<>>;
  std::int32_t vocab_size_ = 0;
  std::vector<std::string> token_bytes_;  // id -> the bytes it decodes to
  std::vector<char> has_token_;           // id -> whether any token has that id
  StringMap vocab_strings_;               // ByteLevel vocab string ("Ġint") -> id
  StringMap bytes_to_id_;                 // vocab token bytes (" int") -> id
  std::array<std::int32_t, 256> byte_id_{};  // byte -> its single-byte token, -1 when absent
  std::unordered_map<std::uint64_t, detail::BpeMerge> merges_;  // (left id, right id) -> rank, result
  std::vector<AddedToken> added_;
  std::array<std::vector<std::size_t>, 256> added_by_first_byte_;  // indices into added_, longest first
  PreTokenizer pre_tokenizer_;
  bool ignore_merges_ = false;
  SpecialTokens special_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>, detail::StringViewHash, std::equal_to<>> cache_;
};

}  // namespace megacpp::data
