/// \file
/// megacpp/core/error.hpp: the one exception type thrown at the API boundary.
///
/// Every check on user input throws megacpp::Error with the op's name and the offending values,
/// e.g. "matmul: inner dims differ: (4, 8) x (7, 2)". There are no assert-only checks on user
/// input: a release build validates exactly as a debug build does.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace megacpp {

/// The exception every check on user input throws: what() reads "op: what failed, with values".
class Error : public std::runtime_error {
 public:
  /// An error raised by `op`, with the message `what` (the offending values included).
  Error(std::string op, const std::string& what)
      : std::runtime_error(op + ": " + what), op_(std::move(op)) {}
  /// The op or component that rejected the input ("matmul", "cross_entropy", "Shape").
  const std::string& op() const noexcept { return op_; }

 private:
  std::string op_;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

/// Throws Error(op, parts...) where parts are streamed together: fail("matmul", "bad ", shape).
template <class... Parts>
[[noreturn]] void fail(const std::string& op, const Parts&... parts) {
  throw Error(op, detail::concat(parts...));
}

/// Checks a condition on user input; the message parts are only formatted on failure.
template <class... Parts>
void check(bool condition, const std::string& op, const Parts&... parts) {
  if (!condition) fail(op, parts...);
}

}  // namespace megacpp
