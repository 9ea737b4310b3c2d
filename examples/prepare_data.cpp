// megacpp-prepare: turns directories of source files into train/val token shards.
//
// Walks each --input DIR for C/C++/CUDA sources (sorted, so the output is deterministic), tokenizes each file
// as one document (byte-level: BOS + bytes + EOS; or, with --tokenizer, a byte-level BPE
// `tokenizer.json` such as StarCoder's: BOS + BPE tokens + EOS), applies fill-in-the-middle to a
// share of the training documents (docs/recipe.md "Fill in the middle": 40% plain, 40% random FIM,
// 20% structured FIM, the structured spans found in the text and mapped to tokens by their byte
// offsets, data/fim_spans.hpp), and writes
// OUT/train_000000.bin ... and OUT/val_000000.bin in the modded-nanogpt shard format (uint16
// tokens, or uint32 in any shard holding an id above 65535: write_shard picks per shard). Files
// are assigned to val by a hash of their path, so adding a file never moves another between splits.
// OUT/shards.json records the tokenizer (its BOS, EOS and FIM ids, vocabulary size and a hash of
// tokenizer.json) so the trainer never guesses them (megacpp/data/shard_meta.hpp).
// With --stream NAME=DIR instead of --input, each named stream (code, text, math or any name of
// lowercase letters and digits) takes every file under its directories and is written as
// OUT/train_NAME_000000.bin and OUT/val_NAME_000000.bin; the trainer draws rows from the streams
// by a mixture (data/mixture.hpp). FIM applies to C/C++/CUDA files only, whatever their stream.
//
// Every flag is checked before any work. The shards are written into a hidden directory beside
// OUT, which replaces OUT only when everything is written: a failure leaves OUT as it was and no
// partial shard anywhere. An existing OUT is replaced only when it holds nothing but an earlier
// megacpp-prepare output, so a mistyped --output never deletes other files.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "common/bpe_option.hpp"
#include "common/cli.hpp"
#include "common/progress_bar.hpp"
#include "megacpp/data.hpp"
#include "megacpp/data/bpe_tokenizer.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;
using namespace megacpp;
using namespace megacpp::examples;

namespace {
const std::string kTool = "megacpp-prepare";

struct ShardSink {
  fs::path dir;
  std::string prefix;
  std::size_t max_tokens;
  std::vector<std::uint32_t> buffer;
  int written = 0;
  std::size_t total = 0;

