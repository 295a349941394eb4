// HostPool: what it hands out is intact and separate, a request no free range fits is built from
// the free pages (resident, no new faults) so the pool maps at most the peak of its live bytes, and
// the control (freed ranges kept but never moved, a heap's behaviour) maps more on the same requests.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include <torch/torch.h>

#include "runtime/host_pool.h"

using namespace tandem;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Pages of [p, p + bytes) resident now.
size_t resident_pages(void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  REQUIRE(mincore(p, bytes, v.data()) == 0);
  return static_cast<size_t>(std::count_if(v.begin(), v.end(), [](unsigned char c) { return c & 1; }));
}

struct Block {
  char* p;
  size_t bytes;
  char tag;
};

// A GRPO-like request stream: every step allocates about the same bytes (a token budget) in blocks
// whose size changes with the step (as tensors change with the prompts' lengths), a few of which
// outlive it (a KV cache, the next step's inputs), and checks every live block still holds its own
// bytes. Returns the pool's stats after `steps` steps.
HostPoolStats churn(HostPool& pool, int steps) {
  std::mt19937 rng(7);
  std::vector<Block> live;
  for (int step = 0; step < steps; ++step) {
    const size_t block = (1 + rng() % 12) * kMiB + (rng() % 7) * 4096;
    std::vector<Block> now;
    for (size_t total = 0; total < 96 * kMiB; total += block) {
      char* p = static_cast<char*>(pool.allocate(block));
      REQUIRE(p != nullptr);
      const char tag = static_cast<char>('a' + (step + now.size()) % 26);
      std::memset(p, tag, block);
      now.push_back({p, block, tag});
    }
    for (const Block& b : live) REQUIRE(pool.deallocate(b.p));  // last step's survivors
    live.clear();
    for (const Block& b : now) {  // nobody else wrote into a live block (no overlap, no lost pages)
      INFO("step " << step << ", a block of " << b.bytes << " bytes");
      REQUIRE(b.p[0] == b.tag);
      REQUIRE(b.p[b.bytes / 2] == b.tag);
      REQUIRE(b.p[b.bytes - 1] == b.tag);
    }
    for (size_t i = 0; i < now.size(); ++i) {
      if (i % 4 == 1)
        live.push_back(now[i]);
      else
        REQUIRE(pool.deallocate(now[i].p));
    }
  }
  for (const Block& b : live) REQUIRE(pool.deallocate(b.p));
  return pool.stats();
}

}  // namespace

TEST_CASE("the host pool maps at most the peak of its live bytes; a heap that only reuses maps more", "[host_pool]") {
  HostPool pool;
  const HostPoolStats s = churn(pool, 40);
  INFO("peak live " << s.peak_live_bytes / kMiB << " MiB, peak mapped " << s.peak_mapped_bytes / kMiB << " MiB, moved "
                    << s.moved_bytes / kMiB << " MiB in " << s.moves << " calls, new " << s.fresh_bytes / kMiB
                    << " MiB");
  CHECK(s.live_bytes == 0);
  CHECK(s.peak_mapped_bytes <= s.peak_live_bytes);
  CHECK(s.fresh_bytes <= s.peak_live_bytes);  // nothing mapped twice
  CHECK(s.moves > 0);
  CHECK(s.failed_moves == 0);
  CHECK(s.free_bytes == s.peak_mapped_bytes);  // all of it back in the pool, resident

  // Control: the same requests with free ranges reused only where one fits.
  HostPool heap(/*stitch=*/false);
  const HostPoolStats h = churn(heap, 40);
  INFO("control: peak live " << h.peak_live_bytes / kMiB << " MiB, peak mapped " << h.peak_mapped_bytes / kMiB
                             << " MiB");
  CHECK(h.peak_live_bytes == s.peak_live_bytes);
  CHECK(h.peak_mapped_bytes > s.peak_live_bytes * 5 / 4);
  CHECK(h.moves == 0);
}

