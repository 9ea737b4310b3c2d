// megacpp/nn/model/lm.hpp: the language model, LM<T, B, Dims, Pattern, Letters>.
//
//   x_0 = E[input_ids]                               token embedding (vocab, d), Role::embedding
//   x_l = block_l(x_{l-1}, documents)                 block types from Pattern + Letters
//   h   = RMSNorm(x_L)
//   loss = CE(softcap_30(h E^T), targets, loss_mask)  head tied to E (Gemma 2's final-logit
//          + sum_i w_i aux_i                          softcap), fused: logits never materialised;
//                                                    plus the blocks' auxiliary losses, if any,
//                                                    and lambda * the MTP loss (MtpDepth1, mtp.hpp)
// doc_ids and positions are derived once per batch (DocumentLayout::from_tokens) and handed to
// every block. Every size is in the type: LM<float, Cpu, Dims{...}, Pattern<"AAM">, Letters<...>>,
// the shared sizes in Dims and each letter's own in its Letters entry.
// Precision (the last parameter, autograd/precision.hpp): Fp32, or Bf16Mixed for bf16 product
// operands with fp32 sums, fp32 weights and everything else fp32 (docs/systems/precision.md); every
// forward entry point opens the policy's scope, so the products it creates (and their backward)
// follow the model's type whatever the caller's scope.
// Generation: make_cache() holds every block's decode cache (Cache), step_logits() feeds one token
// per row through the blocks' step() and returns the same softcapped logits as logits(hidden())
// at that position (nn/model/sampling.hpp builds generate() on it).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/cross_entropy.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/embedding.hpp"
#include "megacpp/autograd/ops/matmul.hpp"
#include "megacpp/autograd/ops/rmsnorm.hpp"
#include "megacpp/autograd/precision.hpp"
#include "megacpp/core/bounded_ids.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/loss_mask.hpp"
#include "megacpp/nn/attention/yarn.hpp"
#include "megacpp/nn/aux_loss.hpp"
#include "megacpp/nn/block.hpp"
#include "megacpp/nn/linear_cross_entropy.hpp"
#include "megacpp/nn/model/mtp.hpp"
#include "megacpp/nn/model/pattern.hpp"
#include "megacpp/autograd/module.hpp"

namespace megacpp {

/// Final-logit soft cap c (c * tanh(z / c), Gemma 2; the recipe uses 30). Cap 0 disables it.
template <int Cap>
struct HeadSoftcap {
  static constexpr double cap = Cap;  ///< the cap c
};
/// No cap on the final logits.
using NoHeadSoftcap = HeadSoftcap<0>;

namespace detail {
// True when every letter of the pattern maps to a recipe meeting BlockFactory.
template <class T, class B, Dims D, class PatternT, class LettersT, std::size_t... I>
constexpr bool letters_are_factories(std::index_sequence<I...>) {
  return (BlockFactory<typename letter_entry<PatternT::letter(I), LettersT>::type::template factory<T, B, D>> && ...);
}
}  // namespace detail

/// A causal language model whose block sequence is fixed at compile time. MtpT adds a
/// multi-token-prediction module (MtpDepth1<'A'>, nn/model/mtp.hpp); NoMtp is the model without.
/// PrecisionT (Fp32 or Bf16Mixed, autograd/precision.hpp) is the precision of the products.
template <class T, Backend B, Dims D, class PatternT, class LettersT, class HeadCap = HeadSoftcap<30>, class MtpT = NoMtp,
          PrecisionPolicy PrecisionT = Fp32>
struct LM {
  static_assert(validate_dims<D>());
  static_assert(detail::letters_are_factories<T, B, D, PatternT, LettersT>(std::make_index_sequence<PatternT::size>{}),
                "megacpp_letter_not_a_block_factory: every letter of the pattern needs a recipe L whose "
                "L::factory<T, B, D> has type, make(rng) -> type and describe() -> std::string (see "
                "megacpp/nn/model/letters.hpp and docs/extending.md)");

  using value_type = T;                            ///< element type
  using backend_type = B;                          ///< backend
  using V = Var<T, B>;                             ///< activation type
  using precision_type = PrecisionT;               ///< the precision policy of the products
  /// The same model (same parameters, names and checkpoints) with another precision policy.
  template <PrecisionPolicy P>
  using with_precision = LM<T, B, D, PatternT, LettersT, HeadCap, MtpT, P>;
  static constexpr Dims dims = D;                  ///< the model's sizes
  static constexpr index_t n_layers = D.n_layers;  ///< number of blocks

