// Host memory for tensors: keep what the process frees for its next allocation.
// glibc serves every allocation above its mmap threshold (128 KiB, growing to at most 32 MiB) with
// a fresh mmap and gives it back with munmap on free, so each of a step's large tensors (a logits
// chunk alone is 128 MiB) arrives as zero-filled pages the kernel faults in one by one. At the mid
// bench workload that was 1 min 37 s of system time in a 2.5 min run and made the step 1.47x
// slower. With mmap off and trimming off, freed blocks stay in the heap and are reused: the
// process keeps its peak, which is what a training loop allocates again every step (the same
// policy as PyTorch's CUDA caching allocator). A heap that keeps also fragments as tensor sizes
// change step to step, so the large tensors now come from host_pool.h, which does not.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace tandem {

struct HostMemoryPolicy {
  bool keep_freed = false;  // mmap off and trim off
  std::string why;          // for the log: who chose, and how to change it
  bool pool = false;        // large tensors from the host pool (host_pool.h); only with keep_freed
};

// What to do given the environment (`getenv` looks a variable up; nullopt when unset):
// TANDEM_KEEP_HOST_MEMORY=0 opts out, any MALLOC_*_ variable or a malloc setting in
// GLIBC_TUNABLES is the user's own choice and is left alone; otherwise keep freed memory. Keeping
// it also puts the large tensors in the host pool (host_pool.h), unless TANDEM_HOST_POOL=0.
HostMemoryPolicy choose_host_memory_policy(const std::function<std::optional<std::string>(const char*)>& getenv);

// Call first in main(): bounds the GEMM kernel caches (bound_kernel_caches) and applies
// choose_host_memory_policy() to this process's malloc (glibc only; elsewhere it changes nothing
// and says so) and its CPU tensors (host_pool.h). Returns what it did.
const HostMemoryPolicy& keep_freed_host_memory();

// Caps oneDNN's and ideep's caches of compiled GEMM kernels (ONEDNN_PRIMITIVE_CACHE_CAPACITY and
// LRU_CACHE_CAPACITY) at kKernelCacheCapacity each, unless the environment set them: with a new
// shape per step and per micro-batch, the default 1,024 entries grew the heap by 26 MB a step.
constexpr int kKernelCacheCapacity = 256;
void bound_kernel_caches();

// Hands large freed blocks back to the system from now on (mmap from 64 MiB, trim above 128 MiB),
// for a run that chose memory over speed (`train.recompute: layers`): with the heap keeping every
// freed block, a 32K-token step with recompute peaked at 4.86 GiB, with this at 2.90 GiB. Does
// nothing when the environment chose (TANDEM_KEEP_HOST_MEMORY or a malloc setting).
// `why` names the recipe key for the log. Returns host_memory_description() afterwards.
std::string return_freed_host_memory(const std::string& why);

// This process's peak resident set size in bytes (VmHWM of /proc/self/status), 0 where unknown.
int64_t peak_rss_bytes();

// One line for the logs and the bench JSON: what keep_freed_host_memory() did, "" before it ran.
std::string host_memory_description();

}  // namespace tandem
