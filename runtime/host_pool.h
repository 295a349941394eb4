// Large host tensors from a pool of resident pages whose size never exceeds the peak of what is
// live. A heap that keeps freed blocks (host_memory.h) avoids page faults but fragments: each GRPO
// step's tensors change size with its prompts, a freed block too small for the next request stays
// resident beside a new one, and the peak RSS of a LoRA run on the Qwen2-0.5B shape climbed from
// 3.51 to 4.53 GiB in 11 steps. Here a request no free range can serve is built from the free ranges
// themselves: mremap() moves their pages, already faulted in, side by side into one new address range
// (the page tables move, no byte is copied), and only the part the pool cannot cover is new memory.
// So the pool maps at most the peak of its live bytes, and freed memory is reused without faults.
// Linux only (mremap); elsewhere install_host_pool() does nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace tandem {

struct HostPoolStats {
  int64_t live_bytes = 0;         // handed out and not yet freed
  int64_t free_bytes = 0;         // resident, waiting for reuse
  int64_t peak_live_bytes = 0;    // the most live_bytes has been
  int64_t peak_mapped_bytes = 0;  // the most live_bytes + free_bytes has been
  int64_t fresh_bytes = 0;        // ever mapped new (faulted in on first touch)
  int64_t moved_bytes = 0;        // free pages moved into a new block instead
  int64_t moves = 0;              // mremap calls
  int64_t failed_moves = 0;       // mremap refused: the free pages were unmapped instead
  int64_t released_bytes = 0;     // free pages given back (release_free, or too many pieces)
  int64_t pieces = 0;             // address boundaries tracked (each can be a kernel mapping)
};

class HostPool {
 public:
  // Requests are rounded up to kGranule. `stitch` false keeps freed ranges but never moves them
  // (a heap's behaviour: the control in the tests). `max_pieces` bounds the kernel mappings the
  // pool can leave (vm.max_map_count is 65,530 by default): past it a request that no free range
  // serves gives the free ranges back and maps new memory.
  explicit HostPool(bool stitch = true, size_t max_pieces = 16384);
  ~HostPool();  // unmaps the free ranges; live blocks stay mapped (their owners may outlive it)
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  static constexpr size_t kGranule = size_t{64} << 10;

  void* allocate(size_t bytes);  // nullptr when the system has no memory left
  bool deallocate(void* p);      // false (and nothing done) for a pointer the pool did not give
  size_t release_free();         // unmaps every free range; returns the bytes given back
  HostPoolStats stats() const;

 private:
  uintptr_t take_best_fit(size_t n);
  uintptr_t build(size_t n);
  void move_pages(uintptr_t from, size_t len, uintptr_t to);
  void add_free(uintptr_t addr, size_t len);  // coalesces with its neighbours
  void remove_free(uintptr_t addr, size_t len);
  void take_front(uintptr_t addr, size_t len, size_t take);  // of a free range; the rest stays free
  size_t release_free_locked();
  void forget_dead_cuts();

  const bool stitch_;
  const size_t max_pieces_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> free_by_addr_;
  std::set<std::pair<size_t, uintptr_t>> free_by_size_;
  std::map<uintptr_t, size_t> live_;
  // Every address where one of our mmap/mremap calls may have left a boundary between kernel
  // mappings. mremap moves only ranges inside one mapping, so a move goes piece by piece between
  // these; a boundary the kernel merged away only costs an extra call.
  std::set<uintptr_t> cuts_;
  HostPoolStats stats_;
};

// Makes a process-wide HostPool LibTorch's CPU allocator for blocks of kMinPooledBytes and more
// (smaller ones stay with malloc). Once per process, before the first large tensor; later calls
// return the same pool. nullptr where not supported (not Linux). From 256 KiB, not 1 MiB: the
// decode step's activations (16 rows x 4,864 in bf16 is 152 KiB) still go to the heap, but the heap
// of the LoRA run above came to 0.57 GiB instead of 0.76 and its peak RSS to 3.14 GiB from 3.33.
constexpr size_t kMinPooledBytes = size_t{256} << 10;
HostPool* install_host_pool();
HostPool* installed_host_pool();  // nullptr before install_host_pool()

}  // namespace tandem
