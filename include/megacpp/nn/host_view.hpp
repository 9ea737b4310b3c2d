// megacpp/nn/host_view.hpp: what every decode step (attention KV cache, Mamba state) shares.
//
// Decode steps advance one token and update their caches in place on the host: HostView gives a
// host pointer to a cache tensor (its own memory on a host backend, else a copy written back when
// the view ends), and check_cache_shape names a cache made for another layer or batch.
#pragma once

#include <vector>

#include "megacpp/core/tensor.hpp"

namespace megacpp {

namespace detail {

// Host view of a tensor for an in-place update: the tensor's own memory when the backend's memory
// is host memory, else a copy written back when the view goes away.
template <class T, Backend B>
class HostView {
 public:
  explicit HostView(Tensor<T, B>& t) : tensor_(t) {
    if constexpr (B::host_accessible) data_ = t.data();
    else {
      copy_ = t.to_host();
      data_ = copy_.data();
    }
  }
  ~HostView() {
    if constexpr (!B::host_accessible) tensor_.assign(Tensor<T, B>::from_host(tensor_.shape(), copy_));
  }
  HostView(const HostView&) = delete;
  HostView& operator=(const HostView&) = delete;
  T* data() { return data_; }

 private:
  Tensor<T, B>& tensor_;
  std::vector<T> copy_;
  T* data_ = nullptr;
};

// Checks that a cache tensor has the shape this layer and batch need.
inline void check_cache_shape(const char* who, const char* field, const Shape& got, const Shape& want) {
  check(got == want, who, "cache.", field, " is ", got, " but this layer and batch need ", want,
        " (make the cache with the layer's make_cache)");
}

}  // namespace detail

}  // namespace megacpp
