// bench/attention/attention_problem.cuh: one fused-attention problem on the GPU for the CUDA
// benches (bench/attention, bench/train_step): random q, k, v and dO, the output buffers, and the
// forward and backward of FusedAttention<Cuda> on them.
#pragma once

#include "megacpp/backends/cuda.cuh"

namespace megacpp::bench {

struct CudaAttentionProblem {
  using Kernel = kernels::FusedAttention<Cuda>;
  DocumentLayout<Cuda> docs;
  Tensor<float, Cuda> q, k, v, grad_o, o, lse, dq, dk, dv;
  kernels::AttentionParams params;

  // q, o (batch, seq, heads, dim); k, v (batch, seq, kv_heads, dim); the documents' (batch, seq).
  CudaAttentionProblem(DocumentLayout<Cuda> layout, index_t heads, index_t kv_heads, index_t dim, std::uint64_t seed)
      : docs(std::move(layout)) {
    Rng rng(seed);
    const Shape qs{docs.batch, docs.seq, heads, dim}, ks{docs.batch, docs.seq, kv_heads, dim};
    q = randn<float, Cuda>(qs, rng);
    k = randn<float, Cuda>(ks, rng);
    v = randn<float, Cuda>(ks, rng);
    grad_o = randn<float, Cuda>(qs, rng);
    o = Tensor<float, Cuda>(qs);
    lse = Tensor<float, Cuda>(Shape{docs.batch, docs.seq, heads});
    dq = Tensor<float, Cuda>::zeros(qs);
    dk = Tensor<float, Cuda>::zeros(ks);
    dv = Tensor<float, Cuda>::zeros(ks);
    params = kernels::attention_params("bench", qs, ks, ks, docs, AttentionOptions{});
  }
  // As the op (flash_attention) calls them: the forward leaves its state for the backward
  // (kernels::AttentionSaved: the bf16 kernels' copies of q, k, v).
  void forward() {
    Kernel::forward<float>(params, docs, {q.data(), k.data(), v.data(), o.data(), lse.data(), &saved});
  }
  // Adds into dq, dk, dv (never cleared: the figures are times, not values).
  void backward() {
    Kernel::backward<float>(params, docs, {q.data(), k.data(), v.data(), o.data(), lse.data(), grad_o.data(), dq.data(),
                                           dk.data(), dv.data(), &saved});
  }

 private:
  kernels::AttentionSaved saved;
};

}  // namespace megacpp::bench
