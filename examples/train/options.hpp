// examples/train/options.hpp: megacpp-train's options, their checks, and the run they plan.
//
// Every flag is checked before the model is built or a file is read (docs/trainer.md "Flag
// rules"): integers are parsed as integers and range-checked (an integer flag left out means the
// model's default; given, it must be in range: `--steps 0` is refused, not read as "default"),
// products are overflow-checked, and every sampling option is checked against the model, so a bad
// value is exit 2 at startup and never a failure after the run. A value a check refuses throws
// UsageError naming the flag and the value.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/cli.hpp"
#include "megacpp/data/mixture.hpp"
#include "megacpp/optim.hpp"
#include "megacpp/train/curriculum.hpp"
#include "megacpp/train/mtp_schedule.hpp"
#include "models.hpp"
#include "pass_eval_run.hpp"
#include "plasticity_run.hpp"

namespace megacpp::examples {

/// The default of --precision: "bf16" (bf16 product operands, fp32 master weights) where this CPU
/// has bf16 dot-product instructions (AVX512-BF16), "fp32" elsewhere, where bf16 products would
/// run on the convert-to-fp32 fallback and only lose precision.
/// The --sft* flags (sft_data.hpp).
struct SftFlags {
  std::string file;         ///< training examples, JSONL ("" = pretraining)
  std::string val_file;     ///< held-out examples ("" = every 20th of `file`)
  double fim_share = 0.05;  ///< share of rows drawn from the pretraining shards (FIM kept in)
};

/// The --gspo* flags (gspo_run.hpp).
struct GspoFlags {
  bool enabled = false;          ///< --gspo: reinforcement learning on the problems' tests
  std::int64_t group = 8;        ///< completions sampled per problem (G)
  std::int64_t prompts = 4;      ///< problems per step
  std::int64_t updates = 2;      ///< optimizer steps per rollout (the later ones off-policy)
  index_t max_tokens = 128;      ///< new tokens at most per completion
  double temperature = 1.0;      ///< sampling temperature of the rollouts
  std::string reward = "pass";   ///< pass (1/0) | coderl (graded: eval/rewards.hpp)
};

inline std::string default_precision() { return cpu::cpu_has_avx512_bf16() ? "bf16" : "fp32"; }

/// Every option of a training run (the command line fills it; 0 / -1 mean "the model's default").
struct TrainOptions {
  std::string model = "tiny";        ///< registry name (models.hpp)
  std::string data;                  ///< directory with train_*.bin, val_*.bin and shards.json
  std::string out = "runs/tiny";     ///< run directory: checkpoints, metrics.jsonl, loss.svg
  std::string resume;                ///< checkpoint or run directory to resume from ("" = fresh)
  std::uint64_t seed = 0;            ///< model init and sampling
  std::int64_t steps = 0;            ///< total optimizer steps of the run
  std::int64_t total_batch_size = 0;  ///< global batch in tokens
  index_t micro_batch = 0;           ///< rows per micro-batch
  index_t seq_len = 0;               ///< tokens per row
  int phase = 1;                     ///< curriculum phase 1-3
  std::int64_t warmup_steps = -1;    ///< absolute LR warmup
  std::string lr_schedule = "wsd";   ///< constant | cosine | linear | wsd
  std::int64_t lr_decay_steps = -1;  ///< wsd: length of the final decay (-1: 30% of the run)
  double lr_final_ratio = 0.0;       ///< LR multiplier at the last step
  double lr_matrix = 0.02;           ///< Muon lr (2-D hidden matrices)
  double lr_embedding = 0.01;        ///< AdamW lr of the tied embedding / head
  double lr_scalar = 0.004;          ///< AdamW lr of everything else (norm gains, Mamba scalars)
  double weight_decay = 0.0;         ///< decoupled weight decay of 2-D matrices
  double max_grad_norm = 1.0;        ///< global gradient-norm clip
  bool fim_mask = true;              ///< mask the FIM sentinel targets (data/fim.hpp)
  std::string mix;                   ///< stream weights "code=0.7,text=0.2" ("": the phase's mixture)
  double mtp_weight = -1;            ///< MTP lambda before the switch (-1: 0.3; models with MTP only)
  double mtp_weight_final = -1;      ///< MTP lambda from the switch on (-1: 0.1)
  std::int64_t mtp_switch_tokens = -1;  ///< tokens seen at the switch (-1: 10/14.8 of the run, DeepSeek-V3)
  std::int64_t eval_every = 0;       ///< steps between validation passes
  std::int64_t val_tokens = 0;       ///< tokens per validation pass
  std::int64_t save_every = 0;       ///< steps between checkpoints (0: only at the end)
  std::int64_t stop_at_step = 0;     ///< checkpoint and exit after this step (0: run to the end)
  int keep_checkpoints = 2;          ///< newest checkpoints kept
  std::int64_t plateau_steps = 20;   ///< warn when the loss is exactly the same for this many steps (0: never)
  index_t sample_tokens = 200;       ///< tokens sampled at the end (0: none)
  double temperature = 0.8;          ///< sampling temperature (0: greedy)
  index_t top_k = 40;                ///< sampling top-k (0: all)
  std::string prompt = "#include <";  ///< sample prompt
  std::string tokenizer;             ///< BPE shards: their tokenizer.json, for the sample
  std::string special_tokens = kDefaultSpecialTokens;  ///< with tokenizer: megacpp-prepare's names
  bool require_improvement = false;  ///< exit 5 when a fresh run's validation loss did not fall
  bool zero1 = false;                ///< ZeRO-1: shard the optimizer state over the data-parallel ranks
  double collective_timeout = 1800;  ///< seconds a rank waits in a collective before it aborts the job (0: never)
  std::int64_t debug_poison_step = 0;    ///< fault injection: NaN weights before this step (tests)
  int debug_fail_rank = -1;              ///< fault injection: this rank throws before step 2 (tests)
  int debug_hang_rank = -1;              ///< fault injection: this rank hangs before step 2 (tests)
  int debug_checkpoint_pause_ms = 0;     ///< fault injection: sleep between checkpoint files (tests)
  PlasticityFlags plasticity;            ///< FIRE, DASH, ReDo (plasticity_run.hpp)
  std::string precision = default_precision();  ///< products: bf16 (Bf16Mixed) | fp32 (Fp32)
  std::string device = "cpu";            ///< where the model and optimizer live: cpu | cuda (one GPU)
  PassEvalFlags pass_eval;               ///< pass@k every N steps (pass_eval_run.hpp)
  std::string init;                      ///< SFT / GSPO: start from this checkpoint's weights ("" = none)
  SftFlags sft;                          ///< supervised fine-tuning (sft_data.hpp)
  GspoFlags gspo;                        ///< GSPO (gspo_run.hpp)

