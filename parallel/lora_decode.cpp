// See lora_decode.h. The kernel's body (lora_decode_isa.inc) is compiled once per instruction set
// here, AMX's (lora_decode_amx.inc) once, and the best one the host has is called: one binary for
// the Intel and AMD hosts alike.
#include "parallel/lora_decode.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <type_traits>
#include <vector>

namespace tandem::parallel {

namespace {

// Below this many multiply-adds a product runs on the calling thread: an OpenMP fork and join
// costs some 5 us, about what a rank-32 product of 896 inputs takes on one core at 16 rows. (The
// Qwen2-0.5B shape's gate / up / down B and down A passes run in parallel, the rest serially.)
constexpr int64_t kMinParallelMacs = int64_t{1} << 21;

inline float to_float(float v) { return v; }
inline float to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
template <class T>
inline T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return c10::BFloat16(v).x;  // round to nearest even
  }
}

std::atomic<uint64_t> g_sampling_scope{1};

// Whether a factor of this dtype packs for isa in AMX's layout (lora_decode.h).
bool amx_layout(LoraDecodeIsa isa, at::ScalarType dtype) {
  return isa == LoraDecodeIsa::kAmx && dtype == at::kBFloat16;
}
int64_t blocks(int64_t n, int64_t size) { return (n + size - 1) / size; }

}  // namespace

#define TANDEM_LORA_NS baseline
#define TANDEM_LORA_LANES 4
#define TANDEM_LORA_MB 1
#include "parallel/lora_decode_isa.inc"
#undef TANDEM_LORA_NS
#undef TANDEM_LORA_LANES
#undef TANDEM_LORA_MB

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define TANDEM_LORA_NS avx2
#define TANDEM_LORA_LANES 8
#define TANDEM_LORA_MB 2
#include "parallel/lora_decode_isa.inc"
#undef TANDEM_LORA_NS
#undef TANDEM_LORA_LANES
#undef TANDEM_LORA_MB
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#define TANDEM_LORA_NS avx512
#define TANDEM_LORA_LANES 16
#define TANDEM_LORA_MB 8
#include "parallel/lora_decode_isa.inc"
#undef TANDEM_LORA_NS
#undef TANDEM_LORA_LANES
#undef TANDEM_LORA_MB
#pragma GCC pop_options
#endif

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#include "parallel/lora_decode_amx.inc"
#pragma GCC pop_options
#endif

bool host_supports(LoraDecodeIsa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case LoraDecodeIsa::kBaseline:
      return true;
    case LoraDecodeIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case LoraDecodeIsa::kAvx512:
      return host_supports(LoraDecodeIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
    case LoraDecodeIsa::kAmx:
      return host_supports(LoraDecodeIsa::kAvx512) && __builtin_cpu_supports("amx-tile") &&
             __builtin_cpu_supports("amx-bf16") && amx::permitted();
  }
  return false;
#else
  return isa == LoraDecodeIsa::kBaseline;
#endif
}

namespace {
thread_local int t_isa_override = -1;  // LoraDecodeIsaGuard's, or -1

int supported(LoraDecodeIsa isa) {
  TORCH_CHECK(host_supports(isa), "LoraDecodeIsaGuard: this host lacks the instruction set asked for");
  return static_cast<int>(isa);
}
}  // namespace

LoraDecodeIsaGuard::LoraDecodeIsaGuard(LoraDecodeIsa isa) : ScopedValue(t_isa_override, supported(isa)) {}

LoraDecodeIsa best_lora_decode_isa() {
  if (t_isa_override >= 0) return static_cast<LoraDecodeIsa>(t_isa_override);
  static const LoraDecodeIsa best = [] {
    for (LoraDecodeIsa isa : {LoraDecodeIsa::kAmx, LoraDecodeIsa::kAvx512, LoraDecodeIsa::kAvx2})
      if (host_supports(isa)) return isa;
    return LoraDecodeIsa::kBaseline;
  }();
  return best;
}

torch::Tensor pack_for_decode(const torch::Tensor& w, LoraDecodeIsa isa) {
  TORCH_CHECK(w.dim() == 2, "pack_for_decode: a factor must be 2-D, got ", w.sizes());
  const int64_t n = w.size(0), k = w.size(1);
  torch::Tensor packed =
      amx_layout(isa, w.scalar_type())
          ? torch::empty({blocks(n, 16), blocks(k, 32), 16, 32}, w.options())             // (n/16, k/32, 16, 32)
          : torch::empty({blocks(n, kLoraDecodeTile), k, kLoraDecodeTile}, w.options());  // (tiles, k, tile)
  pack_for_decode_into(packed, w);
  return packed;
}

// Straight from w into packed's storage: a rebuild (every rollout) allocates nothing. A new copy
// per rollout, allocated while the old one still lived, was placed wherever the heap had room,
// typically in the training step's freed activations, and stayed there through the next step.
void pack_for_decode_into(const torch::Tensor& packed, const torch::Tensor& w) {
  const int64_t n = w.size(0), k = w.size(1), full = n / kLoraDecodeTile, rest = n - full * kLoraDecodeTile;
  torch::NoGradGuard no_grad;
  const torch::Tensor src = w.detach();
  if (packed.dim() == 4) {  // AMX: w (16 nb, 32 kb) as (nb, 16 c, kb, 16 p, 2) -> (nb, kb, 16 p, 16 c, 2)
    const int64_t nb = packed.size(0), kb = packed.size(1);
    torch::Tensor whole = src.contiguous();
    if (n != nb * 16 || k != kb * 32) {  // zero-padded to whole blocks in a copy (the Qwen shapes need none)
      whole = torch::zeros({nb * 16, kb * 32}, w.options());
      whole.narrow(0, 0, n).narrow(1, 0, k).copy_(src);
    }
    packed.view({nb, kb, 16, 16, 2}).copy_(whole.view({nb, 16, kb, 16, 2}).permute({0, 2, 3, 1, 4}));
    return;
  }
  if (full > 0)  // (full, k, tile) <- (full, tile, k)^T
    packed.narrow(0, 0, full)
        .copy_(src.narrow(0, 0, full * kLoraDecodeTile).reshape({full, kLoraDecodeTile, k}).transpose(1, 2));
  if (rest > 0) {
    const torch::Tensor last = packed.select(0, full);  // (k, tile)
    last.zero_();
    last.narrow(1, 0, rest).copy_(src.narrow(0, full * kLoraDecodeTile, rest).t());
  }
}

