// The CUDA label ([20]): the model, the fused attention and the sampler on a GPU against the CPU.
// Each case prints "skipped: no GPU visible" and returns where LibTorch sees no GPU (CI's
// machines); ctest's cuda.unit marks that skipped. scripts/gpu/check.sh runs them on a GPU.
// The packed attention alone: FlashAttention's variable-length kernel (bf16) against float64 on the
// CPU, 2e-2 of the largest entry, with GQA, a one-token sequence and a sliding window.
// Tolerances: float32 on the GPU (TF32 off, LibTorch's default for matmuls) against float64 on
// the CPU: log-probs 1e-4, gradients 1e-3 of their largest entry; bf16: 5e-2 and 0.15.
#include <catch2/catch.hpp>

#include <map>

#include "fixtures.h"
#include "llama_test_util.h"
#include "models/llama/attention_core.h"
#include "models/llama/model.h"
#include "models/llama/next_token.h"
#include "models/llama/sampler.h"
#include "models/llama/weights.h"

using namespace tandem;
using models::LlamaForCausalLM;

namespace {

bool gpu_visible() {
  if (torch::cuda::is_available()) return true;
  WARN("skipped: no GPU visible to LibTorch (torch::cuda::is_available() is false)");
  return false;
}

const torch::Device kGpu(torch::kCUDA, 0);

struct Run {
  std::vector<torch::Tensor> logp;             // per layout, float64 on the CPU
  std::map<std::string, torch::Tensor> grads;  // float64 on the CPU
};

// log-probs of a packed batch, its padded twin and a shared-prompt pack, and the gradients of a
// weighted sum of them, with the model on `device`.
Run run(LlamaForCausalLM& model, torch::Device device) {
  model->zero_grad();
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({7, 1, 12, 4, 9}, 97, 5));
  models::PackedInput shared = test::ragged_batch(test::random_sequences({5, 4, 1, 6, 3}, 97, 21)).packed;
  shared.prefix_of = torch::tensor({-1, 0, 0, 0, -1}, torch::kInt64);  // stays on the host
  shared.position_ids =
      torch::tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 5, 5, 6, 7, 8, 9, 10, 0, 1, 2}, torch::kInt64).view({1, -1});
  const torch::Tensor shared_targets = torch::tensor(test::random_sequences({19}, 97, 22)[0], torch::kInt64);
  models::PaddedInput padded = b.padded;
  padded.input_ids = padded.input_ids.to(device);
  padded.position_ids = padded.position_ids.to(device);
  padded.attention_mask = padded.attention_mask.to(device);
  Run r;
  torch::Tensor loss = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device));
  for (const models::TokenLogProbs& t : {model->log_probs(b.packed, b.packed_targets.to(device), {true}),
                                         model->log_probs(padded, b.padded_targets.to(device), {true}),
                                         model->log_probs(shared, shared_targets.to(device), {true})}) {
    r.logp.push_back(t.logp.detach().to(torch::kCPU, torch::kFloat64));
    const torch::Tensor w = test::random_weights(t.logp.numel(), 3, torch::kFloat64).to(device);
    loss = loss + (t.logp.to(torch::kFloat64) * w.view(t.logp.sizes())).sum() + t.entropy.to(torch::kFloat64).sum();
  }
  loss.backward();
  for (const auto& p : model->named_parameters())
    r.grads[p.key()] = p.value().grad().detach().to(torch::kCPU, torch::kFloat64).clone();
  return r;
}

void check_close(const Run& got, const Run& want, double logp_tol, double grad_tol) {
  for (size_t i = 0; i < want.logp.size(); ++i) {
    INFO("layout " << i);
    CHECK(test::rel_floor1(got.logp[i], want.logp[i]) < logp_tol);
  }
  for (const auto& [name, g] : want.grads) {
    INFO(name);
    CHECK(test::rel_to_max(got.grads.at(name), g) < grad_tol);
  }
}

}  // namespace

TEST_CASE("cuda: the model's forward and backward against the CPU float64 reference", "[cuda]") {
  if (!gpu_visible()) return;
  const std::string dir = test::llama_fixture("tiny_qwen2");
  LlamaForCausalLM reference = models::load_llama(dir, {}, torch::kFloat64);
  const Run want = run(reference, torch::kCPU);
  for (const auto& [dtype, logp_tol, grad_tol] :
       {std::tuple{torch::kFloat32, 1e-4, 1e-3}, std::tuple{torch::kBFloat16, 5e-2, 0.15}}) {
    INFO(c10::toString(dtype));
    LlamaForCausalLM model = models::load_llama(dir, {}, dtype);
    model->to(kGpu);
    check_close(run(model, kGpu), want, logp_tol, grad_tol);
  }
}

TEST_CASE("cuda: the fused attention equals the materialised one on the GPU", "[cuda]") {
  if (!gpu_visible()) return;
  LlamaForCausalLM model = models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat32);
  model->to(kGpu);
  model->set_execution(models::AttentionKernel::kMaterialised, false);
  const Run materialised = run(model, kGpu);
  model->set_execution(models::AttentionKernel::kFused, false);
  check_close(run(model, kGpu), materialised, 1e-5, 1e-4);
  model->set_execution(models::AttentionKernel::kFused, true);  // with layer recompute
  check_close(run(model, kGpu), materialised, 1e-5, 1e-4);
}