TEST_CASE("a block built from freed blocks is their resident pages, moved piece by piece", "[host_pool]") {
  HostPool pool;
  const size_t bytes = 8 * kMiB;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // One 24 MiB mapping split best-fit into a, keep, b in address order: a and b are not neighbours.
  REQUIRE(pool.deallocate(pool.allocate(3 * bytes)));
  char* a = static_cast<char*>(pool.allocate(bytes));
  char* keep = static_cast<char*>(pool.allocate(bytes));
  char* b = static_cast<char*>(pool.allocate(bytes));
  REQUIRE(keep == a + bytes);
  REQUIRE(b == keep + bytes);
  std::memset(a, 1, bytes);
  std::memset(b, 2, bytes);
  std::memset(keep, 3, bytes);
  REQUIRE(pool.deallocate(a));
  REQUIRE(pool.deallocate(b));
  const long before = minor_faults();
  char* big = static_cast<char*>(pool.allocate(2 * bytes));  // no free range holds 16 MiB
  CHECK(resident_pages(big, 2 * bytes) == 2 * bytes / page);
  std::memset(big, 4, 2 * bytes);
  const long faults = minor_faults() - before;
  HostPoolStats s = pool.stats();
  INFO("faults building and writing 16 MiB from freed pages: " << faults);
  CHECK(faults < static_cast<long>(2 * bytes / page / 10));
  CHECK(s.moved_bytes == static_cast<int64_t>(2 * bytes));
  CHECK(s.fresh_bytes == static_cast<int64_t>(3 * bytes));  // the first mapping; nothing for big
  CHECK(s.free_bytes == 0);
  CHECK(keep[0] == 3);
  CHECK(keep[bytes - 1] == 3);

  // big is two kernel mappings (pages moved from two places); moving it again into a larger
  // request takes one mremap per mapping: kernels before 6.17 refuse a call over both (EFAULT),
  // newer ones accept it, so the test counts the calls (a boundary left unrecorded makes them 2).
  REQUIRE(pool.deallocate(big));
  REQUIRE(pool.deallocate(keep));
  const int64_t moves = s.moves;
  char* all = static_cast<char*>(pool.allocate(3 * bytes));
  CHECK(resident_pages(all, 3 * bytes) == 3 * bytes / page);
  s = pool.stats();
  CHECK(s.failed_moves == 0);
  CHECK(s.moves - moves == 3);  // big's two pieces and keep: a lost boundary makes it 2
  CHECK(s.moved_bytes == static_cast<int64_t>(5 * bytes));
  CHECK(s.fresh_bytes == static_cast<int64_t>(3 * bytes));
  CHECK(pool.deallocate(all));
  int on_stack = 0;
  CHECK_FALSE(pool.deallocate(&on_stack));  // not the pool's: left alone
  CHECK(pool.release_free() == 3 * bytes);
  CHECK(pool.stats().free_bytes == 0);

  // Control: without moving, the same request is all new pages, faulted in as it is written.
  HostPool heap(/*stitch=*/false);
  char* c = static_cast<char*>(heap.allocate(bytes));
  char* d = static_cast<char*>(heap.allocate(bytes));
  std::memset(c, 1, bytes);
  std::memset(d, 2, bytes);
  REQUIRE(heap.deallocate(c));
  REQUIRE(heap.deallocate(d));
  const long before_heap = minor_faults();
  char* big2 = static_cast<char*>(heap.allocate(3 * bytes));
  madvise(big2, 3 * bytes, MADV_NOHUGEPAGE);  // 4 KiB faults also where transparent huge pages are always on
  std::memset(big2, 4, 3 * bytes);
  CHECK(minor_faults() - before_heap >= static_cast<long>(3 * bytes / page));
  CHECK(heap.deallocate(big2));
}

TEST_CASE("the process's CPU allocator takes tensors from kMinPooledBytes from the installed pool", "[host_pool]") {
  HostPool* pool = installed_host_pool();
  if (pool == nullptr) {
    WARN("no host pool in this process (TANDEM_HOST_POOL=0, TANDEM_KEEP_HOST_MEMORY=0 or a malloc setting)");
    return;
  }
  const int64_t live = pool->stats().live_bytes;
  {
    torch::Tensor big = torch::ones({static_cast<int64_t>(kMinPooledBytes / sizeof(float))});  // (65536,)
    torch::Tensor small = torch::ones({1000});                                                 // (1000,)
    CHECK(pool->stats().live_bytes == live + static_cast<int64_t>(kMinPooledBytes));
    CHECK(big.sum().item<float>() == static_cast<float>(kMinPooledBytes / sizeof(float)));
    CHECK(small.sum().item<float>() == 1000.0f);
  }
  CHECK(pool->stats().live_bytes == live);
}
