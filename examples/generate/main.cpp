// megacpp-generate: samples text from a megacpp-train checkpoint, printing tokens as they come.
//
// Decoding runs one token at a time through the model's caches: attention keeps each layer's
// rotated keys and values (nn/attention/decode.hpp), Mamba-3 keeps its state, angle and previous
// (k, v) (nn/mamba/decode.hpp), so each new token costs O(context) instead of a whole forward.
// --verify also decodes by re-running the full forward at every step and fails unless both
// produce the same tokens (with --temperature 0 this is the greedy equality the issue asks for).
#include <cstdio>
#include <sstream>
#include <string>

#include <boost/program_options.hpp>

#include "megacpp/data/tokenizer.hpp"
#include "megacpp/train/curriculum.hpp"
#include "megacpp/nn/model/sampling.hpp"
#include "models.hpp"
#include "run_checkpoint.hpp"

namespace po = boost::program_options;
using namespace megacpp;
using namespace megacpp::examples;

namespace {
struct GenerateOptions {
  std::string checkpoint, prompt = "#include <";
  index_t tokens = 200, top_k = 40;
  double temperature = 0.8;
  std::uint64_t seed = 0;
  bool verify = false, stop_at_eos = true;
};

void print_token(const data::ByteTokenizer& tokenizer, std::int32_t t) {
  if (t < 256) std::putchar(t);
  else if (t < tokenizer.vocab_size()) std::fputs(tokenizer.decode({t}).c_str(), stdout);
  else std::printf("<%d>", t);
  std::fflush(stdout);
}

template <class Model>
int run(const GenerateOptions& o, const fs::path& dir, const TrainingState& state) {
  const std::string type_id = Model::type_id();
  check(state.model_type == type_id, "megacpp-generate", dir.string(), " holds model type [", state.model_type,
        "], the registry's \"", state.model, "\" is [", type_id, "]");
  Model model(0);
  io::load_model(dir / "model.safetensors", model, type_id);
  // The checkpoint's phase decides the RoPE base the weights were trained with.
  enter_phase(model, recipe_phase(state.phase));
  const data::ByteTokenizer tokenizer;
  const std::int32_t bos = tokenizer.special().bos, eos = tokenizer.special().eos;
  const auto prompt = tokenizer.encode_document(o.prompt, false);
  const SamplingOptions so{o.temperature, o.top_k};
  std::fputs(o.prompt.c_str(), stdout);
  Rng rng(o.seed);
  const auto tokens = generate(model, prompt, o.tokens, so, rng, bos, [&](std::int32_t t) {
    print_token(tokenizer, t);
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
  return 4;
}
}  // namespace

int main(int argc, char** argv) {
  GenerateOptions o;
  po::options_description opts("megacpp-generate: sample from a megacpp-train checkpoint\n\nOptions");
  opts.add_options()("help,h", "show this help and exit")
      ("checkpoint", po::value(&o.checkpoint)->required(), "a step_* directory, or a run directory (its latest)")
      ("prompt", po::value(&o.prompt)->default_value(o.prompt), "text to continue")
      ("tokens", po::value(&o.tokens)->default_value(o.tokens), "tokens to generate")
      ("temperature", po::value(&o.temperature)->default_value(o.temperature), "softmax temperature (0: greedy)")
      ("top_k", po::value(&o.top_k)->default_value(o.top_k), "sample among the k most likely tokens (0: all)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "sampling seed")
      ("stop_at_eos", po::value(&o.stop_at_eos)->default_value(o.stop_at_eos), "stop at the end-of-document token")
      ("verify", po::bool_switch(&o.verify), "also decode with a full forward per token and fail unless the tokens match");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) {
      std::printf("%s\n", (std::ostringstream() << opts).str().c_str());
      return 0;
    }
    po::notify(vm);
    const fs::path dir = resolve_checkpoint(o.checkpoint);
    const TrainingState state = read_training_state(dir / "state.json");
    return with_model(state.model, [&](auto model_type, const ModelDefaults&) {
      return run<typename decltype(model_type)::type>(o, dir, state);
    });
  } catch (const po::error& e) {
    std::fprintf(stderr, "megacpp-generate: %s (see --help)\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