  /// Factory of layer I's block (from the pattern letter and the letter table).
  template <std::size_t I>
  using block_factory = typename detail::letter_entry<PatternT::letter(I), LettersT>::type::template factory<T, B, D>;
  /// Block type of layer I.
  template <std::size_t I>
  using block_type = typename block_factory<I>::type;
  static constexpr bool has_mtp = MtpT::enabled;  ///< true when the model holds an MTP module
  /// The MTP module's type (an empty struct for NoMtp).
  using mtp_type = typename MtpT::template module<T, B, D, LettersT>;
  /// The loss terms of one forward pass.
  struct Losses {
    V total;                                               ///< main + sum_i weight_i * aux_i
    V main;                                                ///< the next-token cross-entropy
    std::vector<typename AuxLosses<T, B>::Entry> aux;      ///< the blocks' auxiliary losses
  };

 private:
  template <std::size_t... I>
  static auto block_tuple(std::index_sequence<I...>) -> std::tuple<block_type<I>...>;
  template <std::size_t... I>
  static auto cache_tuple(std::index_sequence<I...>) -> std::tuple<typename block_type<I>::cache_type...>;

 public:
  /// std::tuple of every layer's block.
  using Blocks = decltype(block_tuple(std::make_index_sequence<D.n_layers>{}));
  /// std::tuple of every layer's decode cache (Block::cache_type), in layer order.
  using Cache = decltype(cache_tuple(std::make_index_sequence<D.n_layers>{}));

  Param<T, B> embedding;  ///< (vocab, d_model), tied to the head
  Blocks blocks;          ///< one block per layer, types from the pattern
  double norm_eps = 1e-6;  ///< eps of the final RMSNorm
  LinearCrossEntropyOptions head{HeadCap::cap, 1024};  ///< fused head options (softcap, chunk rows)
  [[no_unique_address]] mtp_type mtp;  ///< the MTP module (its weight() is lambda); empty for NoMtp

  /// Standard deviation of the embedding's initial entries: 2.5 / d_model. Why: every block's
  /// output projection starts at zero, so at step 0 the final hidden state is RMSNorm(E[t]) and
  /// the tied head gives the input token itself the logit |E[t]| sqrt(d) = sigma d, the others
  /// N(0, sigma^2 d). With sigma = 1/sqrt(d) that is a logit of sqrt(d) for "repeat the input"
  /// (8 at d = 64: an initial loss of 7.2 nats for 264 tokens, ln 264 = 5.58); sigma = c / d makes
  /// it c at every width, and c = 2.5 starts near ln(V) (5.50 nats on the default run's data)
  /// and ends it within 0.3% of the 1/sqrt(d) init's loss (docs/recipe.md "Initialisation").
  static constexpr double kEmbeddingStd = 2.5 / static_cast<double>(D.d_model);

  /// Initialises every parameter from `seed`, deterministically: embedding N(0, kEmbeddingStd^2),
  /// then the blocks in order (each block's own init; output projections zero, docs/recipe.md).
  explicit LM(std::uint64_t seed = 0) {
    Rng rng(seed);
    embedding = Param<T, B>::normal(Shape{D.vocab, D.d_model}, Role::embedding, rng, kEmbeddingStd);
    init_blocks(rng, std::make_index_sequence<D.n_layers>{});
    // drawn after the trunk: a seed gives the same trunk with or without MTP
    if constexpr (has_mtp) mtp = mtp_type(rng, [](Rng& r) { return MtpT::template factory<T, B, D, LettersT>::make(r); });
  }

  /// The pattern string ("AAM") and the letter of each layer.
  static constexpr const char* pattern() { return PatternT::c_str(); }

  /// Documents of a packed batch (batch, seq) of token ids on the host.
  static DocumentLayout<B> documents(const std::vector<std::int32_t>& input_ids, index_t batch, index_t seq,
                                     std::int32_t bos_id, Positions mode = Positions::per_document) {
    return DocumentLayout<B>::from_tokens(input_ids, batch, seq, bos_id, mode);
  }

  /// Residual stream after the embedding (layer 0) and after each block (layers 1..L).
  /// Non-leaf outputs can be asked to retain their gradients (masking checks).
  std::vector<V> trace(const Tensor<std::int32_t, B>& input_ids, const DocumentLayout<B>& docs) const {
    check(input_ids.rank() == 2, "LM", "input_ids must be (batch, seq), got ", input_ids.shape());
    docs.check_matches("LM", input_ids.shape()[0], input_ids.shape()[1]);
    const MatmulPrecisionScope precision(PrecisionT::matmul);
    std::vector<V> outputs;
    outputs.reserve(static_cast<std::size_t>(D.n_layers) + 1);
    outputs.push_back(megacpp::embedding(embedding.var, checked_tokens(input_ids)));
    std::apply([&](const auto&... block) { ((outputs.push_back(block.forward(outputs.back(), docs))), ...); }, blocks);
    return outputs;
  }