  void add(const std::vector<std::int32_t>& doc) {
    buffer.insert(buffer.end(), doc.begin(), doc.end());
    total += doc.size();
    if (buffer.size() >= max_tokens) flush();
  }
  void flush() {
    if (buffer.empty()) return;
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06d.bin", prefix.c_str(), written++);
    data::write_shard(dir / name, buffer);
    buffer.clear();
  }
};

// True for the files a megacpp-prepare output holds (and the build's stamp beside them).
bool is_prepare_output(const fs::path& file) {
  const std::string n = file.filename().string();
  const bool shard = (n.rfind("train_", 0) == 0 || n.rfind("val_", 0) == 0) && file.extension() == ".bin";
  return shard || n == data::kShardMetadataFile || n == "corpus.stamp";
}

// The hidden directory the shards are written into; removed unless commit() moved it into place.
class StagingDirectory {
 public:
  explicit StagingDirectory(const fs::path& out) : out_(out) {
    path_ = out.parent_path() / ("." + out.filename().string() + ".tmp." + std::to_string(::getpid()));
    std::error_code ec;
    fs::remove_all(path_, ec);
    ensure_writable_directory(kTool, "output", path_);
  }
  ~StagingDirectory() {
    std::error_code ec;
    if (!committed_) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  // Replaces OUT by the staging directory: OUT moves aside, the staging directory takes its name,
  // then the old OUT is removed. A crash in between leaves OUT or the complete new one in place.
  void commit() {
    const fs::path old = out_.parent_path() / ("." + out_.filename().string() + ".old." + std::to_string(::getpid()));
    const bool had_old = fs::exists(out_);
    if (had_old) fs::rename(out_, old);
    fs::rename(path_, out_);
    committed_ = true;
    std::error_code ec;
    if (had_old) fs::remove_all(old, ec);
  }

 private:
  fs::path out_, path_;
  bool committed_ = false;
};

// The FIM rewrites of the training documents, counted for the closing report.
struct FimCounts {
  std::size_t code = 0, plain = 0, random = 0, doc_to_code = 0, code_to_doc = 0, structured_found = 0;
  void add(data::FimKind k) {
    ++code;
    switch (k) {
      case data::FimKind::plain: ++plain; break;
      case data::FimKind::random: ++random; break;
      case data::FimKind::doc_to_code: ++doc_to_code; break;
      case data::FimKind::code_to_doc: ++code_to_doc; break;
    }
  }
};

// One source of documents: a stream name ("" for --input) and its directories.
struct Source {
  std::string stream;
  std::vector<std::string> dirs;
};

// --stream NAME=DIR values grouped by name, in the order the names first appear.
std::vector<Source> parse_streams(const std::vector<std::string>& values) {
  std::vector<Source> out;
  for (const auto& v : values) {
    const std::size_t eq = v.find('=');
    check_flag(eq != std::string::npos && eq + 1 < v.size(), kTool, "stream", "\"", v, "\" is not NAME=DIR");
    const std::string name = v.substr(0, eq);
    check_flag(data::valid_stream_name(name), kTool, "stream", "name \"", name,
               "\" must be 1-32 lowercase letters and digits (e.g. code, text, math)");
    auto it = std::find_if(out.begin(), out.end(), [&](const Source& s) { return s.stream == name; });
    if (it == out.end()) it = out.insert(out.end(), Source{name, {}});
    it->dirs.push_back(v.substr(eq + 1));
  }
  return out;
}

int prepare(int argc, char** argv) {
  po::options_description opts("megacpp-prepare: source directories -> train/val token shards\nOptions");
  std::vector<std::string> inputs, stream_values;
  std::string output;
  data::FimConfig fim_config = data::FimConfig::recipe();
  double val_fraction = 0.05, fim_rate = fim_config.rate, fim_structured = fim_config.structured_share;
  std::string seed_text = "0";
  std::int64_t shard_tokens = 16 << 20;
  std::string tokenizer_path, special_names = kDefaultSpecialTokens;
  opts.add_options()("help,h", "show this help and exit")("version", "print the version and exit")
      ("input,i", po::value(&inputs)->composing(),
       "directory to walk for .h .hpp .c .cc .cpp .cu .cuh files (repeat for several); one unnamed stream")
      ("stream", po::value(&stream_values)->composing(),
       "NAME=DIR: every file under DIR goes to the named stream (e.g. code=src, text=docs, math=tex; repeat; "
       "not with --input)")
      ("output,o", po::value(&output)->required(),
       "directory for train_*.bin, val_*.bin and shards.json (replaced only if it holds an earlier output)")
      ("val_fraction", po::value(&val_fraction)->default_value(val_fraction, shown_default(val_fraction)), "share of files (by path hash) kept for validation, in [0, 1)")
      ("fim_rate", po::value(&fim_rate)->default_value(fim_rate, shown_default(fim_rate)),
       "probability a training C/C++ file becomes a FIM example, in [0, 1] (0.6: the recipe's 40% plain; "
       "0.5: \"FIM at rate 0.5\")")
      ("fim_structured", po::value(&fim_structured)->default_value(fim_structured, "1/3"),
       "share of FIM examples split at a comment and its function body (doc -> code or code -> doc, even), in [0, 1]")
      ("shard_tokens", po::value(&shard_tokens)->default_value(shard_tokens), "tokens per shard (the last may be smaller), in [1, 2^31 - 1]")
      ("seed", po::value(&seed_text)->default_value(seed_text), "seed of the FIM transform (unsigned 64-bit)")
      ("tokenizer", po::value(&tokenizer_path), "byte-level BPE tokenizer.json (default: the byte tokenizer, vocab 261)")
      ("special_tokens", po::value(&special_names)->default_value(special_names),
       "with --tokenizer: the added tokens used as BOS,EOS,FIM prefix,FIM suffix,FIM middle");
  po::variables_map vm;
  if (!parse_flags_or_help(argc, argv, opts, opts, vm)) return kExitOk;  // --help

  // Every flag before any work.
  const std::uint64_t seed = parse_u64_flag(kTool, "seed", seed_text);
  check_flag(!inputs.empty() || !stream_values.empty(), kTool, "input", "or --stream is required");
  check_flag(inputs.empty() || stream_values.empty(), kTool, "stream",
             "cannot be combined with --input (name every source: --stream code=DIR)");
  std::vector<Source> sources = inputs.empty() ? parse_streams(stream_values) : std::vector<Source>{{"", inputs}};
  check_real(kTool, "val_fraction", val_fraction, 0, 1);
  check_flag(val_fraction < 1, kTool, "val_fraction", "must be below 1 (the training split needs files), got ", val_fraction);
  check_real(kTool, "fim_rate", fim_rate, 0, 1);
  check_real(kTool, "fim_structured", fim_structured, 0, 1);
  fim_config.rate = fim_rate;
  fim_config.structured_share = fim_structured;
  check_range(kTool, "shard_tokens", shard_tokens, 1, INT32_MAX, "a shard header counts tokens in an int32");
  check_flag(!output.empty(), kTool, "output", "is empty");
  const fs::path out = fs::absolute(output).lexically_normal();
  check_flag(!out.filename().empty() && out.has_parent_path() && out != out.root_path(), kTool, "output", "\"",
             output, "\" names no directory that can be replaced");
  for (const auto& source : sources)
    for (const auto& input : source.dirs)
      check(fs::is_directory(input), kTool, source.stream.empty() ? "--input " : "--stream " + source.stream + "=", input,
            fs::exists(input) ? " is not a directory" : " does not exist");
  if (fs::exists(out)) {
    check(fs::is_directory(out), kTool, "--output ", output, " exists and is not a directory");
    for (const auto& e : fs::directory_iterator(out))
      check(e.is_regular_file() && is_prepare_output(e.path()), kTool, "--output ", output, " holds ",
            e.path().filename().string(), ", which megacpp-prepare did not write: refusing to replace it (choose "
            "an empty or new directory)");
  }
  const data::BpeSpecialNames names = parse_special_token_names(kTool, special_names);
  const std::string tokenizer_bytes =
      tokenizer_path.empty() ? std::string() : read_flag_file(kTool, "--tokenizer", tokenizer_path);

  // The BPE option: special tokens by name. Structured FIM finds its spans in the text and maps
  // them to tokens through each token's bytes (data/fim_spans.hpp), so it works for BPE too.
  data::ByteTokenizer byte_tokenizer;
  std::optional<data::BpeTokenizer> bpe;
  data::ShardMetadata meta = data::byte_shard_metadata();
  if (!tokenizer_path.empty()) {
    bpe = data::BpeTokenizer::from_json(tokenizer_bytes, names, tokenizer_path);
    meta.tokenizer = "bpe";
    meta.tokenizer_hash = data::tokenizer_fingerprint(tokenizer_bytes);
    meta.vocab_size = bpe->vocab_size();
    meta.special = bpe->special();
    std::printf("megacpp-prepare: BPE tokenizer %s: vocab %d, %zu merges, %zu added tokens\n", tokenizer_path.c_str(),
                bpe->vocab_size(), bpe->num_merges(), bpe->num_added_tokens());
  }
  data::validate(meta, tokenizer_path.empty() ? std::string("the byte tokenizer") : tokenizer_path);
  const data::SpecialTokens special = meta.special;

  const std::set<std::string> extensions{".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh"};
  // (path, name, stream): the name decides the split, so it must not depend on where the tree
  // sits: the path relative to its input directory, prefixed by that directory's name when a
  // source has several, and by the stream's name for a named stream.
  struct File {
    fs::path path;
    std::string name;
    std::size_t source;
  };
  std::vector<File> files;
  for (std::size_t si = 0; si < sources.size(); ++si) {
    const Source& source = sources[si];
    const std::size_t before = files.size();
    for (const auto& input : source.dirs) {
      const fs::path prefix = fs::path(source.stream) /
                              (source.dirs.size() > 1 ? fs::path(input).lexically_normal().filename() : fs::path());
      for (const auto& e : fs::recursive_directory_iterator(input, fs::directory_options::skip_permission_denied)) {
        const bool hidden = e.path().filename().string().rfind('.', 0) == 0;
        const bool wanted = source.stream.empty() ? extensions.count(e.path().extension().string()) > 0 : !hidden;
        if (e.is_regular_file() && wanted)
          files.push_back({e.path(), (prefix / fs::relative(e.path(), input)).generic_string(), si});
      }
    }
    check(files.size() > before, kTool, "no ", source.stream.empty() ? "source " : "", "files under ", source.dirs.front(),
          source.dirs.size() > 1 ? " and the other inputs" : "",
          source.stream.empty() ? "" : " (stream " + source.stream + ")");
  }
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return fs::path(a.name) < fs::path(b.name); });

