/// \file
/// megacpp/autograd/var.hpp: Var<T, B>, a tensor that records the ops applied to it.
///
/// Each Var shares one VarState: the value, the accumulated gradient, and (for op results) the
/// graph node that produced it. A node holds its inputs' states, so the loss keeps its whole graph
/// alive and nothing points back up: the graph has no cycles. Backward functions must capture
/// only inputs and saved tensors, never the result Var.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "megacpp/core/tensor.hpp"

namespace megacpp {

namespace detail {

struct Node;

// The part of a Var's state the backward engine sees, whatever T and B are.
struct VarStateBase {
  virtual ~VarStateBase() = default;
  virtual bool has_grad() const = 0;
  virtual void release_grad() = 0;
  virtual void seed_grad_ones() = 0;

  std::shared_ptr<Node> grad_fn;  // null for leaves and constants
  bool requires_grad = false;
  bool retains_grad = false;   // keep the gradient of a non-leaf after backward
  bool graph_freed = false;    // a backward already released this result's graph
  // Called by backward once this leaf's gradient is final for the pass (every node that feeds
  // it has run): data-parallel gradient buckets start their all-reduce from here.
  std::function<void()> grad_ready;
};

// A recorded op: computes its inputs' gradients from its output's gradient.
struct Node {
  virtual ~Node() = default;
  virtual void backward(VarStateBase& output) = 0;
  std::string_view name;
  std::vector<std::shared_ptr<VarStateBase>> inputs;  // the inputs that require a gradient
};

template <class T, Backend B>
struct VarState final : VarStateBase {
  explicit VarState(Tensor<T, B> v) : value(std::move(v)) {}
  bool has_grad() const override { return grad.defined(); }
  void release_grad() override { grad = Tensor<T, B>(); }
  void seed_grad_ones() override { grad = Tensor<T, B>::full(value.shape(), T(1)); }

  Tensor<T, B> value;
  Tensor<T, B> grad;  // undefined until a gradient flows here
  // value rounded to bf16, made by the first bf16 product that reads it (Var::value_as_bf16) or
  // by an optimizer's update (Var::update_value); for a leaf, the value's write count it is of
  Tensor<bf16, B> value_bf16;
  std::uint64_t value_bf16_writes = 0;
};

// The one way code outside Var reaches a Var's state: make_result (autograd/function.hpp) attaches
// the graph node to a new result. A friend class rather than a friend function template: clang 16
// does not match a constrained friend template declaration to make_result's definition and
// reports calls as ambiguous; a friend class means the same to every compiler.
struct VarAccess {
  template <class V>
  static auto& state(V& v) {
    return *v.state_;
  }
};

}  // namespace detail

/// A gradient accumulator as Var::grad_sink() hands it out: write with `beta` (0 on a new
/// buffer, 1 to add to an existing one).
template <class T>
struct GradSink {
  T* data;  ///< the accumulator's elements (backend memory)
  T beta;   ///< 0: overwrite every element (new buffer), 1: add
};

/// A tensor that records the ops applied to it: a handle (like shared_ptr) to one shared state
/// holding the value, the accumulated gradient and, for op results, the node that produced it.
/// T is float or double; bf16/f16 stay Tensor storage.
template <class T, Backend B>
class Var {
  static_assert(is_compute_type_v<T>,
                "megacpp_var_needs_float_or_double: keep bf16/f16 as Tensor storage and convert with .to<float>()");

 public:
  using value_type = T;  ///< element type (float or double)
  using backend_type = B;  ///< backend tag

  Var() = default;  ///< undefined: defined() is false
  /// A constant (requires_grad = false) or a leaf that collects gradients (requires_grad = true).
  explicit Var(Tensor<T, B> value, bool requires_grad = false)
      : state_(std::make_shared<detail::VarState<T, B>>(std::move(value))) {
    state_->requires_grad = requires_grad;
  }
  /// A leaf that collects gradients: Var(value, true).
  static Var parameter(Tensor<T, B> value) { return Var(std::move(value), true); }

