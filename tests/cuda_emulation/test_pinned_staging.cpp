// tests/cuda_emulation/test_pinned_staging.cpp: the pinned staging policy (detail/pinned_staging.cuh)
// over a stand-in runtime whose "GPU" runs the queued copies and event records only when the test
// says so (all of them, or the first k): a copy lands the bytes the caller had at the call even
// when the caller overwrites them at once; the event is recorded after the copy; a block whose copy
// has not run is never written again; blocks are reused once it has, the smallest free one that
// holds the copy, per device, so a loop of steps stops allocating after its first; completed blocks
// are freed to make room under the cap and by release(), blocks in flight never; the cap, the
// largest staged copy and a failed allocation refuse the copy (false, nothing queued); a failed
// event frees its block; a failed record retires its block.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/pinned_staging.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace {

using megacpp::cuda::kMinPinnedBlock;

// A stream of queued copies and event records, run in order by run_gpu(); host memory stands in for
// both the pinned blocks and the device.
struct FakeGpu {
  struct Work {
    void* dst = nullptr;
    const void* src = nullptr;
    std::size_t bytes = 0;
    int event = -1;  // a record when >= 0
  };
  std::vector<Work> queue;
  std::vector<bool> event_done;
  std::map<void*, std::unique_ptr<unsigned char[]>> pinned;
  int device = 0;
  bool fail_allocation = false, fail_event = false, fail_record = false;
  int failing_query = -1;  // the event whose query throws (cudaEventQuery reporting an earlier error)
  int freed = 0, destroyed = 0;

  // Runs the first `count` queued items (all by default), in order.
  void run_gpu(std::size_t count = SIZE_MAX) {
    const std::size_t n = std::min(count, queue.size());
    for (std::size_t i = 0; i < n; ++i) {
      const Work& w = queue[i];
      if (w.event >= 0) event_done[static_cast<std::size_t>(w.event)] = true;
      else std::memcpy(w.dst, w.src, w.bytes);
    }
    queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(n));
  }
};

struct FakeRuntime {
  using Event = int;
  FakeGpu* gpu;
  int device() const { return gpu->device; }
  void* allocate_pinned(std::size_t bytes) const {
    if (gpu->fail_allocation) return nullptr;
    auto block = std::make_unique<unsigned char[]>(bytes);
    void* p = block.get();
    gpu->pinned.emplace(p, std::move(block));
    return p;
  }
  void free_pinned(void* p) const {
    REQUIRE(gpu->pinned.erase(p) == 1);  // never freed twice
    ++gpu->freed;
  }
  Event make_event() const {
    if (gpu->fail_event) throw std::runtime_error("cudaEventCreateWithFlags failed (stand-in)");
    gpu->event_done.push_back(false);
    return static_cast<int>(gpu->event_done.size()) - 1;
  }
  void destroy_event(Event) const { ++gpu->destroyed; }
  bool completed(Event e) const {
    if (e == gpu->failing_query) throw std::runtime_error("cudaEventQuery failed (stand-in)");
    return gpu->event_done[static_cast<std::size_t>(e)];
  }
  void copy_async(void* dst, const void* pinned, std::size_t bytes) const {
    REQUIRE(gpu->pinned.count(const_cast<void*>(pinned)) == 1);  // only ever from a pinned block
    gpu->queue.push_back({dst, pinned, bytes, -1});
  }
  void record(Event e) const {
    if (gpu->fail_record) throw std::runtime_error("cudaEventRecord failed (stand-in)");
    gpu->event_done[static_cast<std::size_t>(e)] = false;  // re-recorded: pending again
    gpu->queue.push_back({nullptr, nullptr, 0, e});
  }
};

using Staging = megacpp::cuda::PinnedStaging<FakeRuntime>;

std::vector<unsigned char> bytes_of(std::size_t n, unsigned char salt) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i * 31 + salt);
  return v;
}

}  // namespace