  /// Final normalised hidden states h (batch, seq, d_model); the blocks' auxiliary losses go to
  /// `aux` (dropped when there is no collector). Ids as BoundedIds (core/bounded_ids.hpp), e.g.
  /// the loader's (data::PackedBatch::upload, `from_host`): checked on the host, so no pass over
  /// them here and, on a GPU, no read back.
  V hidden(const BoundedIds<B>& input_ids, const DocumentLayout<B>& docs, AuxLosses<T, B>* aux = nullptr) const {
    const MatmulPrecisionScope precision(PrecisionT::matmul);
    V x = megacpp::embedding(embedding.var, input_ids);
    forward_blocks(x, docs, aux, std::make_index_sequence<D.n_layers>{});
    return rmsnorm(x, norm_eps);
  }
  /// The same from ids in backend memory, checked against the vocabulary by one pass.
  V hidden(const Tensor<std::int32_t, B>& input_ids, const DocumentLayout<B>& docs, AuxLosses<T, B>* aux = nullptr) const {
    return hidden(checked_tokens(input_ids), docs, aux);
  }

  /// The loss terms: mean next-token loss over tokens weighted by loss_mask (fused head; logits
  /// never whole), every auxiliary loss the blocks added, the MTP loss ("mtp", weight lambda;
  /// not computed at all when lambda is 0), and their weighted total. Ids and targets as
  /// BoundedIds (see hidden()), the mask as a LossMask with its sum (core/loss_mask.hpp, e.g.
  /// `LossMask<T, B>::from_host`): on a GPU the step then reads nothing back before the loss.
  Losses losses(const BoundedIds<B>& input_ids, const BoundedIds<B>& targets, const LossMask<T, B>& loss_mask,
                const DocumentLayout<B>& docs) const {
    const MatmulPrecisionScope precision(PrecisionT::matmul);
    AuxLosses<T, B> aux;
    const V h = hidden(input_ids, docs, &aux);
    V main = linear_cross_entropy(h, embedding.var, targets, loss_mask, head);
    if constexpr (has_mtp) {
      if (mtp.weight() > 0)
        aux.add("mtp", mtp.loss(h, embedding.var, targets, loss_mask, docs, norm_eps, head), mtp.weight());
    }
    V total = aux.add_to(main);
    return {std::move(total), std::move(main), aux.entries()};
  }
  /// The same with the mask from backend memory (or undefined: every token), summed by one pass.
  Losses losses(const BoundedIds<B>& input_ids, const BoundedIds<B>& targets, const Tensor<T, B>& loss_mask,
                const DocumentLayout<B>& docs) const {
    return losses(input_ids, targets, LossMask<T, B>::counted(loss_mask), docs);
  }
  /// The same from ids, targets and mask in backend memory: the ids and the targets each checked
  /// against the vocabulary by one pass, the mask summed by one.
  Losses losses(const Tensor<std::int32_t, B>& input_ids, const Tensor<std::int32_t, B>& targets,
                const Tensor<T, B>& loss_mask, const DocumentLayout<B>& docs) const {
    const BoundedIds<B> ids = checked_tokens(input_ids);  // the ids first: their error before the targets'
    const BoundedIds<B> bounded_targets = BoundedIds<B>::checked("linear_cross_entropy", targets, D.vocab, "target");
    return losses(ids, bounded_targets, loss_mask, docs);
  }

  /// The total loss of losses(): what training differentiates.
  V loss(const BoundedIds<B>& input_ids, const BoundedIds<B>& targets, const LossMask<T, B>& loss_mask,
         const DocumentLayout<B>& docs) const {
    return losses(input_ids, targets, loss_mask, docs).total;
  }
  /// The same with the mask from backend memory.
  V loss(const BoundedIds<B>& input_ids, const BoundedIds<B>& targets, const Tensor<T, B>& loss_mask,
         const DocumentLayout<B>& docs) const {
    return losses(input_ids, targets, loss_mask, docs).total;
  }
  /// The same from ids, targets and mask in backend memory.
  V loss(const Tensor<std::int32_t, B>& input_ids, const Tensor<std::int32_t, B>& targets, const Tensor<T, B>& loss_mask,
         const DocumentLayout<B>& docs) const {
    return losses(input_ids, targets, loss_mask, docs).total;
  }

