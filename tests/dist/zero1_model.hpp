// tests/dist/zero1_model.hpp: a Hybrid optimiser (Muon matrices, AdamW embedding, head, norm
// gains and biases) trained on gradients every rank shares, sharded (ZeRO-1) or not; shared by
// the in-process and the MPI tests of ZeRO-1.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "megacpp/megacpp.hpp"

namespace zero1_test {

using namespace megacpp;

struct Result {
  std::vector<float> params;       // every parameter, flattened, after the last step
  std::size_t state_bytes = 0;     // optimiser state this rank held
  std::size_t unsharded_bytes = 0; // optimiser state an unsharded optimiser holds
  std::vector<float> full_state;   // every state tensor after unshard(), flattened in name order
};

// Five matrices of different shapes (Muon: chunks with padding) and six AdamW parameters of
// different sizes (size-balanced owners), drawn from Rng(11), with their names and Roles.
struct Params {
  std::vector<Param<float, Cpu>> store;
  std::vector<std::pair<std::string, Role>> names;

  Params() {
    Rng rng(11);
    const std::vector<std::pair<index_t, index_t>> matrices{{32, 16}, {16, 48}, {24, 24}, {8, 40}, {40, 8}};
    for (std::size_t i = 0; i < matrices.size(); ++i) {
      store.push_back(Param<float, Cpu>::normal({matrices[i].first, matrices[i].second}, Role::matrix, rng, 0.5));
      names.emplace_back("m" + std::to_string(i), Role::matrix);
    }
    store.push_back(Param<float, Cpu>::normal({50, 16}, Role::embedding, rng, 0.5));
    names.emplace_back("embed", Role::embedding);
    store.push_back(Param<float, Cpu>::normal({16, 50}, Role::head, rng, 0.5));
    names.emplace_back("head", Role::head);
    for (index_t n : {16, 48, 24, 7}) {
      store.push_back(Param<float, Cpu>::normal({n}, Role::norm_gain, rng, 0.5));
      names.emplace_back("gain" + std::to_string(n), Role::norm_gain);
    }
  }

  // The (unsharded) Hybrid optimiser of these parameters.
  optim::Hybrid<float, Cpu> optimizer() {
    std::vector<optim::ParamRef<float, Cpu>> refs;
    for (std::size_t i = 0; i < store.size(); ++i) {
      optim::ParamRef<float, Cpu> r = optim::make_param_ref(names[i].first, store[i]);
      r.role = names[i].second;
      refs.push_back(r);
    }
    optim::HybridOptions options;
    options.muon.weight_decay = 0.01;
    options.adamw.weight_decay = 0.1;
    options.adamw.lr = 1e-2;
    return optim::Hybrid<float, Cpu>(refs, options);
  }

  // Step s of every run: gradients from Rng(700 + s) on every rank (as if all-reduced), lr scale
  // 1 - 0.1 s.
  template <class C>
  void step(optim::Hybrid<float, Cpu>& opt, C& comm, int s) {
    Rng grads(700 + static_cast<std::uint64_t>(s));
    for (auto& p : store) p.var.grad_buffer().assign(randn<float, Cpu>(p.shape(), grads, 1.0));
    opt.set_lr_scale(1.0 - 0.1 * s);
    opt.step(comm);
  }

  // Every parameter, flattened.
  std::vector<float> flat() const {
    std::vector<float> out;
    for (const auto& p : store)
      for (float v : p.value().to_host()) out.push_back(v);
    return out;
  }
};

// `steps` Hybrid steps over `comm` (sharded when `zero1`) of the Params above.
// After the steps, unshard() and the whole state are recorded.
template <class C>
Result train(C& comm, int steps, bool zero1) {
  Params params;
  optim::Hybrid<float, Cpu> opt = params.optimizer();
  if (zero1) opt.shard(comm.rank(), comm.size());
  for (int s = 0; s < steps; ++s) params.step(opt, comm, s);
  Result r;
  r.params = params.flat();
  r.state_bytes = opt.state_bytes();
  r.unsharded_bytes = opt.unsharded_state_bytes();
  opt.unshard(comm);
  for (const auto& [name, t] : optim::save_state(opt).tensors)
    for (float v : t.to_host()) r.full_state.push_back(v);
  return r;
}

}  // namespace zero1_test