  /// False for a default-constructed Var.
  bool defined() const { return state_ != nullptr; }
  /// The value.
  const Tensor<T, B>& value() const { return state_->value; }
  /// The value's storage, for in-place updates outside the graph (optimizer steps under NoGrad).
  /// Drops the bf16 copy: writes into the storage are counted anyway (value_as_bf16), but a
  /// caller may also assign a whole new Tensor here, whose storage has a count of its own.
  Tensor<T, B>& mutable_value() {
    state_->value_bf16 = Tensor<bf16, B>();
    return state_->value;
  }
  /// Updates a leaf's value in place through `update(T* value, bf16* rounded)`, which writes every
  /// element of the value and, when `rounded` is not null, each new element rounded to bf16 as
  /// convert rounds it (an optimizer step's update_in_place with its bf16 output). `rounded` is a
  /// new buffer when the leaf holds a bf16 copy (a mixed-precision product has read it), and it
  /// becomes the copy, current for the write the update made: the next product makes no cast
  /// (without it, one pass over every weight per step). Null when no copy is held: nothing reads one.
  /// Whoever still holds the old copy (a graph kept for a later backward) keeps it unchanged.
  template <class Update>
  void update_value(Update&& update) {
    detail::VarState<T, B>& s = *state_;
    const bool rounds = is_leaf() && s.value_bf16.defined();
    s.value_bf16 = Tensor<bf16, B>();  // released before its successor is allocated
    Tensor<bf16, B> rounded = rounds ? Tensor<bf16, B>(s.value.shape()) : Tensor<bf16, B>();
    update(s.value.data(), rounds ? rounded.data() : nullptr);
    if (!rounds) return;
    s.value_bf16 = std::move(rounded);
    s.value_bf16_writes = s.value.write_count();  // after the update's own write
  }
  /// True when a bf16 copy is held and current (value_as_bf16 would make no cast).
  bool bf16_copy_current() const {
    const detail::VarState<T, B>& s = *state_;
    return s.value_bf16.defined() && (!is_leaf() || s.value_bf16_writes == s.value.write_count());
  }
  /// The value rounded to bf16 (nearest even), the operand of mixed-precision products
  /// (autograd/precision.hpp). The copy is made once and kept with the value until the value
  /// changes:
  /// - an op result's value never changes, so the products that share an operand (an attention
  ///   layer's q, k and v projections of one normalised input) convert it once and hold one copy
  ///   for their backward;
  /// - a leaf (a parameter) changes in place: optimizer steps, checkpoint loads, the data-parallel
  ///   broadcast and plasticity resets write its storage. Its storage counts mutable accesses
  ///   (Tensor::count_writes), and the copy is remade when the count moved: at most one cast per
  ///   optimizer step however many micro-batches use it, as torch.autocast's weight cast cache
  ///   (none when the optimizer wrote the copy with the weight: update_value).
  /// The copy of a leaf outlives the step: half the weight's fp32 bytes, held until the next cast.
  Tensor<bf16, B> value_as_bf16() const {
    detail::VarState<T, B>& s = *state_;
    if (!is_leaf()) {
      if (!s.value_bf16.defined()) s.value_bf16 = s.value.template to<bf16>();
      return s.value_bf16;
    }
    s.value.count_writes();
    const std::uint64_t writes = s.value.write_count();
    if (!s.value_bf16.defined() || s.value_bf16_writes != writes) {
      s.value_bf16 = Tensor<bf16, B>();  // release the stale copy before making the new one
      s.value_bf16 = s.value.template to<bf16>();
      s.value_bf16_writes = writes;
    }
    return s.value_bf16;
  }
  /// The value's shape.
  const Shape& shape() const { return state_->value.shape(); }
  /// The value's number of dims.
  int rank() const { return state_->value.rank(); }
  /// The value's number of elements.
  index_t numel() const { return state_->value.numel(); }
  /// Size of dim `axis` of the value.
  index_t size(int axis) const { return state_->value.size(axis); }
  /// The single element of a one-element value (a loss).
  T item() const { return state_->value.item(); }

  /// True for leaves created with requires_grad and for results of ops on such Vars.
  bool requires_grad() const { return state_ && state_->requires_grad; }
  /// True unless an op produced this Var (parameters and constants are leaves).
  bool is_leaf() const { return !state_->grad_fn; }
  /// Accumulated gradient; undefined (`!grad().defined()`) until a backward reaches this Var.
  const Tensor<T, B>& grad() const { return state_->grad; }
  /// The gradient accumulator, created as zeros on first use. Backward functions add into it.
  /// A Var is a handle (like shared_ptr): const-ness of the handle does not freeze the state.
  Tensor<T, B>& grad_buffer() const {
    if (!state_->grad.defined()) state_->grad = Tensor<T, B>::zeros(shape());
    return state_->grad;
  }
  /// Where a backward function puts a gradient it computes for every element at once: the
  /// accumulator and the beta to apply to what it holds. A first contribution gets a new,
  /// uninitialised buffer and beta 0 (write every element, never read one); later ones get the
  /// existing buffer and beta 1 (add). This saves the zero-fill and the extra read that
  /// grad_buffer() costs a first contribution. Only for writers of the whole gradient.
  GradSink<T> grad_sink() const {
    if (state_->grad.defined()) return {state_->grad.data(), T(1)};
    state_->grad = Tensor<T, B>(shape());
    return {state_->grad.data(), T(0)};
  }
  /// Makes `g` (this Var's shape) the gradient without copying it, for a backward function whose
  /// first contribution is a tensor nothing else will use again; only when there is none yet.
  void take_grad(Tensor<T, B> g) const {
    check(!state_->grad.defined(), "Var::take_grad", "a gradient is already accumulated here");
    check(g.shape() == shape(), "Var::take_grad", "gradient shape ", g.shape(), " differs from value shape ", shape());
    state_->grad = std::move(g);
  }
  /// Forgets the accumulated gradient (the next backward starts from zero).
  void zero_grad() { state_->release_grad(); }
  /// Keep this non-leaf's gradient after backward (leaves always keep theirs).
  void retain_grad() { state_->retains_grad = true; }
  /// Calls `hook` during every backward pass as soon as this leaf's gradient for the pass is
  /// final (every op that contributes to it has run), before the pass continues below it; an
  /// empty function removes the hook. Data parallelism starts a gradient bucket's all-reduce
  /// from here (megacpp/dist/data_parallel.hpp). Leaves only; one hook per leaf.
  void on_grad_ready(std::function<void()> hook) {
    check(is_leaf(), "Var::on_grad_ready", "only leaves (parameters) take a gradient-ready hook");
    state_->grad_ready = std::move(hook);
  }
  /// Turns gradient collection of a leaf on or off (throws for op results).
  void set_requires_grad(bool on) {
    check(is_leaf(), "Var::set_requires_grad", "only leaves can change requires_grad");
    state_->requires_grad = on;
  }
  /// Same value (shared storage), no history.
  Var detach() const { return Var(state_->value, false); }

  /// The shared state as the backward engine sees it (for make_result and the engine).
  std::shared_ptr<detail::VarStateBase> state_base() const { return state_; }
  /// Identity of the underlying state (two Vars that are copies of each other compare equal).
  const void* id() const { return state_.get(); }

 private:
  friend struct detail::VarAccess;

  std::shared_ptr<detail::VarState<T, B>> state_;
};

}  // namespace megacpp
