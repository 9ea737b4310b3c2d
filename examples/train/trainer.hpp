// examples/train/trainer.hpp: the training loop of megacpp-train, for any model type.
//
// One optimizer step = `accumulation` micro-batches of (micro_batch x seq_len) packed tokens,
// losses scaled by 1 / accumulation so the gradient is the mean over the global batch, global
// gradient-norm clipping (docs/recipe.md: 1.0), then Muon (2-D matrices) + AdamW (the rest) with an
// absolute-warmup LR schedule and Muon momentum warmup (modded-nanogpt: 0.85 -> 0.95 over 300
// steps). Everything that decides the next step lives in a checkpoint (weights, optimizer
// moments and counters, the data position, the RNG), so `--resume` continues bit for bit on the
// same thread count. A phase (docs/recipe.md "Curriculum") sets seq_len, rope_theta and micro-batch;
// the global batch in tokens is constant, so accumulation is recomputed, and a resumed run may
// enter another phase.
//
// The model, its batches and the optimizer live on the model type's backend: Cpu, or Cuda under
// --device cuda (backend_runs.hpp); the data, files and metrics are host-side either way.
//
// Before any work the options are checked (options.hpp), the shards' tokenizer is read from their
// shards.json (BOS and FIM ids are never assumed), --out is proven writable and made safe for this
// run (run_checkpoint.hpp). During the run a non-finite loss, gradient or parameter stops it with
// exit 3 before that state is checkpointed, and a loss stuck at one value is reported
// (divergence.hpp).
//
// Data parallel (docs/systems/distributed.md): train() runs on every rank of a communicator
// (SingleProcess, or MpiComm when megacpp-train is launched by mpirun/srun: main.cpp). Each rank
// reads its own rows of every step (ShardLoader's rank slice), the global batch stays
// micro_batch x accumulation x world tokens (accumulation is divided by the world size), the
// gradients are averaged in buckets during the last micro-batch's backward (data_parallel_run.hpp;
// --zero1 reduce-scatters them to their owners), rank 0's initial parameters are broadcast,
// Muon's Newton-Schulz work is shared by the ranks, the validation loss is averaged over every
// rank's slice, and rank 0 alone writes the run directory and draws the progress bar.
#pragma once

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bpe_option.hpp"
#include "common/progress_bar.hpp"
#include "megacpp/data.hpp"
#include "megacpp/train/curriculum.hpp"
#include "megacpp/nn/model/sampling.hpp"
#include "megacpp/optim.hpp"
#include "data_parallel_run.hpp"
#include "divergence.hpp"
#include "evaluate.hpp"
#include "metrics.hpp"
#include "models.hpp"
#include "expert_load.hpp"
#include "options.hpp"
#include "pass_eval_run.hpp"
#include "run_checkpoint.hpp"
#include "sft_data.hpp"
#include "step_losses.hpp"
#include "trained_model.hpp"

