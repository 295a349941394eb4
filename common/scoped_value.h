// Sets a (thread-local) switch for a scope and restores its previous value on exit: the base of the
// guards that name one of a layer's switches (SamplingGuard, LoraOffGuard, PackedSamplingGuard,
// LoraDecodeIsaGuard, ...), so that each states only which switch it sets and to what.
#pragma once

namespace tandem {

template <typename T>
class ScopedValue {
 public:
  ScopedValue(const ScopedValue&) = delete;
  ScopedValue& operator=(const ScopedValue&) = delete;

 protected:
  ScopedValue(T& slot, T value) : slot_(slot), previous_(slot) { slot_ = value; }
  ~ScopedValue() { slot_ = previous_; }
  const T& previous() const { return previous_; }

 private:
  T& slot_;
  T previous_;
};

}  // namespace tandem
