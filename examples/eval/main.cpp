// megacpp-eval: execution-based evaluation of C++ code generation (pass@k, CodeBLEU's n-gram
// components) on HumanEval-style problems.
//
// Two sources of candidates:
//   megacpp-eval --problems P.jsonl --completions C.jsonl      completions produced anywhere
//   megacpp-eval --problems P.jsonl --checkpoint RUN [--samples k]   sampled from a megacpp model
// Each candidate is compiled with the system compiler and its test run in a sandbox
// (eval/sandbox.hpp, docs/eval.md); the tool prints one line per task and ends with one JSON line
// holding pass@k for every k the samples allow. Without --problems it uses the 20 problems shipped
// with the project (examples/eval/problems/megacpp_cpp20.jsonl).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <boost/program_options.hpp>

#include "common/bpe_option.hpp"
#include "common/cli.hpp"
#include "common/install_paths.hpp"
#include "eval/harness.hpp"
#include "eval/model_samples.hpp"
#include "eval/report.hpp"
#include "megacpp/train/curriculum.hpp"
#include "models.hpp"
#include "run_checkpoint.hpp"
#include "trained_model.hpp"

#ifndef MEGACPP_EVAL_PROBLEMS
#define MEGACPP_EVAL_PROBLEMS "megacpp_cpp20.jsonl"
#endif

namespace po = boost::program_options;
using namespace megacpp;
using namespace megacpp::examples;

namespace {
const std::string kTool = "megacpp-eval";

struct EvalOptions {
  std::string problems, completions, checkpoint, results, metrics, tokenizer, special_tokens = kDefaultSpecialTokens;
  std::string cxxflags = "-std=c++17 -O0 -Werror=return-type";
  SampleSettings sampling;
  HarnessOptions harness;
  double timeout = 10, compile_timeout = 60;
  std::int64_t memory_mb = 512;
};

std::vector<std::string> split_flags(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string flag; in >> flag;) out.push_back(flag);
  return out;
}

template <class Model>
std::vector<Completion> sample_from_checkpoint(const EvalOptions& o, const std::vector<Problem>& problems,
                                               const fs::path& dir, const TrainingState& state, const ModelDefaults& d) {
  const SampleCodec codec(kTool, o.tokenizer, o.special_tokens, state.shards);
  check(codec.available(), kTool, dir.string(), " was trained on BPE shards (", state.shards.tokenizer_hash,
        "): pass their tokenizer.json with --tokenizer");
  check_flag(o.sampling.top_k <= Model::dims.vocab, kTool, "top_k", o.sampling.top_k, " exceeds the vocabulary of \"",
             state.model, "\" (", Model::dims.vocab, ")");
  Model model(0);
  load_trained_model(kTool, dir, state, d, model);
  return sample_completions(model, codec, problems, o.sampling, state.shards.special.bos, state.shards.special.eos);
}

