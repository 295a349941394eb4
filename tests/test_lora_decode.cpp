// lora_decode (parallel/lora_decode.h): the host decode kernel against a float64 reference for
// every instruction set this host has, bf16 and float32, shapes with and without vector tails;
// bitwise the same at 1 and 2 threads; the operands it refuses; the factors' packing (the vector
// kernels' and AMX's) and PackedFactor's rebuilds;
// and the tp layers' sampling path taking it, as close to float64 as their training forward.
#include <ATen/Parallel.h>
#include <catch2/catch.hpp>

#include "parallel/lora_decode.h"
#include "parallel/tp_layers.h"

using namespace tandem::parallel;

namespace {

struct Case {
  int64_t m, in, r, out;
};

struct Operands {
  torch::Tensor y, x, a, b;  // (M, out), (M, in), (r, in), (out, r)
};

Operands make(const Case& c, torch::ScalarType dtype, uint64_t seed) {
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  // Magnitudes as a trained adapter's: the delta comparable to y, so an error in it shows.
  const double a_scale = 1.0 / std::sqrt(static_cast<double>(c.in)),
               b_scale = 1.0 / std::sqrt(static_cast<double>(c.r));
  return {torch::randn({c.m, c.out}, gen).to(dtype), torch::randn({c.m, c.in}, gen).to(dtype),
          (torch::randn({c.r, c.in}, gen) * a_scale).to(dtype), (torch::randn({c.out, c.r}, gen) * b_scale).to(dtype)};
}

// y + scale (x A^T) B^T in float64 from the same rounded operands.
torch::Tensor reference(const Operands& o, double scale) {
  const auto d = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
  return d(o.y) + scale * torch::mm(torch::mm(d(o.x), d(o.a).t()), d(o.b).t());
}

torch::Tensor run_kernel(const Operands& o, double scale, LoraDecodeIsa isa) {
  const torch::Tensor y = o.y.clone();
  add_lora_decode(y, o.x, pack_for_decode(o.a, isa), pack_for_decode(o.b, isa), scale, isa);
  return y;
}

// The magnitude of y's terms, |y| + scale (|x| |A|^T) |B|^T: float32's sums err in proportion to it.
torch::Tensor magnitude(const Operands& o, double scale) {
  const auto d = [](const torch::Tensor& t) { return t.to(torch::kFloat64).abs(); };
  return d(o.y) + scale * torch::mm(torch::mm(d(o.x), d(o.a).t()), d(o.b).t());
}

// Within one rounding of the result's dtype (bf16: 2^-8 relative) beyond float32's sums: 2^-16 of
// the terms' magnitude, which a cancelling sum of hundreds of float32 products (AMX's pairs, the
// vector kernels' fused multiply-adds) can reach where the result itself is small.
void check_close(const torch::Tensor& got, const torch::Tensor& ref, const torch::Tensor& size,
                 torch::ScalarType dtype) {
  const double rel = dtype == torch::kBFloat16 ? std::ldexp(1.0, -8) : 1e-5;
  const torch::Tensor err = (got.to(torch::kFloat64) - ref).abs();
  const torch::Tensor bound = ref.abs() * rel + size * std::ldexp(1.0, -16);
  INFO("max error " << err.max().item<double>() << ", max excess " << (err - bound).max().item<double>());
  CHECK((err <= bound).all().item<bool>());
}

const std::vector<Case> kCases = {
    {16, 896, 32, 4864},  // gate_proj of Qwen2-0.5B, a decode step of 16 sequences
    {16, 4864, 32, 896},  // down_proj
    {1, 896, 32, 128},    // k_proj, one sequence
    {7, 100, 7, 70},      // tails in every dimension
    {64, 257, 33, 97},    // the most rows taken
    {5, 16, 1, 32},
};

std::vector<LoraDecodeIsa> host_isas() {
  std::vector<LoraDecodeIsa> out;
  for (LoraDecodeIsa isa :
       {LoraDecodeIsa::kBaseline, LoraDecodeIsa::kAvx2, LoraDecodeIsa::kAvx512, LoraDecodeIsa::kAmx})
    if (host_supports(isa)) out.push_back(isa);
  return out;
}

}  // namespace