TEST_CASE("pinned staging: block sizes are powers of two from 64 KiB", "[pinned_staging]") {
  CHECK(Staging::block_size(1) == kMinPinnedBlock);
  CHECK(Staging::block_size(63489) == kMinPinnedBlock);
  CHECK(Staging::block_size(kMinPinnedBlock) == kMinPinnedBlock);
  CHECK(Staging::block_size(kMinPinnedBlock + 1) == 2 * kMinPinnedBlock);
  CHECK(Staging::block_size(3 * kMinPinnedBlock) == 4 * kMinPinnedBlock);
  CHECK(Staging::block_size(megacpp::cuda::kMaxStagedCopy) == megacpp::cuda::kMaxStagedCopy);
}

TEST_CASE("pinned staging: the copy lands the caller's bytes as they were at the call", "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu});
  std::vector<unsigned char> src = bytes_of(100000, 7), dst(100000, 0);
  const std::vector<unsigned char> sent = src;
  REQUIRE(staging.upload(dst.data(), src.data(), src.size()));
  src.assign(src.size(), 0xEE);  // reused at once, before the GPU has copied anything
  CHECK(dst == std::vector<unsigned char>(100000, 0));  // queued, not done
  gpu.run_gpu();
  CHECK(dst == sent);
  CHECK(staging.blocks() == 1);
  CHECK(staging.pinned_bytes() == 2 * kMinPinnedBlock);
}

TEST_CASE("pinned staging: a block whose copy has not run is not reused; one whose copy has is", "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu});
  const std::vector<unsigned char> a = bytes_of(70000, 1), b = bytes_of(70000, 2), c = bytes_of(70000, 3);
  std::vector<unsigned char> da(70000), db(70000), dc(70000);
  REQUIRE(staging.upload(da.data(), a.data(), a.size()));
  REQUIRE(staging.upload(db.data(), b.data(), b.size()));  // a's copy is still queued: a second block
  CHECK(staging.blocks() == 2);
  gpu.run_gpu();
  CHECK(da == a);
  CHECK(db == b);
  REQUIRE(staging.upload(dc.data(), c.data(), c.size()));  // both done: no new block
  CHECK(staging.blocks() == 2);
  gpu.run_gpu();
  CHECK(dc == c);
}

TEST_CASE("pinned staging: a loop of steps stops allocating after its first step", "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu});
  const std::size_t sizes[] = {131072, 131072, 131072, 70000, 300000};  // ids, targets, mask, ...
  std::vector<std::vector<unsigned char>> dst;
  for (std::size_t s : sizes) dst.emplace_back(s);
  std::size_t after_first = 0;
  for (int step = 0; step < 50; ++step) {
    for (std::size_t i = 0; i < dst.size(); ++i) {
      const std::vector<unsigned char> src = bytes_of(sizes[i], static_cast<unsigned char>(step + i));
      REQUIRE(staging.upload(dst[i].data(), src.data(), src.size()));
    }
    gpu.run_gpu();  // the step ends with a read back: every copy before it has run
    for (std::size_t i = 0; i < dst.size(); ++i)
      CHECK(dst[i] == bytes_of(sizes[i], static_cast<unsigned char>(step + i)));
    if (step == 0) after_first = staging.pinned_bytes();
  }
  CHECK(staging.blocks() == 5);  // three 128 KiB, one 128 KiB (70,000 bytes), one 512 KiB
  CHECK(staging.pinned_bytes() == after_first);
  CHECK(after_first == 4 * 2 * kMinPinnedBlock + 8 * kMinPinnedBlock);
}

TEST_CASE("pinned staging: blocks are kept per device and per size", "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu});
  const std::vector<unsigned char> src = bytes_of(70000, 9), big = bytes_of(200000, 4);
  std::vector<unsigned char> d0(70000), d1(70000), d2(200000);
  REQUIRE(staging.upload(d0.data(), src.data(), src.size()));
  gpu.run_gpu();
  gpu.device = 1;  // device 0's free block is not used on device 1 (its event is device 0's)
  REQUIRE(staging.upload(d1.data(), src.data(), src.size()));
  CHECK(staging.blocks() == 2);
  REQUIRE(staging.upload(d2.data(), big.data(), big.size()));  // another size: another block
  CHECK(staging.blocks() == 3);
  gpu.run_gpu();
  CHECK(d1 == src);
  CHECK(d2 == big);
}

