// See host_pool.h. Free ranges are kept coalesced by address (a request is served best-fit from one)
// and by size; a request none can hold gets a new address range that the largest free ranges are
// moved into, biggest first, until it is covered or the pool is empty. The pool's mapped bytes grow
// only when it is empty after such a move, when they equal the live bytes: hence at most their peak.
#include "runtime/host_pool.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace tandem {

namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

#if defined(__linux__)
// After a failed mremap into [dst, dst + len): the kernel may have unmapped the destination before
// it failed. Map a hole there again, but never over what another thread may have mapped into it
// since (MAP_FIXED_NOREPLACE); a range neither fully ours nor a hole cannot be recovered.
void restore_destination(uintptr_t dst, size_t len) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((len + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(dst), len, resident.data()) == 0) return;  // still mapped: ours
  void* again = mmap(reinterpret_cast<void*>(dst), len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (again == reinterpret_cast<void*>(dst)) return;
  std::fprintf(stderr,
               "host memory: a failed mremap left %zu bytes of a pool block unmapped and they cannot be mapped "
               "again (%s); run with TANDEM_HOST_POOL=0\n",
               len, again == MAP_FAILED ? std::strerror(errno) : "placed elsewhere");
  std::abort();
}
#endif

}  // namespace

HostPool::HostPool(bool stitch, size_t max_pieces) : stitch_(stitch), max_pieces_(max_pieces) {}

HostPool::~HostPool() { release_free(); }

void HostPool::add_free(uintptr_t addr, size_t len) {
  auto next = free_by_addr_.lower_bound(addr);
  if (next != free_by_addr_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == addr) {
      addr = prev->first;
      len += prev->second;
      free_by_size_.erase({prev->second, prev->first});
      free_by_addr_.erase(prev);
    }
  }
  if (next != free_by_addr_.end() && addr + len == next->first) {
    len += next->second;
    free_by_size_.erase({next->second, next->first});
    free_by_addr_.erase(next);
  }
  free_by_addr_[addr] = len;
  free_by_size_.insert({len, addr});
}

void HostPool::remove_free(uintptr_t addr, size_t len) {
  free_by_addr_.erase(addr);
  free_by_size_.erase({len, addr});
}

void HostPool::take_front(uintptr_t addr, size_t len, size_t take) {
  remove_free(addr, len);
  // The remainder needs no coalescing: its left neighbour is what was taken, its right one was not free.
  if (len > take) {
    free_by_addr_[addr + take] = len - take;
    free_by_size_.insert({len - take, addr + take});
  }
}

uintptr_t HostPool::take_best_fit(size_t n) {
  const auto it = free_by_size_.lower_bound({n, 0});
  if (it == free_by_size_.end()) return 0;
  const auto [len, addr] = *it;
  take_front(addr, len, n);
  return addr;
}

void HostPool::move_pages(uintptr_t from, size_t len, uintptr_t to) {
#if defined(__linux__)
  // One mremap per piece between recorded boundaries: before Linux 6.17 a range that spans two
  // kernel mappings cannot move in one call (EFAULT).
  std::vector<uintptr_t> bounds{from};
  for (auto it = cuts_.upper_bound(from); it != cuts_.end() && *it < from + len; ++it) bounds.push_back(*it);
  bounds.push_back(from + len);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const uintptr_t src = bounds[i];
    const size_t piece = bounds[i + 1] - src;
    const uintptr_t dst = to + (src - from);
    void* got =
        mremap(reinterpret_cast<void*>(src), piece, piece, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(dst));
    ++stats_.moves;
    if (got == MAP_FAILED) {
      // The pages are free, their contents nobody's: give them back, and keep the destination new.
      if (munmap(reinterpret_cast<void*>(src), piece) == 0) stats_.released_bytes += static_cast<int64_t>(piece);
      restore_destination(dst, piece);
      ++stats_.failed_moves;
      stats_.fresh_bytes += static_cast<int64_t>(piece);
    } else {
      stats_.moved_bytes += static_cast<int64_t>(piece);
    }
    cuts_.insert(dst);
  }
  cuts_.insert(to + len);
  // The source is now a hole: boundaries strictly inside it are gone.
  cuts_.erase(cuts_.upper_bound(from), cuts_.lower_bound(from + len));
#else
  (void)from, (void)len, (void)to;
#endif
}