TEST_CASE("add_lora_decode: y + scale (x A^T) B^T within a rounding, every instruction set", "[lora_decode]") {
  const auto dtype = GENERATE(torch::kBFloat16, torch::kFloat32);
  for (LoraDecodeIsa isa : host_isas()) {
    for (size_t i = 0; i < kCases.size(); ++i) {
      const Case& c = kCases[i];
      INFO("isa " << static_cast<int>(isa) << ", dtype " << dtype << ", case " << c.m << "x" << c.in << " r" << c.r
                  << " -> " << c.out);
      const Operands o = make(c, dtype, 10 + i);
      check_close(run_kernel(o, 2.0, isa), reference(o, 2.0), magnitude(o, 2.0), dtype);
    }
  }
}

TEST_CASE("add_lora_decode: the checks can fail", "[lora_decode]") {
  // Control: a scale off by 1% is outside the bf16 bound on the Qwen2-0.5B gate's shape.
  const Operands o = make(kCases[0], torch::kBFloat16, 10);
  const torch::Tensor got = run_kernel(o, 2.02, best_lora_decode_isa());
  const torch::Tensor err = (got.to(torch::kFloat64) - reference(o, 2.0)).abs();
  const torch::Tensor bound = reference(o, 2.0).abs() * std::ldexp(1.0, -8) + magnitude(o, 2.0) * std::ldexp(1.0, -16);
  CHECK_FALSE((err <= bound).all().item<bool>());
}

TEST_CASE("add_lora_decode: bitwise the same at 1 and 2 threads", "[lora_decode]") {
  const int threads = at::get_num_threads();
  const auto dtype = GENERATE(torch::kBFloat16, torch::kFloat32);
  for (LoraDecodeIsa isa : host_isas())
    for (size_t i = 0; i < kCases.size(); ++i) {
      INFO("isa " << static_cast<int>(isa) << ", case " << i);
      const Operands o = make(kCases[i], dtype, 20 + i);
      at::set_num_threads(1);
      const torch::Tensor one = run_kernel(o, 2.0, isa);
      at::set_num_threads(2);
      const torch::Tensor two = run_kernel(o, 2.0, isa);
      CHECK(torch::equal(one, two));
    }
  at::set_num_threads(threads);
}

TEST_CASE("lora_decode_applies: what the kernel refuses", "[lora_decode]") {
  const Operands o = make({16, 64, 8, 96}, torch::kBFloat16, 1);
  const torch::Tensor pa = pack_for_decode(o.a), pb = pack_for_decode(o.b);
  CHECK(lora_decode_applies(o.y, o.x, pa, pb));
  CHECK_FALSE(lora_decode_applies(o.y, o.x, pa, o.b.t().contiguous()));  // B^T, not packed
  CHECK_FALSE(lora_decode_applies(o.y, o.x, pa, pb.transpose(1, 2)));
  CHECK_FALSE(lora_decode_applies(o.y, o.x, pb, pa));  // the factors swapped
  CHECK_FALSE(lora_decode_applies(o.y.to(torch::kFloat64), o.x.to(torch::kFloat64), pa.to(torch::kFloat64),
                                  pb.to(torch::kFloat64)));
  CHECK_FALSE(lora_decode_applies(o.y, o.x.to(torch::kFloat32), pa, pb));  // mixed dtypes
  const Operands big = make({kLoraDecodeMaxRows + 1, 64, 8, 96}, torch::kBFloat16, 2);
  CHECK_FALSE(lora_decode_applies(big.y, big.x, pack_for_decode(big.a), pack_for_decode(big.b)));
  // A column block of a wider output (rows contiguous, row stride 96) is taken; columns apart are not.
  CHECK(lora_decode_applies(o.y.slice(1, 0, 48), o.x, pa, pack_for_decode(o.b.slice(0, 0, 48))));
  CHECK_FALSE(lora_decode_applies(o.y.slice(1, 0, 96, 2), o.x, pa, pack_for_decode(o.b.slice(0, 0, 48))));
  CHECK_FALSE(lora_decode_applies(o.y.t(), o.x, pa, pb));
  CHECK_FALSE(lora_decode_applies(o.y, o.x, pa, pack_for_decode(o.b.slice(0, 0, 48))));  // another B's out
  CHECK_THROWS_WITH(add_lora_decode(o.y, o.x, pa, o.b.t().contiguous(), 1.0),
                    Catch::Contains("operands it does not take"));
}

