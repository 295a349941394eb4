// keep_freed_host_memory(): the environment decides, and a large block freed and allocated again
// costs no new page faults; the control (glibc's defaults restored) faults every page again.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "runtime/host_memory.h"

using namespace tandem;

namespace {

HostMemoryPolicy choose(const std::map<std::string, std::string>& env) {
  return choose_host_memory_policy([&](const char* name) -> std::optional<std::string> {
    const auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Page faults of allocating `bytes`, writing every page and freeing it, done the second time.
long faults_of_second_round(size_t bytes) {
  for (int round = 0; round < 2; ++round) {
    const long before = minor_faults();
    char* p = static_cast<char*>(std::malloc(bytes));
    if (p == nullptr) FAIL("malloc of " << bytes << " bytes failed");
    std::memset(p, round + 1, bytes);
    const volatile char sink = p[bytes - 1];
    (void)sink;
    std::free(p);
    if (round == 1) return minor_faults() - before;
  }
  return -1;
}

}  // namespace

TEST_CASE("the environment decides whether freed host memory is kept", "[host_memory]") {
  CHECK(choose({}).keep_freed);
  CHECK(choose({}).pool);
  const HostMemoryPolicy no_pool = choose({{"TANDEM_HOST_POOL", "0"}});
  CHECK(no_pool.keep_freed);
  CHECK_FALSE(no_pool.pool);
  CHECK(choose({{"TANDEM_KEEP_HOST_MEMORY", "1"}}).keep_freed);
  const HostMemoryPolicy off = choose({{"TANDEM_KEEP_HOST_MEMORY", "0"}});
  CHECK_FALSE(off.keep_freed);
  CHECK(off.why.find("TANDEM_KEEP_HOST_MEMORY=0") != std::string::npos);
  const HostMemoryPolicy user = choose({{"MALLOC_MMAP_MAX_", "65536"}});
  CHECK_FALSE(user.keep_freed);
  CHECK(user.why.find("MALLOC_MMAP_MAX_") != std::string::npos);
  CHECK_FALSE(choose({{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"}}).keep_freed);
  CHECK(choose({{"GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX2"}}).keep_freed);
}

#if defined(__GLIBC__)
TEST_CASE("a freed 64 MiB block is reused without page faults", "[host_memory]") {
  const HostMemoryPolicy& applied = keep_freed_host_memory();  // tests/main.cpp already applied it
  if (!applied.keep_freed) {
    WARN("host memory policy off in this environment: " << applied.why);
    return;
  }
  const size_t bytes = 64u << 20;
  const long pages = static_cast<long>(bytes / 4096);
  const long kept = faults_of_second_round(bytes);
  INFO("minor faults of the second round: " << kept << " of " << pages << " pages");
  CHECK(kept < pages / 10);

  // Control: glibc's defaults (mmap for large blocks, trim at 128 KiB) fault every page again. A
  // larger block than the kept one, so that no free heap block can serve it.
  REQUIRE(mallopt(M_MMAP_MAX, 65536) == 1);
  REQUIRE(mallopt(M_TRIM_THRESHOLD, 128 * 1024) == 1);
  const long fresh = faults_of_second_round(2 * bytes);
  REQUIRE(mallopt(M_MMAP_MAX, 0) == 1);
  REQUIRE(mallopt(M_TRIM_THRESHOLD, -1) == 1);
  INFO("control, glibc defaults: " << fresh << " faults");
  CHECK(fresh > pages);  // of 2 * pages
}
#endif

#if defined(__GLIBC__)
// After the 64 MiB case (declaration order): it needs the kept policy this one gives up.
TEST_CASE("a run that chose recompute hands freed memory back, unless the environment said keep", "[host_memory]") {
  if (!keep_freed_host_memory().keep_freed) {
    WARN("host memory policy off in this environment: " << host_memory_description());
    return;
  }
  const size_t bytes = 96u << 20;
  const long pages = static_cast<long>(bytes / 4096);
  setenv("TANDEM_KEEP_HOST_MEMORY", "1", 1);
  CHECK(return_freed_host_memory("test") == host_memory_description());
  CHECK(keep_freed_host_memory().keep_freed);
  const long kept = faults_of_second_round(bytes);  // control: still kept
  CHECK(kept < pages / 10);
  unsetenv("TANDEM_KEEP_HOST_MEMORY");

  const std::string why = return_freed_host_memory("train.recompute: layers");
  CHECK_FALSE(keep_freed_host_memory().keep_freed);
  CHECK(why.find("train.recompute: layers") != std::string::npos);
  const long fresh = faults_of_second_round(bytes);
  INFO("faults after handing memory back: " << fresh << " of " << pages << " pages; kept: " << kept);
  CHECK(fresh >= pages);
  REQUIRE(mallopt(M_MMAP_MAX, 0) == 1);  // the rest of the test process as it was
  REQUIRE(mallopt(M_TRIM_THRESHOLD, -1) == 1);
}
#endif

TEST_CASE("the GEMM kernel caches are capped unless the environment set them", "[host_memory]") {
  // tests/main.cpp ran keep_freed_host_memory(), which caps them before the first GEMM.
  for (const char* name : {"ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"}) {
    const char* v = std::getenv(name);
    REQUIRE(v != nullptr);
    INFO(name << "=" << v);
    CHECK(std::atoi(v) > 0);
  }
  const std::string before_onednn = std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY");
  const std::string before_lru = std::getenv("LRU_CACHE_CAPACITY");
  setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "7", 1);
  unsetenv("LRU_CACHE_CAPACITY");
  bound_kernel_caches();
  CHECK(std::string(std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")) == "7");  // the user's value wins
  CHECK(std::string(std::getenv("LRU_CACHE_CAPACITY")) == std::to_string(kKernelCacheCapacity));
  unsetenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY");  // oneDNN's older name set by the user: not overridden
  setenv("DNNL_PRIMITIVE_CACHE_CAPACITY", "5", 1);
  bound_kernel_caches();
  CHECK(std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == nullptr);
  unsetenv("DNNL_PRIMITIVE_CACHE_CAPACITY");
  setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", before_onednn.c_str(), 1);
  setenv("LRU_CACHE_CAPACITY", before_lru.c_str(), 1);
}
