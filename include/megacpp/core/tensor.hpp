/// \file
/// megacpp/core/tensor.hpp: Tensor<T, B>, owning reference-counted storage on backend B.
///
/// Element type and backend are compile-time; the shape is runtime. Tensors are always
/// contiguous and row-major: ops that permute axes copy (matmul takes transpose flags instead,
/// so the hot path never needs a transposed copy). Copies of a Tensor share storage; `clone()`
/// copies the data. `reshape` and `rows` are views on the same storage.
///
/// A storage can count the writes made to it (count_writes / write_count): every mutable access
/// (non-const data(), assign, fill) through any copy or view bumps the count, so a value derived
/// from the elements (a parameter's bf16 copy, autograd/var.hpp) knows when it is stale without
/// each writer having to say so: the counter is torch's tensor version counter, kept per storage.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/shape.hpp"

namespace megacpp {

namespace detail {

// One allocation of n elements on backend B, and the count of mutable accesses to it once
// counting is on. Counting is off until asked for, so a tensor nobody watches pays one relaxed
// load per mutable access; relaxed atomics because OpenMP threads may take data() of one storage
// at once, and the count only has to change, not order other memory.
template <class T, Backend B>
struct TensorStorage {
  TensorStorage(T* p, std::size_t count) : elements(p), n(count) {}
  ~TensorStorage() {
    if (elements) B::template deallocate<T>(elements, n);
  }
  TensorStorage(const TensorStorage&) = delete;
  TensorStorage& operator=(const TensorStorage&) = delete;

  void note_write() {
    if (counting.load(std::memory_order_relaxed)) writes.fetch_add(1, std::memory_order_relaxed);
  }

  T* elements;
  std::size_t n;
  std::atomic<bool> counting{false};
  std::atomic<std::uint64_t> writes{0};
};

}  // namespace detail

/// Owning, reference-counted, contiguous row-major storage of `T` on backend `B`, with a runtime
/// Shape. Copies share storage; clone() copies the data.
template <class T, Backend B>
class Tensor {
  static_assert(is_storage_type_v<T>,
                "megacpp_unsupported_element_type: Tensor holds float, double, bf16, f16, int32_t or uint8_t");

 public:
  using value_type = T;  ///< element type
  using backend_type = B;  ///< backend tag

  Tensor() = default;  ///< undefined: no storage; defined() is false
  /// Uninitialised storage for `shape`.
  explicit Tensor(Shape shape) : shape_(shape) {
    const auto n = static_cast<std::size_t>(shape_.numel());
    check(n <= SIZE_MAX / sizeof(T), "Tensor", "shape ", shape_, " of ", sizeof(T), "-byte elements needs more than 2^64 bytes");
    T* p = n ? B::template allocate<T>(n) : nullptr;
    try {
      storage_ = std::make_shared<detail::TensorStorage<T, B>>(p, n);
    } catch (...) {
      if (p) B::template deallocate<T>(p, n);
      throw;
    }
    data_ = p;
  }

  /// A tensor of zeros.
  static Tensor zeros(Shape shape) { return full(shape, T{}); }
  /// A tensor with every element equal to `value`.
  static Tensor full(Shape shape, T value) {
    Tensor t(shape);
    B::template fill<T>(t.data_, static_cast<std::size_t>(t.numel()), value);
    return t;
  }
  /// Copies host values; their count must equal the shape's number of elements.
  static Tensor from_host(Shape shape, std::span<const T> values) {
    check(static_cast<index_t>(values.size()) == shape.numel(), "Tensor::from_host", "shape ",
          shape, " needs ", shape.numel(), " values, got ", values.size());
    Tensor t(shape);
    // An empty tensor has no storage: memcpy(nullptr, nullptr, 0) is UB, so do not call it.
    if (!values.empty()) B::template copy_from_host<T>(t.data_, values.data(), values.size());
    return t;
  }
  /// Same, from a braced list: from_host({2, 2}, {1, 2, 3, 4}).
  static Tensor from_host(Shape shape, std::initializer_list<T> values) {
    return from_host(shape, std::span<const T>(values.begin(), values.size()));
  }
  /// A rank-0 tensor holding `value`.
  static Tensor scalar(T value) { return from_host(Shape{}, {value}); }

  /// The elements in row-major order, copied to the host.
  std::vector<T> to_host() const {
    std::vector<T> out(static_cast<std::size_t>(numel()));
    if (!out.empty()) B::template copy_to_host<T>(out.data(), data_, out.size());
    return out;
  }
  /// The single element of a one-element tensor.
  T item() const {
    check(defined() && numel() == 1, "Tensor::item", "needs exactly one element, shape is ", shape_);
    T v;
    B::template copy_to_host<T>(&v, data_, 1);
    return v;
  }