  /// The options as JSON (recorded in every checkpoint).
  nlohmann::json to_json() const {
    return {{"model", model}, {"data", data}, {"out", out}, {"seed", std::to_string(seed)}, {"steps", steps},
            {"total_batch_size", total_batch_size}, {"micro_batch", micro_batch}, {"seq_len", seq_len}, {"phase", phase},
            {"warmup_steps", warmup_steps}, {"lr_schedule", lr_schedule}, {"lr_decay_steps", lr_decay_steps},
            {"lr_final_ratio", lr_final_ratio}, {"lr_matrix", lr_matrix}, {"lr_embedding", lr_embedding},
            {"lr_scalar", lr_scalar}, {"weight_decay", weight_decay}, {"max_grad_norm", max_grad_norm},
            {"fim_mask", fim_mask}, {"mix", mix}, {"mtp_weight", mtp_weight}, {"mtp_weight_final", mtp_weight_final},
            {"mtp_switch_tokens", mtp_switch_tokens}, {"precision", precision}, {"device", device}, {"zero1", zero1},
            {"init", init}, {"sft", sft.file}, {"sft_val", sft.val_file}, {"sft_fim_share", sft.fim_share},
            {"gspo", gspo.enabled}, {"gspo_group", gspo.group}, {"gspo_prompts", gspo.prompts},
            {"gspo_updates", gspo.updates}, {"gspo_max_tokens", gspo.max_tokens}, {"gspo_temperature", gspo.temperature},
            {"gspo_reward", gspo.reward}};
  }
};

inline const std::string kTrainTool = "megacpp-train";

/// --mix parsed (data::parse_mixture); a malformed value is a UsageError naming it.
inline data::Mixture parse_mix_flag(const std::string& text) {
  try {
    return data::parse_mixture(text);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(kTrainTool, std::string("--mix \"") + text + "\": " + e.what());
  }
}

/// Checks what the options say on their own (no model needed); `given` holds the flags the
/// command line set, so an integer left at its "model default" sentinel is not range-checked.
/// The SFT / GSPO flags (docs/recipe.md, "Post-training"): --sft and --gspo exclude each other and
/// start from --init (or continue with --resume, never both); ReDo, DASH and FIRE are off there,
/// and asking for them is an error rather than a silent no-op.
inline void check_post_training_flags(const TrainOptions& o, const std::set<std::string>& given) {
  const auto& t = kTrainTool;
  const bool sft = !o.sft.file.empty(), gspo = o.gspo.enabled;
  check_flag(!(sft && gspo), t, "gspo", "and --sft ", o.sft.file, " exclude each other: run SFT, then GSPO --init from it");
  check_flag(o.init.empty() || !given.count("resume"), t, "init", o.init,
             " and --resume exclude each other: --init starts a run from a checkpoint's weights, --resume continues one");
  check_flag(o.init.empty() || sft || gspo, t, "init", o.init, " is for --sft or --gspo (pretraining continues with --resume)");
  check_flag(o.sft.val_file.empty() || sft, t, "sft_val", o.sft.val_file, " is given without --sft");
  check_real(t, "sft_fim_share", o.sft.fim_share, 0, 1);
  check_range(t, "gspo_group", o.gspo.group, 2, 1 << 16, "completions per problem; advantages compare them");
  check_range(t, "gspo_prompts", o.gspo.prompts, 1, 1 << 20);
  check_range(t, "gspo_updates", o.gspo.updates, 1, 1 << 10);
  check_range(t, "gspo_max_tokens", o.gspo.max_tokens, 1, std::int64_t{1} << 30);
  check_real(t, "gspo_temperature", o.gspo.temperature, 0, 1e6, /*open_lo=*/true);
  check_flag(o.gspo.reward == "pass" || o.gspo.reward == "coderl", t, "gspo_reward", "\"", o.gspo.reward,
             "\" is not one of pass, coderl");
  if (!sft && !gspo) return;
  const char* mode = sft ? "--sft" : "--gspo";
  check_flag(!o.init.empty() || given.count("resume"), t, sft ? "sft" : "gspo",
             sft ? o.sft.file : std::string(), ": post-training starts from a trained model: give --init CHECKPOINT (or "
             "--resume a run of it)");
  for (const char* flag : {"fire", "fire_targets", "dash_every", "dash_threshold", "dash_min_factor", "redo_every",
                           "redo_tau", "redo_min_history"})
    check_flag(!given.count(flag), t, flag, "is given with ", mode,
               ": ReDo, DASH and FIRE are off in post-training, where they destroy what fine-tuning teaches "
               "(docs/recipe.md)");
  check_flag(!given.count("mix"), t, "mix", "is given with ", mode, ": post-training reads its own examples");
}

inline void check_options(const TrainOptions& o, const std::set<std::string>& given) {
  constexpr std::int64_t kMaxSteps = std::int64_t{1} << 40, kMaxTokens = std::int64_t{1} << 50;
  const auto& t = kTrainTool;
  const auto has = [&](const char* flag) { return given.count(flag) > 0; };
  check_flag(is_model_name(o.model), t, "model", "\"", o.model, "\" is not a model: ", model_names());
  check_flag(!o.data.empty(), t, "data", "is empty");
  check_flag(!o.out.empty(), t, "out", "is empty");
  if (has("steps")) check_range(t, "steps", o.steps, 1, kMaxSteps, "optimizer steps of the whole run");
  if (has("stop_at_step")) check_range(t, "stop_at_step", o.stop_at_step, 0, kMaxSteps, "0: run to the end");
  if (has("save_every")) check_range(t, "save_every", o.save_every, 0, kMaxSteps, "0: a checkpoint at the end only");
  check_range(t, "keep_checkpoints", o.keep_checkpoints, 1, 1 << 20);
  if (has("eval_every")) check_range(t, "eval_every", o.eval_every, 1, kMaxSteps);
  if (has("val_tokens")) check_range(t, "val_tokens", o.val_tokens, 1, kMaxTokens);
  check_range(t, "phase", o.phase, 1, 3, "1 syntax, 2 file, 3 repo");
  if (has("mix")) parse_mix_flag(o.mix);
  if (has("total_batch_size")) check_range(t, "total_batch_size", o.total_batch_size, 1, kMaxTokens);
  if (has("micro_batch")) check_range(t, "micro_batch", o.micro_batch, 1, kMaxTokens);
  if (has("seq_len")) check_range(t, "seq_len", o.seq_len, 1, kMaxTokens);
  if (has("warmup_steps")) check_range(t, "warmup_steps", o.warmup_steps, 0, kMaxSteps);
  if (has("lr_decay_steps")) check_range(t, "lr_decay_steps", o.lr_decay_steps, 1, kMaxSteps);
  check_flag(o.lr_schedule == "constant" || o.lr_schedule == "cosine" || o.lr_schedule == "linear" ||
                 o.lr_schedule == "wsd",
             t, "lr_schedule", "\"", o.lr_schedule, "\" is not one of constant, cosine, linear, wsd");
  check_real(t, "lr_final_ratio", o.lr_final_ratio, 0, 1);
  // Learning rates have no upper bound here: a rate that makes training diverge is caught by the
  // run (exit 3), which is the behaviour to test, not a flag error.
  const double huge = std::numeric_limits<double>::max();
  check_real(t, "lr_matrix", o.lr_matrix, 0, huge);
  check_real(t, "lr_embedding", o.lr_embedding, 0, huge);
  check_real(t, "lr_scalar", o.lr_scalar, 0, huge);
  check_real(t, "weight_decay", o.weight_decay, 0, huge);
  check_real(t, "max_grad_norm", o.max_grad_norm, 0, huge, /*open_lo=*/true);
  check_real(t, "collective_timeout", o.collective_timeout, 0, 1e7);
  if (has("mtp_weight")) check_real(t, "mtp_weight", o.mtp_weight, 0, huge);
  if (has("mtp_weight_final")) check_real(t, "mtp_weight_final", o.mtp_weight_final, 0, huge);
  if (has("mtp_switch_tokens")) check_range(t, "mtp_switch_tokens", o.mtp_switch_tokens, 0, kMaxTokens);
  check_range(t, "plateau_steps", o.plateau_steps, 0, kMaxSteps, "0: never warn");
  check_range(t, "sample_tokens", o.sample_tokens, 0, kMaxTokens);
  check_real(t, "temperature", o.temperature, 0, 1e6);
  check_range(t, "top_k", o.top_k, 0, kMaxTokens, "0: all tokens");
  check_range(t, "debug_poison_step", o.debug_poison_step, 0, kMaxSteps);
  check_range(t, "debug_checkpoint_pause_ms", o.debug_checkpoint_pause_ms, 0, 60000);
  check_plasticity_flags(t, o.plasticity);
  check_flag(o.precision == "bf16" || o.precision == "fp32", t, "precision", "\"", o.precision,
             "\" is not one of bf16, fp32");
  check_flag(o.device == "cpu" || o.device == "cuda", t, "device", "\"", o.device, "\" is not one of cpu, cuda");
  check_flag(o.device == "cpu" || !o.gspo.enabled, t, "device", "cuda with --gspo: GSPO's rollouts run on the CPU "
             "(train on the GPU, then run --gspo --init CHECKPOINT on the CPU)");
  check_pass_eval_flags(t, o.pass_eval);
  check_post_training_flags(o, given);
}

/// Gives `loader` the run's mixture: --mix when given, else the phase's (restricted to the streams
/// the data has, renormalised, and said so). Returns the mixture as text ("" for data with one
/// unnamed stream). --mix on such data, or naming a stream the data lacks, is a UsageError.
inline std::string set_run_mixture(data::MixtureLoader& loader, const TrainOptions& o, const CurriculumPhase& phase) {
  const auto& t = kTrainTool;
  if (!loader.mixed()) {
    check_flag(o.mix.empty(), t, "mix", "\"", o.mix, "\": the data in ", o.data,
               " is one unnamed stream (train_NNNNNN.bin); write named streams with megacpp-prepare --stream NAME=DIR");
    return "";
  }
  std::string available;
  for (const auto& s : loader.streams()) available += (available.empty() ? "" : ", ") + s;
  data::Mixture m;
  if (!o.mix.empty()) {
    m = parse_mix_flag(o.mix);
    for (const auto& w : m) {
      const auto streams = loader.streams();
      check_flag(std::find(streams.begin(), streams.end(), w.stream) != streams.end(), t, "mix", "\"", o.mix,
                 "\": unknown stream \"", w.stream, "\" (the data in ", o.data, " has ", available, ")");
    }
  } else {
    try {
      m = phase_mixture_for(phase, loader.streams());
    } catch (const Error& e) {
      throw UsageError(t, std::string(e.what()) + " (the data in " + o.data + " has " + available + ")");
    }
    const std::string full = data::format_mixture(phase_mixture(phase));
    if (data::format_mixture(m) != full)
      std::printf("phase %d mixture %s: the data has %s, so rows are drawn by %s\n", phase.number, full.c_str(),
                  available.c_str(), data::format_mixture(m).c_str());
  }
  loader.set_mixture(m);
  return data::format_mixture(m);
}

/// Sizes of one run after the model's defaults and the phase are applied.
struct RunPlan {
  CurriculumPhase phase;
  index_t seq_len = 0, micro_batch = 0, accumulation = 0;
  std::int64_t total_batch_size = 0, steps = 0, warmup_steps = 0, decay_steps = 0, eval_every = 0, val_tokens = 0;
  MtpWeightSchedule mtp;  ///< lambda by tokens seen (models with an MTP module)
};

/// The options as the run uses them (recorded in state.json): every "model default" sentinel of
/// the command line (steps 0, warmup -1, ...) replaced by the value the plan derived.
inline nlohmann::json resolved_options(const TrainOptions& o, const RunPlan& p) {
  nlohmann::json j = o.to_json();
  j["steps"] = p.steps;
  j["warmup_steps"] = p.warmup_steps;
  j["lr_decay_steps"] = p.decay_steps;
  j["seq_len"] = p.seq_len;
  j["micro_batch"] = p.micro_batch;
  j["total_batch_size"] = p.total_batch_size;
  j["accumulation"] = p.accumulation;
  j["eval_every"] = p.eval_every;
  j["val_tokens"] = p.val_tokens;
  return j;
}

/// Applies the defaults of `d` to `o` and checks what needs the model (context, vocabulary) or
/// a product of flags; throws UsageError naming the flags for an impossible combination.
template <class Model>
RunPlan make_plan(const TrainOptions& o, const ModelDefaults& d) {
  const auto& t = kTrainTool;
  RunPlan p;
  p.phase = recipe_phase(o.phase);
  p.seq_len = o.seq_len > 0 ? o.seq_len : p.phase.seq_len / d.seq_len_divisor;
  check_flag(p.seq_len <= Model::dims.max_seq, t, "seq_len", p.seq_len, " exceeds the model's max_seq ",
             Model::dims.max_seq);
  p.total_batch_size = o.total_batch_size > 0 ? o.total_batch_size : d.total_batch_size;
  p.micro_batch = o.micro_batch > 0 ? o.micro_batch
                                    : std::max<index_t>(1, std::min<index_t>(d.micro_batch_tokens, p.total_batch_size) / p.seq_len);
  const index_t micro_tokens = checked_product(t, "--micro_batch x --seq_len", p.micro_batch, p.seq_len);
  check_flag(micro_tokens <= p.total_batch_size, t, "micro_batch", p.micro_batch, " x seq_len ", p.seq_len, " = ",
             micro_tokens, " tokens per micro-batch exceeds the global batch of ", p.total_batch_size, " tokens");
  check_flag(p.total_batch_size % micro_tokens == 0, t, "total_batch_size", p.total_batch_size,
             " is not a multiple of micro_batch ", p.micro_batch, " x seq_len ", p.seq_len, " = ", micro_tokens,
             ": choose a micro_batch or total_batch_size that divides");
  p.accumulation = gradient_accumulation(p.total_batch_size, p.micro_batch, p.seq_len);
  // A step holds all of its micro-batches in memory before the first forward (their learned-token
  // counts weigh the losses), so the count is bounded rather than left to fail allocating mid-run.
  constexpr index_t kMaxAccumulation = 1 << 16;
  check_flag(p.accumulation <= kMaxAccumulation, t, "total_batch_size", p.total_batch_size, " = ", p.accumulation,
             " micro-batches of ", micro_tokens, " tokens per step, more than ", kMaxAccumulation,
             ": raise --micro_batch or lower --total_batch_size");
  p.steps = o.steps > 0 ? o.steps : d.steps;
  checked_product(t, "--steps x --total_batch_size (tokens of the run)", p.steps, p.total_batch_size);
  p.warmup_steps = o.warmup_steps >= 0 ? o.warmup_steps : std::min(d.warmup_steps, p.steps / 10);
  p.decay_steps = o.lr_decay_steps >= 0 ? o.lr_decay_steps : std::max<std::int64_t>(1, 3 * p.steps / 10);
  p.eval_every = o.eval_every > 0 ? o.eval_every : d.eval_every;
  p.val_tokens = o.val_tokens > 0 ? o.val_tokens : d.val_tokens;
  check_flag(o.stop_at_step <= p.steps, t, "stop_at_step", o.stop_at_step, " is past the run's last step ", p.steps,
             " (--steps)");
  // MTP lambda: a step from --mtp_weight to --mtp_weight_final at --mtp_switch_tokens (docs/mtp.md)
  const bool mtp_flags = o.mtp_weight >= 0 || o.mtp_weight_final >= 0 || o.mtp_switch_tokens >= 0;
  check_flag(Model::has_mtp || !mtp_flags, t, o.mtp_weight >= 0 ? "mtp_weight" : o.mtp_weight_final >= 0 ? "mtp_weight_final" : "mtp_switch_tokens",
             "is set but the model \"", o.model, "\" has no MTP module (train tiny_mtp for multi-token prediction)");
  const std::int64_t run_tokens = p.steps * p.total_batch_size;
  p.mtp = MtpWeightSchedule::deepseek_v3(run_tokens, o.mtp_weight >= 0 ? o.mtp_weight : 0.3,
                                         o.mtp_weight_final >= 0 ? o.mtp_weight_final : 0.1);
  if (o.mtp_switch_tokens >= 0) p.mtp.switch_tokens = o.mtp_switch_tokens;
  check_flag(o.top_k <= Model::dims.vocab, t, "top_k", o.top_k, " exceeds the model's vocabulary of ", Model::dims.vocab);
  // The sample is prompt (BOS + its bytes) + sample_tokens long and must fit the model's context.
  const auto prompt_tokens = static_cast<std::int64_t>(o.prompt.size()) + 1;
  check_flag(o.sample_tokens == 0 || prompt_tokens + o.sample_tokens <= Model::dims.max_seq, t, "sample_tokens",
             o.sample_tokens, " + the prompt's ", prompt_tokens, " tokens exceed the model's context of ",
             Model::dims.max_seq, " tokens");
  return p;
}

/// The run's learning-rate schedule; an inconsistent warmup / decay / steps is a UsageError.
/// Muon (2-D matrices) + AdamW (the rest) as the flags set them.
inline optim::HybridOptions hybrid_options(const TrainOptions& o) {
  optim::HybridOptions ho;
  ho.muon.lr = o.lr_matrix;
  ho.muon.weight_decay = o.weight_decay;
  ho.adamw.lr = o.lr_scalar;
  ho.adamw.beta1 = 0.9;
  ho.adamw.beta2 = 0.95;
  ho.adamw_by_role[Role::embedding].lr = o.lr_embedding;
  return ho;
}

inline optim::LrSchedule make_schedule(const TrainOptions& o, const RunPlan& p) {
  const optim::Decay decay = o.lr_schedule == "constant" ? optim::Decay::constant
                             : o.lr_schedule == "cosine" ? optim::Decay::cosine
                             : o.lr_schedule == "linear" ? optim::Decay::linear
                                                         : optim::Decay::wsd;
  try {
    return optim::LrSchedule({p.warmup_steps, p.steps, decay, o.lr_final_ratio, p.decay_steps});
  } catch (const Error& e) {
    throw UsageError(kTrainTool, std::string("--warmup_steps / --lr_decay_steps / --steps: ") + e.what());
  }
}

}  // namespace megacpp::examples