TEST_CASE("pinned staging: refused past the cap, above the largest staged copy and when allocation fails",
          "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu}, /*limit=*/3 * kMinPinnedBlock, /*max_copy=*/2 * kMinPinnedBlock);
  const std::vector<unsigned char> src = bytes_of(kMinPinnedBlock, 5);
  std::vector<unsigned char> d(kMinPinnedBlock);
  for (int i = 0; i < 3; ++i) REQUIRE(staging.upload(d.data(), src.data(), src.size()));
  const std::size_t queued = gpu.queue.size();
  CHECK_FALSE(staging.upload(d.data(), src.data(), src.size()));  // three blocks in flight fill the cap
  CHECK(gpu.queue.size() == queued);                              // nothing queued by the refusal
  CHECK(staging.pinned_bytes() == 3 * kMinPinnedBlock);
  gpu.run_gpu();
  CHECK(staging.upload(d.data(), src.data(), src.size()));  // a block is free again
  gpu.run_gpu();

  std::vector<unsigned char> large(2 * kMinPinnedBlock + 1), dl(large.size());
  CHECK_FALSE(staging.upload(dl.data(), large.data(), large.size()));  // above max_copy
  CHECK(gpu.queue.empty());

  FakeGpu failing;
  failing.fail_allocation = true;
  Staging no_memory(FakeRuntime{&failing});
  CHECK_FALSE(no_memory.upload(d.data(), src.data(), src.size()));
  CHECK(no_memory.pinned_bytes() == 0);
  CHECK(failing.queue.empty());
}

TEST_CASE("pinned staging: an event that cannot be made frees its block and throws", "[pinned_staging]") {
  FakeGpu gpu;
  gpu.fail_event = true;
  Staging staging(FakeRuntime{&gpu});
  const std::vector<unsigned char> src = bytes_of(70000, 1);
  std::vector<unsigned char> d(70000);
  CHECK_THROWS_AS(staging.upload(d.data(), src.data(), src.size()), std::runtime_error);
  CHECK(gpu.freed == 1);
  CHECK(gpu.pinned.empty());
  CHECK(staging.pinned_bytes() == 0);
  CHECK(staging.blocks() == 0);
  gpu.fail_event = false;
  REQUIRE(staging.upload(d.data(), src.data(), src.size()));  // usable afterwards
  gpu.run_gpu();
  CHECK(d == src);
}

TEST_CASE("pinned staging: the event is recorded after the copy, so a block is not reused before its copy ran",
          "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu});
  const std::vector<unsigned char> a = bytes_of(70000, 1), b = bytes_of(70000, 2);
  std::vector<unsigned char> da(70000), db(70000);
  REQUIRE(staging.upload(da.data(), a.data(), a.size()));
  REQUIRE(gpu.queue.size() == 2);
  CHECK(gpu.queue[0].event < 0);   // the copy first,
  CHECK(gpu.queue[1].event >= 0);  // then the record
  gpu.run_gpu(1);                  // the copy has run, the record not yet: the block is still busy
  REQUIRE(staging.upload(db.data(), b.data(), b.size()));
  CHECK(staging.blocks() == 2);
  gpu.run_gpu();
  CHECK(da == a);
  CHECK(db == b);
}

TEST_CASE("pinned staging: the smallest free block that holds the copy serves it", "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu});
  const std::vector<unsigned char> big = bytes_of(300000, 1), mid = bytes_of(100000, 2), small = bytes_of(70000, 3);
  std::vector<unsigned char> d1(300000), d2(100000), d3(70000);
  REQUIRE(staging.upload(d1.data(), big.data(), big.size()));   // a 512 KiB block
  REQUIRE(staging.upload(d2.data(), mid.data(), mid.size()));   // a 128 KiB block
  gpu.run_gpu();
  REQUIRE(staging.upload(d3.data(), small.data(), small.size()));  // takes the 128 KiB one
  REQUIRE(staging.upload(d2.data(), mid.data(), mid.size()));      // 128 KiB in flight: the 512 KiB one
  CHECK(staging.blocks() == 2);
  CHECK(staging.pinned_bytes() == 10 * kMinPinnedBlock);
  gpu.run_gpu();
  CHECK(d3 == small);
  CHECK(d2 == mid);
}

