// megacpp-train: pretrains one of the compiled specialist models on token shards.
//
// With no arguments it trains the tiny "AAM" hybrid on the corpus built with the project (the
// repository's own C++ sources, tokenized by megacpp-prepare at build time) for a few minutes,
// prints validation loss and bits per byte as they fall, writes checkpoints, metrics.jsonl and
// loss.svg under --out, and ends with a generated sample. Every flag is checked before any work
// (options.hpp) and every failure is one line and an exit code (common/cli.hpp, docs/trainer.md).
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#include <boost/program_options.hpp>

#include "common/cli.hpp"
#include "common/install_paths.hpp"
#include "entry_points.hpp"
#include "megacpp/dist/comm.hpp"
#ifdef MEGACPP_TRAIN_MPI
#include "megacpp/dist/mpi.hpp"
#endif

#ifndef MEGACPP_DEFAULT_CORPUS
#define MEGACPP_DEFAULT_CORPUS "corpus"
#endif
#ifndef MEGACPP_EVAL_PROBLEMS
#define MEGACPP_EVAL_PROBLEMS "megacpp_cpp20.jsonl"
#endif

namespace po = boost::program_options;
using namespace megacpp;
using namespace megacpp::examples;

namespace {
template <class Comm>
int parse_and_train(int argc, char** argv, Comm& comm) {
  TrainOptions o;
  o.data = default_corpus_dir(MEGACPP_DEFAULT_CORPUS);
  o.pass_eval.problems = default_eval_problems(MEGACPP_EVAL_PROBLEMS);
  std::string seed_text = "0";
  bool no_fim_mask = false;
  po::options_description run("Run");
  run.add_options()("help,h", "show this help and exit")("version", "print the version and exit")
      ("model,m", po::value(&o.model)->default_value(o.model), model_names())
      ("data,d", po::value(&o.data)->default_value(o.data), "directory of train_*.bin / val_*.bin shards (megacpp-prepare)")
      ("out,o", po::value(&o.out)->default_value(o.out), "run directory: step_*/ checkpoints, latest, metrics.jsonl, loss.svg")
      ("resume", po::value(&o.resume)->implicit_value("", "OUT"),
       "continue from a checkpoint: a step_* directory or a run directory (its latest); bare --resume uses --out")
      ("seed", po::value(&seed_text)->default_value(seed_text), "seed of initialisation and sampling")
      ("steps", po::value(&o.steps)->default_value(0, "model default"), "optimizer steps of the whole run")
      ("stop_at_step", po::value(&o.stop_at_step)->default_value(0, "none"), "checkpoint and exit after this step (split a run into jobs)")
      ("save_every", po::value(&o.save_every)->default_value(0, "end only"), "steps between checkpoints")
      ("keep_checkpoints", po::value(&o.keep_checkpoints)->default_value(o.keep_checkpoints), "newest checkpoints kept")
      ("plateau_steps", po::value(&o.plateau_steps)->default_value(o.plateau_steps),
       "warn (log and metrics) when the training loss is exactly the same for this many steps (0: never)")
      ("eval_every", po::value(&o.eval_every)->default_value(0, "model default"), "steps between validation passes")
      ("val_tokens", po::value(&o.val_tokens)->default_value(0, "model default"), "tokens per validation pass")
      ("require_improvement", po::bool_switch(&o.require_improvement), "exit with code 5 unless the validation loss fell")
      ("precision", po::value(&o.precision)->default_value(o.precision),
       "bf16: bf16 product operands, fp32 weights and everything else (docs/systems/precision.md) | fp32; the default is bf16 on CPUs with AVX512-BF16")
      ("device", po::value(&o.device)->default_value(o.device),
       "cpu | cuda: the model, its activations and the optimizer on one GPU (data, checkpoints and metrics stay on the "
       "host); --precision defaults to bf16 there (the tensor cores)")
      ("zero1", po::bool_switch(&o.zero1),
       "ZeRO-1: shard the optimizer state (Muon momentum, AdamW moments) over the data-parallel ranks and reduce-scatter "
       "each gradient to its owner; a no-op at world size 1")
      ("collective_timeout", po::value(&o.collective_timeout)->default_value(o.collective_timeout, "1800"),
       "seconds a rank waits in a collective (MPI) before it ends the job with an error naming it: a dead or hung rank "
       "must not hang the others; 0 waits for ever");
  po::options_description batch("Batch and curriculum (docs/recipe.md: the global batch stays constant across phases)");
  batch.add_options()
      ("phase", po::value(&o.phase)->default_value(o.phase), "1 syntax (4K, rope_theta 1e4) | 2 file (16K, 5e5) | 3 repo (64K, 1e6); the tiny model runs 1/16 of each context")
      ("total_batch_size", po::value(&o.total_batch_size)->default_value(0, "model default"), "global batch in tokens")
      ("micro_batch", po::value(&o.micro_batch)->default_value(0, "phase default"), "rows per micro-batch; accumulation = total / (micro_batch x seq_len)")
      ("seq_len", po::value(&o.seq_len)->default_value(0, "phase default"), "tokens per row")
      ("mix", po::value(&o.mix)->default_value("", "phase mixture"),
       "stream weights summing to 1, e.g. code=0.7,text=0.2,math=0.1 (data written with megacpp-prepare --stream); "
       "default: the phase's (1: code 0.7 text 0.2 math 0.1, 2: code 0.7 text 0.3, 3: code 0.5 text 0.3 math 0.2)")
      ("no_fim_mask", po::bool_switch(&no_fim_mask), "learn the FIM sentinel targets <PRE> <SUF> <MID> too (masked by default)");
  po::options_description optim_opts("Optimizer (Muon for 2-D matrices, AdamW for the rest)");
  optim_opts.add_options()
      ("lr_matrix", po::value(&o.lr_matrix)->default_value(o.lr_matrix, shown_default(o.lr_matrix)), "Muon learning rate")
      ("lr_embedding", po::value(&o.lr_embedding)->default_value(o.lr_embedding, shown_default(o.lr_embedding)), "AdamW learning rate of the tied embedding / head")
      ("lr_scalar", po::value(&o.lr_scalar)->default_value(o.lr_scalar, shown_default(o.lr_scalar)), "AdamW learning rate of norms, Mamba scalars and other 1-D tensors")
      ("lr_schedule", po::value(&o.lr_schedule)->default_value(o.lr_schedule), "constant | cosine | linear | wsd")
      ("warmup_steps", po::value(&o.warmup_steps)->default_value(-1, "model default"), "absolute LR warmup steps (never a ratio)")
      ("lr_decay_steps", po::value(&o.lr_decay_steps)->default_value(-1, "30% of steps"), "wsd: steps of the final decay")
      ("lr_final_ratio", po::value(&o.lr_final_ratio)->default_value(o.lr_final_ratio, shown_default(o.lr_final_ratio)), "LR multiplier reached at the last step")
      ("weight_decay", po::value(&o.weight_decay)->default_value(o.weight_decay, shown_default(o.weight_decay)), "decoupled weight decay of 2-D matrices")
      ("max_grad_norm", po::value(&o.max_grad_norm)->default_value(o.max_grad_norm, shown_default(o.max_grad_norm)), "clip the global gradient norm to this");
  po::options_description mtp("Multi-token prediction (models with MTP: tiny_mtp; docs/mtp.md)");
  mtp.add_options()
      ("mtp_weight", po::value(&o.mtp_weight)->default_value(-1, "0.3"), "MTP loss weight lambda until --mtp_switch_tokens (0: no MTP compute)")
      ("mtp_weight_final", po::value(&o.mtp_weight_final)->default_value(-1, "0.1"), "MTP loss weight lambda from --mtp_switch_tokens on")
      ("mtp_switch_tokens", po::value(&o.mtp_switch_tokens)->default_value(-1, "10/14.8 of the run"),
       "tokens seen at which lambda steps to --mtp_weight_final (DeepSeek-V3: 10T of 14.8T)");
  po::options_description plasticity_opts("Plasticity (docs/systems/plasticity.md; DASH and ReDo in phase 1 only)");
  plasticity_opts.add_options()
      ("fire", po::value(&o.plasticity.fire)->default_value(o.plasticity.fire),
       "phase: FIRE when resuming into phase 2 or 3 from an earlier phase | now: also at this run's start (once per phase) | force | off")
      ("fire_targets", po::value(&o.plasticity.fire_targets)->default_value(o.plasticity.fire_targets), "attention_qk | aggressive (every 2-D matrix)")
      ("dash_every", po::value(&o.plasticity.dash_every)->default_value(0, "off"), "steps between DASH passes")
      ("dash_threshold", po::value(&o.plasticity.dash_threshold)->default_value(o.plasticity.dash_threshold, shown_default(o.plasticity.dash_threshold)), "DASH shrinks rows whose cosine with their gradient exceeds this")
      ("dash_min_factor", po::value(&o.plasticity.dash_min_factor)->default_value(o.plasticity.dash_min_factor, shown_default(o.plasticity.dash_min_factor)), "DASH's smallest shrink factor")
      ("redo_every", po::value(&o.plasticity.redo_every)->default_value(0, "off"), "steps between ReDo passes")
      ("redo_tau", po::value(&o.plasticity.redo_tau)->default_value(o.plasticity.redo_tau, shown_default(o.plasticity.redo_tau)), "ReDo recycles units whose activity is at most this x the layer mean")
      ("redo_min_history", po::value(&o.plasticity.redo_min_history)->default_value(0, "redo_every x accumulation"), "forward passes ReDo needs before it judges");
  po::options_description sample("Sample printed at the end");
  sample.add_options()
      ("sample_tokens", po::value(&o.sample_tokens)->default_value(o.sample_tokens), "tokens to generate (0: none)")
      ("temperature", po::value(&o.temperature)->default_value(o.temperature, shown_default(o.temperature)), "sampling temperature (0: greedy)")
      ("top_k", po::value(&o.top_k)->default_value(o.top_k), "sample among the k most likely tokens (0: all)")
      ("prompt,p", po::value(&o.prompt)->default_value(o.prompt), "text the sample continues")
      ("tokenizer", po::value(&o.tokenizer), "BPE shards: their tokenizer.json, to encode the prompt and print the sample")
      ("special_tokens", po::value(&o.special_tokens)->default_value(o.special_tokens),
       "with --tokenizer: the names given to megacpp-prepare (BOS,EOS,FIM prefix,FIM suffix,FIM middle)");
  po::options_description pass_eval("Execution-based evaluation (docs/eval.md): pass@k of C++ problems compiled and tested");
  pass_eval.add_options()
      ("eval_pass_every", po::value(&o.pass_eval.every)->default_value(0, "off"), "steps between pass@k evaluations (and the last step)")
      ("eval_problems", po::value(&o.pass_eval.problems)->default_value(o.pass_eval.problems), "HumanEval-style C++ problems (JSONL)")
      ("eval_samples", po::value(&o.pass_eval.samples)->default_value(o.pass_eval.samples), "completions sampled per problem")
      ("eval_max_tokens", po::value(&o.pass_eval.max_tokens)->default_value(o.pass_eval.max_tokens), "new tokens at most per completion")
      ("eval_temperature", po::value(&o.pass_eval.temperature)->default_value(o.pass_eval.temperature, shown_default(o.pass_eval.temperature)),
       "sampling temperature of the completions (0: greedy; top-k is --top_k)");
  po::options_description post("Post-training (docs/recipe.md: SFT, then GSPO; ReDo, DASH and FIRE are off)");
  std::string warmup_ratio;
  post.add_options()
      ("init", po::value(&o.init), "start SFT or GSPO from this checkpoint's weights (a step_* or run directory); the "
       "optimizer and schedule start afresh")
      ("sft", po::value(&o.sft.file), "supervised fine-tuning on these JSONL examples ({\"prompt\", \"response\"} or "
       "{\"instruction\", \"before\", \"after\"|\"diff\"}); the prompt is not learned")
      ("sft_val", po::value(&o.sft.val_file), "held-out SFT examples for the validation loss (default: every 20th of --sft)")
      ("sft_fim_share", po::value(&o.sft.fim_share)->default_value(o.sft.fim_share, shown_default(o.sft.fim_share)),
       "share of SFT rows drawn from --data's pretraining shards, whose FIM documents keep infilling alive")
      ("gspo", po::bool_switch(&o.gspo.enabled), "GSPO: reinforcement learning on --eval_problems, rewarded by their "
       "compiled and run tests (one process)")
      ("gspo_group", po::value(&o.gspo.group)->default_value(o.gspo.group), "completions sampled per problem (G)")
      ("gspo_prompts", po::value(&o.gspo.prompts)->default_value(o.gspo.prompts), "problems per GSPO step")
      ("gspo_updates", po::value(&o.gspo.updates)->default_value(o.gspo.updates), "optimizer steps per rollout (after the first, off-policy and clipped)")
      ("gspo_max_tokens", po::value(&o.gspo.max_tokens)->default_value(o.gspo.max_tokens), "new tokens at most per completion")
      ("gspo_temperature", po::value(&o.gspo.temperature)->default_value(o.gspo.temperature, shown_default(o.gspo.temperature)),
       "sampling temperature of the rollouts (top-k is --top_k)")
      ("gspo_reward", po::value(&o.gspo.reward)->default_value(o.gspo.reward),
       "pass: 1 when the tests pass, else 0 | coderl: -1 compile error, -0.6 runtime error, -0.3 failed test, 1 pass "
       "(CodeRL, Le et al. 2022)");
  po::options_description debug("Fault injection (tests)");
  debug.add_options()
      ("debug_poison_step", po::value(&o.debug_poison_step)->default_value(0), "set the weights to NaN before this step")
      ("debug_fail_rank", po::value(&o.debug_fail_rank)->default_value(-1), "this data-parallel rank fails before step 2")
      ("debug_hang_rank", po::value(&o.debug_hang_rank)->default_value(-1), "this data-parallel rank hangs before step 2")
      ("warmup_ratio", po::value(&warmup_ratio), "refused: warmup is absolute (--warmup_steps)")
      ("debug_checkpoint_pause_ms", po::value(&o.debug_checkpoint_pause_ms)->default_value(0), "sleep between checkpoint files");
  po::options_description visible("megacpp-train: pretrain a megacpp model on token shards\n\n"
                                  "Usage: megacpp-train [options]   (no options: the tiny model on the built-in corpus)");
  visible.add(run).add(batch).add(optim_opts).add(mtp).add(plasticity_opts).add(pass_eval).add(post).add(sample);
  po::options_description all;
  all.add(visible).add(debug);
  po::variables_map vm;
  if (!parse_flags_or_help(argc, argv, all, visible, vm)) return kExitOk;  // --help
  std::set<std::string> given;  // the flags the command line set (the rest keep their defaults)
  for (const auto& [name, value] : vm)
    if (!value.defaulted()) given.insert(name);
  o.seed = parse_u64_flag(kTrainTool, "seed", seed_text);
  o.fim_mask = !no_fim_mask;
  check_flag(warmup_ratio.empty(), kTrainTool, "warmup_ratio", warmup_ratio,
             ": warmup is a number of steps, never a share of the run (a ratio of a long run warms up for tens of "
             "thousands of steps; docs/recipe.md): give --warmup_steps");
  if (o.device == "cuda" && !given.count("precision")) o.precision = "bf16";  // the tensor cores
  check_options(o, given);
  if constexpr (requires { comm.set_timeout(1.0); }) comm.set_timeout(o.collective_timeout);
  if (!o.sft.file.empty() || o.gspo.enabled) o.plasticity.fire = "off";  // and DASH, ReDo: refused when given
  if (vm.count("resume") && o.resume.empty()) o.resume = o.out;
  if (o.gspo.enabled) {
    if constexpr (std::is_same_v<Comm, dist::SingleProcess>) return train_gspo_run(o, comm);
    check_flag(false, kTrainTool, "gspo", "runs in one process (rollouts are not data-parallel): launch megacpp-train "
               "without mpirun");
  }
  if (o.device == "cuda") {
#ifdef MEGACPP_TRAIN_CUDA
    if constexpr (std::is_same_v<Comm, dist::SingleProcess>) {
      if (o.precision == "bf16") return train_on_cuda<Bf16Mixed>(o, comm);
      return train_on_cuda<Fp32>(o, comm);
    }
    check_flag(false, kTrainTool, "device", "cuda runs in one process: data parallel over GPUs (NCCL) is not part of "
               "megacpp-train yet; launch it without mpirun");
#else
    check_flag(false, kTrainTool, "device", "cuda: this megacpp-train was built without the CUDA backend (the default "
               "preset builds it where nvcc is found: -DMEGACPP_CUDA=ON -DMEGACPP_TRAIN_CUDA=ON)");
#endif
  }
  if (o.precision == "bf16") return train_in_precision<Bf16Mixed>(o, comm);
  return train_in_precision<Fp32>(o, comm);
}

#ifdef MEGACPP_TRAIN_MPI
// Launched by mpirun / srun: one rank of a data-parallel run over MPI. Rank 0 alone prints (the
// others' stdout goes to /dev/null; errors still reach stderr). A rank that stops with an error
// ends the whole job through MPI_Abort, so no rank is left waiting in a collective; a rank that
// dies is reported by the launcher, which ends the others.
int run_data_parallel(int argc, char** argv) {
  dist::MpiEnvironment mpi(&argc, &argv);
  dist::MpiComm comm;
  if (comm.rank() != 0 && !std::freopen("/dev/null", "w", stdout))
    std::fprintf(stderr, "%s: rank %d could not silence its stdout\n", kTrainTool.c_str(), comm.rank());
  const int code = run_tool(kTrainTool, [&] { return parse_and_train(argc, argv, comm); });
  if (code != kExitOk && comm.size() > 1)
    comm.abort(code, kTrainTool + " stopped with exit code " + std::to_string(code) + " (its message is above)");
  return code;
}
#endif
}  // namespace

int main(int argc, char** argv) {
#ifdef MEGACPP_TRAIN_MPI
  if (dist::launched_by_mpi()) return run_tool(kTrainTool, [&] { return run_data_parallel(argc, argv); });
#endif
  dist::SingleProcess single;
  return run_tool(kTrainTool, [&] { return parse_and_train(argc, argv, single); });
}
