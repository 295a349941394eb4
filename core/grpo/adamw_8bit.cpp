// AdamW with blockwise 8-bit moments; the arithmetic mirrors torchao.optim.AdamW8bit op for op
// (single_param_adam), so scripts/fixtures/adamw8bit_oracle.py can hold it to torchao's numbers.
// Float32 parameters on the host take two fused passes per block around ATen's square root, the
// same float32 operations in the same order (the moments and codes come out bitwise equal to the
// tensor-op form's); the tensor-op form stays for other devices and dtypes.
#include "core/grpo/adamw_8bit.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

namespace tandem {

namespace {
constexpr int64_t kStepChunk = int64_t{1} << 20;  // elements per pass of a quantised tensor's update

// One step's scalars, each rounded to float32 as torchao's tensor arithmetic rounds it.
struct StepScalars {
  float lr, lr_decay;  // lr, and lr * weight_decay
  float w1, w2;        // the lerp weights 1 - beta1, 1 - beta2
  float bc1, bc2_sqrt, eps;
};

// ATen's vectorised lerp (lerp_vec): one fused multiply-add from the nearer end, as torchao's
// moments are computed on any AVX2 or AVX512 host. Rounding twice instead moves a moment by an ulp,
// enough to flip a code now and then and move the parameter by some 1e-5 over 20 steps.
inline float lerp(float self, float end, float w) {
  return std::abs(w) < 0.5f ? std::fma(w, end - self, self) : std::fma(w - 1.0f, end - self, end);
}

// The quantised update of blocks [b0, b1) on the host, in two passes around ATen's square root:
// the first decays the parameter and writes both moments (dequantised, then lerped) to m and v,
// the second steps the parameter from m, v and sq = sqrt(v) and requantises. The square root is
// torch::sqrt's, as torchao's: ATen computes it with oneMKL's vector math, which on the AMD hosts
// is not correctly rounded (an ulp off std::sqrt for ~17% of floats), so a std::sqrt here moved the
// parameters 1.5e-5 from torchao's over 20 steps there. The ATen form below makes some thirty passes
// over int64 and float32 temporaries instead; this is the same arithmetic in the same order
// (single_param_adam, quantize_8bit_with_qmap).
void moments_blocks_cpu(float* p, const float* g, const uint8_t* m_codes, const float* m_scale, const uint8_t* v_codes,
                        const float* v_scale, float* m, float* v, int64_t b0, int64_t b1, const NearestCode& m_code,
                        const NearestCode& v_code, const StepScalars& k) {
  for (int64_t o = b0 * kMomentBlock; o < b1 * kMomentBlock; ++o) {
    const int64_t b = o / kMomentBlock;
    const float gj = g[o];
    p[o] = p[o] - k.lr_decay * p[o];  // decoupled decay
    m[o] = lerp(m_code.value(m_codes[o]) * m_scale[b], gj, k.w1);
    v[o] = lerp(v_code.value(v_codes[o]) * v_scale[b], gj * gj, k.w2);
  }
}

void update_blocks_cpu(float* p, const float* m, const float* v, const float* sq, uint8_t* m_codes, float* m_scale,
                       uint8_t* v_codes, float* v_scale, int64_t b0, int64_t b1, const NearestCode& m_code,
                       const NearestCode& v_code, const StepScalars& k) {
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t o = b * kMomentBlock;
    float m_max = 0.0f, v_max = 0.0f;
    for (int64_t j = o; j < o + kMomentBlock; ++j) {
      const float denom = sq[j] / k.bc2_sqrt + k.eps;
      p[j] = p[j] - k.lr * (m[j] / k.bc1) / denom;
      // amax's NaN propagation: a NaN moment makes its block's scale NaN, as torchao's would.
      const float ma = std::abs(m[j]), va = std::abs(v[j]);
      m_max = std::isnan(ma) || ma > m_max ? ma : m_max;
      v_max = std::isnan(va) || va > v_max ? va : v_max;
    }
    m_scale[b] = std::max(m_max, 1e-12f);
    v_scale[b] = std::max(v_max, 1e-12f);
    for (int64_t j = o; j < o + kMomentBlock; ++j) {
      m_codes[j] = m_code(m[j] / m_scale[b]);
      v_codes[j] = v_code(v[j] / v_scale[b]);
    }
  }
}
}  // namespace

