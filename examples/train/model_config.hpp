// examples/train/model_config.hpp: a model's configuration as data (config.json beside a
// checkpoint's weights and the "megacpp.config" metadata of model.safetensors).
//
// What a reader outside megacpp needs to build the same network from the weights alone
// (scripts/megacpp_torch.py does, docs/pytorch.md): the shared sizes, the letter of every layer,
// and under "letters" each distinct letter's block as its layer is configured at save time, the
// values that live outside the weights included (RoPE base and YaRN after a curriculum phase
// switch, score softcap and scale, the Mamba-3 A rule and MIMO rank, the MoE routing rule and the
// sigmoid router's balancing bias). The blocks of one letter share one configuration (LM builds
// them all from the letter's recipe and changes RoPE on all of them at once), so the first
// block of each letter describes them all.
#pragma once

#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "megacpp/nn/model.hpp"
#include "megacpp/core/version.hpp"

namespace megacpp::examples {

namespace detail {

// The attention mixer's configuration, policies included.
template <class M>
nlohmann::json attention_config(const M& m) {
  const AttentionConfig& c = m.config;
  return {{"kind", "attention"},
          {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads},
          {"head_dim", c.head_dim},
          {"window", c.window},
          {"rope", c.rope},
          {"rope_theta", c.rope_theta},
          {"yarn",
           {{"factor", c.yarn.factor},
            {"original_context", c.yarn.original_context},
            {"beta_fast", c.yarn.beta_fast},
            {"beta_slow", c.yarn.beta_slow}}},
          {"softcap", M::SoftcapPolicy::cap},
          {"score_scale", M::ScalePolicy::scale(c.head_dim)},
          {"qk_norm", M::QKNormPolicy::enabled},
          {"qk_norm_eps", 1e-6}};
}

// The Mamba-3 mixer's configuration (policy rank, A rule).
template <class M>
nlohmann::json mamba3_config(const M& m) {
  const Mamba3Config& c = m.config;
  return {{"kind", "mamba3"},
          {"d_state", c.d_state},
          {"headdim", c.headdim},
          {"expand", c.expand},
          {"heads", m.heads()},
          {"mimo_rank", M::R},
          {"n_angles", m.n_angles()},
          {"a_activation", std::string(M::a_activation::name)},
          {"A_floor", c.A_floor},
          {"norm_eps", c.norm_eps},
          {"outproj_norm", c.is_outproj_norm}};
}

// The M2RNN mixer's configuration.
template <class M>
nlohmann::json m2rnn_config(const M& m) {
  const M2RNNConfig& c = m.config;
  return {{"kind", "m2rnn"},
          {"heads", c.n_heads()},
          {"k_head_dim", c.k_head_dim},
          {"v_head_dim", c.v_head_dim},
          {"conv_kernel", c.conv_kernel},
          {"norm_eps", c.norm_eps}};
}

// The MoE feed-forward's configuration and routing rule. The sigmoid rule's balancing bias is
// per layer and lives in the weights file ("blocks.<i>.ffn.routing.bias", MoE::for_each_state).
template <class F>
nlohmann::json moe_config(const F& f) {
  const MoEConfig& c = f.config;
  nlohmann::json j = {{"kind", "moe"},
                      {"experts", c.experts},
                      {"top_k", c.top_k},
                      {"expert_hidden", c.hidden()},
                      {"shared_experts", c.shared_experts}};
  using Routing = std::decay_t<decltype(f.routing)>;
  if constexpr (std::is_same_v<Routing, SigmoidBiasTopK>) {
    j["routing"] = "sigmoid_bias_topk";
    j["normalize"] = true;
  } else if constexpr (std::is_same_v<Routing, SoftmaxTopK>) {
    j["routing"] = "softmax_topk";
    j["normalize"] = f.routing.normalize;
  } else {
    j["routing"] = std::string(Routing::name);  // a reader refuses a rule it does not know
  }
  return j;
}

// One part of a block: its kind and sizes; "unsupported" names a type this writer does not describe.
template <class Part>
nlohmann::json part_config(const Part& p) {
  if constexpr (requires { p.inv_freq; p.options(); }) return attention_config(p);
  else if constexpr (requires { typename Part::policy_type; typename Part::a_activation; }) return mamba3_config(p);
  else if constexpr (std::is_same_v<Part, M2RNN<typename Part::value_type, typename Part::backend_type>>) return m2rnn_config(p);
  else if constexpr (requires { p.router; p.experts; p.routing; }) return moe_config(p);
  else if constexpr (requires { p.fc; p.proj; }) return {{"kind", "mlp"}, {"hidden", p.fc.out_features()}, {"activation", "relu2"}};
  else return {{"kind", "unsupported"}};
}

}  // namespace detail

/// A block's configuration: "mixer" and "ffn" (null when the block has none) and "norm_eps".
template <class BlockT>
nlohmann::json block_config(const BlockT& block) {
  nlohmann::json j;
  if constexpr (BlockT::has_mixer) j["mixer"] = detail::part_config(block.mixer);
  else j["mixer"] = nullptr;
  if constexpr (BlockT::has_feed_forward) j["ffn"] = detail::part_config(block.ffn);
  else j["ffn"] = nullptr;
  j["norm_eps"] = block.norm_eps;
  return j;
}

/// The model's configuration as data. `layers` spells the letter of every layer, `letters` maps
/// each letter to its block's configuration (block_config), `mtp` (models with MTP) holds the
/// MTP block's; `type_id` keeps each letter's sizes in words.
template <class Model>
nlohmann::json model_config(Model& model, const std::string& name) {
  const std::string pattern = Model::pattern();
  std::string layers;
  for (index_t i = 0; i < Model::dims.n_layers; ++i) layers += pattern[static_cast<std::size_t>(i) % pattern.size()];
  nlohmann::json letters = nlohmann::json::object();
  model.for_each_block([&](std::size_t i, const auto& block) {
    const std::string letter(1, layers[i]);
    if (!letters.contains(letter)) letters[letter] = block_config(block);
  });
  nlohmann::json j = {{"format", "megacpp"},
                      {"megacpp_version", kVersion},
                      {"model", name},
                      {"type_id", Model::type_id()},
                      {"dtype", std::string(dtype_name<typename Model::value_type>())},
                      {"d_model", Model::dims.d_model},
                      {"n_layers", Model::dims.n_layers},
                      {"vocab", Model::dims.vocab},
                      {"max_seq", Model::dims.max_seq},
                      {"pattern", pattern},
                      {"layers", layers},
                      {"letters", letters},
                      {"tied_embedding", true},
                      {"logit_softcap", model.head.softcap},
                      {"norm_eps", model.norm_eps}};
  if constexpr (Model::has_mtp) j["mtp"] = {{"depth", 1}, {"block", block_config(model.mtp.block)}};
  return j;
}

}  // namespace megacpp::examples
