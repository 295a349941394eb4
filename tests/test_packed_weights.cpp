// packed_weights (parallel/packed_weights.h): the sampler's oneDNN-packed bf16 weights against a
// float64 reference and ATen's linear, a fused group's blocks, when a copy is built, rebuilt and
// released, and the tp layers' sampling path through it (adapters included). On a host without
// bf16 dot products nothing packs: the tests then check the fallback is ATen's linear to the bit.
#include <catch2/catch.hpp>

#include <thread>

#include "parallel/packed_weights.h"
#include "parallel/tp_layers.h"

using namespace tandem::parallel;

namespace {

torch::Tensor d64(const torch::Tensor& t) { return t.to(torch::kFloat64); }

// Within one bf16 rounding of the float64 product of the same rounded operands (float32 sums).
void check_close(const torch::Tensor& got, const torch::Tensor& ref) {
  const torch::Tensor err = (d64(got) - ref).abs();
  const torch::Tensor bound = ref.abs() * std::ldexp(1.0, -8) + 1e-3;
  INFO("max error " << err.max().item<double>() << ", max excess " << (err - bound).max().item<double>());
  CHECK((err <= bound).all().item<bool>());
}

torch::Tensor bf16_randn(std::vector<int64_t> shape, torch::Generator& gen, double scale = 1.0) {
  return (torch::randn(shape, gen) * scale).to(torch::kBFloat16);
}

}  // namespace

TEST_CASE("a packed copy computes x W^T + b within one bf16 rounding, a fused group's blocks in order",
          "[packed_weights]") {
  torch::Generator gen = at::detail::createCPUGenerator(3);
  const int64_t in = 896;
  const std::vector<torch::Tensor> w = {bf16_randn({896, in}, gen, 0.03), bf16_randn({128, in}, gen, 0.03),
                                        bf16_randn({100, in}, gen, 0.03)};  // q, k and an odd-sized block
  const torch::Tensor bias = bf16_randn({1124}, gen);
  SamplingGuard sampling;
  PackedWeight one, group;
  const torch::Tensor p1 = one.of({w[0]}), pg = group.of(w);
  if (!packed_sampling_supported()) {
    WARN("this host does not pack (no AVX512-BF16, or TANDEM_PACKED_SAMPLING=0): the fallback is checked");
    CHECK_FALSE(p1.defined());
    CHECK_FALSE(pg.defined());
    return;
  }
  REQUIRE(p1.defined());
  REQUIRE(pg.defined());
  for (int64_t m : {1, 16, 64, 400}) {
    CAPTURE(m);
    const torch::Tensor x = bf16_randn({m, in}, gen);
    const torch::Tensor y1 = packed_linear(x, p1, torch::Tensor());  // (m, 896)
    REQUIRE(y1.scalar_type() == torch::kBFloat16);
    check_close(y1, torch::mm(d64(x), d64(w[0]).t()));
    const torch::Tensor yg = packed_linear(x, pg, bias);  // (m, 1124)
    REQUIRE(yg.sizes() == torch::IntArrayRef({m, 1124}));
    check_close(yg, torch::mm(d64(x), d64(torch::cat(w)).t()) + d64(bias));
    // Control: the blocks swapped (q's rows where k's are) is far outside the bound.
    const torch::Tensor swapped =
        torch::cat({yg.narrow(1, 896, 128), yg.narrow(1, 0, 896), yg.narrow(1, 1024, 100)}, 1);
    const torch::Tensor ref = torch::mm(d64(x), d64(torch::cat(w)).t()) + d64(bias);
    CHECK_FALSE(((d64(swapped) - ref).abs() <= ref.abs() * std::ldexp(1.0, -8) + 1e-3).all().item<bool>());
  }
}

TEST_CASE("a packed copy lives in sampling scopes: built once, rebuilt when its weight is written, released at the end",
          "[packed_weights]") {
  torch::Generator gen = at::detail::createCPUGenerator(5);
  torch::Tensor w = bf16_randn({64, 32}, gen);
  const torch::Tensor x = bf16_randn({4, 32}, gen);
  PackedWeight packed;
  CHECK_FALSE(packed.of({w}).defined());  // outside any scope
  if (!packed_sampling_supported()) {
    SamplingGuard sampling;
    CHECK_FALSE(packed.of({w}).defined());
    return;
  }
  {
    SamplingGuard sampling;
    const torch::Tensor first = packed.of({w});
    REQUIRE(first.defined());
    CHECK(packed.of({w}).defined());
    CHECK(packed.builds() == 1);  // kept between calls
    CHECK(packed_bytes_held() >= w.numel() * 2);
    {
      SamplingGuard nested;  // a nested scope neither rebuilds nor releases
      CHECK(packed.of({w}).defined());
    }
    CHECK(packed.held());
    CHECK(packed.builds() == 1);
    // An in-place write bumps the version: the next call packs the new values.
    torch::Tensor old_y = packed_linear(x, first, torch::Tensor());
    {
      torch::NoGradGuard no_grad;
      w.mul_(2);
    }
    const torch::Tensor y = packed_linear(x, packed.of({w}), torch::Tensor());
    CHECK(packed.builds() == 2);
    check_close(y, torch::mm(d64(x), d64(w).t()));
    // Control: the stale copy (the handle taken before the write) gives the old product.
    CHECK_FALSE(torch::equal(old_y, y));
    {
      PackedSamplingGuard off(false);  // this thread's switch: ATen's linear
      CHECK_FALSE(packed.of({w}).defined());
    }
  }
  CHECK_FALSE(packed.held());  // the last scope ended
  CHECK(packed_bytes_held() == 0);
  {
    PackedScope keep;  // a sampler's lifetime over several scopes (TurnSampler)
    for (int i = 0; i < 3; ++i) {
      SamplingGuard sampling;
      CHECK(packed.of({w}).defined());
    }
    CHECK(packed.builds() == 3);  // once for the three scopes
  }
  CHECK_FALSE(packed.held());
}