TEST_CASE("cuda: the sampler's choice on GPU logits is the host's, the logits never crossing whole", "[cuda]") {
  if (!gpu_visible()) return;
  const int64_t m = 16, n = 1000;
  const torch::Tensor z = torch::randn({m, n}, at::detail::createCPUGenerator(9), torch::kFloat32) * 3.0;  // (m, n)
  for (const double temperature : {1.0, 0.0}) {
    INFO("temperature " << temperature);
    models::SamplingParams p;
    p.temperature = temperature;
    p.vocab_limit = 900;
    const auto u = [&](int64_t i) { return (i + 0.5) / m; };
    const models::NextTokens host = models::next_tokens(z, p, u);
    const models::NextTokens gpu = models::next_tokens(z.to(kGpu), p, u);
    CHECK(gpu.tokens == host.tokens);
    for (int64_t i = 0; i < m; ++i) CHECK(std::abs(gpu.logp[i] - host.logp[i]) < 1e-5);
  }
}

namespace {

// The packed attention of 5 sequences (one of a single token), GQA 8 / 2 heads, head dim 64, on
// `device` in `dtype`: the output and q/k/v gradients of a weighted sum, float64 on the CPU.
std::vector<torch::Tensor> packed_attention_run(torch::Device device, torch::Dtype dtype, bool fused, int64_t window) {
  const std::vector<int64_t> lengths = {37, 1, 64, 20, 50};
  std::vector<int64_t> cu{0};
  for (const int64_t l : lengths) cu.push_back(cu.back() + l);
  const int64_t n = cu.back(), heads = 8, kv_heads = 2, dim = 64;
  const std::vector<models::AttentionSegment> segments = models::segments_from_cu_seqlens(torch::tensor(cu));
  const auto gen = at::detail::createCPUGenerator(11);
  const torch::Tensor q = torch::randn({n, heads, dim}, gen, torch::kFloat64);     // (N, H, D)
  const torch::Tensor k = torch::randn({n, kv_heads, dim}, gen, torch::kFloat64);  // (N, H_kv, D)
  const torch::Tensor v = torch::randn({n, kv_heads, dim}, gen, torch::kFloat64);
  const torch::Tensor w = torch::randn({n, heads, dim}, gen, torch::kFloat64);  // weights of the loss
  std::vector<torch::Tensor> in;  // fresh leaves (in float64 on the CPU, .to would return q itself)
  for (const torch::Tensor& t : {q, k, v}) in.push_back(t.to(device, dtype).clone().requires_grad_(true));
  const models::PackedAttentionPlan plan =
      models::plan_packed_attention(segments, n, n, heads, device, fused, models::kBucketSpanRatio, window);
  if (fused && device.is_cuda()) CHECK(plan.varlen_cu.defined());
  const torch::Tensor out = models::packed_attention(in[0], in[1], in[2], plan);  // (N, H, D)
  (out.to(torch::kFloat64) * w.to(device)).sum().backward();
  std::vector<torch::Tensor> r = {out.detach().to(torch::kCPU, torch::kFloat64)};
  for (const torch::Tensor& t : in) r.push_back(t.grad().to(torch::kCPU, torch::kFloat64));
  return r;
}

void check_attention_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want, double tol) {
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(names[i]);
    CHECK(test::rel_to_max(got[i], want[i]) < tol);
  }
}

}  // namespace

TEST_CASE("cuda: FlashAttention's variable-length kernel on packed rows equals the CPU float64 attention", "[cuda]") {
  if (!gpu_visible()) return;
  // With and without a window that bites (HF's: key j seen from query i when i - 16 < j <= i).
  for (const int64_t window : {int64_t{0}, int64_t{16}}) {
    INFO("window " << window);
    check_attention_close(packed_attention_run(kGpu, torch::kBFloat16, true, window),
                          packed_attention_run(torch::kCPU, torch::kFloat64, false, window), 2e-2);  // bf16
  }
}

// The GPU cases' own harness, run here on the CPU so that CI exercises it: float32 against the
// float64 reference within the GPU cases' float32 tolerances.
TEST_CASE("cuda harness on the CPU: the model run and the packed attention run meet their tolerances in float32",
          "[llama][cuda_harness]") {
  const std::string dir = test::llama_fixture("tiny_qwen2");
  LlamaForCausalLM reference = models::load_llama(dir, {}, torch::kFloat64);
  LlamaForCausalLM model = models::load_llama(dir, {}, torch::kFloat32);
  check_close(run(model, torch::kCPU), run(reference, torch::kCPU), 1e-4, 1e-3);
  for (const int64_t window : {int64_t{0}, int64_t{16}})
    check_attention_close(packed_attention_run(torch::kCPU, torch::kFloat32, true, window),
                          packed_attention_run(torch::kCPU, torch::kFloat64, false, window), 1e-5);
  // Control: a window the reference does not have moves the output past any tolerance above.
  CHECK(test::rel_to_max(packed_attention_run(torch::kCPU, torch::kFloat32, true, 16)[0],
                         packed_attention_run(torch::kCPU, torch::kFloat64, false, 0)[0]) > 5e-2);
}
