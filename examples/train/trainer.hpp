// examples/train/trainer.hpp: the training loop of megacpp-train, for any model type.
//
// One optimizer step = `accumulation` micro-batches of (micro_batch x seq_len) packed tokens,
// losses scaled by 1 / accumulation so the gradient is the mean over the global batch, global
// gradient-norm clipping (RECIPE.md: 1.0), then Muon (2-D matrices) + AdamW (the rest) with an
// absolute-warmup LR schedule and Muon momentum warmup (modded-nanogpt: 0.85 -> 0.95 over 300
// steps). Everything that decides the next step lives in a checkpoint (weights, optimizer
// moments and counters, the data position, the RNG), so `--resume` continues bit for bit on the
// same thread count. A phase (RECIPE.md "Curriculum") sets seq_len, rope_theta and micro-batch;
// the global batch in tokens is constant, so accumulation is recomputed, and a resumed run may
// enter another phase.
#pragma once

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/progress_bar.hpp"
#include "megacpp/data.hpp"
#include "megacpp/train/curriculum.hpp"
#include "megacpp/nn/model/sampling.hpp"
#include "megacpp/optim.hpp"
#include "metrics.hpp"
#include "models.hpp"
#include "run_checkpoint.hpp"

namespace megacpp::examples {

/// Every option of a training run (the command line fills it; 0 / -1 mean "the model's default").
struct TrainOptions {
  std::string model = "tiny";        ///< registry name (models.hpp)
  std::string data;                  ///< directory with train_*.bin and val_*.bin
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
  bool fim_mask = true;              ///< mask the context targets of FIM documents
  std::int64_t eval_every = 0;       ///< steps between validation passes
  std::int64_t val_tokens = 0;       ///< tokens per validation pass
  std::int64_t save_every = 0;       ///< steps between checkpoints (0: only at the end)
  std::int64_t stop_at_step = 0;     ///< checkpoint and exit after this step (0: run to the end)
  int keep_checkpoints = 2;          ///< newest checkpoints kept
  index_t sample_tokens = 200;       ///< tokens sampled at the end (0: none)
  double temperature = 0.8;          ///< sampling temperature (0: greedy)
  index_t top_k = 40;                ///< sampling top-k (0: all)
  std::string prompt = "#include <";  ///< sample prompt
  bool require_improvement = false;  ///< exit 5 when a fresh run's validation loss did not fall
  std::int64_t debug_poison_step = 0;    ///< fault injection: NaN weights before this step (tests)
  int debug_checkpoint_pause_ms = 0;     ///< fault injection: sleep between checkpoint files (tests)

