// Peak CPU tensor memory of a block of code: a counting allocator wraps LibTorch's CPU allocator
// for the lifetime of a PeakMemoryScope and records the high-water mark of live tensor bytes
// above the level at the scope's start. For tests and benchmarks (not thread-hot, not for
// production runs).
#pragma once

#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace tandem {

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

  // Both constnesses: LibTorch 1.x declares allocate() const, 2.x non-const; whichever the base
  // class declares is overridden, the other is a harmless overload.
  c10::DataPtr allocate(size_t n) const { return wrap(n); }
  c10::DataPtr allocate(size_t n) { return wrap(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

  void reset() {
    peak_ = current_.load();
    start_ = current_.load();
  }
  int64_t peak_above_start() const { return peak_.load() - start_; }

 private:
  struct Block {
    c10::DataPtr inner;
    size_t bytes;
    const CountingCpuAllocator* owner;
  };
  static void release(void* ctx) {
    auto* b = static_cast<Block*>(ctx);
    b->owner->current_ -= static_cast<int64_t>(b->bytes);
    delete b;
  }
  c10::DataPtr wrap(size_t n) const {
    auto* b = new Block{base_->allocate(n), n, this};
    const int64_t now = current_ += static_cast<int64_t>(n);
    int64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
    void* data = b->inner.get();
    const c10::Device device = b->inner.device();
    return c10::DataPtr(data, b, &release, device);
  }

  c10::Allocator* base_;
  mutable std::atomic<int64_t> current_{0}, peak_{0};
  int64_t start_ = 0;
};

// Installs the counting allocator while alive; peak_bytes() is the high-water mark of tensor
// bytes allocated inside the scope and not yet freed.
class PeakMemoryScope {
 public:
  PeakMemoryScope() {
    base_ = c10::GetCPUAllocator();
    counter_ = new CountingCpuAllocator(base_);  // leaked on purpose: tensors may outlive the scope
    counter_->reset();
    c10::SetCPUAllocator(counter_, kPriority);
  }
  ~PeakMemoryScope() { c10::SetCPUAllocator(base_, kPriority); }
  int64_t peak_bytes() const { return counter_->peak_above_start(); }

 private:
  static constexpr uint8_t kPriority = 100;
  c10::Allocator* base_ = nullptr;
  CountingCpuAllocator* counter_ = nullptr;
};

}  // namespace tandem