  /// False for a default-constructed Tensor (no storage).
  bool defined() const { return storage_.use_count() > 0; }
  /// True when no other Tensor (copy or view) shares this storage.
  bool sole_owner() const { return storage_.use_count() == 1; }
  /// The shape.
  const Shape& shape() const { return shape_; }
  /// Number of dims.
  int rank() const { return shape_.rank(); }
  /// Number of elements.
  index_t numel() const { return shape_.numel(); }
  /// Size of dim `axis` (negative axes count from the end).
  index_t size(int axis) const { return shape_[axis]; }
  /// Backend pointer to the first element (host memory for Cpu). Counts as a write to the
  /// storage (see count_writes): read through a const Tensor to leave the count alone.
  T* data() {
    note_write();
    return data_;
  }
  /// Same, read-only.
  const T* data() const { return data_; }

  /// Same storage, new shape with the same number of elements; one dim may be -1 (inferred).
  Tensor reshape(std::initializer_list<index_t> dims) const { return reshape(Shape(infer(dims))); }
  /// Same storage viewed as `shape` (same number of elements).
  Tensor reshape(const Shape& shape) const {
    check(shape.numel() == numel(), "reshape", "cannot view shape ", shape_, " (", numel(),
          " elements) as ", shape, " (", shape.numel(), " elements)");
    Tensor t = *this;
    t.shape_ = shape;
    return t;
  }
  /// View of rows [begin, end) of the first axis (no copy).
  Tensor rows(index_t begin, index_t end) const {
    check(rank() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "Tensor::rows",
          "range [", begin, ", ", end, ") invalid for shape ", shape_);
    Tensor t = *this;
    t.shape_.set(0, end - begin);
    t.data_ = data_ + begin * shape_.prod(1, rank());
    return t;
  }
  /// A copy of the data in new storage.
  Tensor clone() const {
    Tensor t(shape_);
    if (numel()) B::template copy<T>(t.data_, data_, static_cast<std::size_t>(numel()));
    return t;
  }
  /// Element type conversion (round to nearest even for bf16/f16).
  template <class U>
  Tensor<U, B> to() const {
    Tensor<U, B> t(shape_);
    if (numel()) B::template convert<T, U>(static_cast<std::size_t>(numel()), data_, t.data());
    return t;
  }
  /// Copies `src` (same shape) into this tensor's storage, which all views see.
  void assign(const Tensor& src) {
    check(src.shape() == shape_, "Tensor::assign", "shape ", src.shape(), " into ", shape_);
    note_write();
    if (numel() && src.data_ != data_) B::template copy<T>(data_, src.data_, static_cast<std::size_t>(numel()));
  }
  /// Sets every element to `value`.
  void fill(T value) {
    note_write();
    B::template fill<T>(data_, static_cast<std::size_t>(numel()), value);
  }
  /// Starts counting mutable accesses to this storage (idempotent; every copy and view shares
  /// the count). Const: counting changes no element.
  void count_writes() const {
    if (storage_) storage_->counting.store(true, std::memory_order_relaxed);
  }
  /// Mutable accesses (non-const data(), assign, fill, through any copy or view) since
  /// count_writes(): equal counts mean the elements were not written in between. 0 without storage.
  std::uint64_t write_count() const { return storage_ ? storage_->writes.load(std::memory_order_relaxed) : 0; }
  /// True when both tensors view the same first element (used to detect aliasing).
  bool same_data(const Tensor& other) const { return data_ == other.data_; }

 private:
  Shape infer(std::initializer_list<index_t> dims) const {
    Shape s;
    int unknown = -1;
    index_t known = 1;
    int i = 0;
    for (index_t d : dims) {
      if (d == -1) {
        check(unknown < 0, "reshape", "more than one -1 in target shape for ", shape_);
        unknown = i;
        s.push_back(1);
      } else {
        s.push_back(d);
        known *= d;
      }
      ++i;
    }
    if (unknown >= 0) {
      check(known > 0 && numel() % known == 0, "reshape", "cannot infer -1 viewing ", shape_);
      s.set(unknown, numel() / known);
    }
    return s;
  }

  void note_write() {
    if (storage_) storage_->note_write();
  }

  std::shared_ptr<detail::TensorStorage<T, B>> storage_;
  T* data_ = nullptr;
  Shape shape_;
};

}  // namespace megacpp