TEST_CASE("the tp layers' sampling path through packed copies: fused, column and row layers with adapters",
          "[packed_weights][tp][lora]") {
  torch::Generator gen = at::detail::createCPUGenerator(7);
  const int64_t in = 96, m = 16;
  ColumnParallelLinear q(in, 64, true, ParallelContext{}), k(in, 32, true, ParallelContext{}),
      up(in, 80, false, ParallelContext{});
  RowParallelLinear down(80, in, false, ParallelContext{});
  {
    torch::NoGradGuard no_grad;
    for (torch::nn::Module* mod : std::vector<torch::nn::Module*>{q.get(), k.get(), up.get(), down.get()})
      for (auto& p : mod->parameters()) p.copy_(torch::randn(p.sizes(), gen) * 0.1);
  }
  q->attach_lora(torch::randn({4, in}, gen) * 0.1, torch::randn({64, 4}, gen) * 0.3, 2.0);
  k->attach_lora(torch::randn({4, in}, gen) * 0.1, torch::randn({32, 4}, gen) * 0.3, 1.5);  // a block at column 64
  down->attach_lora(torch::randn({4, 80}, gen) * 0.1, torch::randn({in, 4}, gen) * 0.3, 0.5);
  for (torch::nn::Module* mod : std::vector<torch::nn::Module*>{q.get(), k.get(), up.get(), down.get()})
    mod->to(torch::kBFloat16);

  // W x (+ b) and the adapter's term in float64 from the bf16 operands; a bf16 result is within a
  // few roundings of the products' magnitudes (as the lora_decode tests bound it).
  const auto check = [](const torch::Tensor& got, const torch::Tensor& x, const torch::Tensor& w,
                        const torch::Tensor& b, const LoraFactors& f, const char* what) {
    const auto d = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat64); };
    torch::Tensor ref = torch::mm(d(x), d(w).t());
    torch::Tensor size = torch::mm(d(x).abs(), d(w).abs().t());
    if (b.defined()) ref = ref + d(b), size = size + d(b).abs();
    if (f.defined()) {
      ref = ref + f.scale * torch::mm(torch::mm(d(x), d(f.a).t()), d(f.b).t());
      size = size + f.scale * torch::mm(torch::mm(d(x).abs(), d(f.a).abs().t()), d(f.b).abs().t());
    }
    const torch::Tensor err = (d(got) - ref).abs();
    INFO(what << ": max error " << err.max().item<double>() << ", max error / size "
              << (err / size).max().item<double>());
    CHECK((err <= size * std::ldexp(1.0, -7)).all().item<bool>());
  };
  torch::NoGradGuard no_grad;
  SamplingGuard sampling;
  for (int64_t rows : {m, int64_t{100}}) {  // a decode step's rows, and a prefill's (ATen's adapter GEMMs)
    CAPTURE(rows);
    const torch::Tensor x = bf16_randn({rows, in}, gen);
    const std::vector<torch::Tensor> qk = fused_column_parallel(x, {q.get(), k.get()});
    check(qk[0], x, q->weight, q->bias, q->lora(), "q (fused, adapted)");
    check(qk[1], x, k->weight, k->bias, k->lora(), "k (fused at column 64, adapted)");
    const torch::Tensor h = up(x);  // (rows, 80)
    check(h, x, up->weight, torch::Tensor(), LoraFactors{}, "up (column)");
    check(down(h), h, down->weight, torch::Tensor(), down->lora(), "down (row, adapted)");
  }
  const int64_t builds = q->group_packed().builds() + up->packed_weight().builds();
  if (packed_sampling_supported()) {
    CHECK(builds == 2);  // the q/k group's copy (led by q) and up's, once for both row counts
    CHECK(k->group_packed().builds() + k->packed_weight().builds() + q->packed_weight().builds() == 0);
  } else {
    CHECK(builds == 0);
  }
}

TEST_CASE("the copies stay while any thread samples, and another thread's scoring forward does not pack",
          "[packed_weights]") {
  if (!packed_sampling_supported()) return;  // nothing is held on such a host (checked above)
  torch::Generator gen = at::detail::createCPUGenerator(11);
  const torch::Tensor w = bf16_randn({64, 32}, gen);
  ColumnParallelLinear layer(32, 64, false, ParallelContext{});
  layer->to(torch::kBFloat16);
  PackedWeight packed;
  SamplingGuard sampling;  // this thread samples throughout
  REQUIRE(packed.of({w}).defined());
  std::thread other([&] {
    {
      SamplingGuard theirs;  // another thread's rollout begins and ends
      CHECK(packed.of({w}).defined());
    }
    torch::NoGradGuard no_grad;  // a scoring forward there (the overlap worker's): ATen's linear
    layer(bf16_randn({4, 32}, gen));
  });
  other.join();
  CHECK(packed.held());  // this thread's scope still holds it
  CHECK(packed.builds() == 1);
  CHECK(layer->packed_weight().builds() == 0);
  {
    torch::NoGradGuard no_grad;  // control: the same forward on this sampling thread packs
    layer(bf16_randn({4, 32}, gen));
  }
  CHECK(layer->packed_weight().builds() == 1);
}
