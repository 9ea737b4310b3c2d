// tests/dist/dp_model.hpp: a small two-layer network, its data and a training loop, shared by the
// in-process and the MPI tests of data parallelism. train() runs `steps` optimizer steps of
// `accumulation` micro-batches of `micro` rows each, rank `rank` of `world` taking the rows
// [((step * world + rank) * accumulation + a) * micro, + micro) of a fixed data set, so that world 2 x
// accumulation 1 and world 1 x accumulation 2 see the same rows in every step.
#pragma once

#include <cstdint>
#include <vector>

#include "megacpp/megacpp.hpp"
#include "megacpp/dist/data_parallel.hpp"

namespace dp_test {

using namespace megacpp;
using V = Var<float, Cpu>;

constexpr index_t kIn = 24, kHidden = 48, kClasses = 10;

struct Net {
  V w1, w2, bias;
  explicit Net(std::uint64_t seed) {
    Rng rng(seed);
    w1 = V::parameter(randn<float, Cpu>(Shape{kIn, kHidden}, rng, 0.2));
    w2 = V::parameter(randn<float, Cpu>(Shape{kHidden, kClasses}, rng, 0.2));
    bias = V::parameter(randn<float, Cpu>(Shape{kClasses}, rng, 0.1));
  }
  std::vector<V> params() const { return {w1, w2, bias}; }
  V loss(const Tensor<float, Cpu>& x, const Tensor<std::int32_t, Cpu>& y) const {
    return cross_entropy(matmul(tanh(matmul(V(x), w1)), w2) + bias, y);
  }
};

// Row block `block` (micro rows) of a deterministic data set.
inline std::pair<Tensor<float, Cpu>, Tensor<std::int32_t, Cpu>> batch(index_t block, index_t micro) {
  Rng rng(1000 + static_cast<std::uint64_t>(block));
  auto x = randn<float, Cpu>(Shape{micro, kIn}, rng, 1.0);
  std::vector<std::int32_t> y(static_cast<std::size_t>(micro));
  for (index_t i = 0; i < micro; ++i) y[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((block * 7 + i * 3) % kClasses);
  return {std::move(x), Tensor<std::int32_t, Cpu>::from_host(Shape{micro}, std::span<const std::int32_t>(y))};
}

struct Result {
  std::vector<double> losses;  // per step: the mean over the global batch (averaged over ranks)
  std::vector<float> params;   // every parameter, flattened, after the last step
  int clipped = 0;             // steps whose gradients the global-norm clip scaled
};

// How the optimiser state and the gradients are spread over the ranks.
enum class Zero {
  off,             // replicated AdamW, gradients all-reduced
  state,           // ZeRO-1 moments, gradients still all-reduced (every rank gets all of them)
  reduce_scatter,  // ZeRO-1 moments, each gradient reduce-scattered to its owner; the clip's sharded form
};

// Trains Net(seed) with AdamW (its moments sharded over the ranks unless Zero::off) and a
// global-norm clip at 0.3 (below the first steps' norms, so it scales); the initial values of
// ranks other than 0 are perturbed so that the broadcast of rank 0's parameters is tested too.
template <class C>
Result train(C& comm, int steps, index_t accumulation, index_t micro, std::size_t bucket_bytes, Zero zero = Zero::off) {
  const int world = comm.size(), rank = comm.rank();
  Net net(7 + static_cast<std::uint64_t>(rank));
  const std::vector<optim::ParamRef<float, Cpu>> refs{optim::ParamRef<float, Cpu>{"w1", net.w1, Role::matrix, {}},
                                                      optim::ParamRef<float, Cpu>{"w2", net.w2, Role::matrix, {}},
                                                      optim::ParamRef<float, Cpu>{"bias", net.bias, Role::bias, {}}};
  optim::AdamW<float, Cpu> opt(refs, {.lr = 1e-2});
  if (zero != Zero::off) opt.shard(rank, world);
  std::vector<int> owners;
  if (zero == Zero::reduce_scatter)
    for (const auto& p : refs) owners.push_back(opt.owner(p.name));
  dist::DataParallel<float, Cpu, C> dp(comm, net.params(), dist::DataParallelOptions{bucket_bytes, owners});
  dp.broadcast_parameters();
  Result r;
  for (int step = 0; step < steps; ++step) {
    double loss = 0;
    for (index_t a = 0; a < accumulation; ++a) {
      dp.set_sync(a + 1 == accumulation);
      const auto [x, y] = batch((static_cast<index_t>(step) * world + rank) * accumulation + a, micro);
      V l = net.loss(x, y);
      loss += l.item() / static_cast<double>(accumulation);
      backward(accumulation > 1 ? scale(l, 1.0 / static_cast<double>(accumulation)) : l);
    }
    dp.finish();
    const optim::ClipResult clip = owners.empty() ? optim::clip_grad_norm(refs, 0.3) : optim::clip_grad_norm(refs, comm, owners, 0.3);
    r.clipped += clip.clipped;
    comm.template all_reduce<double, Cpu>(&loss, 1, dist::ReduceOp::avg);
    r.losses.push_back(loss);
    opt.step(comm);
    opt.zero_grad();
  }
  for (const V& p : net.params())
    for (float v : p.value().to_host()) r.params.push_back(v);
  return r;
}

}  // namespace dp_test