TEST_CASE("a column block of a wider output gets the adapter in place, its neighbours untouched", "[lora_decode]") {
  // A fused projection's packed GEMM gives its blocks as column views: (13, 100) at columns
  // [40, 140) of a (13, 200) output; 13 rows leave a tail in every instruction set's row block,
  // 100 columns one in the last tile.
  const Operands o = make({13, 64, 8, 100}, torch::kBFloat16, 4);
  torch::Generator gen = at::detail::createCPUGenerator(9);
  for (LoraDecodeIsa isa : host_isas()) {
    CAPTURE(static_cast<int>(isa));
    const torch::Tensor wide = torch::randn({13, 200}, gen).to(torch::kBFloat16);
    const torch::Tensor block = wide.narrow(1, 40, 100);
    block.copy_(o.y);
    const torch::Tensor before = wide.clone();
    add_lora_decode(block, o.x, pack_for_decode(o.a, isa), pack_for_decode(o.b, isa), 2.0, isa);
    CHECK(torch::equal(block, run_kernel(o, 2.0, isa)));  // as on a contiguous y
    CHECK(torch::equal(wide.narrow(1, 0, 40), before.narrow(1, 0, 40)));
    CHECK(torch::equal(wide.narrow(1, 140, 60), before.narrow(1, 140, 60)));
    CHECK_FALSE(torch::equal(block, before.narrow(1, 40, 100)));  // control: the block did change
  }
}

TEST_CASE("pack_for_decode: w^T in tiles of 32 columns, the last padded with zeros", "[lora_decode]") {
  const torch::Tensor w = torch::randn({70, 5});  // (n, k): two whole tiles and 6 columns
  const torch::Tensor p = pack_for_decode(w);
  REQUIRE(p.sizes() == torch::IntArrayRef({3, 5, kLoraDecodeTile}));
  for (int64_t t = 0; t < 3; ++t) {
    const int64_t cols = std::min<int64_t>(kLoraDecodeTile, 70 - t * kLoraDecodeTile);
    CHECK(torch::equal(p[t].narrow(1, 0, cols), w.narrow(0, t * kLoraDecodeTile, cols).t()));
    if (cols < kLoraDecodeTile) CHECK(p[t].narrow(1, cols, kLoraDecodeTile - cols).eq(0).all().item<bool>());
  }
  // Into a buffer of that shape holding other values (a rebuild): the same, its padding zeroed again.
  const torch::Tensor again = torch::full_like(p, 7.0);
  pack_for_decode_into(again, w);
  CHECK(torch::equal(again, p));
  const torch::Tensor whole = torch::randn({64, 5});  // whole tiles only
  const torch::Tensor into = torch::full({2, 5, kLoraDecodeTile}, 7.0);
  pack_for_decode_into(into, whole);
  CHECK(torch::equal(into, pack_for_decode(whole)));
  CHECK(torch::equal(into[1], whole.narrow(0, kLoraDecodeTile, kLoraDecodeTile).t()));
}