  /// Head logits softcap(h E^T) (batch, seq, vocab): for generation and tests, not training.
  V logits(const V& h) const {
    const MatmulPrecisionScope precision(PrecisionT::matmul);
    V z = matmul(h, embedding.var, false, true);
    return HeadCap::cap > 0 ? softcap(z, HeadCap::cap) : z;
  }

  /// Empty decode caches of every block for `batch` rows of documents up to `capacity` tokens
  /// (attention keeps that many keys per row; Mamba's state has a fixed size).
  Cache make_cache(index_t batch, index_t capacity) const {
    return make_caches(batch, capacity, std::make_index_sequence<D.n_layers>{});
  }

  /// One decode step: tokens (one per row of `cache`) -> logits (batch, vocab), softcapped like
  /// logits(): the logits logits(hidden(...)) gives at this token's position of the whole
  /// sequence fed so far. A row whose token is `bos_id` starts a new document (docs/recipe.md "Document masking": its
  /// caches are reset first). Records no gradients.
  V step_logits(const std::vector<std::int32_t>& tokens, Cache& cache, std::int32_t bos_id) const {
    NoGrad no_grad;
    const MatmulPrecisionScope precision(PrecisionT::matmul);
    const index_t batch = static_cast<index_t>(tokens.size());
    check(batch > 0, "LM::step_logits", "needs one token per row, got none");
    // Checked here, on the host: the embedding makes no pass over device memory and reads nothing back.
    const auto ids = BoundedIds<B>::from_host("LM::step_logits", Shape{batch}, tokens, D.vocab, "token");
    std::apply([&](const auto&... c) { (check_cache_rows(c, batch), ...); }, cache);
    std::vector<bool> new_document(static_cast<std::size_t>(batch));
    for (std::size_t b = 0; b < tokens.size(); ++b) new_document[b] = tokens[b] == bos_id;
    V x = megacpp::embedding(embedding.var, ids);  // (batch, d_model)
    step_blocks(x, cache, new_document, std::make_index_sequence<D.n_layers>{});
    return logits(rmsnorm(x, norm_eps));
  }

  /// Per-token losses (batch, seq) through the materialised logits (evaluation, masking checks).
  V per_token_loss(const Tensor<std::int32_t, B>& input_ids, const Tensor<std::int32_t, B>& targets,
                   const DocumentLayout<B>& docs) const {
    return cross_entropy_per_token(logits(hidden(input_ids, docs)), targets);
  }
  /// Per-token losses from the last block's output x_L (the last entry of trace()).
  V per_token_loss_from(const V& last_block_output, const Tensor<std::int32_t, B>& targets) const {
    return cross_entropy_per_token(logits(rmsnorm(last_block_output, norm_eps)), targets);
  }

  /// Visits "embedding.weight", "blocks.<i>.<...>" for every parameter, then "mtp.<...>".
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    visit(child_name(prefix, "embedding.weight"), embedding);
    visit_blocks(visit, prefix, std::make_index_sequence<D.n_layers>{});
    if constexpr (has_mtp) mtp.for_each_param(visit, child_name(prefix, "mtp"));
  }

  /// Visits the non-trainable state of every block and the MTP module (autograd/module.hpp):
  /// e.g. "blocks.1.ffn.routing.bias" of a sigmoid-routed MoE layer.
  template <class Visitor>
  void for_each_state(Visitor&& visit, const std::string& prefix = "") {
    apply_blocks_state(visit, prefix, std::make_index_sequence<D.n_layers>{});
    if constexpr (has_mtp) visit_state(mtp, visit, child_name(prefix, "mtp"));
  }

  /// Applies f(layer_index, block) to every block.
  template <class F>
  void for_each_block(F&& f) {
    apply_blocks(f, std::make_index_sequence<D.n_layers>{});
  }

  /// Sets the RoPE base of every layer with rotary positions (RotaryMixer; YaRN settings kept):
  /// the context curriculum's phase switch. Weights are unchanged. Returns how many layers changed.
  int set_rope_theta(double theta) {
    return for_each_rotary_mixer([&](auto& mixer) { mixer.set_rope_theta(theta); });
  }
  /// Sets the YaRN extension of every layer with rotary positions. Returns how many changed.
  int set_yarn(const Yarn& yarn) {
    return for_each_rotary_mixer([&](auto& mixer) { mixer.set_yarn(yarn); });
  }

  /// The model's type in words: element type, pattern, shared sizes and each letter's sizes. Two
  /// models with the same id have the same parameter names and shapes (checkpoints check it).
  static std::string type_id() {
    std::ostringstream os;
    os << dtype_name<T>() << " LM \"" << pattern() << "\" d_model " << D.d_model << " layers " << D.n_layers << " vocab "
       << D.vocab << " max_seq " << D.max_seq;
    std::string seen;
    for (std::size_t i = 0; i < PatternT::size; ++i) seen += PatternT::letter(i);
    describe_letters(os, seen, std::make_index_sequence<PatternT::size>{});
    if constexpr (has_mtp) os << "; MTP depth 1 (block of letter " << MtpT::letter << ")";
    return os.str();
  }

