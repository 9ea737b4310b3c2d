// tests/torch/torch_reference.cpp: writes, for every model type the trainer offers and the layer
// options its letters take, a checkpoint (model.safetensors + config.json, as megacpp-train
// writes them) and megacpp's fp32 logits on a fixed packed batch, for scripts/megacpp_torch.py to
// reproduce (tests/torch/check_torch_loader.sh compares the two; docs/pytorch.md).
//
//   torch_reference OUT_DIR      -> OUT_DIR/<case>/{model.safetensors, config.json, reference.json,
//                                                   logits.f32[, mtp_logits.f32]}
//
// Every weight is perturbed from its initial value with a fixed seed: at init the blocks' output
// projections are zero (every block the identity) and the Mamba/M2RNN gains and biases constant,
// so logits at init would not exercise the layers at all. Three cases store their weights as
// BF16, F16 and F64 (rounded first, so megacpp computes with exactly the stored values). logits.f32 is (batch, seq, vocab)
// little-endian float32, mtp_logits.f32 the MTP module's logits of the same positions.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/backends/cpu.hpp"
#include "megacpp/io/checkpoint.hpp"
#include "megacpp/nn/model.hpp"
#include "model_config.hpp"

namespace fs = std::filesystem;
using namespace megacpp;

namespace {

constexpr index_t kBatch = 2, kSeq = 40;
constexpr std::int32_t kBos = 256;

// Row 0 starts with BOS and holds three documents; row 1 starts mid-document and holds two.
std::vector<std::int32_t> fixed_tokens(std::int32_t vocab) {
  Rng rng(2024);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(kBatch * (kSeq + 1)));
  for (auto& t : ids) t = static_cast<std::int32_t>(rng.below(256));
  for (const index_t at : {0, 17, 30}) ids[static_cast<std::size_t>(at)] = kBos;
  ids[static_cast<std::size_t>(kSeq + 1 + 9)] = kBos;
  for (auto& t : ids) t = t % vocab;
  return ids;
}