  /// The options as JSON (recorded in every checkpoint).
  nlohmann::json to_json() const {
    return {{"model", model}, {"data", data}, {"out", out}, {"seed", std::to_string(seed)}, {"steps", steps},
            {"total_batch_size", total_batch_size}, {"micro_batch", micro_batch}, {"seq_len", seq_len}, {"phase", phase},
            {"warmup_steps", warmup_steps}, {"lr_schedule", lr_schedule}, {"lr_decay_steps", lr_decay_steps},
            {"lr_final_ratio", lr_final_ratio}, {"lr_matrix", lr_matrix}, {"lr_embedding", lr_embedding},
            {"lr_scalar", lr_scalar}, {"weight_decay", weight_decay}, {"max_grad_norm", max_grad_norm},
            {"fim_mask", fim_mask}};
  }
};

/// Sizes of one run after the model's defaults and the phase are applied.
struct RunPlan {
  CurriculumPhase phase;
  index_t seq_len = 0, micro_batch = 0, accumulation = 0;
  std::int64_t total_batch_size = 0, steps = 0, warmup_steps = 0, decay_steps = 0, eval_every = 0, val_tokens = 0;
};

/// Applies the defaults of `d` to `o`; throws naming the value for an impossible combination.
template <class Model>
RunPlan make_plan(const TrainOptions& o, const ModelDefaults& d) {
  RunPlan p;
  p.phase = recipe_phase(o.phase);
  p.seq_len = o.seq_len > 0 ? o.seq_len : p.phase.seq_len / d.seq_len_divisor;
  check(p.seq_len <= Model::dims.max_seq, "megacpp-train", "seq_len ", p.seq_len, " exceeds the model's max_seq ",
        Model::dims.max_seq);
  p.total_batch_size = o.total_batch_size > 0 ? o.total_batch_size : d.total_batch_size;
  p.micro_batch = o.micro_batch > 0 ? o.micro_batch
                                    : std::max<index_t>(1, std::min<index_t>(d.micro_batch_tokens, p.total_batch_size) / p.seq_len);
  p.accumulation = gradient_accumulation(p.total_batch_size, p.micro_batch, p.seq_len);
  p.steps = o.steps > 0 ? o.steps : d.steps;
  p.warmup_steps = o.warmup_steps >= 0 ? o.warmup_steps : std::min(d.warmup_steps, p.steps / 10);
  p.decay_steps = o.lr_decay_steps >= 0 ? o.lr_decay_steps : std::max<std::int64_t>(1, 3 * p.steps / 10);
  p.eval_every = o.eval_every > 0 ? o.eval_every : d.eval_every;
  p.val_tokens = o.val_tokens > 0 ? o.val_tokens : d.val_tokens;
  check(o.stop_at_step >= 0 && o.stop_at_step <= p.steps, "megacpp-train", "stop_at_step ", o.stop_at_step,
        " outside [0, steps = ", p.steps, "]");
  return p;
}

inline optim::LrSchedule make_schedule(const TrainOptions& o, const RunPlan& p) {
  const optim::Decay decay = o.lr_schedule == "constant" ? optim::Decay::constant
                             : o.lr_schedule == "cosine" ? optim::Decay::cosine
                             : o.lr_schedule == "linear" ? optim::Decay::linear
                             : o.lr_schedule == "wsd"    ? optim::Decay::wsd
                                                         : (fail("megacpp-train", "unknown lr_schedule \"", o.lr_schedule,
                                                                 "\": constant, cosine, linear or wsd"),
                                                            optim::Decay::constant);
  return optim::LrSchedule({p.warmup_steps, p.steps, decay, o.lr_final_ratio, p.decay_steps});
}

/// Validation loss (nats per token) and bits per byte (byte tokens only: ids < 256).
struct EvalResult {
  double loss = 0, bits_per_byte = 0;
};

template <class Model>
EvalResult evaluate(const Model& model, const std::vector<fs::path>& shards, const RunPlan& p, std::int32_t bos) {
  NoGrad no_grad;
  data::ShardLoader val(shards, p.micro_batch, p.seq_len, static_cast<std::uint32_t>(Model::dims.vocab));
  const index_t per_batch = p.micro_batch * p.seq_len;
  index_t available = 0;  // evaluate each validation token at most once
  for (const auto& s : shards) available += data::TokenShard(s).size() / per_batch * per_batch;
  const index_t batches = std::max<index_t>(1, std::min<index_t>(p.val_tokens, available) / per_batch);
  double nats = 0, tokens = 0, bytes = 0;
  for (index_t i = 0; i < batches; ++i) {
    const auto b = val.next<float, Cpu>();
    const auto docs = Model::documents(b.input_ids_host, p.micro_batch, p.seq_len, bos);
    nats += static_cast<double>(model.loss(b.input_ids, b.target_ids, b.loss_mask, docs).item()) * per_batch;
    tokens += per_batch;
    for (const std::int32_t t : b.target_ids_host) bytes += t < 256;
  }
  return {nats / tokens, bytes > 0 ? nats / std::log(2.0) / bytes : 0.0};
}

/// Runs (or resumes) a training run of Model; returns the process exit code.
template <class Model>
int train(const TrainOptions& o, const ModelDefaults& d) {
  using Clock = std::chrono::steady_clock;
  const data::SpecialTokens special;
  const RunPlan p = make_plan<Model>(o, d);
  const std::string type_id = Model::type_id();
  const int threads = omp_get_max_threads();

  // A checkpoint of another model is refused before this one is built (that may be large).
  const fs::path resume_dir = o.resume.empty() ? fs::path() : resolve_checkpoint(o.resume);
  const TrainingState saved = o.resume.empty() ? TrainingState{} : read_training_state(resume_dir / "state.json");
  check(o.resume.empty() || (saved.model == d.name && saved.model_type == type_id), "megacpp-train", "checkpoint ",
        resume_dir.string(), " is from a different model type: it holds \"", saved.model, "\" [", saved.model_type,
        "], this run trains \"", d.name, "\" [", type_id, "]");

  Model model(o.seed);
  optim::HybridOptions ho;
  ho.muon.lr = o.lr_matrix;
  ho.muon.weight_decay = o.weight_decay;
  ho.adamw.lr = o.lr_scalar;
  ho.adamw.beta1 = 0.9;
  ho.adamw.beta2 = 0.95;
  ho.adamw_by_role[Role::embedding].lr = o.lr_embedding;
  optim::Hybrid<float, Cpu> opt(model, ho);
  const auto params = optim::collect_params<float, Cpu>(model);

  const auto train_shards = data::list_shards(o.data, "train_");
  const auto val_shards = data::list_shards(o.data, "val_");
  data::ShardLoader loader(train_shards, p.micro_batch, p.seq_len, static_cast<std::uint32_t>(Model::dims.vocab));
  if (o.fim_mask) loader.enable_fim_mask(special);

  TrainingState state;
  state.model = d.name;
  state.model_type = type_id;
  state.threads = threads;
  state.phase = p.phase.number;
  state.options = o.to_json();
  Rng rng(o.seed ^ 0x9E3779B97F4A7C15ull);
  std::int64_t start = 0;
  if (!o.resume.empty()) {
    const fs::path& dir = resume_dir;
    load_checkpoint(dir, model, opt, type_id);
    loader.seek(saved.train_position);
    rng.set_state(saved.rng_state);
    start = saved.step;
    state.tokens_seen = saved.tokens_seen;
    std::printf("resumed from %s at step %lld (phase %d)\n", dir.string().c_str(), static_cast<long long>(start), saved.phase);
    if (saved.phase != p.phase.number)
      std::printf("phase switch %d -> %d (%.*s): seq_len %lld, rope_theta %g, micro_batch %lld, accumulation %lld\n",
                  saved.phase, p.phase.number, static_cast<int>(p.phase.name.size()), p.phase.name.data(),
                  static_cast<long long>(p.seq_len), p.phase.rope_theta, static_cast<long long>(p.micro_batch),
                  static_cast<long long>(p.accumulation));
    if (saved.threads != threads)
      std::printf("warning: the checkpoint was written with %d threads, this run uses %d: results are not bitwise "
                  "those of an uninterrupted run (set OMP_NUM_THREADS=%d)\n", saved.threads, threads, saved.threads);
    check(start < p.steps, "megacpp-train", "checkpoint is at step ", start, ", the run has only ", p.steps,
          " steps: nothing to do (raise --steps)");
  }
  enter_phase(model, p.phase);
  const optim::LrSchedule schedule = make_schedule(o, p);
  const optim::MomentumWarmup momentum{0.85, 0.95, 300};

  std::fputs(model.summary().c_str(), stdout);
  std::printf("data %s (%zu train, %zu val shards); phase %d (%.*s): seq_len %lld, rope_theta %g\n"
              "global batch %lld tokens = %lld micro-batches of %lld x %lld; %lld steps, warmup %lld, %s schedule; "
              "%d threads\n",
              o.data.c_str(), train_shards.size(), val_shards.size(), p.phase.number, static_cast<int>(p.phase.name.size()),
              p.phase.name.data(), static_cast<long long>(p.seq_len), p.phase.rope_theta,
              static_cast<long long>(p.total_batch_size), static_cast<long long>(p.accumulation),
              static_cast<long long>(p.micro_batch), static_cast<long long>(p.seq_len), static_cast<long long>(p.steps),
              static_cast<long long>(p.warmup_steps), o.lr_schedule.c_str(), threads);
  fs::create_directories(o.out);
  MetricsLog log(fs::path(o.out) / "metrics.jsonl", o.resume.empty() ? -1 : start);

  auto run_eval = [&](std::int64_t step) {
    const EvalResult e = evaluate(model, val_shards, p, special.bos);
    std::printf("%sstep %lld: val loss %.4f nats, %.3f bits per byte\n", isatty(STDERR_FILENO) ? "\n" : "",
                static_cast<long long>(step), e.loss, e.bits_per_byte);
    std::fflush(stdout);
    log.write({{"step", step}, {"val_loss", e.loss}, {"val_bpb", e.bits_per_byte}});
    return e;
  };
  const EvalResult first = start == 0 ? run_eval(0) : EvalResult{std::numeric_limits<double>::quiet_NaN(), 0};
  EvalResult last = first;

  ProgressBar bar("train", static_cast<double>((p.steps - start) * p.total_batch_size), "tok");
  const auto t0 = Clock::now();
  const std::int64_t end = o.stop_at_step > 0 ? o.stop_at_step : p.steps;
  for (std::int64_t step = start; step < end; ++step) {
    const std::int64_t number = step + 1;  // the step being taken, as logs and checkpoints count
    if (number == o.debug_poison_step) model.embedding.var.mutable_value().fill(std::numeric_limits<float>::quiet_NaN());
    const double lr_scale = schedule(step);
    opt.set_lr_scale(lr_scale);
    opt.set_muon_momentum(momentum(step));
    const auto ts = Clock::now();
    // The step's loss is the mean over every learned target of the global batch: micro-batch i
    // weighs count_i / total (FIM context is masked, so counts differ, and a micro-batch inside
    // one long FIM context may learn nothing at all).
    std::vector<data::PackedBatch<float, Cpu>> batches;
    std::vector<double> counts;
    double total = 0;
    for (index_t micro = 0; micro < p.accumulation; ++micro) {
      batches.push_back(loader.next<float, Cpu>());
      counts.push_back(0);
      for (const float m : batches.back().loss_mask_host) counts.back() += m;
      total += counts.back();
    }
    double loss_sum = 0;
    for (index_t micro = 0; micro < p.accumulation; ++micro) {
      const auto& batch = batches[static_cast<std::size_t>(micro)];
      const double weight = total > 0 ? counts[static_cast<std::size_t>(micro)] / total : 0.0;
      if (weight == 0) continue;
      const auto docs = Model::documents(batch.input_ids_host, p.micro_batch, p.seq_len, special.bos);
      const auto loss = model.loss(batch.input_ids, batch.target_ids, batch.loss_mask, docs);
      const double value = loss.item();
      if (!std::isfinite(value)) {
        bar.finish();
        std::fprintf(stderr,
                     "megacpp-train: step %lld: training loss is %s (micro-batch %lld of %lld); stopping before the "
                     "optimizer step. Last checkpoint: %s\n",
                     static_cast<long long>(number), std::isnan(value) ? "NaN" : "infinite",
                     static_cast<long long>(micro + 1), static_cast<long long>(p.accumulation),
                     fs::exists(fs::path(o.out) / "latest") ? resolve_checkpoint(o.out).string().c_str() : "none");
        return 3;
      }
      loss_sum += weight * value;
      backward(weight != 1.0 ? scale(loss, weight) : loss);
    }
    // A global batch with no learned target at all (possible only with tiny batches inside one
    // long FIM context) has no gradient: the step consumes its data and updates nothing.
    optim::ClipResult clip;
    if (total > 0) {
      clip = optim::clip_grad_norm(params, o.max_grad_norm);
      opt.step();
    }
    opt.zero_grad();
    state.tokens_seen += p.total_batch_size;
    const double seconds = std::chrono::duration<double>(Clock::now() - ts).count();
    const double loss = loss_sum;
    log.write({{"step", number}, {"loss", loss}, {"lr", o.lr_matrix * lr_scale}, {"grad_norm", clip.norm},
               {"tokens", state.tokens_seen}, {"tokens_per_s", static_cast<double>(p.total_batch_size) / seconds}});
    char extra[160];
    std::snprintf(extra, sizeof extra, " | step %lld/%lld loss %.3f lr %.2e gnorm %.3f", static_cast<long long>(number),
                  static_cast<long long>(p.steps), loss, o.lr_matrix * lr_scale, clip.norm);
    bar.update(static_cast<double>((number - start) * p.total_batch_size), extra);
    if (number % p.eval_every == 0 || number == p.steps) last = run_eval(number);
    if ((o.save_every > 0 && number % o.save_every == 0) || number == end) {
      state.step = number;
      state.rng_state = rng.state();
      state.train_position = loader.position();
      save_checkpoint(o.out, model, opt, state, o.keep_checkpoints, o.debug_checkpoint_pause_ms);
    }
  }
  bar.finish();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::int64_t done = end - start;
  std::printf("trained %lld steps in %.1f s (%.0f tokens/s); checkpoint %s\n", static_cast<long long>(done), elapsed,
              static_cast<double>(done * p.total_batch_size) / elapsed, resolve_checkpoint(o.out).string().c_str());
  const fs::path svg = fs::path(o.out) / "loss.svg";
  write_loss_plot(log.path(), svg, std::string("megacpp-train ") + d.name + " (" + Model::pattern() + ")");
  std::printf("metrics %s, loss curve %s\n", log.path().string().c_str(), svg.string().c_str());
  if (end < p.steps) {
    std::printf("stopped at step %lld of %lld as asked (--stop_at_step); continue with --resume %s\n",
                static_cast<long long>(end), static_cast<long long>(p.steps), o.out.c_str());
    return 0;
  }
  const bool learned = start > 0 || last.loss < first.loss;
  if (start == 0)
    std::printf("validation loss %.4f -> %.4f nats (%.3f -> %.3f bits per byte)%s\n", first.loss, last.loss,
                first.bits_per_byte, last.bits_per_byte, learned ? "" : ": DID NOT FALL");
  if (o.sample_tokens > 0) {
    const data::ByteTokenizer tokenizer;
    std::printf("sample (temperature %.2f, top-k %lld):\n%s", o.temperature, static_cast<long long>(o.top_k), o.prompt.c_str());
    SamplingOptions so{o.temperature, o.top_k};
    generate(model, tokenizer.encode_document(o.prompt, false), o.sample_tokens, so, rng, special.bos,
             [&](std::int32_t t) {
               if (t < 256) std::putchar(t);
               else if (t < tokenizer.vocab_size()) std::printf("%s", tokenizer.decode({t}).c_str());
               else std::printf("<%d>", t);  // padding ids of the model's vocabulary
               std::fflush(stdout);
               return t != special.eos;
             });
    std::printf("\n");
  }
  return learned || !o.require_improvement ? 0 : 5;
}

}  // namespace megacpp::examples