TEST_CASE("pack_for_decode for AMX: bf16 w in 16-row blocks of 32-input pairs, padded with zeros", "[lora_decode]") {
  if (!host_supports(LoraDecodeIsa::kAmx)) {
    WARN("this host has no AMX: its layout is not used here");
    return;
  }
  const torch::Tensor w = torch::randn({37, 70}).to(torch::kBFloat16);  // (n, k): tails in both
  const torch::Tensor p = pack_for_decode(w, LoraDecodeIsa::kAmx);
  REQUIRE(p.sizes() == torch::IntArrayRef({3, 3, 16, 32}));
  const torch::Tensor pf = p.to(torch::kFloat32), wf = w.to(torch::kFloat32);
  int64_t checked = 0;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t q = 0; q < 3; ++q)
      for (int64_t pr = 0; pr < 16; ++pr)
        for (int64_t c = 0; c < 16; ++c)
          for (int64_t e = 0; e < 2; ++e) {
            const int64_t row = 16 * b + c, col = 32 * q + 2 * pr + e;
            const float want = row < 37 && col < 70 ? wf[row][col].item<float>() : 0.0f;
            checked += pf[b][q][pr][2 * c + e].item<float>() == want;
          }
  CHECK(checked == 3 * 3 * 16 * 32);
  const torch::Tensor again = torch::full_like(p, 7.0);  // a rebuild into a buffer of other values
  pack_for_decode_into(again, w);
  CHECK(torch::equal(again, p));
  // float32 factors keep the vector kernels' layout (AMX multiplies bf16 only).
  CHECK(pack_for_decode(wf, LoraDecodeIsa::kAmx).dim() == 3);
  // The layouts do not mix: an AMX A with a vector kernel's B, or the reverse, is refused.
  const Operands o = make({16, 64, 8, 96}, torch::kBFloat16, 1);
  const torch::Tensor pa = pack_for_decode(o.a, LoraDecodeIsa::kAmx), pb = pack_for_decode(o.b, LoraDecodeIsa::kAmx);
  CHECK(lora_decode_applies(o.y, o.x, pa, pb, LoraDecodeIsa::kAmx));
  CHECK_FALSE(lora_decode_applies(o.y, o.x, pa, pack_for_decode(o.b, LoraDecodeIsa::kAvx512), LoraDecodeIsa::kAmx));
  CHECK_FALSE(lora_decode_applies(o.y, o.x, pack_for_decode(o.a, LoraDecodeIsa::kAvx512), pb, LoraDecodeIsa::kAmx));
  CHECK_FALSE(lora_decode_applies(o.y, o.x, pa, pb, LoraDecodeIsa::kAvx512));
  // The host's best is AMX; a guard sets another on this thread, and a cached factor follows it.
  CHECK(best_lora_decode_isa() == LoraDecodeIsa::kAmx);
  PackedFactor cache;
  CHECK(cache.of(o.b).dim() == 4);
  {
    LoraDecodeIsaGuard vector(LoraDecodeIsa::kAvx512);
    CHECK(best_lora_decode_isa() == LoraDecodeIsa::kAvx512);
    CHECK(torch::equal(cache.of(o.b), pack_for_decode(o.b, LoraDecodeIsa::kAvx512)));
  }
  CHECK(best_lora_decode_isa() == LoraDecodeIsa::kAmx);
  CHECK(torch::equal(cache.of(o.b), pb));
  CHECK(cache.builds() == 3);
}

TEST_CASE("PackedFactor: the packed factor, rebuilt when it changes or a sampling scope begins", "[lora_decode]") {
  torch::Tensor b = torch::randn({40, 8});  // (out, r)
  PackedFactor cache;
  const void* first = cache.of(b).data_ptr();
  CHECK(torch::equal(cache.of(b), pack_for_decode(b)));
  CHECK(cache.builds() == 1);
  CHECK(cache.of(b).data_ptr() == first);  // kept between calls
  {
    torch::NoGradGuard no_grad;
    b.add_(1.0);  // bumps the version counter
  }
  CHECK(torch::equal(cache.of(b), pack_for_decode(b)));
  CHECK(cache.builds() == 2);
  CHECK(cache.of(b).data_ptr() == first);  // rebuilt in its own storage: nothing allocated
  b.data().mul_(2.0);                      // .data() does not share the version counter: caught at the next scope
  CHECK(cache.builds() == 2);
  { SamplingGuard sampling; }
  CHECK(torch::equal(cache.of(b), pack_for_decode(b)));
  CHECK(cache.builds() == 3);
  torch::Tensor other = b.clone();
  CHECK(torch::equal(cache.of(other), pack_for_decode(other)));  // another tensor
  CHECK(cache.builds() == 4);
}