NearestCode::NearestCode(const torch::Tensor& qmap) : qmap_(qmap.contiguous()), floor_(size_t{1} << 16) {
  TORCH_CHECK(qmap_.scalar_type() == torch::kFloat32 && qmap_.numel() == 256, "NearestCode: a (256,) float32 map");
  q_ = qmap_.data_ptr<float>();
  // The search's answer for the lowest float of each top-16-bit prefix (sign, exponent, 7 mantissa
  // bits). The search only grows with x, so a float's own answer is there or above, and the scan
  // finds it: a prefix spans 0.8% of a value, and the map's entries are 0.35% apart at the closest.
  for (uint32_t prefix = 0; prefix < floor_.size(); ++prefix) {
    const uint32_t lowest = prefix << 16 | ((prefix & 0x8000) != 0 ? 0xFFFF : 0);  // most negative if signed
    floor_[prefix] = static_cast<uint8_t>(search(std::bit_cast<float>(lowest)));
  }
}

int NearestCode::search(float x) const {
  int c = x >= q_[128] ? 128 : 0;
  for (int half = 64; half >= 1; half /= 2) c += x >= q_[c + half] ? half : 0;
  return c;
}

uint8_t NearestCode::round_up(float x, int c) const {
  const int up = std::min(c + 1, 255);
  return static_cast<uint8_t>(x - q_[c] >= (q_[up] - q_[c]) * 0.5f ? up : c);
}

uint8_t NearestCode::by_search(float x) const { return round_up(x, search(x)); }

