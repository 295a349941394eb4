// A tiny counter-based random generator (SplitMix64) for the prompt streams: the standard
// library's engines and distributions differ between libstdc++ and libc++, and a resumed or
// re-sharded run must draw exactly the same prompts on every platform.
#pragma once

#include <cstdint>

namespace tandem::tasks {

// One SplitMix64 step: a bijective 64-bit mix of `x` (Steele et al. 2014).
inline uint64_t splitmix64_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Folds `value` into `hash`; chained calls derive independent streams from (seed, tag, index).
inline uint64_t hash_combine(uint64_t hash, uint64_t value) {
  return splitmix64_mix(hash ^ splitmix64_mix(value + 0x632BE59BD9B4E019ull));
}

class DetRng {
 public:
  explicit DetRng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n), n > 0, without modulo bias (rejects the short tail of the 2^64 range).
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

  // Uniform in [lo, hi], lo <= hi.
  int64_t uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }

 private:
  uint64_t state_;
};

}  // namespace tandem::tasks
