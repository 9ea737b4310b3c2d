// megacpp/nn/attention/policies.hpp: compile-time options of the attention layer.
//
//   Attention<float, Cpu>                              softcap 50, scale 1/sqrt(D), no QK-norm
//   Attention<float, Cpu, NoSoftcap, Scale<12, 100>, QKNorm>   the modded-nanogpt variant (scale 0.12)
//
// Policies may come in any order; each kind (softcap, scale, QK-norm) at most once; anything
// else is a compile error that lists the valid policies. Defaults follow docs/recipe.md
// "Architecture floor": Gemma-2 softcap 50 on scores, no QK-norm.
#pragma once

#include <cmath>
#include <type_traits>

#include "megacpp/core/config.hpp"

namespace megacpp {

/// Tags naming the kind of an attention policy (one policy per kind).
namespace attention_policy {
struct softcap_kind {};  ///< Softcap<N> or NoSoftcap
struct scale_kind {};    ///< InvSqrtHeadDim or a fixed Scale (e.g. Scale<0.12>)
struct qk_norm_kind {};  ///< QKNorm or NoQKNorm
}  // namespace attention_policy

/// Gemma 2 soft-capping of scores, s = Cap * tanh(s / Cap), before the mask (default Cap = 50).
template <int Cap>
struct Softcap {
  static_assert(Cap > 0, "megacpp_softcap_must_be_positive: use NoSoftcap to turn score soft-capping off");
  using policy_kind = attention_policy::softcap_kind;  ///< policy kind tag
  static constexpr double cap = Cap;                   ///< the cap (0 would mean none)
};
/// No soft-capping of scores.
struct NoSoftcap {
  using policy_kind = attention_policy::softcap_kind;  ///< policy kind tag
  static constexpr double cap = 0.0;                   ///< 0: none
};

/// Scores scaled by 1 / sqrt(head_dim) (Vaswani et al. 2017), the default.
struct InvSqrtHeadDim {
  using policy_kind = attention_policy::scale_kind;  ///< policy kind tag
  /// The scale for heads of `head_dim` features.
  static double scale(index_t head_dim) { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }
};
/// A fixed score scale Num / Den, e.g. Scale<12, 100> = 0.12 (modded-nanogpt, with QK-norm).
/// A fraction of integers rather than a `double` template argument: GCC accepts floating-point
/// template arguments (C++20) but clang only from version 18, so Debian's clang 14 and 16 reject them.
template <long long Num, long long Den = 1>
struct Scale {
  static_assert(Num > 0 && Den > 0, "megacpp_attention_scale_must_be_positive: Scale<num, den> needs num, den > 0");
  using policy_kind = attention_policy::scale_kind;  ///< policy kind tag
  /// The scale, whatever the head dim.
  static double scale(index_t) { return static_cast<double>(Num) / static_cast<double>(Den); }
};

/// RMSNorm (no gain) of q and k over head_dim before RoPE (modded-nanogpt's QK-norm).
struct QKNorm {
  using policy_kind = attention_policy::qk_norm_kind;  ///< policy kind tag
  static constexpr bool enabled = true;                ///< q and k are normalised
};
/// No QK-norm (the default).
struct NoQKNorm {
  using policy_kind = attention_policy::qk_norm_kind;  ///< policy kind tag
  static constexpr bool enabled = false;               ///< q and k are used as projected
};

namespace detail {

/// True for the attention policy types of this header (they name a known policy_kind).
template <class P, class = void>
struct is_attention_policy : std::false_type {};
/// is_attention_policy for a type with a policy_kind member.
template <class P>
struct is_attention_policy<P, std::void_t<typename P::policy_kind>>
    : std::bool_constant<std::is_same_v<typename P::policy_kind, attention_policy::softcap_kind> ||
                         std::is_same_v<typename P::policy_kind, attention_policy::scale_kind> ||
                         std::is_same_v<typename P::policy_kind, attention_policy::qk_norm_kind>> {};

/// 1 when P is an attention policy of kind `Kind`, else 0.
template <class Kind, class P>
constexpr int policy_is_kind() {
  if constexpr (is_attention_policy<P>::value) return std::is_same_v<typename P::policy_kind, Kind> ? 1 : 0;
  else return 0;
}

/// The first policy of kind `Kind` among `Ps`, or `Default` when there is none.
template <class Kind, class Default, class... Ps>
struct pick_policy {
  using type = Default;  ///< no policy of this kind was given
};
/// Recursion step of pick_policy: P if it is of kind `Kind`, else the pick among the rest.
template <class Kind, class Default, class P, class... Ps>
struct pick_policy<Kind, Default, P, Ps...> {
  /// The picked policy.
  using type = std::conditional_t<policy_is_kind<Kind, P>() == 1, P, typename pick_policy<Kind, Default, Ps...>::type>;
};

/// Checks a policy list at compile time with messages that say how to fix it.
template <class... Ps>
constexpr bool check_attention_policies() {
  static_assert((is_attention_policy<Ps>::value && ...),
                "megacpp_unknown_attention_policy: attention policies are Softcap<N>, NoSoftcap, InvSqrtHeadDim, "
                "Scale<num, den>, QKNorm, NoQKNorm (megacpp/nn/attention/policies.hpp)");
  static_assert((policy_is_kind<attention_policy::softcap_kind, Ps>() + ... + 0) <= 1,
                "megacpp_attention_policy_given_twice: pass at most one of Softcap<N> / NoSoftcap");
  static_assert((policy_is_kind<attention_policy::scale_kind, Ps>() + ... + 0) <= 1,
                "megacpp_attention_policy_given_twice: pass at most one of InvSqrtHeadDim / Scale<value>");
  static_assert((policy_is_kind<attention_policy::qk_norm_kind, Ps>() + ... + 0) <= 1,
                "megacpp_attention_policy_given_twice: pass at most one of QKNorm / NoQKNorm");
  return true;
}

}  // namespace detail
}  // namespace megacpp