void write_bytes(const fs::path& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// Zero matrices get N(0, 1/in) entries, everything else N(0, 0.1^2) noise on top of its value.
template <class Model>
void perturb(Model& model, std::uint64_t seed) {
  Rng rng(seed);
  model.for_each_param([&](const std::string&, Param<float, Cpu>& p) {
    std::vector<float> v = p.var.value().to_host();
    bool all_zero = true;
    for (const float x : v) all_zero = all_zero && x == 0.0f;
    const Shape shape = p.var.value().shape();
    const double sigma = all_zero && shape.rank() == 2 ? 1.0 / std::sqrt(static_cast<double>(shape[1])) : 0.1;
    for (float& x : v) x += static_cast<float>(sigma * rng.normal());
    p.var.mutable_value().assign(Tensor<float, Cpu>::from_host(shape, v));
  });
}

// Every weight rounded to S and back: what megacpp computes with after loading an S export.
template <class S, class Model>
void round_through(Model& model) {
  model.for_each_param([](const std::string&, Param<float, Cpu>& p) {
    p.var.mutable_value().assign(p.var.value().template to<S>().template to<float>());
  });
}

// The weights written as element type S (a bf16, f16 or f64 export), as io::save_model writes them.
template <class S, class Model>
void save_as(const fs::path& path, Model& model, const std::string& config) {
  io::SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  writer.set_metadata("megacpp.config", config);
  writer.set_metadata(io::kModelTypeKey, Model::type_id());
  model.for_each_param([&](const std::string& name, Param<float, Cpu>& p) { writer.add(name, p.var.value().template to<S>()); });
  writer.write(path);
}

// Writes case `name`: the model of `seed`, perturbed, `setup` applied, its weights stored as S.
template <class Model, class S = float, class Setup>
void dump(const fs::path& root, const std::string& name, std::uint64_t seed, Setup&& setup) {
  const fs::path dir = root / name;
  fs::create_directories(dir);
  auto model = std::make_unique<Model>(seed);
  perturb(*model, seed + 1);
  setup(*model);
  if constexpr (!std::is_same_v<S, float>) round_through<S>(*model);

  const std::vector<std::int32_t> all = fixed_tokens(static_cast<std::int32_t>(Model::dims.vocab));
  std::vector<std::int32_t> ids, next;
  for (index_t b = 0; b < kBatch; ++b)
    for (index_t t = 0; t < kSeq; ++t) {
      ids.push_back(all[static_cast<std::size_t>(b * (kSeq + 1) + t)]);
      next.push_back(all[static_cast<std::size_t>(b * (kSeq + 1) + t + 1)]);
    }
  NoGrad no_grad;
  const auto docs = Model::documents(ids, kBatch, kSeq, kBos);
  const auto ids_t = Tensor<std::int32_t, Cpu>::from_host(Shape{kBatch, kSeq}, ids);
  const Var<float, Cpu> h = model->hidden(ids_t, docs);
  write_bytes(dir / "logits.f32", model->logits(h).value().to_host());
  if constexpr (Model::has_mtp) {
    const auto next_t = Tensor<std::int32_t, Cpu>::from_host(Shape{kBatch, kSeq}, next);
    const auto e = rmsnorm(embedding(model->embedding.var, next_t), model->norm_eps);
    const auto u = model->mtp.block.forward(model->mtp.proj.forward(concat<float, Cpu>({h, e}, -1)), docs);
    write_bytes(dir / "mtp_logits.f32", model->logits(rmsnorm(u, model->norm_eps)).value().to_host());
  }

  const nlohmann::json config = examples::model_config(*model, name);
  if constexpr (std::is_same_v<S, float>) io::save_model(dir / "model.safetensors", *model, Model::type_id(), {{"megacpp.config", config.dump()}});
  else save_as<S>(dir / "model.safetensors", *model, config.dump());
  std::ofstream(dir / "config.json") << config.dump(2) << "\n";
  const nlohmann::json ref = {{"model", name},      {"batch", kBatch},       {"seq", kSeq},
                              {"vocab", Model::dims.vocab}, {"bos_id", kBos}, {"tokens", ids},
                              {"next_tokens", next}, {"mtp", Model::has_mtp}};
  std::ofstream(dir / "reference.json") << ref.dump() << "\n";
  std::printf("torch_reference: wrote %s (%s)\n", dir.string().c_str(), Model::type_id().c_str());
}

// A dense two-layer attention model with every attention option the letter takes at run time:
// GQA 4/2, a sliding window, a raised RoPE base and YaRN (a curriculum phase's settings).
inline constexpr Dims kDenseDims{.d_model = 64, .n_layers = 2, .vocab = 264, .max_seq = 4096};
using Dense = RecipeLM<float, Cpu, kDenseDims, "AA", AttentionSizes{.n_heads = 4, .n_kv_heads = 2, .window = 7}>;
// The tiny model with the earlier Mamba-3 A rule (softplus).
using TinySoftplusA = LM<float, Cpu, kTinyDims, Pattern<"AAM">,
                         Letters<Letter<'A', AttentionLetter<kTinyAttention>>, Letter<'M', Mamba3Letter<kTinyMamba, SISO, SoftplusA>>>>;
// Mamba-3 MIMO rank 4 with the per-head output norm.
inline constexpr MambaSizes kMimoMamba{.d_state = 16, .headdim = 32, .expand = 2, .outproj_norm = true};
using TinyMimo = RecipeMIMOLM<float, Cpu, kTinyDims, "AAM", kTinyAttention, kMimoMamba, 4>;
// MoE with sigmoid routing (a non-zero balancing bias) and a shared expert.
using TinyMoESigmoid = RecipeMoELM<float, Cpu, kTinyDims, "AEM", kTinyAttention, kTinyMamba,
                                   MoESizes{.experts = 4, .top_k = 2, .shared_experts = 1}, SigmoidBiasTopK>;
// The modded-nanogpt attention (QK-norm, fixed score scale 0.12, no score softcap) in a model
// without the final logit softcap: the attention options no trainer letter uses.
struct QKNormAttentionLetter {
  template <class T, class B, Dims D>
  struct factory {
    using type = Block<GQA<T, B, NoSoftcap, Scale<12, 100>, QKNorm>>;
    static AttentionConfig config() {
      AttentionConfig c;
      c.d_model = D.d_model;
      c.n_heads = 4;
      c.n_kv_heads = 1;
      c.max_seq = D.max_seq;
      return c;
    }
    static type make(Rng& rng) { return make_attention_block<T, B, NoSoftcap, Scale<12, 100>, QKNorm>(config(), rng); }
    static std::string describe() { return "GQA heads 4/1 QK-norm scale 0.12 no softcap mlp 256"; }
  };
};
using QKNormDense = LM<float, Cpu, kDenseDims, Pattern<"AA">, Letters<Letter<'A', QKNormAttentionLetter>>, NoHeadSoftcap>;
// Attention then the recurrent tail.
inline constexpr Dims kRecurrentDims{.d_model = 64, .n_layers = 2, .vocab = 264, .max_seq = 4096};
using TinyM2RNN = RecipeLM<float, Cpu, kRecurrentDims, "AR", kTinyAttention, kTinyMamba, kTinyM2RNN>;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: torch_reference OUT_DIR\n");
    return 2;
  }
  try {
    const fs::path root = argv[1];
    dump<Dense>(root, "dense", 1, [](auto& m) {
      m.set_rope_theta(5e5);
      m.set_yarn(Yarn{.factor = 4.0, .original_context = 16});
    });
    dump<QKNormDense>(root, "dense_qk_norm", 10, [](auto&) {});
    dump<TinyLM<float, Cpu>>(root, "tiny", 2, [](auto&) {});
    dump<TinySoftplusA>(root, "tiny_softplus_a", 3, [](auto&) {});
    dump<TinyMimo>(root, "tiny_mimo", 4, [](auto&) {});
    dump<TinyMoELM<float, Cpu>>(root, "tiny_moe", 5, [](auto&) {});
    dump<TinyMoESigmoid>(root, "tiny_moe_sigmoid", 6, [](auto& m) { std::get<1>(m.blocks).ffn.routing.bias = {0.3, -0.2, 0.0, 0.1}; });
    dump<TinyM2RNN>(root, "tiny_m2rnn", 7, [](auto&) {});
    // exports in the other dtypes the script converts on load (megacpp's own files are F32)
    dump<TinyLM<float, Cpu>, bf16>(root, "tiny_bf16", 11, [](auto&) {});
    dump<TinyMoELM<float, Cpu>, f16>(root, "tiny_moe_f16", 12, [](auto&) {});
    dump<TinyM2RNN, double>(root, "tiny_m2rnn_f64", 13, [](auto&) {});
    dump<Nam56rTinyLM<float, Cpu>>(root, "nam56r_tiny", 8, [](auto&) {});
    dump<TinyMtpLM<float, Cpu>>(root, "tiny_mtp", 9, [](auto&) {});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_reference: %s\n", e.what());
    return 1;
  }
  return 0;
}