uintptr_t HostPool::build(size_t n) {
#if defined(__linux__)
  if (stitch_ && cuts_.size() > max_pieces_) {
    forget_dead_cuts();
    if (cuts_.size() > max_pieces_) release_free_locked();  // too many pieces: start again from new memory
  }
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    if (free_by_addr_.empty()) return 0;
    release_free_locked();  // the free ranges' address space and commit charge, then once more
    p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return 0;
  }
  const auto dst = reinterpret_cast<uintptr_t>(p);
  cuts_.insert(dst);
  cuts_.insert(dst + n);
  size_t filled = 0;
  while (stitch_ && filled < n && !free_by_size_.empty()) {
    const auto [len, addr] = *free_by_size_.rbegin();
    const size_t take = std::min(len, n - filled);
    take_front(addr, len, take);
    stats_.free_bytes -= static_cast<int64_t>(take);
    move_pages(addr, take, dst + filled);
    filled += take;
  }
  stats_.fresh_bytes += static_cast<int64_t>(n - filled);
  return dst;
#else
  (void)n;
  return 0;
#endif
}

void* HostPool::allocate(size_t bytes) {
  const size_t n = round_up(std::max<size_t>(bytes, 1), kGranule);
  std::lock_guard<std::mutex> lock(mu_);
  uintptr_t addr = take_best_fit(n);
  if (addr != 0) {
    stats_.free_bytes -= static_cast<int64_t>(n);
  } else {
    addr = build(n);
    if (addr == 0) return nullptr;
  }
  live_[addr] = n;
  stats_.live_bytes += static_cast<int64_t>(n);
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  stats_.peak_mapped_bytes = std::max(stats_.peak_mapped_bytes, stats_.live_bytes + stats_.free_bytes);
  return reinterpret_cast<void*>(addr);
}

bool HostPool::deallocate(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) return false;
  const auto [addr, len] = *it;
  live_.erase(it);
  stats_.live_bytes -= static_cast<int64_t>(len);
  stats_.free_bytes += static_cast<int64_t>(len);
  add_free(addr, len);
  return true;
}

size_t HostPool::release_free_locked() {
  size_t bytes = 0;
#if defined(__linux__)
  for (const auto& [addr, len] : free_by_addr_) {
    munmap(reinterpret_cast<void*>(addr), len);
    bytes += len;
  }
#endif
  free_by_addr_.clear();
  free_by_size_.clear();
  stats_.free_bytes = 0;
  stats_.released_bytes += static_cast<int64_t>(bytes);
  forget_dead_cuts();
  return bytes;
}

size_t HostPool::release_free() {
  std::lock_guard<std::mutex> lock(mu_);
  return release_free_locked();
}

// A boundary matters only where it touches a range the pool still maps (live or free).
void HostPool::forget_dead_cuts() {
  const auto touches = [](const std::map<uintptr_t, size_t>& ranges, uintptr_t c) {
    const auto it = ranges.upper_bound(c);  // first range starting after c
    return it != ranges.begin() && std::prev(it)->first + std::prev(it)->second >= c;
  };
  for (auto it = cuts_.begin(); it != cuts_.end();) {
    if (touches(live_, *it) || touches(free_by_addr_, *it))
      ++it;
    else
      it = cuts_.erase(it);
  }
}

HostPoolStats HostPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  HostPoolStats s = stats_;
  s.pieces = static_cast<int64_t>(cuts_.size());
  return s;
}

namespace {

HostPool* g_pool = nullptr;

void pooled_free(void* p) {
  if (p != nullptr && !g_pool->deallocate(p)) c10::free_cpu(p);
}

// LibTorch's CPU allocator with the large blocks from the pool. The small ones keep c10's own
// aligned malloc, so its alignment and the heap policy of host_memory.h still hold for them.
class PooledCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n < kMinPooledBytes) {
      void* p = c10::alloc_cpu(n);
      return {p, p, &c10::free_cpu, cpu};
    }
    void* p = g_pool->allocate(n);
    TORCH_CHECK(p != nullptr, "host memory: could not map ", n, " bytes for a tensor (the host is out of memory; ",
                "lower train.max_tokens_per_micro or the rollout batch)");
    return {p, p, &pooled_free, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pooled_free; }
  void copy_data(void* dest, const void* src, size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

HostPool* install_host_pool() {
#if defined(__linux__)
  static PooledCpuAllocator* allocator = [] {
    g_pool = new HostPool();  // never destroyed: tensors may be freed during static destruction
    auto* a = new PooledCpuAllocator();
    c10::SetCPUAllocator(a, /*priority=*/100);
    return a;
  }();
  (void)allocator;
  return g_pool;
#else
  return nullptr;
#endif
}

HostPool* installed_host_pool() { return g_pool; }

}  // namespace tandem
