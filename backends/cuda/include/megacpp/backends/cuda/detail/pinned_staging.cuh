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
// are free again: after the first step no block is allocated and no copy waits.
//
// Blocks come in powers of two from kMinPinnedBlock, are kept per device (an event records on the
// device it was made on) and never returned (cudaFreeHost waits for the device). Their total is
// capped: a copy that would take a new block past the cap, or whose allocation fails, is refused
// (upload() returns false) and the caller takes the waiting pageable path instead.
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
// (nullptr on failure) and `void free_pinned(void*)`; `Event make_event()` (throws on failure);
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
    Block* block = free_block(runtime_.device(), block_size(bytes));
    if (!block) return false;
    std::memcpy(block->host, src, bytes);
    runtime_.copy_async(dst, block->host, bytes);
    runtime_.record(block->copied);
    block->queued = true;
    return true;
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
  Runtime& runtime() { return runtime_; }

 private:
  struct Block {
    void* host;
    Event copied;         // recorded after the last copy out of this block
    bool queued = false;  // a copy has been queued (before the first, `copied` was never recorded)
  };

  // A block of `size` on `device` whose last copy has completed, a new one if the cap allows, or null.
  Block* free_block(int device, std::size_t size) {
    std::vector<Block>& list = blocks_[{device, size}];
    for (Block& b : list)
      if (!b.queued || runtime_.completed(b.copied)) return &b;
    if (size > limit_ - pinned_bytes_) return nullptr;
    void* host = runtime_.allocate_pinned(size);
    if (!host) return nullptr;
    Event copied;
    try {
      copied = runtime_.make_event();
    } catch (...) {
      runtime_.free_pinned(host);
      throw;
    }
    pinned_bytes_ += size;
    list.push_back(Block{host, copied});
    return &list.back();
  }

  Runtime runtime_;
  std::size_t limit_, max_copy_;
  std::size_t pinned_bytes_ = 0;
  mutable std::mutex mutex_;
  std::map<std::pair<int, std::size_t>, std::vector<Block>> blocks_;  // (device, size) -> blocks
};

}  // namespace megacpp::cuda
