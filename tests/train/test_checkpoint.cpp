// Checkpoint files (io/checkpoint.hpp, examples/train/run_checkpoint.hpp), curriculum helpers
// and the metrics log, tested as a library: round trips are bitwise, every damaged or foreign
// file is refused with a message naming the problem, and a failed load changes nothing.
#include <catch2/catch.hpp>

#include <fstream>

#include "data/temp_dir.hpp"
#include "dist/on_ranks.hpp"
#include "metrics.hpp"
#include "models.hpp"
#include "run_checkpoint.hpp"
#include "megacpp/train/curriculum.hpp"
#include "megacpp/optim.hpp"

using namespace megacpp;
using namespace megacpp::examples;
using megacpp::testing::TempDir;
using Tiny = TinyModel;
using TinyDense = RecipeLM<float, Cpu, kTinyDims, "A", kTinyAttention, kTinyMamba>;

namespace {
std::vector<float> all_weights(Tiny& m) {
  std::vector<float> out;
  m.for_each_param([&](const std::string&, Param<float, Cpu>& p) {
    const auto v = p.var.value().to_host();
    out.insert(out.end(), v.begin(), v.end());
  });
  return out;
}

// One real training step so optimizer moments and counters are non-trivial.
template <class Opt>
void train_step(Tiny& model, Opt& opt, std::uint64_t seed) {
  Rng rng(seed);
  const index_t batch = 2, seq = 16;
  std::vector<std::int32_t> ids(batch * seq), targets(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = i % 8 == 0 ? 256 : static_cast<std::int32_t>(rng.below(256));
    targets[i] = static_cast<std::int32_t>(rng.below(256));
  }
  const auto in = CpuTensor<std::int32_t>::from_host({batch, seq}, ids);
  const auto tg = CpuTensor<std::int32_t>::from_host({batch, seq}, targets);
  const auto loss = model.loss(in, tg, CpuTensor<float>::full({batch, seq}, 1.0f), Tiny::documents(ids, batch, seq, 256));
  backward(loss);
  opt.step();
  opt.zero_grad();
}

}  // namespace

TEST_CASE("model and optimizer checkpoints round-trip bitwise and the next step matches", "[checkpoint]") {
  TempDir dir;
  Tiny model(1);
  optim::Hybrid<float, Cpu> opt(model);
  train_step(model, opt, 7);
  const std::string id = Tiny::type_id();
  io::save_model(dir / "m.safetensors", model, id);
  io::save_optimizer(dir / "o.safetensors", opt);

  Tiny restored(99);
  optim::Hybrid<float, Cpu> restored_opt(restored);
  io::load_model(dir / "m.safetensors", restored, id);
  io::load_optimizer(dir / "o.safetensors", restored_opt);
  CHECK(all_weights(restored) == all_weights(model));

  train_step(model, opt, 8);
  train_step(restored, restored_opt, 8);
  CHECK(all_weights(restored) == all_weights(model));  // moments and step counters came back too
}

TEST_CASE("a checkpoint of another model type is refused before anything changes", "[checkpoint]") {
  TempDir dir;
  TinyDense dense(1);
  io::save_model(dir / "dense.safetensors", dense, TinyDense::type_id());
  Tiny model(2);
  const auto before = all_weights(model);
  CHECK_THROWS_WITH(io::load_model(dir / "dense.safetensors", model, Tiny::type_id()),
                    Catch::Contains("different model type") && Catch::Contains("\"A\"") && Catch::Contains("\"AAM\""));
  CHECK(all_weights(model) == before);
  CHECK(Tiny::type_id() != TinyDense::type_id());
}