TEST_CASE("pinned staging: completed blocks are freed to make room under the cap, and by release(); busy ones never",
          "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu}, /*limit=*/4 * kMinPinnedBlock);
  const std::vector<unsigned char> small = bytes_of(kMinPinnedBlock, 1), large = bytes_of(3 * kMinPinnedBlock, 2);
  std::vector<unsigned char> d(kMinPinnedBlock), dl(3 * kMinPinnedBlock);
  for (int i = 0; i < 3; ++i) REQUIRE(staging.upload(d.data(), small.data(), small.size()));
  gpu.run_gpu(2);  // the first block's copy and record have run; the others are in flight
  // 3 x 64 KiB held, a 256 KiB block needed under a 256 KiB cap: the completed block is freed,
  // which is not enough room with two in flight, so the copy is refused.
  CHECK_FALSE(staging.upload(dl.data(), large.data(), large.size()));
  CHECK(gpu.freed == 1);
  CHECK(gpu.destroyed == 1);
  CHECK(staging.pinned_bytes() == 2 * kMinPinnedBlock);
  gpu.run_gpu();
  REQUIRE(staging.upload(dl.data(), large.data(), large.size()));  // both freed now: room
  CHECK(gpu.freed == 3);
  CHECK(staging.pinned_bytes() == 4 * kMinPinnedBlock);
  CHECK_FALSE(staging.upload(d.data(), small.data(), small.size()));  // no room, and nothing completed to free
  staging.release();  // the block is in flight: nothing freed
  CHECK(gpu.freed == 3);
  gpu.run_gpu();
  CHECK(dl == large);
  staging.release();
  CHECK(gpu.freed == 4);
  CHECK(staging.pinned_bytes() == 0);
  CHECK(staging.blocks() == 0);
}

TEST_CASE("pinned staging: a record that fails retires its block (its copy may be in flight)", "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu});
  const std::vector<unsigned char> src = bytes_of(70000, 4);
  std::vector<unsigned char> d(70000);
  gpu.fail_record = true;
  CHECK_THROWS_AS(staging.upload(d.data(), src.data(), src.size()), std::runtime_error);
  CHECK(staging.blocks() == 0);                            // never handed out again
  CHECK(staging.pinned_bytes() == 2 * kMinPinnedBlock);    // and still counted against the cap
  gpu.fail_record = false;
  gpu.run_gpu();
  REQUIRE(staging.upload(d.data(), src.data(), src.size()));  // a new block
  CHECK(staging.blocks() == 1);
  gpu.run_gpu();
  CHECK(d == src);
}

TEST_CASE("pinned staging: a query that throws while freeing leaves no freed block behind", "[pinned_staging]") {
  FakeGpu gpu;
  Staging staging(FakeRuntime{&gpu});
  const std::vector<unsigned char> src = bytes_of(kMinPinnedBlock, 5);
  std::vector<unsigned char> d(kMinPinnedBlock);
  // three blocks of one size (each upload while the others are in flight), events 0, 1, 2
  for (int i = 0; i < 3; ++i) REQUIRE(staging.upload(d.data(), src.data(), src.size()));
  REQUIRE(staging.blocks() == 3);
  gpu.run_gpu();
  gpu.failing_query = 1;  // block 0 is freed, then block 1's query throws
  CHECK_THROWS_AS(staging.release(), std::runtime_error);
  CHECK(gpu.freed == 1);
  REQUIRE(staging.blocks() == 2);  // the freed block left the list (else the upload below would reuse it)
  CHECK(staging.pinned_bytes() == 2 * kMinPinnedBlock);
  gpu.failing_query = -1;
  REQUIRE(staging.upload(d.data(), src.data(), src.size()));  // served by a live block (copy_async checks)
  gpu.run_gpu();
  CHECK(d == src);
  staging.release();  // frees the other two once each (free_pinned checks)
  CHECK(gpu.freed == 3);
  CHECK(staging.blocks() == 0);
  CHECK(staging.pinned_bytes() == 0);
}
