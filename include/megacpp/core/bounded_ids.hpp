/// \file
/// megacpp/core/bounded_ids.hpp: int32 ids in backend memory, each known to lie in [0, bound).
///
/// An op that gathers or scatters rows by id must know the ids are rows before it reads: a token
/// id >= vocab is bad input and gets an error naming it. Checking costs one pass over the ids
/// (B::minmax_index), and on CUDA a device-to-host copy of its two results, which waits for the
/// stream. Ids that a kernel wrote are valid by its contract's postcondition (the ExpertRouting
/// kernel's gate indices, sorted-row tokens and slot rows:
/// megacpp/core/kernels/expert_routing.hpp), and a MoE layer gathers by them three times per
/// forward. So the bound travels with the ids as a type, made in one of three ways:
///   - `checked`: ids from outside, in backend memory (one pass, as above);
///   - `from_host`: ids from outside, on the host, checked there before the upload (the host
///     copy is kept, so a consumer that needs the ids on the host reads none back);
///   - `by_contract`: a kernel's outputs, in range by its contract. Never for input.
/// The ops that take BoundedIds compare the bound, and that the ids' storage has not been written
/// since (Tensor::write_count, a host counter): no pass over the ids, no read back.
///
/// Builds without NDEBUG (Debug, the ASan preset: CPU only) check `by_contract` ids as `checked`
/// does, so the CPU tests verify the contract on every call; the CUDA kernels' outputs are compared
/// with the CPU's, exactly, by tests/cuda and tests/cuda_emulation.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "megacpp/core/error.hpp"
#include "megacpp/core/tensor.hpp"

namespace megacpp {

/// int32 ids in backend memory with a bound every id is known to be below (see the file comment).
template <Backend B>
class BoundedIds {
 public:
  /// No ids, bound 0.
  BoundedIds() = default;

  /// Checks every id against [0, bound) and throws naming `op`, `what` and the offending value.
  static BoundedIds checked(const char* op, Tensor<std::int32_t, B> ids, index_t bound, const char* what) {
    check_range(op, ids, bound, what);
    return BoundedIds(std::move(ids), bound);
  }

  /// Host ids checked on the host (naming the first one out of range and its position), then
  /// copied to the backend: no pass over backend memory and nothing read back.
  static BoundedIds from_host(const char* op, const Shape& shape, std::vector<std::int32_t> ids, index_t bound,
                              const char* what) {
    for (std::size_t i = 0; i < ids.size(); ++i)
      check(ids[i] >= 0 && ids[i] < bound, op, what, " id ", ids[i], " at [", i, "] is outside [0, ", bound, ")");
    BoundedIds out(Tensor<std::int32_t, B>::from_host(shape, ids), bound);
    out.host_ = std::make_shared<const std::vector<std::int32_t>>(std::move(ids));
    return out;
  }

  /// `what`, ids a kernel wrote in [0, bound) by its contract; not checked where NDEBUG is defined.
  /// Never for ids that came from outside the library: those take `checked` or `from_host`.
  static BoundedIds by_contract(Tensor<std::int32_t, B> ids, index_t bound, const char* what) {
#ifndef NDEBUG
    check_range("BoundedIds::by_contract", ids, bound, what);
#else
    (void)what;
#endif
    return BoundedIds(std::move(ids), bound);
  }

  /// The ids.
  const Tensor<std::int32_t, B>& ids() const { return ids_; }
  /// Every id is in [0, bound()).
  index_t bound() const { return bound_; }
  /// Number of ids.
  index_t numel() const { return ids_.numel(); }
  /// Backend pointer to the first id, read-only.
  const std::int32_t* data() const { return ids_.data(); }
  /// The host ids these were uploaded from (`from_host`), for a consumer that needs them on the
  /// host (MTP's rolled targets) without a read back; null for `checked` and `by_contract` ids.
  /// Valid while check_for passes (the backend copy not written since).
  const std::vector<std::int32_t>* host() const { return host_.get(); }

  /// Throws naming `op` unless the bound is at most `rows` and the ids' storage has not been
  /// written (through any copy of the tensor) since the bound was established.
  void check_for(const char* op, index_t rows, const char* what) const {
    check(bound_ <= rows, op, what, " ids bounded by ", bound_, " index ", rows, " rows");
    check(ids_.write_count() == writes_, op, what, " ids were written after their bound was checked: check them again");
  }

 private:
  BoundedIds(Tensor<std::int32_t, B> ids, index_t bound) : ids_(std::move(ids)), bound_(bound) {
    ids_.count_writes();
    writes_ = ids_.write_count();
  }

  static void check_range(const char* op, const Tensor<std::int32_t, B>& ids, index_t bound, const char* what) {
    if (ids.numel() == 0) return;
    const auto [lo, hi] = B::minmax_index(ids.numel(), ids.data());
    check(lo >= 0, op, what, " id ", lo, " is negative");
    check(hi < bound, op, what, " id ", hi, " >= ", bound);
  }

  Tensor<std::int32_t, B> ids_;
  index_t bound_ = 0;
  std::uint64_t writes_ = 0;  // the storage's write count when the bound was established
  std::shared_ptr<const std::vector<std::int32_t>> host_;  // from_host's ids (shared by copies)
};

}  // namespace megacpp
