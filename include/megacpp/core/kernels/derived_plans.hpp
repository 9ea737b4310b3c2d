/// \file
/// megacpp/core/kernels/derived_plans.hpp: what a backend derives from one DocumentLayout (a work
/// list of document tiles, a scan's chunk table) and uploads, built on the first call that needs
/// it and reused by every later call on the same layout.
///
/// Why: a packed batch's layout is read by every layer, forward and backward, and a GPU kernel
/// wants its plan in device memory. Planning and uploading it per call costs a host loop and a
/// pageable host-to-device copy, which waits for all work queued before it: the host could not
/// run ahead of the GPU past any attention or scan call. Keyed by the plan's type and its sizes,
/// shared by every copy of the layout (the autograd graph keeps copies for the backward), freed
/// with the last copy. A layout is not edited after it is built (documents.hpp), so a plan never
/// goes stale.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <typeindex>
#include <typeinfo>
#include <utility>

#include "megacpp/core/config.hpp"

namespace megacpp::kernels {

/// Plans derived from one layout, each built once per (type, key).
class DerivedPlans {
 public:
  /// The sizes a plan depends on besides the layout (e.g. tile length), unused entries 0.
  using Key = std::array<index_t, 2>;

  /// The Plan stored under `key`, made by `make()` (returning std::shared_ptr<Plan>) on first use.
  /// Safe to call from several threads; the reference stays valid while this object lives.
  template <class Plan, class Make>
  const Plan& get(const Key& key, Make&& make) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<const void>& slot = plans_[{std::type_index(typeid(Plan)), key}];
    if (!slot) slot = std::shared_ptr<const Plan>(std::forward<Make>(make)());
    return *static_cast<const Plan*>(slot.get());
  }

  /// Plans built so far (for tests: a second call on the same layout builds none).
  std::size_t size() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return plans_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::type_index, Key>, std::shared_ptr<const void>> plans_;
};

}  // namespace megacpp::kernels