  StagingDirectory staging(out);
  Rng rng(seed);
  const auto per_shard = static_cast<std::size_t>(shard_tokens);
  std::vector<ShardSink> train, val;
  for (const Source& source : sources) {
    const std::string suffix = source.stream.empty() ? "" : "_" + source.stream;
    train.push_back({staging.path(), "train" + suffix, per_shard, {}, 0, 0});
    val.push_back({staging.path(), "val" + suffix, per_shard, {}, 0, 0});
  }
  FimCounts counts;
  ProgressBar bar("prepare", static_cast<double>(files.size()), "files");
  std::size_t n = 0;
  for (const File& file : files) {
    const std::string text = read_flag_file(kTool, "input file", file.path);
    const bool is_val = static_cast<double>(data::fnv1a64(file.name) % 10000) < val_fraction * 10000;
    const auto doc = bpe ? bpe->encode_document(text) : byte_tokenizer.encode_document(text);
    if (is_val) {
      val[file.source].add(doc);
    } else if (!extensions.count(file.path.extension().string())) {
      train[file.source].add(doc);  // FIM is for code
    } else {
      const std::span<const std::int32_t> body(doc.data() + 1, doc.size() - 2);
      const auto ends = bpe ? data::token_end_offsets(*bpe, body) : data::token_end_offsets(byte_tokenizer, body);
      const auto structured = data::structured_fim(text, ends);
      counts.structured_found += structured.has_value();
      data::FimDocument f = data::fim_transform(doc, special, fim_config, rng, structured);
      counts.add(f.kind);
      train[file.source].add(f.tokens);
    }
    bar.update(static_cast<double>(++n));
  }
  bar.finish();
  int train_shards = 0, val_shards = 0;
  std::size_t train_tokens = 0, val_tokens = 0;
  for (std::size_t si = 0; si < sources.size(); ++si) {
    train[si].flush();
    val[si].flush();
    check(train[si].written > 0, kTool, "split left the training set of ",
          sources[si].stream.empty() ? std::string("the input") : "stream " + sources[si].stream,
          " empty: use more files or another --val_fraction (nothing was written to ", output, ")");
    train_shards += train[si].written;
    val_shards += val[si].written;
    train_tokens += train[si].total;
    val_tokens += val[si].total;
  }
  check(val_shards > 0, kTool, "split left val empty: use more files or another --val_fraction (nothing was written to ",
        output, ")");
  data::write_shard_metadata(staging.path(), meta);
  staging.commit();
  std::printf("megacpp-prepare: %zu files -> %zu train tokens in %d shard(s), %zu val tokens in %d shard(s) under %s "
              "(%s tokenizer, BOS %d)\n",
              files.size(), train_tokens, train_shards, val_tokens, val_shards, output.c_str(), meta.tokenizer.c_str(),
              meta.special.bos);
  for (std::size_t si = 0; si < sources.size() && !sources[si].stream.empty(); ++si)
    std::printf("megacpp-prepare: stream %s: %zu train tokens, %zu val tokens\n", sources[si].stream.c_str(),
                train[si].total, val[si].total);
  if (counts.code > 0)
    std::printf("megacpp-prepare: FIM over %zu training code files: %zu plain, %zu random, %zu doc->code, %zu "
                "code->doc (%zu had a documented function)\n",
                counts.code, counts.plain, counts.random, counts.doc_to_code, counts.code_to_doc, counts.structured_found);
  return kExitOk;
}
}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return prepare(argc, argv); });
}