namespace {
// Whether packed is pack_for_decode(w, isa) of some (n, k) w of its dtype. The AMX layout's padded
// k is no longer k, so its B (k = r) is matched against A's r blocks by the caller.
bool packs(const torch::Tensor& packed, int64_t n, int64_t k, LoraDecodeIsa isa) {
  if (amx_layout(isa, packed.scalar_type()))
    return packed.dim() == 4 && packed.size(0) == blocks(n, 16) && packed.size(1) == blocks(k, 32) &&
           packed.size(2) == 16 && packed.size(3) == 32;
  return packed.dim() == 3 && packed.size(0) == blocks(n, kLoraDecodeTile) && packed.size(1) == k &&
         packed.size(2) == kLoraDecodeTile;
}
}  // namespace

bool lora_decode_applies(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& packed_a,
                         const torch::Tensor& packed_b, LoraDecodeIsa isa) {
  const at::ScalarType dt = y.scalar_type();
  if (!y.device().is_cpu() || (dt != at::kBFloat16 && dt != at::kFloat)) return false;
  for (const torch::Tensor* t : {&x, &packed_a, &packed_b})
    if (!t->device().is_cpu() || t->scalar_type() != dt || !t->is_contiguous()) return false;
  if (y.dim() != 2 || x.dim() != 2 || y.stride(1) != 1 || y.stride(0) < y.size(1)) return false;
  if (y.size(0) > kLoraDecodeMaxRows || x.size(0) != y.size(0)) return false;
  if (amx_layout(isa, dt)) {  // r is A's rows padded to 16, B's inputs padded to 32: both from A's blocks
    if (packed_a.dim() != 4 || packed_b.dim() != 4) return false;
    const int64_t r16 = packed_a.size(0) * 16;
    return packs(packed_a, r16, x.size(1), isa) && packs(packed_b, y.size(1), r16, isa);
  }
  if (packed_b.dim() != 3) return false;
  const int64_t r = packed_b.size(1);
  return packs(packed_a, r, x.size(1), isa) && packs(packed_b, y.size(1), r, isa);
}

void add_lora_decode(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& packed_a,
                     const torch::Tensor& packed_b, double scale, LoraDecodeIsa isa) {
  TORCH_CHECK(lora_decode_applies(y, x, packed_a, packed_b, isa), "add_lora_decode: operands it does not take: y ",
              y.sizes(), " x ", x.sizes(), " packed A ", packed_a.sizes(), " packed B ", packed_b.sizes());
  TORCH_CHECK(host_supports(isa), "add_lora_decode: this host lacks the instruction set asked for");
  const int64_t m = y.size(0), in = x.size(1), out = y.size(1);
  if (m == 0 || out == 0) return;
  const auto s = static_cast<float>(scale);
  const auto bits = [](const torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); };
#if defined(__x86_64__)
  if (amx_layout(isa, y.scalar_type())) {
    amx::run(bits(y), y.stride(0), bits(x), bits(packed_a), bits(packed_b), m, in, packed_a.size(0), out, s);
    return;
  }
  if (isa == LoraDecodeIsa::kAmx) isa = LoraDecodeIsa::kAvx512;  // float32: the vector kernel
#endif
  const int64_t r = packed_b.size(1);
  if (y.scalar_type() == at::kFloat) {
    auto f = baseline::run_float;
#if defined(__x86_64__)
    if (isa == LoraDecodeIsa::kAvx2) f = avx2::run_float;
    if (isa == LoraDecodeIsa::kAvx512) f = avx512::run_float;
#endif
    f(y.data_ptr<float>(), y.stride(0), x.data_ptr<float>(), packed_a.data_ptr<float>(), packed_b.data_ptr<float>(), m,
      in, r, out, s);
    return;
  }
  auto f = baseline::run_bf16;
#if defined(__x86_64__)
  if (isa == LoraDecodeIsa::kAvx2) f = avx2::run_bf16;
  if (isa == LoraDecodeIsa::kAvx512) f = avx512::run_bf16;
#endif
  f(bits(y), y.stride(0), bits(x), bits(packed_a), bits(packed_b), m, in, r, out, s);
}

void begin_sampling_scope() { g_sampling_scope.fetch_add(1, std::memory_order_relaxed); }

const torch::Tensor& PackedFactor::of(const torch::Tensor& w) {
  const uint64_t scope = g_sampling_scope.load(std::memory_order_relaxed);
  const bool fits = packed_.defined() && packed_.scalar_type() == w.scalar_type() &&
                    packs(packed_, w.size(0), w.size(1), best_lora_decode_isa());
  if (!fits || w.data_ptr() != data_ || w._version() != version_ || scope != scope_) {
    if (fits)
      pack_for_decode_into(packed_, w);
    else
      packed_ = pack_for_decode(w);
    data_ = w.data_ptr();
    version_ = w._version();
    scope_ = scope;
    ++builds_;
  }
  return packed_;
}

}  // namespace tandem::parallel