  /// Parameter counts per role and in total, one line each, with the configuration.
  std::string summary() {
    std::map<std::string, index_t> per_role;
    index_t total = 0, tensors = 0;
    for_each_param([&](const std::string&, Param<T, B>& p) {
      per_role[std::string(role_name(p.role))] += p.numel();
      total += p.numel();
      ++tensors;
    });
    std::ostringstream os;
    os << type_id() << " (tied head, softcap " << HeadCap::cap << ")\n";
    for (const auto& [role, n] : per_role) os << "  " << role << ": " << n << "\n";
    os << "  total: " << total << " parameters in " << tensors << " tensors\n";
    return os.str();
  }

 private:
  template <class Cache>
  static void check_cache_rows(const Cache& c, index_t batch) {
    if constexpr (!std::is_same_v<Cache, NoDecodeCache>)
      check(c.batch() == batch, "LM::step_logits", "the cache holds ", c.batch(), " rows but ", batch,
            " tokens were given (one per row): make the cache with make_cache(", batch, ", capacity)");
  }

  template <class F>
  int for_each_rotary_mixer(F&& f) {
    int changed = 0;
    const auto visit = [&](std::size_t, auto& block) {
      using Block = std::decay_t<decltype(block)>;
      if constexpr (Block::has_mixer && RotaryMixer<decltype(block.mixer)>) {
        if (block.mixer.uses_rope()) {
          f(block.mixer);
          ++changed;
        }
      }
    };
    for_each_block(visit);
    if constexpr (has_mtp) visit(static_cast<std::size_t>(D.n_layers), mtp.block);  // the MTP block follows the phases too
    return changed;
  }

  // "; A: <letter A's sizes>; M: ..." for each distinct letter, in pattern order.
  template <std::size_t... I>
  static void describe_letters(std::ostringstream& os, const std::string& letters, std::index_sequence<I...>) {
    ((letters.find(letters[I]) == I ? (os << "; " << letters[I] << ": " << block_factory<I>::describe(), 0) : 0), ...);
  }

  // Token ids from backend memory, checked against the vocabulary (one pass; the embedding's check).
  static BoundedIds<B> checked_tokens(const Tensor<std::int32_t, B>& input_ids) {
    return BoundedIds<B>::checked("embedding", input_ids, D.vocab, "token");
  }

  // x through every block; layer I's auxiliary losses are named "blocks.I.<...>".
  template <std::size_t... I>
  void forward_blocks(V& x, const DocumentLayout<B>& docs, AuxLosses<T, B>* aux, std::index_sequence<I...>) const {
    const auto one = [&](const auto& block, std::size_t layer) {
      if (!aux) return block.forward(x, docs);
      const typename AuxLosses<T, B>::Scope scope(*aux, "blocks." + std::to_string(layer));
      return block.forward(x, docs, *aux);
    };
    ((x = one(std::get<I>(blocks), I)), ...);
  }

  template <std::size_t... I>
  void init_blocks(Rng& rng, std::index_sequence<I...>) {
    ((std::get<I>(blocks) = block_factory<I>::make(rng)), ...);
  }
  template <std::size_t... I>
  Cache make_caches(index_t batch, index_t capacity, std::index_sequence<I...>) const {
    return Cache{std::get<I>(blocks).make_cache(batch, capacity)...};
  }
  template <std::size_t... I>
  void step_blocks(V& x, Cache& cache, const std::vector<bool>& new_document, std::index_sequence<I...>) const {
    ((x = std::get<I>(blocks).step(x, std::get<I>(cache), new_document)), ...);
  }
  template <class Visitor, std::size_t... I>
  void visit_blocks(Visitor& visit, const std::string& prefix, std::index_sequence<I...>) {
    (std::get<I>(blocks).for_each_param(visit, child_name(prefix, "blocks." + std::to_string(I))), ...);
  }
  template <class Visitor, std::size_t... I>
  void apply_blocks_state(Visitor& visit, const std::string& prefix, std::index_sequence<I...>) {
    (visit_state(std::get<I>(blocks), visit, child_name(prefix, "blocks." + std::to_string(I))), ...);
  }
  template <class F, std::size_t... I>
  void apply_blocks(F& f, std::index_sequence<I...>) {
    (f(I, std::get<I>(blocks)), ...);
  }
};

}  // namespace megacpp
