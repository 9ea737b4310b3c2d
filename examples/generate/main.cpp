// megacpp-generate: samples text from a megacpp-train checkpoint, printing tokens as they come.
//
// Decoding runs one token at a time through the model's caches: attention keeps each layer's
// rotated keys and values (nn/attention/decode.hpp), Mamba-3 keeps its state, angle and previous
// (k, v) (nn/mamba/decode.hpp), so each new token costs O(context) instead of a whole forward.
// --verify also decodes by re-running the full forward at every step and fails unless both
// produce the same tokens (with --temperature 0 this is the greedy equality the issue asks for).
// Every flag is checked before the model is loaded, --tokens against the model's context, and
// every failure is one line and an exit code (common/cli.hpp, docs/trainer.md).
#include <cstdio>
#include <sstream>
#include <string>

#include <boost/program_options.hpp>

#include "common/bpe_option.hpp"
#include "common/cli.hpp"
#include "megacpp/data/tokenizer.hpp"
#include "megacpp/train/curriculum.hpp"
#include "megacpp/nn/model/sampling.hpp"
#include "models.hpp"
#include "run_checkpoint.hpp"
#include "trained_model.hpp"

namespace po = boost::program_options;
using namespace megacpp;
using namespace megacpp::examples;

namespace {
const std::string kTool = "megacpp-generate";

struct GenerateOptions {
  std::string checkpoint, prompt = "#include <", tokenizer, special_tokens = kDefaultSpecialTokens;
  index_t tokens = 200, top_k = 40;
  double temperature = 0.8;
  std::uint64_t seed = 0;
  bool verify = false, stop_at_eos = true;
};

template <class Model>
int run(const GenerateOptions& o, const fs::path& dir, const TrainingState& state, const ModelDefaults& d) {
  const SampleCodec codec(kTool, o.tokenizer, o.special_tokens, state.shards);
  check(codec.available(), kTool, dir.string(), " was trained on BPE shards (", state.shards.tokenizer_hash,
        "): pass their tokenizer.json with --tokenizer");
  const auto prompt = codec.prompt(o.prompt);
  // The prompt (BOS + its tokens) and the new tokens must fit the model's context (the decode
  // caches are sized for it: an unchecked count would ask for terabytes).
  const auto prompt_tokens = static_cast<index_t>(prompt.size());
  check_flag(prompt_tokens + o.tokens <= Model::dims.max_seq, kTool, "tokens", o.tokens, " + the prompt's ",
             prompt_tokens, " tokens exceed the context of \"", state.model, "\" (max_seq ", Model::dims.max_seq, ")");
  check_flag(o.top_k <= Model::dims.vocab, kTool, "top_k", o.top_k, " exceeds the vocabulary of \"", state.model,
             "\" (", Model::dims.vocab, ")");
  Model model(0);
  load_trained_model(kTool, dir, state, d, model);
  const std::int32_t bos = state.shards.special.bos, eos = state.shards.special.eos;
  const SamplingOptions so{o.temperature, o.top_k};
  std::fputs(o.prompt.c_str(), stdout);
  Rng rng(o.seed);
  const auto tokens = generate(model, prompt, o.tokens, so, rng, bos, [&](std::int32_t t) {
    codec.print(t);
    return !(o.stop_at_eos && t == eos);
  });
  std::printf("\n");
  if (!o.verify) return 0;
  Rng reference_rng(o.seed);
  const auto reference = generate_full_forward(model, prompt, o.tokens, so, reference_rng, bos,
                                               [&](std::int32_t t) { return !(o.stop_at_eos && t == eos); });
  std::size_t first_difference = 0;
  while (first_difference < tokens.size() && first_difference < reference.size() &&
         tokens[first_difference] == reference[first_difference])
    ++first_difference;
  if (tokens == reference) {
    std::printf("verify: %zu tokens, cached decoding == full forward at every step\n", tokens.size() - prompt.size());
    return 0;
  }
  std::fprintf(stderr, "verify: cached decoding and full forward differ at token %zu (of %zu / %zu)\n",
               first_difference, tokens.size(), reference.size());
  return kExitVerify;
}

int parse_and_generate(int argc, char** argv) {
  GenerateOptions o;
  std::string seed_text = "0";
  bool no_stop_at_eos = false;
  po::options_description opts("megacpp-generate: sample from a megacpp-train checkpoint\n\nOptions");
  opts.add_options()("help,h", "show this help and exit")("version", "print the version and exit")
      ("checkpoint,c", po::value(&o.checkpoint)->required(), "a step_* directory, or a run directory (its latest)")
      ("prompt,p", po::value(&o.prompt)->default_value(o.prompt), "text to continue")
      ("tokens,n", po::value(&o.tokens)->default_value(o.tokens), "tokens to generate (prompt + tokens <= the model's max_seq)")
      ("temperature", po::value(&o.temperature)->default_value(o.temperature, shown_default(o.temperature)),
       "softmax temperature (0: greedy)")
      ("top_k", po::value(&o.top_k)->default_value(o.top_k), "sample among the k most likely tokens (0: all)")
      ("seed", po::value(&seed_text)->default_value(seed_text), "sampling seed (unsigned 64-bit)")
      ("no_stop_at_eos", po::bool_switch(&no_stop_at_eos), "keep generating past the end-of-document token")
      ("verify", po::bool_switch(&o.verify), "also decode with a full forward per token and fail unless the tokens match")
      ("tokenizer", po::value(&o.tokenizer), "the BPE tokenizer.json the checkpoint's shards were written with (BPE shards only)")
      ("special_tokens", po::value(&o.special_tokens)->default_value(o.special_tokens),
       "with --tokenizer: the names given to megacpp-prepare (BOS,EOS,FIM prefix,FIM suffix,FIM middle)");
  po::variables_map vm;
  if (!parse_flags_or_help(argc, argv, opts, opts, vm)) return kExitOk;  // --help
  o.seed = parse_u64_flag(kTool, "seed", seed_text);
  o.stop_at_eos = !no_stop_at_eos;
  check_range(kTool, "tokens", o.tokens, 0, std::int64_t{1} << 40);
  check_real(kTool, "temperature", o.temperature, 0, 1e6);
  check_range(kTool, "top_k", o.top_k, 0, std::int64_t{1} << 40, "0: all tokens");
  const fs::path dir = resolve_checkpoint(o.checkpoint);
  const TrainingState state = read_training_state(dir / "state.json");
  check(is_model_name(state.model), kTool, (dir / "state.json").string(), ": model \"", state.model,
        "\" is not one this build knows (", model_names(), ")");
  return with_model(state.model, [&](auto model_type, const ModelDefaults& d) {
    return run<typename decltype(model_type)::type>(o, dir, state, d);
  });
}
}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return parse_and_generate(argc, argv); });
}