TEST_CASE("a checkpoint of the earlier -softplus A loads with SoftplusA and is refused by the heavy-tail default", "[checkpoint]") {
  // TinyModel's Mamba-3 uses the reference's heavy-tail A (the default since the A rule became a
  // policy); a softplus model keeps the type id every checkpoint written before that carried.
  using TinySoftplus = LM<float, Cpu, kTinyDims, Pattern<"AAM">,
                          Letters<Letter<'A', AttentionLetter<kTinyAttention>>, Letter<'M', Mamba3Letter<kTinyMamba, SISO, SoftplusA>>>>;
  CHECK(TinySoftplus::type_id() ==
        "F32 LM \"AAM\" d_model 64 layers 3 vocab 264 max_seq 4096; A: GQA heads 4/1 head_dim 16 window 0 mlp 256; "
        "M: Mamba3 SISO N16 P32 x2 mlp 256");
  CHECK(Tiny::type_id() == TinySoftplus::type_id() + " A heavy-tail");
  TempDir dir;
  TinySoftplus old(1);
  io::save_model(dir / "softplus.safetensors", old, TinySoftplus::type_id());
  Tiny model(2);
  const auto before = all_weights(model);
  CHECK_THROWS_WITH(io::load_model(dir / "softplus.safetensors", model, Tiny::type_id()),
                    Catch::Contains("different model type") && Catch::Contains("mlp 256], this model is [") &&
                        Catch::Contains("mlp 256 A heavy-tail]"));
  CHECK(all_weights(model) == before);
  TinySoftplus reloaded(3);
  io::load_model(dir / "softplus.safetensors", reloaded, TinySoftplus::type_id());
  std::vector<float> a, b;
  old.for_each_param([&](const std::string&, Param<float, Cpu>& p) { for (float v : p.value().to_host()) a.push_back(v); });
  reloaded.for_each_param([&](const std::string&, Param<float, Cpu>& p) { for (float v : p.value().to_host()) b.push_back(v); });
  CHECK(a == b);
}

