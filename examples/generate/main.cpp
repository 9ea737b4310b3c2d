// megacpp-generate: samples text from a megacpp-train checkpoint, printing tokens as they come.
//
// Decoding runs one token at a time through the model's caches: attention keeps each layer's
// rotated keys and values (nn/attention/decode.hpp), Mamba-3 keeps its state, angle and previous
// (k, v) (nn/mamba/decode.hpp), so each new token costs O(context) instead of a whole forward.
// --verify also decodes by re-running the full forward at every step and fails unless both
// produce the same tokens (with --temperature 0 this is the greedy equality the issue asks for).
// Every flag is checked before the model is loaded, --tokens against the model's context, and
// every failure is one line and an exit code (common/cli.hpp, docs/trainer.md). --device cuda
// loads the model and its decode caches on the GPU (generate_run.hpp; each step's cache update
// still runs on the host, docs/trainer.md).
#include <string>

#include <boost/program_options.hpp>

#include "generate/generate_run.hpp"

namespace po = boost::program_options;
using namespace megacpp;
using namespace megacpp::examples;

namespace {
const std::string& kTool = kGenerateTool;

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
      ("device", po::value(&o.device)->default_value(o.device), "where the model and its decode caches live: cpu | cuda (one GPU)")
      ("stats", po::bool_switch(&o.stats), "print the tokens generated, the time (the prompt's steps included) and tokens/s on stderr")
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
  check_flag(o.device == "cpu" || o.device == "cuda", kTool, "device", "\"", o.device, "\" is not one of cpu, cuda");
  const fs::path dir = resolve_checkpoint(o.checkpoint);
  const TrainingState state = read_training_state(dir / "state.json");
  check(is_model_name(state.model), kTool, (dir / "state.json").string(), ": model \"", state.model,
        "\" is not one this build knows (", model_names(), ")");
  if (o.device == "cpu") return generate_on_backend<Cpu>(o, dir, state);
#ifdef MEGACPP_TRAIN_CUDA
  return generate_on_cuda(o, dir, state);
#else
  check_flag(false, kTool, "device", "cuda: this megacpp-generate was built without the CUDA backend (the default "
             "preset builds it where nvcc is found: -DMEGACPP_CUDA=ON -DMEGACPP_TRAIN_CUDA=ON)");
  return kExitUsage;
#endif
}
}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return parse_and_generate(argc, argv); });
}
