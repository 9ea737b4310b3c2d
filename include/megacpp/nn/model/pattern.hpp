// megacpp/nn/model/pattern.hpp: block patterns as compile-time strings, and the letter table.
//
// Hybrid patterns (docs/architecture.md "Model composition"): A (attention), M (Mamba), E (MoE
// expert MLP), R (recurrent tail); a pattern such as "AAM" repeats over the layers.
// Letters<Letter<'A', L>, ...> maps each letter to a block recipe L carrying that letter's own
// sizes (megacpp/nn/model/letters.hpp has the library's; docs/extending.md writes one); a letter
// with no entry is a compile error naming the letter.
#pragma once

#include <concepts>
#include <cstddef>
#include <string>

#include "megacpp/core/random.hpp"
#include "megacpp/nn/model/dims.hpp"

namespace megacpp {

/// A string literal usable as a template argument: Pattern<"AAM">.
template <std::size_t N>
struct FixedString {
  char chars[N]{};  ///< the characters, NUL-terminated
  /// Copies a string literal.
  constexpr FixedString(const char (&s)[N]) {
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
  /// Length without the terminating NUL.
  constexpr std::size_t size() const { return N - 1; }
  /// Character i.
  constexpr char operator[](std::size_t i) const { return chars[i]; }
};

/// The sequence of block letters, repeated over the layers.
template <FixedString S>
struct Pattern {
  static_assert(S.size() > 0, "megacpp_empty_pattern: a Pattern needs at least one letter, e.g. Pattern<\"AAM\">");
  static constexpr std::size_t size = S.size();  ///< letters before the pattern repeats
  /// The letter of layer i (the pattern repeats).
  static constexpr char letter(std::size_t layer) { return S[layer % S.size()]; }
  /// The pattern as a C string.
  static constexpr const char* c_str() { return S.chars; }
};

/// What a letter's block recipe L provides for element type T, backend B and shared sizes D:
/// `L::factory<T, B, D>` with `type` (the block type), `make(rng)` (one block, initialised from
/// rng) and `describe()` (its sizes in words, part of the model's type id).
template <class Factory>
concept BlockFactory = requires(Rng& rng) {
  typename Factory::type;
  { Factory::make(rng) } -> std::same_as<typename Factory::type>;
  { Factory::describe() } -> std::convertible_to<std::string>;
};

/// Maps pattern letter C to a block recipe L (see BlockFactory).
template <char C, class L>
struct Letter {
  static constexpr char letter = C;  ///< the pattern letter
  /// The factory for element type T, backend B and shared sizes D.
  template <class T, class B, Dims D>
  using factory = typename L::template factory<T, B, D>;
};

/// The letter table of a model family.
template <class... Ls>
struct Letters {
  /// True when the table has an entry for letter c.
  static constexpr bool has(char c) { return ((Ls::letter == c) || ...); }
};

namespace detail {
template <char C, class... Ls>
struct find_letter;
template <char C, class L, class... Rest>
struct find_letter<C, L, Rest...> {
  using type = std::conditional_t<L::letter == C, L, typename find_letter<C, Rest...>::type>;
};
// What an unknown letter resolves to after its static_assert: a placeholder recipe that meets
// BlockFactory, so the one message is not followed by a cascade of errors about `void`.
struct UnknownLetter {
  template <class T, class B, Dims D>
  struct factory {
    struct type {
      using cache_type = int;
    };
    static type make(Rng&) { return {}; }
    static std::string describe() { return "unknown letter"; }
  };
};
template <char C>
struct find_letter<C> {
  using type = Letter<C, UnknownLetter>;
};

template <char C, class LettersT>
struct letter_entry;
template <char C, class... Ls>
struct letter_entry<C, Letters<Ls...>> {
  static_assert(Letters<Ls...>::has(C),
                "megacpp_unknown_pattern_letter: a pattern letter has no block type in this Letters<...> table "
                "(the recipe's table has A = attention, M = Mamba-3 and R = M2RNN; add Letter<'X', YourBlock> for another, "
                "see docs/extending.md)");
  using type = typename find_letter<C, Ls...>::type;
};
}  // namespace detail

}  // namespace megacpp