TEST_CASE("tp layers: the sampling path's adapters through the kernel, as close to float64 as the training forward",
          "[lora_decode]") {
  torch::Generator gen = at::detail::createCPUGenerator(5);
  ColumnParallelLinear col(96, 160, false, ParallelContext{});
  RowParallelLinear row(160, 96, false, ParallelContext{});
  {
    torch::NoGradGuard no_grad;
    col->weight.copy_(torch::randn({160, 96}, gen) * 0.1);
    row->weight.copy_(torch::randn({96, 160}, gen) * 0.1);
  }
  col->attach_lora(torch::randn({8, 96}, gen) * 0.1, torch::randn({160, 8}, gen) * 0.3, 2.0);
  row->attach_lora(torch::randn({8, 160}, gen) * 0.1, torch::randn({96, 8}, gen) * 0.3, 2.0);
  col->to(torch::kBFloat16);
  row->to(torch::kBFloat16);
  const auto d = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat64); };
  // Each layer on its own input: W x and the adapter's term in float64 from the bf16 operands. A
  // bf16 result is within a few roundings (x A^T's in the training forward's, the base GEMM's, the
  // sum's) of the products' magnitudes, |x| |W|^T + scale (|x| |A|^T) |B|^T.
  const auto check = [&](const torch::Tensor& got, const torch::Tensor& x, const torch::Tensor& w, const LoraFactors& f,
                         const char* what) {
    const torch::Tensor base = torch::mm(d(x), d(w).t());
    const torch::Tensor delta = f.scale * torch::mm(torch::mm(d(x), d(f.a).t()), d(f.b).t());
    const torch::Tensor size = torch::mm(d(x).abs(), d(w).abs().t()) +
                               f.scale * torch::mm(torch::mm(d(x).abs(), d(f.a).abs().t()), d(f.b).abs().t());
    const torch::Tensor err = (d(got) - base - delta).abs();
    INFO(what << ": max error " << err.max().item<double>() << ", max error / size "
              << (err / size).max().item<double>());
    CHECK((err <= size * std::ldexp(1.0, -7)).all().item<bool>());
  };
  const torch::Tensor x = torch::randn({16, 96}, gen).to(torch::kBFloat16);  // a decode step's rows
  torch::NoGradGuard no_grad;
  const torch::Tensor h = col(x);  // the training forward's ops
  check(h, x, col->weight, col->lora(), "column, training forward");
  check(row(h), h, row->weight, row->lora(), "row, training forward");
  SamplingGuard sampling;
  check(col(x), x, col->weight, col->lora(), "column, sampling");
  check(row(h), h, row->weight, row->lora(), "row, sampling");
  CHECK(col->decode_packed().b.builds() == 1);  // the kernel ran for both layers
  CHECK(row->decode_packed().b.builds() == 1);
  // Control: the same check fails for a sampled output with the adapter off.
  {
    LoraOffGuard off;
    const torch::Tensor plain = col(x);
    const torch::Tensor delta = 2.0 * torch::mm(torch::mm(d(x), d(col->lora().a).t()), d(col->lora().b).t());
    const torch::Tensor size = torch::mm(d(x).abs(), d(col->weight).abs().t());
    const torch::Tensor err = (d(plain) - torch::mm(d(x), d(col->weight).t()) - delta).abs();
    CHECK_FALSE((err <= size * std::ldexp(1.0, -7)).all().item<bool>());
  }
}
