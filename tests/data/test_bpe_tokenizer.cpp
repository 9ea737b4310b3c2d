// BpeTokenizer on a handmade byte-level tokenizer.json: hand-derived ids, merge priority, the
// GPT-2 split, added tokens, round trips, agreement with a naive merge loop, every error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/temp_dir.hpp"
#include "megacpp/core/random.hpp"
#include "megacpp/data/bpe_tokenizer.hpp"

using namespace megacpp;
using namespace megacpp::data;
using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

namespace {

std::string utf8(int cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // the GPT-2 alphabet ends at U+0143: two bytes suffice
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// encoder.py's bytes_to_unicode, written as its Python is (independent of the header's table):
// bs = printable ranges; every other byte b appended in order with code point 256 + n.
const std::vector<std::string>& gpt2_alphabet() {
  static const std::vector<std::string> table = [] {
    std::vector<int> bs;
    for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
    std::vector<int> cs = bs;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
        bs.push_back(b);
        cs.push_back(256 + n++);
      }
    }
    std::vector<std::string> out(256);
    for (std::size_t k = 0; k < bs.size(); ++k) out[static_cast<std::size_t>(bs[k])] = utf8(cs[k]);
    return out;
  }();
  return table;
}

// Raw bytes in the vocab's ByteLevel spelling: " int" -> "Ġint".
std::string bl(std::string_view raw) {
  std::string s;
  for (const char c : raw) s += gpt2_alphabet()[static_cast<unsigned char>(c)];
  return s;
}

// The fixture: byte b has id b; then six merges (raw-byte pairs, in rank order) and added tokens.
//   256 " t"  257 "in"  258 "int"  259 " int"  260 "rs"  261 "er"
//   262 `<|endoftext|>`  263..265 FIM sentinels  266 `<sep>` (not special)  267 `<sep>>` (special)
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {" ", "t"}, {"i", "n"}, {"in", "t"}, {" ", "int"}, {"r", "s"}, {"e", "r"}};