int parse_and_evaluate(int argc, char** argv) {
  EvalOptions o;
  o.problems = default_eval_problems(MEGACPP_EVAL_PROBLEMS);
  std::string seed_text = "0";
  bool network = false;
  o.harness.jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  po::options_description opts("megacpp-eval: compile and test C++ completions, report pass@k\n\n"
                               "Usage: megacpp-eval [--problems P.jsonl] (--completions C.jsonl | --checkpoint RUN)\n\nOptions");
  opts.add_options()("help,h", "show this help and exit")("version", "print the version and exit")
      ("problems", po::value(&o.problems)->default_value(o.problems), "HumanEval-style C++ problems (JSONL: task_id, prompt, test)")
      ("completions", po::value(&o.completions), "completions to score (JSONL: task_id, completion; several per task for k > 1)")
      ("checkpoint,c", po::value(&o.checkpoint), "sample the completions from this megacpp-train checkpoint or run directory")
      ("samples,k", po::value(&o.sampling.samples)->default_value(o.sampling.samples), "--checkpoint: completions per problem")
      ("max_tokens", po::value(&o.sampling.max_tokens)->default_value(o.sampling.max_tokens), "--checkpoint: new tokens at most per completion")
      ("temperature", po::value(&o.sampling.temperature)->default_value(o.sampling.temperature, shown_default(o.sampling.temperature)),
       "--checkpoint: sampling temperature (0: greedy)")
      ("top_k", po::value(&o.sampling.top_k)->default_value(o.sampling.top_k), "--checkpoint: sample among the k most likely tokens (0: all)")
      ("seed", po::value(&seed_text)->default_value(seed_text), "--checkpoint: sampling seed (unsigned 64-bit)")
      ("tokenizer", po::value(&o.tokenizer), "--checkpoint on BPE shards: their tokenizer.json")
      ("special_tokens", po::value(&o.special_tokens)->default_value(o.special_tokens), "with --tokenizer: megacpp-prepare's names")
      ("jobs,j", po::value(&o.harness.jobs)->default_value(o.harness.jobs), "candidates compiled and run at once")
      ("cxx", po::value(&o.harness.compiler)->default_value(o.harness.compiler), "the compiler (a name in PATH or a path)")
      ("cxxflags", po::value(&o.cxxflags)->default_value(o.cxxflags), "compiler flags, space-separated")
      ("timeout", po::value(&o.timeout)->default_value(o.timeout, shown_default(o.timeout)), "seconds a test program may run (wall clock and CPU)")
      ("compile_timeout", po::value(&o.compile_timeout)->default_value(o.compile_timeout, shown_default(o.compile_timeout)), "seconds a compilation may take")
      ("memory_mb", po::value(&o.memory_mb)->default_value(o.memory_mb), "address space of a test program, MiB")
      ("max_processes", po::value(&o.harness.run_limits.max_processes)->default_value(o.harness.run_limits.max_processes),
       "processes a test program may have (RLIMIT_NPROC; docs/eval.md)")
      ("allow_network", po::bool_switch(&network), "do not put candidates in a fresh network namespace")
      ("results", po::value(&o.results), "write every candidate's result here (JSONL)")
      ("metrics", po::value(&o.metrics), "append the summary (with --step) to this metrics JSONL")
      ("step", po::value<std::int64_t>()->default_value(0), "with --metrics: the step the record is for");
  po::variables_map vm;
  if (!parse_flags_or_help(argc, argv, opts, opts, vm)) return kExitOk;  // --help
  o.sampling.seed = parse_u64_flag(kTool, "seed", seed_text);
  check_flag(o.completions.empty() != o.checkpoint.empty(), kTool, o.completions.empty() ? "checkpoint" : "completions",
             "give exactly one of --completions and --checkpoint");
  check_range(kTool, "samples", o.sampling.samples, 1, 1 << 20);
  check_range(kTool, "max_tokens", o.sampling.max_tokens, 1, std::int64_t{1} << 30);
  check_real(kTool, "temperature", o.sampling.temperature, 0, 1e6);
  check_range(kTool, "top_k", o.sampling.top_k, 0, std::int64_t{1} << 40, "0: all tokens");
  check_range(kTool, "jobs", o.harness.jobs, 1, 1024);
  check_real(kTool, "timeout", o.timeout, 0.01, 86400);
  check_real(kTool, "compile_timeout", o.compile_timeout, 0.01, 86400);
  check_range(kTool, "memory_mb", o.memory_mb, 16, std::int64_t{1} << 30);
  check_range(kTool, "max_processes", o.harness.run_limits.max_processes, 1, 1 << 20);
  o.harness.compiler_flags = split_flags(o.cxxflags);
  o.harness.run_limits.wall_seconds = o.timeout;
  o.harness.run_limits.cpu_seconds = static_cast<std::int64_t>(std::ceil(o.timeout));
  o.harness.run_limits.memory_bytes = o.memory_mb << 20;
  o.harness.run_limits.isolate_network = o.harness.compile_limits.isolate_network = !network;
  o.harness.compile_limits.wall_seconds = o.compile_timeout;
  o.harness.compile_limits.cpu_seconds = static_cast<std::int64_t>(std::ceil(o.compile_timeout));
  if (!o.results.empty()) ensure_writable_directory(kTool, "results", fs::absolute(o.results).parent_path());

  const auto problems = read_problems(o.problems);
  std::vector<Completion> completions;
  const auto t0 = std::chrono::steady_clock::now();
  if (!o.completions.empty()) {
    completions = read_completions(o.completions, problems);
  } else {
    const fs::path dir = resolve_checkpoint(o.checkpoint);
    const TrainingState state = read_training_state(dir / "state.json");
    check(is_model_name(state.model), kTool, (dir / "state.json").string(), ": model \"", state.model,
          "\" is not one this build knows (", model_names(), ")");
    completions = with_model(state.model, [&](auto model_type, const ModelDefaults& d) {
      return sample_from_checkpoint<typename decltype(model_type)::type>(o, problems, dir, state, d);
    });
    std::printf("sampled %zu completions (%lld per problem) from %s in %.1f s\n", completions.size(),
                static_cast<long long>(o.sampling.samples), dir.string().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const EvalReport report = evaluate_completions(problems, completions, o.harness);
  print_report(report, stdout);
  if (!o.results.empty()) write_results(report, completions, o.results);
  nlohmann::json summary = report.summary();
  summary["seconds_total"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.metrics.empty()) {
    nlohmann::json record = summary;
    record["step"] = vm["step"].as<std::int64_t>();
    std::ofstream out(o.metrics, std::ios::app);
    out << record.dump() << "\n";
    check(out.good(), kTool, "cannot append to --metrics ", o.metrics);
  }
  std::printf("%s\n", summary.dump().c_str());
  return kExitOk;
}
}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return parse_and_evaluate(argc, argv); });
}
