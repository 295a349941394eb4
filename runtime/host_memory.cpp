// See host_memory.h. mallopt() settings apply to every later malloc / posix_memalign (LibTorch's
// CPU allocator), so calling this before the first tensor is enough.
#include "runtime/host_memory.h"

#include "runtime/host_pool.h"

#include <fstream>

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tandem {

namespace {

HostMemoryPolicy g_applied;
bool g_ran = false;

}  // namespace

HostMemoryPolicy choose_host_memory_policy(const std::function<std::optional<std::string>(const char*)>& getenv) {
  if (const auto v = getenv("TANDEM_KEEP_HOST_MEMORY"); v && *v == "0")
    return {false, "glibc malloc defaults (TANDEM_KEEP_HOST_MEMORY=0)"};
  for (const char* name : {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"})
    if (getenv(name)) return {false, std::string("malloc as the environment sets it (") + name + ")"};
  if (const auto v = getenv("GLIBC_TUNABLES"); v && v->find("glibc.malloc.") != std::string::npos)
    return {false, "malloc as the environment sets it (GLIBC_TUNABLES)"};
  const auto pool = getenv("TANDEM_HOST_POOL");
  return {true, "freed host memory kept for reuse (mmap and trim off; TANDEM_KEEP_HOST_MEMORY=0 to disable)",
          !(pool && *pool == "0")};
}

void bound_kernel_caches() {
  // oneDNN and ideep keep a compiled kernel per GEMM shape, 1,024 of each by default; as a step's
  // shapes change with its prompts the caches filled at ~26 MB a step on the Qwen2-0.5B shape. 256
  // holds one step's shapes (the decode shapes, reused every step, stay recent). setenv before
  // their first use, which reads it; a value the user set wins.
  const std::string capacity = std::to_string(kKernelCacheCapacity);
  // oneDNN reads ONEDNN_ before DNNL_, so a user's DNNL_ value would lose to ours.
  if (std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") == nullptr)
    setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", capacity.c_str(), /*overwrite=*/0);
  setenv("LRU_CACHE_CAPACITY", capacity.c_str(), /*overwrite=*/0);
}

const HostMemoryPolicy& keep_freed_host_memory() {
  if (g_ran) return g_applied;
  g_ran = true;
  bound_kernel_caches();
  g_applied = choose_host_memory_policy([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
#if defined(__GLIBC__)
  if (g_applied.keep_freed) {
    // Large blocks then come from the heap; with trimming off a freed one is never handed back.
    const bool ok =
        mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, -1) == 1 && mallopt(M_TOP_PAD, 64 << 20) == 1;
    if (!ok) g_applied = {false, "glibc malloc defaults (mallopt refused the settings)"};
  }
#else
  if (g_applied.keep_freed) g_applied = {false, "the C library's malloc defaults (not glibc)"};
#endif
  if (g_applied.keep_freed && g_applied.pool && install_host_pool() != nullptr)
    g_applied.why = "host tensors from " + std::to_string(kMinPooledBytes >> 10) +
                    " KiB from a pool that reuses freed pages and maps at most their peak, smaller ones from a heap "
                    "that keeps freed memory (TANDEM_HOST_POOL=0: the heap for all; "
                    "TANDEM_KEEP_HOST_MEMORY=0: glibc's defaults)";
  return g_applied;
}

std::string return_freed_host_memory(const std::string& why) {
  if (!g_ran || !g_applied.keep_freed) return host_memory_description();
  if (const char* v = std::getenv("TANDEM_KEEP_HOST_MEMORY"); v && std::string(v) == "1") return g_applied.why;
#if defined(__GLIBC__)
  // Blocks from 64 MiB come from mmap and go back on free; smaller ones are reused from the heap,
  // which gives back what it holds above 128 MiB free at its top. At 4K tokens on the mid model no
  // block reaches 64 MiB (no new page faults); at 32K the hidden states and MLP activations do.
  // Measured (scripts/bench/long.sh, recompute layers): 32K peaks at 2.90 GiB (kept: 4.86; glibc's
  // own dynamic thresholds: 2.76 but 4K 0.80x as fast), 4K at 1.79 GiB, 0.85x the kept policy's speed.
  if (mallopt(M_MMAP_MAX, 65536) == 1 && mallopt(M_MMAP_THRESHOLD, 64 << 20) == 1 &&
      mallopt(M_TRIM_THRESHOLD, 128 << 20) == 1 && mallopt(M_TOP_PAD, 128 * 1024) == 1) {
    malloc_trim(0);
    g_applied = {false, std::string(installed_host_pool() != nullptr ? "large tensors from the pool; " : "") +
                            "glibc malloc defaults: freed host memory goes back to the system (" + why +
                            "; TANDEM_KEEP_HOST_MEMORY=1 keeps it)"};
  }
#endif
  return g_applied.why;
}

std::string host_memory_description() { return g_ran ? g_applied.why : ""; }

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;  // "VmHWM:   123 kB"
  return 0;
}

}  // namespace tandem
