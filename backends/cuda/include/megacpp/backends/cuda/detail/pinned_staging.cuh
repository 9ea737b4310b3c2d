// CUDA backend: host -> device copies too large for launches' parameters, through reused
// page-locked (pinned) host blocks, without a host wait. This header is the policy (which block a
// copy takes, when a block may be reused, how much pinned memory there may be), over a `Runtime`
// that makes the CUDA calls (memory.cuh gives it the real ones; the emulation tests a stand-in).
//
// A cudaMemcpy from pageable memory first waits for everything queued on the stream (CUDA Runtime
// API, "API synchronization behavior"); a cudaMemcpyAsync from page-locked memory is a DMA the
// stream orders like a kernel, and the call returns at once. The caller's buffer is first copied
// into a pinned block, so it may reuse its buffer on return, as after cudaMemcpy. The block is
// not written again until an event recorded after its copy has completed (cudaEventQuery: no wait),
// the rule PyTorch's CachingHostAllocator follows for pinned memory handed to a stream. A training
// loop uploads the same sizes every step, and the step before ended with a read back, so its blocks
// are free again: after the first step no block is allocated and no copy waits, as long as one
// step's uploads fit in the cap together (a step queues all of its micro-batches' before it reads).
//
// Blocks come in powers of two from kMinPinnedBlock and are kept per device (an event records on
// the device it was made on); a copy takes the smallest free block of its device that holds it.
// cudaFreeHost synchronizes the device (why PyTorch caches pinned blocks), so blocks are freed
// only to make room under the cap (the completed ones, each a counted wait) and by release()
// (Cuda::empty_cache). A copy that finds no room even then, or whose allocation fails, is
// refused (upload() returns false) and the caller takes the waiting pageable path instead.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace megacpp::cuda {

// A step's inputs (a micro-batch's ids, targets and loss mask: 4 MiB each at a million tokens) are
// staged; a larger copy (a checkpoint's weights, loaded once) waits instead of pinning a block of
// its size for the rest of the process.
inline constexpr std::size_t kMinPinnedBlock = std::size_t{1} << 16;       // 64 KiB
inline constexpr std::size_t kMaxStagedCopy = std::size_t{4} << 20;       // 4 MiB
inline constexpr std::size_t kPinnedStagingLimit = std::size_t{64} << 20;  // 64 MiB per process

// Runtime: `Event`; `int device()` (the current one); `void* allocate_pinned(std::size_t)`
// (nullptr on failure) and `void free_pinned(void*)`; `Event make_event()` (throws on failure) and
// `void destroy_event(Event)`;
// `bool completed(Event)` (never waits); `void copy_async(void* dst, const void* pinned,
// std::size_t bytes)` and `void record(Event)`, queued on the stream after the work before them.
template <class Runtime>
class PinnedStaging {
 public:
  using Event = typename Runtime::Event;

  explicit PinnedStaging(Runtime runtime, std::size_t limit = kPinnedStagingLimit, std::size_t max_copy = kMaxStagedCopy)
      : runtime_(std::move(runtime)), limit_(limit), max_copy_(max_copy) {}

  // The block size a copy of `bytes` takes: the power of two at or above it, at least kMinPinnedBlock.
  static std::size_t block_size(std::size_t bytes) {
    std::size_t size = kMinPinnedBlock;
    while (size < bytes) size *= 2;
    return size;
  }

  // Queues the copy of `bytes` from host `src` to device `dst` through a free pinned block and
  // returns true; `src` may be reused on return. False, with nothing queued, for a copy larger
  // than max_copy or when no block can be had within the cap (the caller copies another way).
  bool upload(void* dst, const void* src, std::size_t bytes) {
    if (bytes > max_copy_) return false;
    const std::lock_guard<std::mutex> lock(mutex_);  // a block is taken and its event recorded as one step
    const int device = runtime_.device();
    const auto [key, index] = free_block(device, block_size(bytes));
    if (index < 0) return false;
    Block& block = blocks_[key][static_cast<std::size_t>(index)];
    std::memcpy(block.host, src, bytes);
    runtime_.copy_async(dst, block.host, bytes);
    try {
      runtime_.record(block.copied);
    } catch (...) {
      // The copy may be in flight with no event after it: the block is never handed out again
      // (nor freed: its bytes stay counted against the cap).
      blocks_[key].erase(blocks_[key].begin() + index);
      throw;
    }
    block.queued = true;
    return true;
  }

  // Frees every block whose copy has completed (those in flight stay): each free waits for the device.
  void release() {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [key, list] : blocks_) free_completed(key, list);
  }

  std::size_t pinned_bytes() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return pinned_bytes_;
  }
  std::size_t blocks() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::size_t n = 0;
    for (const auto& [key, list] : blocks_) n += list.size();
    return n;
  }

 private:
  using Key = std::pair<int, std::size_t>;  // (device, block size)
  struct Block {
    void* host;
    Event copied;         // recorded after the last copy out of this block
    bool queued = false;  // a copy has been queued (before the first, `copied` was never recorded)
  };

  bool is_free(const Block& b) { return !b.queued || runtime_.completed(b.copied); }

  // The smallest free block of at least `size` on `device`; else a new block of `size` if the cap
  // allows, after freeing completed blocks to make room; else index -1.
  std::pair<Key, std::ptrdiff_t> free_block(int device, std::size_t size) {
    for (auto it = blocks_.lower_bound({device, size}); it != blocks_.end() && it->first.first == device; ++it)
      for (std::size_t i = 0; i < it->second.size(); ++i)
        if (is_free(it->second[i])) return {it->first, static_cast<std::ptrdiff_t>(i)};
    const Key key{device, size};
    if (size > limit_ - pinned_bytes_)
      for (auto& [other, list] : blocks_)
        if (size > limit_ - pinned_bytes_) free_completed(other, list);
    if (size > limit_ - pinned_bytes_) return {key, -1};
    void* host = runtime_.allocate_pinned(size);
    if (!host) return {key, -1};
    Event copied;
    try {
      copied = runtime_.make_event();
    } catch (...) {
      runtime_.free_pinned(host);
      throw;
    }
    pinned_bytes_ += size;
    std::vector<Block>& list = blocks_[key];
    list.push_back(Block{host, copied});
    return {key, static_cast<std::ptrdiff_t>(list.size() - 1)};
  }

  // Frees the blocks of `list` (blocks of size key.second) whose last copy has completed. Each
  // leaves the list before it is freed, so a query that throws (cudaEventQuery reporting an
  // earlier error) leaves no freed block behind to be handed out or freed again.
  void free_completed(const Key& key, std::vector<Block>& list) {
    for (std::size_t i = 0; i < list.size();) {
      if (!is_free(list[i])) {
        ++i;
        continue;
      }
      const Block b = list[i];
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      pinned_bytes_ -= key.second;
      runtime_.free_pinned(b.host);
      runtime_.destroy_event(b.copied);
    }
  }

  Runtime runtime_;
  std::size_t limit_, max_copy_;
  std::size_t pinned_bytes_ = 0;
  mutable std::mutex mutex_;
  std::map<Key, std::vector<Block>> blocks_;
};

}  // namespace megacpp::cuda