TEST_CASE("a model file with a missing, extra or misshapen tensor names it", "[checkpoint]") {
  TempDir dir;
  Tiny model(3);
  const std::string id = Tiny::type_id();
  const auto before = all_weights(model);
  auto write_variant = [&](const fs::path& path, const std::string& skip, const std::string& extra, bool bad_shape) {
    io::SafetensorsWriter w;
    w.set_metadata(io::kModelTypeKey, id);
    model.for_each_param([&](const std::string& name, Param<float, Cpu>& p) {
      if (name == skip) return;
      if (bad_shape && name == "embedding.weight") w.add(name, CpuTensor<float>::zeros({3, 3}));
      else w.add(name, p.var.value());
    });
    if (!extra.empty()) w.add(extra, CpuTensor<float>::zeros({2}));
    w.write(path);
  };
  write_variant(dir / "missing.safetensors", "blocks.1.ffn.fc.weight", "", false);
  CHECK_THROWS_WITH(io::load_model(dir / "missing.safetensors", model, id), Catch::Contains("blocks.1.ffn.fc.weight"));
  write_variant(dir / "extra.safetensors", "", "blocks.9.mixer.ghost", false);
  CHECK_THROWS_WITH(io::load_model(dir / "extra.safetensors", model, id),
                    Catch::Contains("blocks.9.mixer.ghost") && Catch::Contains("does not have"));
  write_variant(dir / "shape.safetensors", "", "", true);
  CHECK_THROWS_WITH(io::load_model(dir / "shape.safetensors", model, id),
                    Catch::Contains("embedding.weight") && Catch::Contains("shape"));
  CHECK(all_weights(model) == before);

  // Truncated file: cut the data buffer short.
  io::save_model(dir / "whole.safetensors", model, id);
  const std::string bytes = megacpp::testing::file_bytes(dir / "whole.safetensors");
  std::ofstream(dir / "cut.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  CHECK_THROWS_AS(io::load_model(dir / "cut.safetensors", model, id), Error);
  CHECK(all_weights(model) == before);
}

TEST_CASE("an optimizer file of another configuration is refused", "[checkpoint]") {
  TempDir dir;
  Tiny model(4);
  optim::AdamW<float, Cpu> adamw(optim::collect_params<float, Cpu>(model));
  io::save_optimizer(dir / "adamw.safetensors", adamw);
  optim::Hybrid<float, Cpu> hybrid(model);
  CHECK_THROWS_AS(io::load_optimizer(dir / "adamw.safetensors", hybrid), Error);
}

TEST_CASE("run checkpoints: latest names the newest complete one and old ones are pruned", "[checkpoint]") {
  TempDir dir;
  Tiny model(5);
  optim::Hybrid<float, Cpu> opt(model);
  TrainingState s;
  s.model = "tiny";
  s.model_type = Tiny::type_id();
  s.rng_state = 0xFFFFFFFFFFFFFFF1ull;  // above 2^53: must survive JSON exactly
  s.train_position = {0, 12345, 2};
  s.options = {{"lr_matrix", 0.02}};
  for (std::int64_t step : {10, 20, 30}) {
    s.step = step;
    save_checkpoint(dir.path, model, opt, s, 2);
  }
  CHECK(resolve_checkpoint(dir.path) == dir / "step_00000030");
  CHECK(!fs::exists(dir / "step_00000010"));
  CHECK(fs::exists(dir / "step_00000020"));
  const TrainingState r = read_training_state(dir / "step_00000030" / "state.json");
  CHECK(r.step == 30);
  CHECK(r.rng_state == s.rng_state);
  CHECK(r.train_position == s.train_position);
  CHECK(r.model_type == s.model_type);

  // Damaged state files and pointers are named.
  std::ofstream(dir / "step_00000030" / "state.json") << "{\"format\": 1, \"step\": \"ten\"}";
  CHECK_THROWS_WITH(read_training_state(dir / "step_00000030" / "state.json"), Catch::Contains("\"step\""));
  std::ofstream(dir / "step_00000030" / "state.json") << "{not json";
  CHECK_THROWS_WITH(read_training_state(dir / "step_00000030" / "state.json"), Catch::Contains("malformed JSON"));
  std::ofstream(dir / "latest") << "step_00000099";
  CHECK_THROWS_WITH(resolve_checkpoint(dir.path), Catch::Contains("step_00000099"));
  CHECK_THROWS_WITH(resolve_checkpoint(dir / "nowhere"), Catch::Contains("no checkpoint"));
}

TEST_CASE("run checkpoints: ZeRO-1 ranks write their own optimizer shards, rank 0 the rest and the manifest", "[checkpoint][zero1]") {
  TempDir dir;
  TrainingState s;
  s.model = "tiny";
  s.model_type = Tiny::type_id();
  s.step = 10;
  s.options = nlohmann::json::object();
  Tiny reference(5);
  optim::Hybrid<float, Cpu> reference_opt(reference);
  train_step(reference, reference_opt, 7);
  // Each rank reports what it saw; the checks run here (Catch2's assertions are not thread-safe).
  const auto ranks = megacpp::testing::on_ranks(2, [&](dist::InProcessComm& comm) {
    Tiny model(5);
    optim::Hybrid<float, Cpu> opt(model);
    train_step(model, opt, 7);  // the same step on every rank, then each keeps its share
    opt.shard(comm.rank(), comm.size());
    const fs::path saved = save_sharded_checkpoint(dir.path, model, opt, s, comm);
    return std::make_pair(saved, fs::exists(dir / "latest"));  // every rank returns after rank 0 published it
  });
  for (const auto& [saved, published] : ranks) {
    CHECK(saved == dir / "step_00000010");
    CHECK(published);
  }
  const fs::path step = dir / "step_00000010";
  CHECK(resolve_checkpoint(dir.path) == step);
  CHECK(fs::exists(step / io::kOptimizerManifest));
  CHECK(fs::exists(step / "optimizer.rank00000-of-00002.safetensors"));
  CHECK(fs::exists(step / "optimizer.rank00001-of-00002.safetensors"));
  CHECK_FALSE(fs::exists(step / "optimizer.safetensors"));
  for (const auto& e : fs::directory_iterator(dir.path)) CHECK(e.path().filename().string().rfind(".step_", 0) != 0);
  // Resumed in one process, unsharded: the weights and the whole state of the reference.
  Tiny restored(99);
  optim::Hybrid<float, Cpu> restored_opt(restored);
  load_checkpoint(step, restored, restored_opt, Tiny::type_id());
  CHECK(all_weights(restored) == all_weights(reference));
  const auto got = optim::save_state(restored_opt), want = optim::save_state(reference_opt);
  CHECK(got.counters == want.counters);
  REQUIRE(got.tensors.size() == want.tensors.size());
  for (const auto& [name, t] : want.tensors) {
    INFO(name);
    CHECK(got.tensors.at(name).to_host() == t.to_host());
  }
}

TEST_CASE("curriculum: accumulation keeps the global batch and rope_theta reaches every attention layer", "[curriculum]") {
  CHECK(gradient_accumulation(524288, 32, 4096) == 4);
  CHECK(gradient_accumulation(524288, 8, 16384) == 4);
  CHECK(gradient_accumulation(524288, 2, 65536) == 4);
  CHECK(gradient_accumulation(8192, 4, 256, 2) == 4);
  CHECK_THROWS_WITH(gradient_accumulation(1000, 3, 256), Catch::Contains("1000") && Catch::Contains("768"));
  CHECK_THROWS_WITH(recipe_phase(4), Catch::Contains("phase 4"));
  CHECK(recipe_phase(2).rope_theta == 5e5);
  CHECK(recipe_phase(3).seq_len == 65536);

  Tiny model(6);
  const auto before = std::get<0>(model.blocks).mixer.inv_freq.to_host();
  CHECK(model.set_rope_theta(5e5) == 2);  // "AAM": two attention layers
  const auto after = std::get<0>(model.blocks).mixer.inv_freq.to_host();
  CHECK(std::get<1>(model.blocks).mixer.config.rope_theta == 5e5);
  REQUIRE(after.size() == before.size());
  CHECK(after[0] == before[0]);  // theta^0
  // inv_freq_i = theta^(-2i/D): the last frequency moves from 1e4^(-(D-2)/D) to 5e5^(-(D-2)/D)
  const double D = static_cast<double>(kTinyAttention.head_dim_for(kTinyDims.d_model));
  CHECK(after.back() == Approx(std::pow(5e5, -(D - 2) / D)).epsilon(1e-5));
}

TEST_CASE("curriculum: each phase holds the recipe's data mixture", "[curriculum][mixture]") {
  CHECK(data::format_mixture(phase_mixture(recipe_phase(1))) == "code=0.7,text=0.2,math=0.1");
  CHECK(data::format_mixture(phase_mixture(recipe_phase(2))) == "code=0.7,text=0.3");
  CHECK(data::format_mixture(phase_mixture(recipe_phase(3))) == "code=0.5,text=0.3,math=0.2");
  for (const auto& phase : kRecipePhases) {
    double sum = 0;
    for (const auto& w : phase_mixture(phase)) sum += w.weight;
    CHECK(sum == Approx(1.0));
  }
  // Data without a math stream: the phase's weights over the streams it has, renormalised.
  const auto no_math = phase_mixture_for(recipe_phase(1), {"code", "text", "other"});
  REQUIRE(no_math.size() == 2);
  CHECK(no_math[0].weight == Approx(0.7 / 0.9));
  CHECK(no_math[1].weight == Approx(0.2 / 0.9));
  CHECK_THROWS_WITH(phase_mixture_for(recipe_phase(2), {"math"}), Catch::Contains("names none of the data's streams"));
}

TEST_CASE("metrics log is cut back on resume and the loss plot draws both series", "[metrics]") {
  TempDir dir;
  {
    MetricsLog log(dir / "m.jsonl", -1);
    for (int s = 1; s <= 10; ++s) log.write({{"step", s}, {"loss", 5.0 - 0.1 * s}});
    log.write({{"step", 10}, {"val_loss", 4.2}, {"val_bpb", 6.0}});
  }
  {
    MetricsLog log(dir / "m.jsonl", 6);  // a resume from step 6 drops steps 7-10
    log.write({{"step", 7}, {"loss", 4.0}});
  }
  std::ifstream in(dir / "m.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  CHECK(lines == 7);
  CHECK(write_loss_plot(dir / "m.jsonl", dir / "loss.svg", "test") == 7);
  const std::string svg = megacpp::testing::file_bytes(dir / "loss.svg");
  CHECK(svg.find("<svg") == 0);
  CHECK(svg.find("<polyline") != std::string::npos);
}

TEST_CASE("loss plot: steps without a loss are skipped, ticks are round, validation points are marked", "[metrics]") {
  TempDir dir;
  {
    MetricsLog log(dir / "m.jsonl", -1);
    for (int s = 1; s <= 300; ++s)
      log.write({{"step", s}, {"loss", s % 23 == 0 ? nlohmann::json() : nlohmann::json(7.2 - 0.018 * s)}});
    for (int s = 0; s <= 300; s += 50) log.write({{"step", s}, {"val_loss", 7.2 - 0.017 * s}});
  }
  CHECK(write_loss_plot(dir / "m.jsonl", dir / "loss.svg", "test") == 300 - 13 + 7);  // 13 null losses
  const std::string svg = megacpp::testing::file_bytes(dir / "loss.svg");
  for (const char* tick : {">2<", ">4<", ">6<", ">8<", ">0<", ">100<", ">300<"}) {
    INFO(tick);
    CHECK(svg.find(tick) != std::string::npos);
  }
  CHECK(svg.find("5.399") == std::string::npos);
  std::size_t circles = 0;
  for (std::size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++circles;
  CHECK(circles == 7);
  CHECK(svg.find("train, EMA 0.9") != std::string::npos);
  CHECK(write_loss_plot(dir / "m.jsonl", dir / "plain.svg", "test", 0.0) == 294);
  CHECK(megacpp::testing::file_bytes(dir / "plain.svg").find("EMA") == std::string::npos);
}