namespace megacpp::examples {

/// Runs (or resumes) a training run of Model on every rank of `comm`; returns the process exit
/// code (common/cli.hpp).
template <class Model, class Comm>
int train(const TrainOptions& o, const ModelDefaults& d, Comm& comm) {
  using Clock = std::chrono::steady_clock;
  const int world = comm.size(), rank = comm.rank();
  const bool lead = rank == 0;  // writes the run directory and prints
  // What the command line decides, checked before any file is read or written.
  RunPlan p = make_plan<Model>(o, d);
  check_flag(p.accumulation % world == 0, kTrainTool, "total_batch_size", p.total_batch_size, " = ", p.accumulation,
             " micro-batches of ", p.micro_batch, " x ", p.seq_len, " tokens, which the ", world,
             " ranks cannot share equally: the global batch must be a multiple of micro_batch x seq_len x ranks");
  p.accumulation /= world;  // micro-batches per rank: the global batch stays the same
  const optim::LrSchedule schedule = make_schedule(o, p);
  const std::string type_id = Model::type_id();
  const int threads = omp_get_max_threads();

  // The files it names. A checkpoint of another model is refused before this one is built (that
  // may be large); so are shards without metadata or of a vocabulary the model cannot embed.
  const fs::path resume_dir = o.resume.empty() ? fs::path() : resolve_checkpoint(o.resume);
  const TrainingState saved = o.resume.empty() ? TrainingState{} : read_training_state(resume_dir / "state.json");
  check(o.resume.empty() || (saved.model == d.name && saved.model_type == type_id), kTrainTool, "checkpoint ",
        resume_dir.string(), " is from a different model type: it holds \"", saved.model, "\" [", saved.model_type,
        "], this run trains \"", d.name, "\" [", type_id, "]");
  const fs::path init_dir = o.init.empty() ? fs::path() : resolve_checkpoint(o.init);
  const TrainingState init = o.init.empty() ? TrainingState{} : read_training_state(init_dir / "state.json");
  const bool sft = !o.sft.file.empty();
  check(o.resume.empty() || training_stage(saved) == (sft ? "sft" : "pretraining"), kTrainTool, "checkpoint ",
        resume_dir.string(), " is a run of ", training_stage(saved),
        sft ? ": start SFT from it with --init, not --resume" : ": resume it with the flag it was started with (--sft FILE or --gspo)");
  const std::int64_t start = o.resume.empty() ? 0 : saved.step;
  check_flag(start < p.steps, kTrainTool, "steps", p.steps, ": the checkpoint is at step ", start,
             ", so there is nothing to do (raise --steps)");
  check_flag(o.stop_at_step == 0 || o.stop_at_step > start, kTrainTool, "stop_at_step", o.stop_at_step,
             " is not after the checkpoint's step ", start);
  const auto train_shards = data::list_shards(o.data, "train_");
  const auto val_shards = data::list_shards(o.data, "val_");
  const data::ShardMetadata meta = data::read_shard_metadata(o.data);
  const std::string meta_file = (fs::path(o.data) / data::kShardMetadataFile).string();
  data::check_vocabulary(meta, Model::dims.vocab, meta_file);
  check(o.resume.empty() || saved.shards == meta, kTrainTool, "checkpoint ", resume_dir.string(),
        " was trained on shards of the ", saved.shards.tokenizer, " tokenizer (", saved.shards.tokenizer_hash, ", BOS ",
        saved.shards.special.bos, ", vocab ", saved.shards.vocab_size, ") but ", meta_file, " says ", meta.tokenizer, " (",
        meta.tokenizer_hash, ", BOS ", meta.special.bos, ", vocab ", meta.vocab_size,
        "): resume on shards written with the same tokenizer");
  check(o.init.empty() || init.shards == meta, kTrainTool, "checkpoint ", init_dir.string(), " was trained on shards of the ",
        init.shards.tokenizer, " tokenizer (", init.shards.tokenizer_hash, ") but ", meta_file, " says ", meta.tokenizer,
        " (", meta.tokenizer_hash, "): fine-tune with the tokenizer the model was trained with");
  const data::SpecialTokens special = meta.special;
  const SampleCodec codec(kTrainTool, o.tokenizer, o.special_tokens, meta);  // the end-of-run sample's
  if (lead) {
    ensure_writable_directory(kTrainTool, "out", o.out);
    prepare_run_directory(o.out, o.resume.empty() ? -1 : start);
  }

  using B = typename Model::backend_type;  // Cpu, or Cuda under --device cuda (train_cuda_*.cu)
  Model model(o.seed);
  optim::Hybrid<float, B> opt(model, hybrid_options(o));
  const auto params = optim::collect_params<float, B>(model);
  // Each optimizer group's base learning rate (the schedule scales them all alike), for the metrics.
  std::map<std::string, double> group_lrs;
  for (const auto& route : opt.routes()) group_lrs[route.group] = route.lr;

  data::MixtureLoader loader(data::list_streams(o.data, "train"), p.micro_batch, p.seq_len,
                             static_cast<std::uint32_t>(meta.vocab_size), o.seed, rank, world);
  if (o.fim_mask) loader.enable_fim_mask(special);
  const std::string mixture = sft ? std::string() : set_run_mixture(loader, o, p.phase);
  // SFT (--sft): packed examples with their prompts masked, plus a share of pretraining rows.
  std::optional<SftData> sft_data;
  if (sft)
    sft_data.emplace(kTrainTool, o.sft, codec, meta, train_shards, p.micro_batch, p.seq_len, o.seed, rank, world, o.fim_mask);
  const auto next_batch = [&] { return sft_data ? sft_data->next<float, B>() : loader.next<float, B>(); };

  TrainingState state;
  state.model = d.name;
  state.model_type = type_id;
  state.threads = threads;
  state.phase = p.phase.number;
  state.options = resolved_options(o, p);
  state.shards = meta;
  Rng rng(o.seed ^ 0x9E3779B97F4A7C15ull);
  if (!o.resume.empty()) {
    const fs::path& dir = resume_dir;
    load_checkpoint(dir, model, opt, type_id);
    if (sft_data) {
      sft_data->seek(saved.post_training, dir.string());
    } else if (loader.mixed()) {
      check(saved.train_mixture.has_value(), kTrainTool, "checkpoint ", dir.string(),
            " was trained on one unnamed stream but ", o.data, " holds named streams: resume on the same data");
      loader.seek(*saved.train_mixture);
    } else {
      check(!saved.train_mixture, kTrainTool, "checkpoint ", dir.string(), " was trained on named streams but ", o.data,
            " holds one unnamed stream: resume on the same data");
      loader.seek_single(saved.train_position);
    }
    rng.set_state(saved.rng_state);
    state.tokens_seen = saved.tokens_seen;
    std::printf("resumed from %s at step %lld (phase %d)\n", dir.string().c_str(), static_cast<long long>(start), saved.phase);
    if (saved.phase != p.phase.number)
      std::printf("phase switch %d -> %d (%.*s): seq_len %lld, rope_theta %g, micro_batch %lld, accumulation %lld\n",
                  saved.phase, p.phase.number, static_cast<int>(p.phase.name.size()), p.phase.name.data(),
                  static_cast<long long>(p.seq_len), p.phase.rope_theta, static_cast<long long>(p.micro_batch),
                  static_cast<long long>(p.accumulation));
    const std::string saved_precision =
        saved.options.is_object() ? saved.options.value("precision", std::string("fp32")) : std::string("fp32");
    if (saved_precision != o.precision)
      std::printf("warning: the checkpoint was written with --precision %s, this run uses %s: results are not bitwise "
                  "those of an uninterrupted run\n", saved_precision.c_str(), o.precision.c_str());
    const std::string saved_device =
        saved.options.is_object() ? saved.options.value("device", std::string("cpu")) : std::string("cpu");
    if (saved_device != o.device)
      std::printf("warning: the checkpoint was written with --device %s, this run uses %s: results are not bitwise "
                  "those of an uninterrupted run\n", saved_device.c_str(), o.device.c_str());
    if (saved.threads != threads)
      std::printf("warning: the checkpoint was written with %d threads, this run uses %d: results are not bitwise "
                  "those of an uninterrupted run (set OMP_NUM_THREADS=%d)\n", saved.threads, threads, saved.threads);
  }
  if (!o.init.empty()) {  // SFT: the pretrained weights, a fresh optimizer and schedule
    load_trained_weights(kTrainTool, init_dir, init, model);
    std::printf("initialised from %s (%s, step %lld); optimizer state and schedule start afresh\n",
                init_dir.string().c_str(), training_stage(init).c_str(), static_cast<long long>(init.step));
  }
  // Data parallel: every rank starts from rank 0's weights (a resumed run reads the same files;
  // the broadcast costs one pass over the weights and guards against a rank that did not).
  DataParallelRun<Comm, B> data_parallel(o, comm, params, opt);  // --zero1: after the full state is loaded
  enter_phase(model, p.phase, p.seq_len);
  PlasticityRun<Model, decltype(opt)> plasticity(kTrainTool, o.plasticity, p.phase, p.accumulation, model, opt,
                                                 o.resume.empty() ? nlohmann::json() : saved.plasticity);
  const optim::MomentumWarmup momentum{0.85, 0.95, 300};
  const PassEvalRun<Model> pass_eval(kTrainTool, o.pass_eval, codec, o.top_k, o.seed);

  std::fputs(model.summary().c_str(), stdout);
  std::printf("data %s (%zu train, %zu val shards, %s tokenizer, BOS %d); phase %d (%.*s): seq_len %lld, rope_theta %g\n"
              "global batch %lld tokens = %lld micro-batches of %lld x %lld; %lld steps, warmup %lld, %s schedule; "
              "%d threads; precision %s; device %s\n",
              o.data.c_str(), train_shards.size(), val_shards.size(), meta.tokenizer.c_str(), special.bos, p.phase.number,
              static_cast<int>(p.phase.name.size()), p.phase.name.data(), static_cast<long long>(p.seq_len),
              p.phase.rope_theta, static_cast<long long>(p.total_batch_size), static_cast<long long>(p.accumulation),
              static_cast<long long>(p.micro_batch), static_cast<long long>(p.seq_len), static_cast<long long>(p.steps),
              static_cast<long long>(p.warmup_steps), o.lr_schedule.c_str(), threads, Model::precision_type::name.data(),
              device_description<B>().c_str());
  data_parallel.print_summary(opt, p.accumulation, p.micro_batch, p.seq_len, p.total_batch_size);
  if (sft_data) std::printf("%s\n", sft_data->describe().c_str());
  if (!mixture.empty()) std::printf("mixture %s (streams drawn per row, seed %llu)\n", mixture.c_str(),
                                    static_cast<unsigned long long>(o.seed));
  std::optional<MetricsLog> metrics;
  if (lead) metrics.emplace(fs::path(o.out) / "metrics.jsonl", o.resume.empty() ? -1 : start);
  const auto write_log = [&](const nlohmann::json& record) {
    if (metrics) metrics->write(record);
  };
  const auto run_start = Clock::now();  // the metrics' elapsed_s counts from here
  // FIRE at phase entry (or when asked for), before the first step; logged to the metrics.
  const auto log_intervention = [&](const nlohmann::json& record) {
    if (record.is_null()) return;
    write_log(record);
    std::printf("%s%s\n", isatty(STDERR_FILENO) ? "\n" : "", record.dump().c_str());
  };
  log_intervention(plasticity.at_start(start, !o.resume.empty() && saved.phase < p.phase.number));

  auto run_eval = [&](std::int64_t step) {
    EvalResult e;
    if (sft_data) std::tie(e.loss, e.bits_per_byte) = sft_data->evaluate(model, comm, special.bos, meta.tokenizer == "byte");
    else e = evaluate(model, val_shards, p, meta, comm);
    std::printf("%sstep %lld: val loss %.4f nats, %.3f bits per byte\n", isatty(STDERR_FILENO) ? "\n" : "",
                static_cast<long long>(step), e.loss, e.bits_per_byte);
    std::fflush(stdout);
    write_log({{"step", step}, {"val_loss", e.loss}, {"val_bpb", e.bits_per_byte},
               {"elapsed_s", std::chrono::duration<double>(Clock::now() - run_start).count()}, {"time", unix_seconds()}});
    return e;
  };
  const EvalResult first = start == 0 ? run_eval(0) : EvalResult{std::numeric_limits<double>::quiet_NaN(), 0};
  EvalResult last = first;

  std::optional<ProgressBar> bar;
  if (lead) bar.emplace("train", static_cast<double>((p.steps - start) * p.total_batch_size), "tok");
  // A diverged step ends the run here, before it is evaluated or checkpointed: `latest` keeps
  // naming the last finite checkpoint, which the message gives.
  auto diverged = [&](std::int64_t number, const std::string& what) {
    if (bar) bar->finish();
    write_log({{"step", number}, {"diverged", what}});
    const std::string last_checkpoint =
        lead && fs::exists(fs::path(o.out) / "latest") ? resolve_checkpoint(o.out).string() : std::string("none");
    std::fflush(stdout);
    std::fprintf(stderr, "megacpp-train: step %lld: %s; stopped before this state was checkpointed. Last checkpoint: %s\n",
                 static_cast<long long>(number), what.c_str(), last_checkpoint.c_str());
    return static_cast<int>(kExitDiverged);
  };
  LossPlateau plateau;
  std::int64_t longest_plateau = 0;
  const auto t0 = Clock::now();
  const std::int64_t end = o.stop_at_step > 0 ? o.stop_at_step : p.steps;
  for (std::int64_t step = start; step < end; ++step) {
    const std::int64_t number = step + 1;  // the step being taken, as logs and checkpoints count
    check(!(rank == o.debug_fail_rank && number == 2), kTrainTool, "rank ", rank,
          " fails on purpose before step 2 (--debug_fail_rank)");
    if (rank == o.debug_hang_rank && number == 2) std::this_thread::sleep_for(std::chrono::hours(1));  // a hung rank
    if (number == o.debug_poison_step) model.embedding.var.mutable_value().fill(std::numeric_limits<float>::quiet_NaN());
    const double lr_scale = schedule(step);
    opt.set_lr_scale(lr_scale);
    opt.set_muon_momentum(momentum(step));
    // MTP lambda by tokens seen before this step (docs/mtp.md); 0 skips the module's compute
    const double mtp_weight = Model::has_mtp ? p.mtp(state.tokens_seen) : 0.0;
    if constexpr (Model::has_mtp) model.mtp.set_weight(mtp_weight);
    const auto ts = Clock::now();
    // The step's loss is the mean over every learned target of the global batch (all ranks):
    // micro-batch i weighs count_i / global total (FIM sentinel targets are masked, so counts
    // differ; a micro-batch of nothing but sentinels would learn nothing at all).
    std::vector<data::PackedBatch<float, B>> batches;
    std::vector<double> counts;
    double total = 0;
    for (index_t micro = 0; micro < p.accumulation; ++micro) {
      batches.push_back(next_batch());
      counts.push_back(batches.back().loss_mask.sum());  // summed on the host by the upload
      total += counts.back();
    }
    // The global batch's learned targets decide whether the step updates (every rank the same).
    double global_total = total;
    comm.template all_reduce<double, Cpu>(&global_total, 1, dist::ReduceOp::sum);
    ExpertLoad expert_load;
    StepLosses<B> step_losses;  // read once the step's forwards and backwards are all queued
    for (index_t micro = 0; micro < p.accumulation; ++micro) {
      const auto& batch = batches[static_cast<std::size_t>(micro)];
      // Share of the global batch's learned targets x world (DataParallel divides by it): the
      // mean over every target even when the ranks' counts differ (docs/systems/distributed.md).
      // `share` (of this rank's targets) weighs the logged auxiliary losses, rank 0's own.
      const double count = counts[static_cast<std::size_t>(micro)];
      const double weight = global_total > 0 ? count * world / global_total : 0.0;
      const double share = total > 0 ? count / total : 0.0;
      data_parallel.set_sync(micro + 1 == p.accumulation);  // communicate on the last only
      if (weight == 0) continue;
      const auto docs = Model::documents(batch.input_ids_host, p.micro_batch, p.seq_len, special.bos);
      // The loader checked the ids and targets against the vocabulary and summed the mask on the
      // host before the upload (PackedBatch::upload): on a GPU the step makes no pass over them and
      // reads nothing back until the losses below.
      const auto terms = model.losses(batch.input_ids, batch.target_ids, batch.loss_mask, docs);
      const auto& loss = terms.total;  // what is differentiated: main + lambda * MTP
      step_losses.queue(micro, weight, share, terms);
      expert_load.add(model);
      backward(weight != 1.0 ? scale(loss, weight) : loss);
    }
    // A global batch with no learned target at all (possible only with tiny batches of nothing
    // but FIM sentinels) has no gradient: the step consumes its data and updates nothing.
    // Averaged gradients (the buckets of the last backward are in flight): wait for them.
    data_parallel.finish();
    const auto losses = step_losses.read(p.accumulation);
    // Every rank stops on any rank's non-finite loss: the averaged gradients carry it to all, and a
    // rank whose own losses were finite would otherwise stop at the clip, blaming the gradient norm.
    double any_bad_loss = losses.bad_loss.empty() ? 0.0 : 1.0;
    if (world > 1) comm.template all_reduce<double, Cpu>(&any_bad_loss, 1, dist::ReduceOp::max);
    if (any_bad_loss > 0)
      return diverged(number, megacpp::detail::concat(losses.bad_loss.empty() ? "training loss is not finite on another rank"
                                                                              : losses.bad_loss,
                                                      "; non-finite parameters before the step: ",
                                                      list_names(non_finite_values(params, /*gradients=*/false))));
    if (!expert_load.empty()) expert_load.all_reduce(comm);  // the global batch's expert load
    optim::ClipResult clip;
    if (global_total > 0) {
      clip = data_parallel.clip(o.max_grad_norm);  // non-finite: skip_step()
      if (clip.skip_step())
        return diverged(number, megacpp::detail::concat("gradient norm is ", clip.norm, " (non-finite gradients in ",
                                               clip.non_finite.empty() ? "none alone: their sum of squares overflowed"
                                                                       : list_names(clip.non_finite),
                                               "); the optimizer step was not taken"));
      log_intervention(plasticity.after_backward(number));  // DASH: this step's gradients, before the update
      opt.step(comm);  // Muon's Newton-Schulz shared over the ranks, AdamW replicated (or sharded: --zero1)
      // Auxiliary-loss-free balancing (SigmoidBiasTopK): each MoE layer's bias moves by gamma
      // against its load, outside the gradient (DeepSeek-V3 sec. 2.1.2, gamma 0.001 there).
      // The load is the global batch's (all micro-batches; all ranks, summed before the step).
      std::size_t moe_layer = 0;
      for_each_moe_layer(model, [&](auto& moe) { moe.update_bias(expert_load.layer(moe_layer++), 1e-3); });
      log_intervention(plasticity.after_step(number, comm));  // ReDo, the same units on every rank
      const auto bad = non_finite_values(params, /*gradients=*/false);
      if (!bad.empty())
        return diverged(number, megacpp::detail::concat("parameters ", list_names(bad),
                                               " are not finite after the optimizer step (loss ", losses.loss,
                                               ", gradient norm ", clip.norm, ", lr scale ", lr_scale,
                                               "): a learning rate too large?"));
    }
    opt.zero_grad();
    state.tokens_seen += p.total_batch_size;
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - ts).count();
    // Each rank's losses.loss is world x its part of the global batch's mean (the weights above):
    // the step's loss is their sum over the ranks divided by the world size.
    double loss = losses.loss;
    if (world > 1) {
      comm.template all_reduce<double, Cpu>(&loss, 1, dist::ReduceOp::sum);
      loss /= world;
    }
    total = global_total;
    // A step with no learned target (every target inside masked FIM context) has no loss and no
    // gradient: null, not 0, so a plot or a mean over the log cannot mistake it for a perfect step.
    nlohmann::json lr = nlohmann::json::object();
    for (const auto& [group, base] : group_lrs) lr[group] = base * lr_scale;
    nlohmann::json record = {{"step", number},
                             {"loss", total > 0 ? nlohmann::json(loss) : nlohmann::json()},
                             {"learned_tokens", static_cast<std::int64_t>(total)},
                             {"lr", lr},
                             {"grad_norm", total > 0 ? nlohmann::json(clip.norm) : nlohmann::json()},
                             {"tokens", state.tokens_seen},
                             {"tokens_per_s", static_cast<double>(p.total_batch_size) / seconds},
                             {"elapsed_s", std::chrono::duration<double>(now - run_start).count()},
                             {"time", unix_seconds()}};
    if constexpr (Model::has_mtp) {
      record["mtp_weight"] = mtp_weight;
      if (losses.mtp_computed) record["mtp_loss"] = losses.mtp;
    }
    if (!expert_load.empty()) {  // MoE: the balance loss (mean over layers) and the experts' shares
      if (losses.balance_layers > 0) record["moe_balance_loss"] = losses.balance / losses.balance_layers;
      const auto [lo, hi] = expert_load.min_max_fraction();
      record["expert_load_min"] = lo;
      record["expert_load_max"] = hi;
    }
    const std::int64_t same = total > 0 ? plateau.observe(loss) : 0;
    if (o.plateau_steps > 0 && same >= o.plateau_steps) {
      record["constant_loss_steps"] = same;
      longest_plateau = std::max(longest_plateau, same);
      if (same == o.plateau_steps) {
        std::fflush(stdout);
        std::fprintf(stderr,
                     "%smegacpp-train: warning: step %lld: the training loss has been exactly %.9g for %lld steps with "
                     "every parameter finite: the run has stopped learning (learning rates too large saturate the "
                     "weights: --lr_matrix %g, --lr_embedding %g)\n",
                     isatty(STDERR_FILENO) ? "\n" : "", static_cast<long long>(number), loss,
                     static_cast<long long>(same), o.lr_matrix, o.lr_embedding);
      }
    }
    write_log(record);
    char extra[160];
    if (total > 0)
      std::snprintf(extra, sizeof extra, " | step %lld/%lld loss %.3f lr %.2e gnorm %.3f", static_cast<long long>(number),
                    static_cast<long long>(p.steps), loss, o.lr_matrix * lr_scale, clip.norm);
    else
      std::snprintf(extra, sizeof extra, " | step %lld/%lld no learned target (all masked)", static_cast<long long>(number),
                    static_cast<long long>(p.steps));
    if (bar) bar->update(static_cast<double>((number - start) * p.total_batch_size), extra);
    if (number % p.eval_every == 0 || number == p.steps) last = run_eval(number);
    if (lead && pass_eval.due(number, p.steps)) {  // rank 0 samples and scores; the others go on
      nlohmann::json record = pass_eval.run(model, number, special.bos, special.eos);
      record["elapsed_s"] = std::chrono::duration<double>(Clock::now() - run_start).count();
      record["time"] = unix_seconds();
      write_log(record);
      std::printf("%sstep %lld: pass@1 %.3f on %lld problems x %lld samples (%.1f s)\n", isatty(STDERR_FILENO) ? "\n" : "",
                  static_cast<long long>(number), record["pass@1"].get<double>(), record["tasks"].get<long long>(),
                  static_cast<long long>(o.pass_eval.samples), record["eval_seconds"].get<double>());
      std::fflush(stdout);
    }
    const bool save = (o.save_every > 0 && number % o.save_every == 0) || number == end;
    if (save) {
      state.step = number;
      if (lead) {
        state.rng_state = rng.state();
        if (loader.mixed()) state.train_mixture = loader.position();
        else state.train_position = loader.single_position();
        state.plasticity = plasticity.to_json();
        if (sft_data) state.post_training = sft_data->position();
      }
      // ZeRO-1: every rank writes the optimizer state it owns as its own shard, rank 0 the rest
      // and the manifest (run_checkpoint.hpp); the set resumes at any world size, sharded or not.
      if (opt.shard_world() > 1)
        save_sharded_checkpoint(o.out, model, opt, state, comm, o.keep_checkpoints, o.debug_checkpoint_pause_ms);
      else if (lead)
        save_checkpoint(o.out, model, opt, state, o.keep_checkpoints, o.debug_checkpoint_pause_ms);
    }
  }
  if (bar) bar->finish();
  const bool learned = start > 0 || last.loss < first.loss;  // the same on every rank (averaged losses)
  const int status = end < p.steps || learned || !o.require_improvement ? kExitOk : kExitNoImprovement;
  if (!lead) return status;  // the report, the plot and the sample are rank 0's
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::int64_t done = end - start;
  std::printf("trained %lld steps in %.1f s (%.0f tokens/s); checkpoint %s\n", static_cast<long long>(done), elapsed,
              static_cast<double>(done * p.total_batch_size) / elapsed, resolve_checkpoint(o.out).string().c_str());
  const fs::path svg = fs::path(o.out) / "loss.svg";
  write_loss_plot(metrics->path(), svg, std::string("megacpp-train ") + d.name + " (" + Model::pattern() + ")");
  std::printf("metrics %s, loss curve %s\n", metrics->path().string().c_str(), svg.string().c_str());
  if (o.pass_eval.every > 0) {
    const fs::path pass_svg = fs::path(o.out) / "pass.svg";
    write_metric_plot(metrics->path(), pass_svg, std::string("megacpp-train ") + d.name + ": pass@1", "pass@1");
    std::printf("pass@1 curve %s\n", pass_svg.string().c_str());
  }
  if (longest_plateau > 0)
    std::printf("warning: the training loss stayed exactly constant for up to %lld steps (\"constant_loss_steps\" in "
                "metrics.jsonl)\n", static_cast<long long>(longest_plateau));
  if (end < p.steps) {
    std::printf("stopped at step %lld of %lld as asked (--stop_at_step); continue with --resume %s\n",
                static_cast<long long>(end), static_cast<long long>(p.steps), o.out.c_str());
    return kExitOk;
  }
  if (start == 0)
    std::printf("validation loss %.4f -> %.4f nats (%.3f -> %.3f bits per byte)%s\n", first.loss, last.loss,
                first.bits_per_byte, last.bits_per_byte, learned ? "" : ": DID NOT FALL");
  if (o.sample_tokens > 0 && !codec.available()) {
    std::printf("no sample: the shards' %s tokenizer needs its tokenizer.json (--tokenizer) to encode the prompt\n",
                meta.tokenizer.c_str());
  } else if (o.sample_tokens > 0) {
    std::printf("sample (temperature %.2f, top-k %lld):\n%s", o.temperature, static_cast<long long>(o.top_k), o.prompt.c_str());
    SamplingOptions so{o.temperature, o.top_k};
    generate(model, codec.prompt(o.prompt), o.sample_tokens, so, rng, special.bos, [&](std::int32_t t) {
      codec.print(t);
      return t != special.eos;
    });
    std::printf("\n");
  }
  return status;
}

}  // namespace megacpp::examples