torch::Tensor dynamic_map(bool is_signed) {
  // bitsandbytes' create_dynamic_map with max_exponent_bits 7 and total_bits 8: per exponent i,
  // 2^i (signed, both signs) or 2^(i+1) (unsigned) midpoints of linspace(0.1, 1) scaled by
  // 10^(i-6); its "additional items" term is 2^(7-7)-1 = 0 here. Built with the same float32
  // tensor ops as the Python, so the values are the same floats.
  constexpr int kExponentBits = 7;
  std::vector<float> data;
  for (int i = 0; i < kExponentBits; ++i) {
    const int64_t items = is_signed ? (int64_t{1} << i) + 1 : (int64_t{1} << (i + 1)) + 1;
    const torch::Tensor b = torch::linspace(0.1, 1, items);                        // (items,) float32
    const torch::Tensor means = (b.slice(0, 0, items - 1) + b.slice(0, 1)) / 2.0;  // (items - 1,)
    const torch::Tensor pos = (means * std::pow(10.0, -(kExponentBits - 1) + i)).contiguous();
    const float* v = pos.data_ptr<float>();
    for (int64_t k = 0; k < pos.numel(); ++k) data.push_back(v[k]);
    if (is_signed) {
      const torch::Tensor neg = (means * -std::pow(10.0, -(kExponentBits - 1) + i)).contiguous();
      const float* w = neg.data_ptr<float>();
      for (int64_t k = 0; k < neg.numel(); ++k) data.push_back(w[k]);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  TORCH_CHECK(data.size() == 256, "dynamic_map: ", data.size(), " values, expected 256");
  std::sort(data.begin(), data.end());
  return torch::tensor(data, torch::kFloat32);
}

bool quantizes_moments(const torch::Tensor& param) {
  return param.numel() >= kMinQuantizedNumel && param.numel() % kMomentBlock == 0;
}

BlockwiseCodes quantize_blockwise(const torch::Tensor& x, const torch::Tensor& host_qmap) {
  const torch::Tensor qmap = host_qmap.to(x.device());  // (256) the tables are built on the host
  TORCH_CHECK(x.numel() % kMomentBlock == 0, "quantize_blockwise: ", x.numel(), " elements is not a multiple of ",
              kMomentBlock);
  const torch::Tensor blocks = x.reshape({-1, kMomentBlock});                 // (N / 256, 256)
  const torch::Tensor scale = blocks.abs().amax(-1).clamp_min(1e-12);         // (N / 256,)
  const torch::Tensor scaled = (blocks / scale.view({-1, 1})).reshape({-1});  // (N,) in [-1, 1]
  // The last entry <= each value (entry 0 below the map), then up when at least half-way to the
  // next: torchao's branchless binary search and rounding, as one searchsorted.
  const torch::Tensor down = (torch::searchsorted(qmap, scaled, false, true) - 1).clamp(0, 255);  // (N,) int64
  const torch::Tensor up = (down + 1).clamp_max(255);
  const torch::Tensor down_v = qmap.index_select(0, down), up_v = qmap.index_select(0, up);
  const torch::Tensor codes = torch::where(scaled - down_v >= (up_v - down_v) * 0.5, up, down);
  return {codes.to(torch::kUInt8).view(x.sizes()), scale};
}

torch::Tensor dequantize_blockwise(const BlockwiseCodes& q, const torch::Tensor& host_qmap) {
  const torch::Tensor qmap = host_qmap.to(q.codes.device());                             // (256)
  const torch::Tensor v = qmap.index_select(0, q.codes.reshape({-1}).to(torch::kLong));  // (N,)
  return (v.view({-1, kMomentBlock}) * q.scale.view({-1, 1})).view(q.codes.sizes());
}

AdamW8bit::AdamW8bit(const std::vector<torch::Tensor>& params, const torch::optim::AdamWOptions& options,
                     bool host_kernel)
    : torch::optim::Optimizer(params, std::make_unique<torch::optim::AdamWOptions>(options)),
      qmap_signed_(dynamic_map(true)),
      qmap_unsigned_(dynamic_map(false)),
      code_signed_(qmap_signed_),
      code_unsigned_(qmap_unsigned_),
      host_kernel_(host_kernel) {
  moments_.resize(all_params().size());
}

void AdamW8bit::zero_moments(Moments& s, const torch::Tensor& p) {
  if (s.exp_avg.defined() || s.exp_avg_q.codes.defined()) return;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(p.device());
  if (quantizes_moments(p)) {
    const int64_t blocks = p.numel() / kMomentBlock;
    for (BlockwiseCodes* q : {&s.exp_avg_q, &s.exp_avg_sq_q})
      *q = {torch::zeros(p.sizes(), f32.dtype(torch::kUInt8)), torch::zeros({blocks}, f32)};
  } else {
    s.exp_avg = torch::zeros(p.sizes(), f32);
    s.exp_avg_sq = torch::zeros(p.sizes(), f32);
  }
}

void AdamW8bit::allocate_state() {
  const std::vector<torch::Tensor> params = all_params();
  for (size_t i = 0; i < params.size(); ++i) zero_moments(moments_[i], params[i]);
}

std::vector<torch::Tensor> AdamW8bit::all_params() const {
  std::vector<torch::Tensor> out;
  for (const auto& g : param_groups()) out.insert(out.end(), g.params().begin(), g.params().end());
  return out;
}

torch::Tensor AdamW8bit::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode grad_mode(true);
    loss = closure();
  }
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> params = all_params();
  TORCH_CHECK(params.size() == moments_.size(), "AdamW8bit: parameter groups changed after construction");
  size_t i = 0;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    const torch::Tensor lr = torch::tensor(static_cast<float>(o.lr()));  // torchao keeps lr as a float32 tensor
    for (auto& p : group.params()) {
      Moments& s = moments_[i++];
      if (!p.grad().defined()) continue;
      const bool quantized = quantizes_moments(p);
      zero_moments(s, p);
      s.step += 1;
      const torch::Tensor step = torch::tensor(static_cast<float>(s.step));
      const torch::Tensor bias_correction1 = 1 - torch::pow(beta1, step);
      const torch::Tensor bias_correction2 = 1 - torch::pow(beta2, step);
      // torchao's single_param_adam on one slice: the new float32 parameter, moments updated in place.
      auto adam = [&](const torch::Tensor& p_in, const torch::Tensor& grad, torch::Tensor& m, torch::Tensor& v) {
        torch::Tensor p32 = p_in.to(torch::kFloat32);
        const torch::Tensor g = grad.to(torch::kFloat32);
        p32 = p32 - lr * o.weight_decay() * p32;  // decoupled decay
        m = m.lerp(g, 1 - beta1);
        v = v.lerp(g.square(), 1 - beta2);
        const torch::Tensor denom = v.sqrt() / bias_correction2.sqrt() + o.eps();
        return p32 - lr * (m / bias_correction1) / denom;  // this step's float32 moments, as torchao
      };
      if (!quantized) {
        p.copy_(adam(p, p.grad(), s.exp_avg, s.exp_avg_sq));
        continue;
      }
      // Block-aligned chunks: every op is elementwise or per block, so this is the whole-tensor
      // update, with float32 / int64 temporaries bounded by the chunk (an embedding is 136 M elements).
      TORCH_CHECK(p.is_contiguous(), "AdamW8bit: parameter ", i - 1, " is not contiguous");
      const torch::Tensor flat = p.view({-1}), grad = p.grad().reshape({-1});  // (N)
      const torch::Tensor m_codes = s.exp_avg_q.codes.view({-1}), v_codes = s.exp_avg_sq_q.codes.view({-1});
      if (host_kernel_ && p.device().is_cpu() && p.scalar_type() == torch::kFloat32) {
        const StepScalars k{lr.item<float>(),
                            (lr * o.weight_decay()).item<float>(),
                            static_cast<float>(1 - beta1),
                            static_cast<float>(1 - beta2),
                            bias_correction1.item<float>(),
                            bias_correction2.sqrt().item<float>(),
                            static_cast<float>(o.eps())};
        for (int64_t start = 0; start < flat.numel(); start += kStepChunk) {
          const int64_t len = std::min(kStepChunk, flat.numel() - start);
          const torch::Tensor g = grad.slice(0, start, start + len).to(torch::kFloat32).contiguous();  // (len)
          const int64_t c0 = start / kMomentBlock;  // the chunk's first block
          float* pp = flat.data_ptr<float>() + start;
          uint8_t *mc = m_codes.data_ptr<uint8_t>() + start, *vc = v_codes.data_ptr<uint8_t>() + start;
          float *ms = s.exp_avg_q.scale.data_ptr<float>() + c0, *vs = s.exp_avg_sq_q.scale.data_ptr<float>() + c0;
          const torch::Tensor m = torch::empty({len}, g.options()), v = torch::empty({len}, g.options());  // (len)
          at::parallel_for(0, len / kMomentBlock, 16, [&](int64_t b0, int64_t b1) {
            moments_blocks_cpu(pp, g.data_ptr<float>(), mc, ms, vc, vs, m.data_ptr<float>(), v.data_ptr<float>(), b0,
                               b1, code_signed_, code_unsigned_, k);
          });
          const torch::Tensor sq = v.sqrt();  // (len) ATen's, as torchao's (above)
          at::parallel_for(0, len / kMomentBlock, 16, [&](int64_t b0, int64_t b1) {
            update_blocks_cpu(pp, m.data_ptr<float>(), v.data_ptr<float>(), sq.data_ptr<float>(), mc, ms, vc, vs, b0,
                              b1, code_signed_, code_unsigned_, k);
          });
        }
        torch::autograd::impl::bump_version(p);  // written through data_ptr: as copy_ would, for autograd's checks
        continue;
      }
      for (int64_t start = 0; start < flat.numel(); start += kStepChunk) {
        const int64_t len = std::min(kStepChunk, flat.numel() - start);
        const int64_t b0 = start / kMomentBlock, nb = len / kMomentBlock;
        BlockwiseCodes mq{m_codes.slice(0, start, start + len), s.exp_avg_q.scale.slice(0, b0, b0 + nb)};
        BlockwiseCodes vq{v_codes.slice(0, start, start + len), s.exp_avg_sq_q.scale.slice(0, b0, b0 + nb)};
        torch::Tensor m = dequantize_blockwise(mq, qmap_signed_), v = dequantize_blockwise(vq, qmap_unsigned_);
        const torch::Tensor p_new = adam(flat.slice(0, start, start + len), grad.slice(0, start, start + len), m, v);
        const BlockwiseCodes m_new = quantize_blockwise(m, qmap_signed_), v_new = quantize_blockwise(v, qmap_unsigned_);
        mq.codes.copy_(m_new.codes), mq.scale.copy_(m_new.scale);
        vq.codes.copy_(v_new.codes), vq.scale.copy_(v_new.scale);
        flat.slice(0, start, start + len).copy_(p_new);
      }
    }
  }
  return loss;
}

