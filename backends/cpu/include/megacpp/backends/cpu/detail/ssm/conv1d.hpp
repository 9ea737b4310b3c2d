// CPU kernels of the CausalConv1d contract (megacpp/core/kernels/causal_conv1d.hpp, which holds
// the equation and the tap rule): Mamba-2's depthwise causal conv1d that never reads across
// documents. x, y channel-last (batch, seq, channels); w (channels, K).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <cstdint>
#include <vector>

#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/kernels/causal_conv1d.hpp"

namespace megacpp::cpu::conv {

// valid[j] = whether tap j of token t reads a token of t's document (kernels::tap_reads_document,
// the first such tap found once).
inline void valid_taps(const std::int32_t* row_ids, index_t t, index_t width, bool* valid) {
  const index_t first = kernels::first_tap_in_document(row_ids, t, width);
  for (index_t j = 0; j < width; ++j) valid[j] = j >= first;
}

template <class T>
void causal_conv1d_forward(index_t batch, index_t seq, index_t channels, index_t width, const std::int32_t* doc_ids,
                           const T* x, const T* w, const T* bias, T* y) {
  // (K, channels) copy of the weight so the inner loop runs over contiguous channels.
  std::vector<T> wt(static_cast<std::size_t>(width * channels));
  for (index_t c = 0; c < channels; ++c)
    for (index_t j = 0; j < width; ++j) wt[j * channels + c] = w[c * width + j];
  parallel_for(batch * seq, channels * width * 2, [&](index_t bt) {
    const index_t b = bt / seq, t = bt % seq;
    bool valid[kMaxConv1dWidth];
    valid_taps(doc_ids + b * seq, t, width, valid);
    T* yr = y + bt * channels;
    for (index_t c = 0; c < channels; ++c) yr[c] = bias ? bias[c] : T(0);
    for (index_t j = 0; j < width; ++j) {
      if (!valid[j]) continue;
      const T* xr = x + (bt - (width - 1) + j) * channels;
      const T* wj = wt.data() + j * channels;
      for (index_t c = 0; c < channels; ++c) yr[c] += wj[c] * xr[c];
    }
  });
}

// Backward (each output may be null; all accumulate):
//   dx[b, s, c]  += sum_j [tap j of t = s + K - 1 - j is valid] w[c, j] dy[b, t, c]
//   dw[c, j]     += sum_{b, t: tap j valid} dy[b, t, c] x[b, t - (K - 1) + j, c]
//   dbias[c]     += sum_{b, t} dy[b, t, c]
// dx is owned by token; dw and dbias by channel block, summed over tokens in order.
template <class T>
void causal_conv1d_backward(index_t batch, index_t seq, index_t channels, index_t width, const std::int32_t* doc_ids,
                            const T* x, const T* w, const T* dy, T* dx, T* dw, T* dbias) {
  if (dx) {
    std::vector<T> wt(static_cast<std::size_t>(width * channels));
    for (index_t c = 0; c < channels; ++c)
      for (index_t j = 0; j < width; ++j) wt[j * channels + c] = w[c * width + j];
    parallel_for(batch * seq, channels * width * 2, [&](index_t bs) {
      const index_t b = bs / seq, s = bs % seq;
      const std::int32_t* ids = doc_ids + b * seq;
      T* dxr = dx + bs * channels;
      const index_t last = kernels::last_output_reading(ids, s, width, seq);
      for (index_t j = width - 1; j >= 0; --j) {
        const index_t t = s + (width - 1) - j;  // the output whose tap j reads token s
        if (t > last) break;
        const T* g = dy + (b * seq + t) * channels;
        const T* wj = wt.data() + j * channels;
        for (index_t c = 0; c < channels; ++c) dxr[c] += wj[c] * g[c];
      }
    });
  }
  if (!dw && !dbias) return;
  constexpr index_t kBlock = 64;
  const index_t blocks = (channels + kBlock - 1) / kBlock;
  parallel_for(blocks, batch * seq * kBlock * width, [&](index_t blk) {
    const index_t c0 = blk * kBlock, cw = std::min(kBlock, channels - c0);
    std::vector<T> acc_w(static_cast<std::size_t>(width * kBlock), T(0)), acc_b(static_cast<std::size_t>(kBlock), T(0));
    bool valid[kMaxConv1dWidth];
    for (index_t bt = 0; bt < batch * seq; ++bt) {
      const index_t b = bt / seq, t = bt % seq;
      const T* g = dy + bt * channels + c0;
      for (index_t c = 0; c < cw; ++c) acc_b[c] += g[c];
      valid_taps(doc_ids + b * seq, t, width, valid);
      for (index_t j = 0; j < width; ++j) {
        if (!valid[j]) continue;
        const T* xr = x + (bt - (width - 1) + j) * channels + c0;
        for (index_t c = 0; c < cw; ++c) acc_w[j * kBlock + c] += g[c] * xr[c];
      }
    }
    for (index_t c = 0; c < cw; ++c) {
      if (dbias) dbias[c0 + c] += acc_b[c];
      if (dw)
        for (index_t j = 0; j < width; ++j) dw[(c0 + c) * width + j] += acc_w[j * kBlock + c];
    }
  });
}

}  // namespace megacpp::cpu::conv
