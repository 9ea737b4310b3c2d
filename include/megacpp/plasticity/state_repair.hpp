// megacpp/plasticity/state_repair.hpp: clearing the optimiser state of exactly the rewritten rows.
//
// An intervention that rewrites a row and leaves the row's Muon momentum or AdamW moments in
// place is undone by the next step: the stale momentum still points where the old row was
// going (tests/plasticity shows it). Whole parameters (FIRE) go through Optimizer::reset_state;
// rows and columns (DASH's shrunk rows, ReDo's recycled units) through the functions here, which
// work on any optimiser through its state visitor (optim/state.hpp): every state tensor named
// "<kind>.<parameter name>" ("momentum_buffer.blocks.0.ffn.fc.weight", "exp_avg....",
// "exp_avg_sq....") with the parameter's shape has the chosen rows (or columns) zeroed, nothing
// else. Step counters stay: they belong to the whole parameter. A cleared AdamW row therefore
// restarts its moments at zero under the parameter's late bias correction, so its first update is
// (1 - beta1) / sqrt(1 - beta2) times a usual one (3.2 for 0.9 / 0.999, 0.45 for 0.9 / 0.95):
// a bounded kick, documented in docs/systems/plasticity.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "megacpp/optim/state.hpp"

namespace megacpp::plasticity {

namespace detail {
// Zeroes rows (by_rows) or columns of every state tensor of `name`; returns how many tensors.
template <optim::Optimizer O>
int clear_state_lines(O& opt, const std::string& name, const std::vector<index_t>& lines, bool by_rows, const char* op) {
  check(opt.owns(name), op, "no parameter named '", name, "' in this optimiser");
  int touched = 0;
  opt.for_each_state([&](const std::string& state_name, auto& item) {
    if constexpr (!std::is_same_v<std::decay_t<decltype(item)>, std::int64_t>) {
      const auto dot = state_name.find('.');
      if (dot == std::string::npos || std::string_view(state_name).substr(dot + 1) != name) return;
      const Shape& s = item.shape();
      check(by_rows ? s.rank() >= 1 : s.rank() == 2, op, "state '", state_name, "' has shape ", s,
            by_rows ? ": no rows to clear" : ": columns need a 2-D state");
      const index_t rows = s[0], cols = s.numel() / (rows ? rows : 1);
      const index_t limit = by_rows ? rows : cols;
      for (index_t l : lines) check(l >= 0 && l < limit, op, "line ", l, " is out of range for state '", state_name, "' ", s);
      if (lines.empty()) return;
      std::vector<typename std::decay_t<decltype(item)>::value_type> h = item.to_host();
      for (index_t l : lines) {
        if (by_rows)
          for (index_t j = 0; j < cols; ++j) h[static_cast<std::size_t>(l * cols + j)] = {};
        else
          for (index_t i = 0; i < rows; ++i) h[static_cast<std::size_t>(i * cols + l)] = {};
      }
      item.assign(std::decay_t<decltype(item)>::from_host(s, h));
      ++touched;
    }
  });
  return touched;
}
}  // namespace detail

/// Zeroes rows `rows` (dim 0) of every state tensor of parameter `name` (Muon momentum, AdamW
/// exp_avg and exp_avg_sq), nothing else. Returns the number of state tensors changed. Throws for
/// a name the optimiser does not own or a row outside a state tensor.
template <optim::Optimizer O>
int clear_state_rows(O& opt, const std::string& name, const std::vector<index_t>& rows) {
  return detail::clear_state_lines(opt, name, rows, true, "clear_state_rows");
}

/// Zeroes columns `cols` (dim 1) of every 2-D state tensor of parameter `name`, as clear_state_rows.
template <optim::Optimizer O>
int clear_state_cols(O& opt, const std::string& name, const std::vector<index_t>& cols) {
  return detail::clear_state_lines(opt, name, cols, false, "clear_state_cols");
}

}  // namespace megacpp::plasticity