namespace {
std::string key(size_t i, const char* what) { return "adamw8bit.p" + std::to_string(i) + "." + what; }
}  // namespace

void AdamW8bit::save(torch::serialize::OutputArchive& archive) const {
  archive.write("adamw8bit.num_params", torch::tensor(static_cast<int64_t>(moments_.size())));
  for (size_t i = 0; i < moments_.size(); ++i) {
    const Moments& s = moments_[i];
    archive.write(key(i, "step"), torch::tensor(s.step));
    if (s.step == 0) continue;
    if (s.exp_avg_q.codes.defined()) {
      archive.write(key(i, "exp_avg.codes"), s.exp_avg_q.codes);
      archive.write(key(i, "exp_avg.scale"), s.exp_avg_q.scale);
      archive.write(key(i, "exp_avg_sq.codes"), s.exp_avg_sq_q.codes);
      archive.write(key(i, "exp_avg_sq.scale"), s.exp_avg_sq_q.scale);
    } else {
      archive.write(key(i, "exp_avg"), s.exp_avg);
      archive.write(key(i, "exp_avg_sq"), s.exp_avg_sq);
    }
  }
}

void AdamW8bit::load(torch::serialize::InputArchive& archive) {
  const std::vector<torch::Tensor> params = all_params();
  torch::Tensor t;
  archive.read("adamw8bit.num_params", t);
  TORCH_CHECK(t.item<int64_t>() == static_cast<int64_t>(params.size()), "the 8-bit AdamW state holds ",
              t.item<int64_t>(), " parameters, this model has ", params.size());
  std::vector<Moments> loaded(params.size());
  auto read = [&](size_t i, const char* what, torch::ScalarType dtype, at::IntArrayRef shape) {
    torch::Tensor x;
    archive.read(key(i, what), x);
    TORCH_CHECK(x.scalar_type() == dtype && x.sizes() == shape, key(i, what), ": ", x.scalar_type(), " ", x.sizes(),
                ", expected ", dtype, " ", shape);
    TORCH_CHECK(dtype == torch::kUInt8 || torch::isfinite(x).all().item<bool>(), key(i, what), ": not finite");
    return x.to(params[i].device());
  };
  for (size_t i = 0; i < params.size(); ++i) {
    Moments& s = loaded[i];
    archive.read(key(i, "step"), t);
    s.step = t.item<int64_t>();
    TORCH_CHECK(s.step >= 0, key(i, "step"), ": negative");
    if (s.step == 0) continue;
    const auto shape = params[i].sizes();
    if (quantizes_moments(params[i])) {
      const int64_t blocks = params[i].numel() / kMomentBlock;
      s.exp_avg_q = {read(i, "exp_avg.codes", torch::kUInt8, shape),
                     read(i, "exp_avg.scale", torch::kFloat32, {blocks})};
      s.exp_avg_sq_q = {read(i, "exp_avg_sq.codes", torch::kUInt8, shape),
                        read(i, "exp_avg_sq.scale", torch::kFloat32, {blocks})};
    } else {
      s.exp_avg = read(i, "exp_avg", torch::kFloat32, shape);
      s.exp_avg_sq = read(i, "exp_avg_sq", torch::kFloat32, shape);
    }
  }
  moments_ = std::move(loaded);
}

int64_t AdamW8bit::state_bytes() const {
  int64_t n = 0;
  for (const Moments& s : moments_)
    for (const torch::Tensor* x : {&s.exp_avg, &s.exp_avg_sq, &s.exp_avg_q.codes, &s.exp_avg_q.scale,
                                   &s.exp_avg_sq_q.codes, &s.exp_avg_sq_q.scale})
      if (x->defined()) n += x->nbytes();
  return n;
}

}  // namespace tandem