json fixture(const std::vector<std::pair<std::string, std::string>>& merges = kMerges, bool array_merges = false) {
  json j;
  j["version"] = "1.0";
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_alphabet()[static_cast<std::size_t>(b)]] = b;
  int next = 256;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(bl(a + b))) vocab[bl(a + b)] = next++;
    if (array_merges) merge_list.push_back(json::array({bl(a), bl(b)}));
    else merge_list.push_back(bl(a) + " " + bl(b));
  }
  next = std::max(next, 262);
  j["added_tokens"] = json::array();
  for (const auto& [content, special] : std::vector<std::pair<std::string, bool>>{
           {"<|endoftext|>", true}, {"<fim_prefix>", true}, {"<fim_suffix>", true}, {"<fim_middle>", true},
           {"<sep>", false}, {"<sep>>", true}}) {
    j["added_tokens"].push_back({{"id", next++}, {"content", content}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", special}});
  }
  j["model"] = {{"type", "BPE"},      {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                {"merges", merge_list}};
  return j;
}

BpeTokenizer load(const json& j, const BpeSpecialNames& names = {}) { return BpeTokenizer::from_json(j.dump(), names); }

Ids bytes_of(std::string_view s) {
  Ids ids;
  for (const char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The reference: lowest rank first, leftmost on ties, one merge at a time, O(n^2) per word
// (tiktoken's `_byte_pair_merge`; HF models/bpe/word.rs does the same with a queue). encoder.py's
// `bpe()` merges every occurrence of the best pair per step, which agrees whenever each token has
// a single merge that creates it (trained tables); random tables here may give a token two.
using Ranks = std::map<std::pair<std::string, std::string>, int>;  // (left, right) in ByteLevel form -> rank

std::vector<std::string> naive_bpe(const std::string& raw_word, const Ranks& ranks) {
  std::vector<std::string> word;
  for (const char c : raw_word) word.push_back(bl(std::string(1, c)));
  while (word.size() > 1) {
    int best = INT_MAX;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && it->second < best) best = it->second, at = i;
    }
    if (best == INT_MAX) break;
    word[at] += word[at + 1];
    word.erase(word.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  return word;
}

}  // namespace

TEST_CASE("BpeTokenizer: the ByteLevel alphabet is encoder.py's bytes_to_unicode", "[data][bpe]") {
  for (int b = 0; b < 256; ++b)
    CHECK(data::detail::bytes_to_byte_level(std::string(1, static_cast<char>(b))) ==
          gpt2_alphabet()[static_cast<std::size_t>(b)]);
  CHECK(bl(" ") == "\xC4\xA0");   // "Ġ" U+0120
  CHECK(bl("\n") == "\xC4\x8A");  // "Ċ" U+010A
  CHECK(bl("\x7F") == "\xC4\xA1");  // DEL is the 34th shifted byte: U+0121
  CHECK(bl("!") == "!");
  CHECK(data::detail::byte_level_to_bytes(bl(" int\n")) == std::optional<std::string>(" int\n"));
  CHECK_FALSE(data::detail::byte_level_to_bytes(" x").has_value());  // a raw space is outside the alphabet
}

TEST_CASE("BpeTokenizer: the GPT-2 split", "[data][bpe]") {
  using Pieces = std::vector<std::string>;
  // HF pre_tokenizers/byte_level.rs tests.
  CHECK(BpeTokenizer::pre_tokenize("Hello my friend, how is your day going?") ==
        Pieces{"Hello", " my", " friend", ",", " how", " is", " your", " day", " going", "?"});
  CHECK(BpeTokenizer::pre_tokenize("Hello there\nHello there") == Pieces{"Hello", " there", "\n", "Hello", " there"});
  CHECK(BpeTokenizer::pre_tokenize("Hello there       dear") == Pieces{"Hello", " there", "      ", " dear"});
  // Contractions are lowercase only; a lone quote is punctuation.
  CHECK(BpeTokenizer::pre_tokenize("don't we'll I'M 'sa") == Pieces{"don", "'t", " we", "'ll", " I", "'", "M", " '", "sa"});
  // `\s+(?!\S)` leaves the last space of a run to the next word; `\s+` takes a lone newline.
  CHECK(BpeTokenizer::pre_tokenize("x = 12345;\n\n  y") == Pieces{"x", " =", " 12345", ";", "\n\n ", " y"});
  CHECK(BpeTokenizer::pre_tokenize("a\n\tb") == Pieces{"a", "\n", "\t", "b"});
  CHECK(BpeTokenizer::pre_tokenize("a  ") == Pieces{"a", "  "});
  CHECK(BpeTokenizer::pre_tokenize("for(int i=0;i<n;++i)") ==
        Pieces{"for", "(", "int", " i", "=", "0", ";", "i", "<", "n", ";++", "i", ")"});
  // \p{L} is Unicode's: accented and CJK words stay whole.
  CHECK(BpeTokenizer::pre_tokenize("h\xC3\xA9llo w\xC3\xB6rld \xE4\xB8\xAD\xE6\x96\x87") ==
        Pieces{"h\xC3\xA9llo", " w\xC3\xB6rld", " \xE4\xB8\xAD\xE6\x96\x87"});
  CHECK(BpeTokenizer::pre_tokenize("").empty());
  CHECK(BpeTokenizer::pre_tokenize("'") == Pieces{"'"});
}

TEST_CASE("BpeTokenizer: hand-derived ids on the fixture", "[data][bpe]") {
  const BpeTokenizer tok = load(fixture());
  CHECK(tok.vocab_size() == 268);
  CHECK(tok.num_merges() == 6);
  CHECK(tok.num_added_tokens() == 6);
  CHECK(tok.token_to_id(bl(" int")) == std::optional<std::int32_t>(259));
  CHECK(tok.token_to_id("<sep>") == std::optional<std::int32_t>(266));
  CHECK_FALSE(tok.token_to_id("nope").has_value());

  CHECK(tok.encode("int") == Ids{258});   // i n t -> in t -> int
  CHECK(tok.encode(" int") == Ids{259});  // Ġ i n t -> Ġ in t -> Ġ int -> Ġint
  CHECK(tok.encode(" t") == Ids{256});
  // " main": only (i, n) has a rank.
  CHECK(tok.encode("int main") == Ids{258, ' ', 'm', 'a', 257});
  // (Ġ, t) outranks (i, n): Ġ is taken by t, so " int" never forms.
  CHECK(tok.encode(" tint") == Ids{256, 258});
  // The split decides what BPE sees: the space joins " int" only when it directly precedes it.
  CHECK(tok.encode("x int") == Ids{'x', 259});
  CHECK(tok.encode("xint") == Ids{'x', 258});
  CHECK(tok.encode("x  int") == Ids{'x', ' ', 259});
  CHECK(tok.encode("x\tint") == Ids{'x', '\t', 258});
  CHECK(tok.encode("1int") == Ids{'1', 258});
  CHECK(tok.encode("a+= int") == Ids{'a', '+', '=', 259});
  CHECK(tok.encode("").empty());
}

TEST_CASE("BpeTokenizer: the lower-ranked merge wins", "[data][bpe]") {
  // "ers": (r, s) has rank 4, (e, r) rank 5, so e + rs.
  CHECK(load(fixture()).encode("ers") == Ids{'e', 260});
  // The same merges with those two swapped: er + s. (ids: "er" is 260, "rs" 261 there.)
  auto swapped = kMerges;
  std::swap(swapped[4], swapped[5]);
  const BpeTokenizer tok = load(fixture(swapped));
  CHECK(tok.token_to_id("er") == std::optional<std::int32_t>(260));
  CHECK(tok.encode("ers") == Ids{260, 's'});
  // The [a, b] array form of merges reads the same as the "a b" string form.
  const BpeTokenizer from_arrays = load(fixture(kMerges, /*array_merges=*/true));
  for (const std::string s : {"ers", " tint", "int main", "x  int"}) CHECK(from_arrays.encode(s) == load(fixture()).encode(s));
}

TEST_CASE("BpeTokenizer: added tokens are matched literally, longest first", "[data][bpe]") {
  const BpeTokenizer tok = load(fixture());
  const SpecialTokens& sp = tok.special();
  CHECK(sp.bos == 262);
  CHECK(sp.eos == 262);
  CHECK(sp.fim_prefix == 263);
  CHECK(sp.fim_suffix == 264);
  CHECK(sp.fim_middle == 265);

  CHECK(tok.encode("a<|endoftext|>int") == Ids{'a', 262, 258});
  CHECK(tok.encode("<fim_prefix> int<fim_suffix>x<fim_middle>") == Ids{263, 259, 264, 'x', 265});
  CHECK(tok.encode("<sep>>") == Ids{267});        // leftmost-longest: not <sep> then >
  CHECK(tok.encode("<sep><sep>") == Ids{266, 266});
  CHECK(tok.encode("<|endoftext") == bytes_of("<|endoftext"));  // incomplete: plain text

  // encode_ordinary: special tokens are text; non-special added tokens still match.
  CHECK(tok.encode_ordinary("a<|endoftext|>int") == concat({{'a'}, bytes_of("<|endoftext|>"), {258}}));
  CHECK(tok.encode_ordinary("<sep>>") == Ids{266, '>'});

  // encode_document: BOS + ordinary text + EOS, as ByteTokenizer.
  CHECK(tok.encode_document("int") == Ids{262, 258, 262});
  CHECK(tok.encode_document("int", /*with_eos=*/false) == Ids{262, 258});
  const auto doc = tok.encode_document("x<|endoftext|>");
  CHECK(std::count(doc.begin(), doc.end(), sp.eos) == 2);  // only the pipeline's BOS and EOS

  CHECK(tok.decode({262, 258, 263, 266}) == "<|endoftext|>int<fim_prefix><sep>");
}

TEST_CASE("BpeTokenizer: decode(encode(s)) == s on random bytes and on UTF-8 text", "[data][bpe]") {
  const BpeTokenizer tok = load(fixture());
  const std::vector<std::string> fragments = {" ",     "  ",     "\n",           "\t", "int", " int",     "er",
                                              "rs",    "'s",     "'ll",          "1",  "(",   "\xC3\xA9", "\xFF",
                                              "<sep>", "<sep>>", "<|endoftext|>", "<fim_middle>", std::string(1, '\0')};
  Rng rng(20240520);
  for (int trial = 0; trial < 400; ++trial) {
    std::string s;
    const auto parts = rng.below(24);
    for (std::uint64_t k = 0; k < parts; ++k) {
      if (rng.uniform() < 0.5) s += static_cast<char>(rng.below(256));
      else s += fragments[rng.below(fragments.size())];
    }
    const Ids ids = tok.encode(s), ordinary = tok.encode_ordinary(s);
    INFO("trial " << trial << " size " << s.size());
    CHECK(tok.decode(ids) == s);
    CHECK(tok.decode(ordinary) == s);
    for (const std::int32_t id : ordinary) {
      CHECK(id >= 0);
      CHECK(id < tok.vocab_size());
      CHECK(id != tok.special().eos);
      CHECK(id != tok.special().fim_middle);
    }
  }
  const std::string text =
      "na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x99\x82\n"
      "int main() {\n\treturn 0;  // it's done\n}\n\n   ";
  CHECK(tok.decode(tok.encode(text)) == text);
  CHECK(tok.decode(tok.encode_document(text)) == "<|endoftext|>" + text + "<|endoftext|>");
}

TEST_CASE("BpeTokenizer: merges agree with the naive lowest-rank-first loop on random merge tables", "[data][bpe]") {
  Rng rng(7);
  for (int table = 0; table < 20; ++table) {
    // A merge table as training builds one: each merge joins two tokens that already exist.
    std::vector<std::string> tokens = {"a", "b", "c", " "};
    std::vector<std::pair<std::string, std::string>> merges;
    Ranks ranks;
    while (merges.size() < 24) {
      const std::string& x = tokens[rng.below(tokens.size())];
      const std::string& y = tokens[rng.below(tokens.size())];
      if (ranks.count({bl(x), bl(y)})) continue;
      ranks[{bl(x), bl(y)}] = static_cast<int>(merges.size());
      merges.emplace_back(x, y);
      if (std::find(tokens.begin(), tokens.end(), x + y) == tokens.end()) tokens.push_back(x + y);
    }
    const json j = fixture(merges);
    const BpeTokenizer tok = load(j);
    for (int w = 0; w < 50; ++w) {
      std::string word;
      const auto n = 1 + rng.below(16);
      for (std::uint64_t k = 0; k < n; ++k) word += "abc"[rng.below(3)];
      Ids expected;
      for (const std::string& piece : naive_bpe(word, ranks))
        expected.push_back(j["model"]["vocab"][piece].get<std::int32_t>());
      INFO("table " << table << " word " << word);
      CHECK(tok.encode(word) == expected);
    }
  }
}

TEST_CASE("BpeTokenizer: ByteLevel add_prefix_space and ignore_merges", "[data][bpe]") {
  json j = fixture();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  const BpeTokenizer prefixed = load(j);
  CHECK(prefixed.encode("int") == Ids{259});  // " int": the documented exception to the round trip
  CHECK(prefixed.encode(" int") == Ids{259});

  j = fixture();
  j["model"]["vocab"]["xyz"] = 268;  // a whole-word token with no merges leading to it
  j["added_tokens"].push_back({{"id", 269}, {"content", "<pad>"}, {"special", true}});
  CHECK(load(j).encode("xyz") == bytes_of("xyz"));
  j["model"]["ignore_merges"] = true;  // Llama-3: a word that is a vocab token is taken whole
  CHECK(load(j).encode("xyz") == Ids{268});
  CHECK(load(j).encode(" int") == Ids{259});
}

TEST_CASE("BpeTokenizer: from_file, gaps in the ids, a vocabulary beyond uint16", "[data][bpe]") {
  testing::TempDir dir;
  json j = fixture();
  j["added_tokens"].push_back({{"id", 70000}, {"content", "<|big|>"}, {"special", true}});
  std::ofstream(dir / "tokenizer.json") << j.dump(2);
  const BpeTokenizer tok = BpeTokenizer::from_file(dir / "tokenizer.json");
  CHECK(tok.vocab_size() == 70001);
  CHECK(tok.encode("<|big|> int") == Ids{70000, 259});
  CHECK(tok.decode({70000}) == "<|big|>");
  CHECK_THROWS_WITH(tok.decode({300}), Catch::Matchers::Contains("id 300 has no token"));
  CHECK_THROWS_WITH(tok.decode({70001}), Catch::Matchers::Contains("id 70001 outside the vocabulary of 70001"));
  CHECK_THROWS_WITH(tok.decode({-1}), Catch::Matchers::Contains("id -1 outside the vocabulary"));
  CHECK_THROWS_WITH(BpeTokenizer::from_file(dir / "missing.json"),
                    Catch::Matchers::Contains("cannot open tokenizer file") && Catch::Matchers::Contains("missing.json"));
}

TEST_CASE("BpeTokenizer: every malformed tokenizer.json is an Error naming the problem", "[data][bpe]") {
  using Catch::Matchers::Contains;
  const auto fails_with = [](const json& j, const std::string& message) {
    INFO(message);
    CHECK_THROWS_AS(load(j), Error);
    CHECK_THROWS_WITH(load(j), Contains(message));
  };
  CHECK_THROWS_WITH(BpeTokenizer::from_json("{\"model\": "),
                    Contains("BpeTokenizer tokenizer JSON: malformed JSON: unexpected end of input at byte 10"));
  CHECK_THROWS_WITH(BpeTokenizer::from_json("[1, 2]"), Contains("top level is array"));
  json j = fixture();
  j.erase("model");
  fails_with(j, "missing \"model\" object");
  j = fixture();
  j["model"]["type"] = "WordPiece";
  fails_with(j, "model.type is \"WordPiece\"; only \"BPE\" is supported");
  j = fixture();
  j["model"].erase("type");
  fails_with(j, "model.type is missing");
  j = fixture();
  j["model"].erase("vocab");
  fails_with(j, "missing model.vocab");
  j = fixture();
  j["model"]["vocab"] = json::array();
  fails_with(j, "missing model.vocab");
  j = fixture();
  j["model"].erase("merges");
  fails_with(j, "missing model.merges");
  j = fixture();
  j["model"]["continuing_subword_prefix"] = "##";
  fails_with(j, "model.continuing_subword_prefix = \"##\" is not supported");
  j = fixture();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  j["decoder"] = nullptr;
  fails_with(j, "pre_tokenizer step \"Whitespace\" is not supported");
  j = fixture();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}},
                                                                    j["pre_tokenizer"]})}};
  j["decoder"] = nullptr;
  CHECK_NOTHROW(load(j));  // Llama-3's shape: Split then ByteLevel

  // Merges.
  j = fixture();
  j["model"]["merges"].push_back(bl(" ") + " zz");
  fails_with(j, "merge 6 (\"\xC4\xA0\", \"zz\"): right token \"zz\" is not in the vocab");
  j = fixture();
  j["model"]["merges"].push_back("a b");
  fails_with(j, "merge 6 (\"a\", \"b\"): result \"ab\" is not in the vocab");
  j = fixture();
  j["model"]["merges"].push_back("abc");
  fails_with(j, "merge 6 \"abc\" is not two tokens separated by one space");
  j = fixture();
  j["model"]["merges"].push_back(json::array({"a"}));
  fails_with(j, "merge 6 [\"a\"] is neither");
  j = fixture();
  j["model"]["merges"].push_back("i n");
  fails_with(j, "merge 6 (\"i\", \"n\") is listed twice");

  // Ids.
  for (const auto& [bad, message] : std::vector<std::pair<json, std::string>>{
           {-1, "has id -1 out of range [0, 16777216)"},
           {1 << 30, "has id 1073741824 out of range"},
           {"7", "has id \"7\", not an integer"},
           {1.5, "has id 1.5, not an integer"}}) {
    j = fixture();
    j["model"]["vocab"]["zz"] = bad;
    fails_with(j, "vocab token \"zz\" " + message);
  }
  // Beyond int64 the strict JSON reader refuses the number itself (io/json_value.hpp).
  j = fixture();
  j["model"]["vocab"]["zz"] = 18446744073709551615ull;
  fails_with(j, "malformed JSON: number 18446744073709551615 is outside the int64 range at byte");
  j = fixture();
  j["model"]["vocab"]["zz"] = 5;
  fails_with(j, "duplicate id 5: tokens");
  j = fixture();
  j["model"]["vocab"][" x"] = 300;  // a raw space: not ByteLevel
  fails_with(j, "vocab token \" x\" (id 300) has a character outside the ByteLevel alphabet");
  j = fixture();
  j["model"]["vocab"] = json::object();
  j["model"]["merges"] = json::array();
  j["added_tokens"] = json::array();
  fails_with(j, "the vocabulary is empty");

  // Added tokens.
  j = fixture();
  j["added_tokens"].push_back({{"id", 5}, {"content", "<new>"}});
  fails_with(j, "duplicate id 5: tokens \"<new>\" and");
  j = fixture();
  j["added_tokens"].push_back({{"id", 300}, {"content", "int"}});
  fails_with(j, "added token \"int\" has id 300 but the vocab gives it id 258");
  j = fixture();
  j["added_tokens"].push_back({{"id", 300}, {"content", "<sep>"}});
  fails_with(j, "added token \"<sep>\" appears twice");
  j = fixture();
  j["added_tokens"].push_back({{"id", 262}, {"content", "<other>"}});
  fails_with(j, "duplicate id 262: added tokens \"<|endoftext|>\" and \"<other>\"");
  j = fixture();
  j["added_tokens"].push_back({{"id", 300}, {"content", ""}});
  fails_with(j, "added token id 300 has empty content");
  j = fixture();
  j["added_tokens"].push_back({{"content", "<x>"}});
  fails_with(j, "lacks an integer id and a string content");
  j = fixture();
  j["added_tokens"].push_back({{"id", 300}, {"content", "<x>"}, {"special", "yes"}});
  fails_with(j, "malformed tokenizer.json");
  j = fixture();
  j["added_tokens"] = "none";
  fails_with(j, "added_tokens is string, not an array");

  // Special-token names.
  BpeSpecialNames names;
  names.fim_prefix = "<PRE>";
  CHECK_THROWS_WITH(load(fixture(), names),
                    Contains("special token fim_prefix = \"<PRE>\" is neither an added token nor in the vocab"));
  names = BpeSpecialNames{};
  names.bos = "<s>";
  CHECK_THROWS_WITH(load(fixture(), names), Contains("special token bos = \"<s>\""));
  names = BpeSpecialNames{};
  names.bos = names.eos = "<sep>";
  CHECK(load(fixture(), names).special().bos == 266);

  // A vocabulary without some byte cannot encode it: an error at encode, naming the byte.
  j = fixture();
  j["model"]["vocab"].erase(bl(std::string(1, '\0')));
  const BpeTokenizer no_nul = load(j);
  CHECK(no_nul.encode("int") == Ids{258});
  CHECK_THROWS_WITH(no_nul.encode(std::string("a\0b", 3)),
                    Contains("byte 0x00 (ByteLevel \"\xC4\x80\") has no token in the vocab"));
}
