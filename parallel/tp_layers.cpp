// The f / g / gather autograd functions carry the communicator as an integer in saved_data;
// layers only compose them with torch::linear / torch::embedding.
#include "parallel/tp_layers.h"

namespace tandem::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t as_int(Communicator* comm) { return reinterpret_cast<int64_t>(comm); }
Communicator* as_comm(AutogradContext* ctx) { return reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt()); }

torch::Tensor all_reduced(const torch::Tensor& t, Communicator& comm) {
  torch::Tensor out = t.clone(at::MemoryFormat::Contiguous);
  comm.all_reduce(out);
  return out;
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduced(grads[0], *as_comm(ctx)), torch::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, int64_t comm) {
    return all_reduced(x, *reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

struct GatherLastDim : torch::autograd::Function<GatherLastDim> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm, int64_t begin) {
    ctx->saved_data["begin"] = begin;
    ctx->saved_data["size"] = x.size(-1);
    const int64_t n = x.size(-1);
    torch::Tensor rows = x.reshape({-1, n}).t().contiguous();                       // (n_r, A)
    torch::Tensor all = reinterpret_cast<Communicator*>(comm)->all_gather_v(rows);  // (n, A)
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = all.size(0);
    return all.t().reshape(shape);  // (..., n)
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t begin = ctx->saved_data["begin"].toInt(), size = ctx->saved_data["size"].toInt();
    return {grads[0].narrow(-1, begin, size).contiguous(), torch::Tensor(), torch::Tensor()};
  }
};

// x (M, in) @ [W_1; ...; W_k]^T (+ [b_1; ...; b_k]) as one GEMM, returned as the k column blocks
// (views of one (M, sum out) result). Its backward takes the blocks' gradients as they come:
// dX = sum_i g_i W_i, dW_i = g_i^T X and db_i = sum_rows g_i, where autograd's split backward would
// first cat them into one (M, sum out) gradient (a copy of the whole output: 0.76 s of a 25 s
// step at the mid bench workload). biases: empty, or one per weight.
struct FusedLinear : torch::autograd::Function<FusedLinear> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList weights,
                               at::TensorList biases) {
    std::vector<int64_t> sizes;
    for (const auto& w : weights) sizes.push_back(w.size(0));
    const torch::Tensor wt = torch::cat(weights, 0).t();  // (in, sum out)
    const torch::Tensor y =
        biases.empty() ? torch::matmul(x, wt) : torch::addmm(torch::cat(biases, 0), x, wt);  // (M, sum out)
    variable_list saved = {x};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["biases"] = static_cast<int64_t>(biases.size());
    return y.split_with_sizes(sizes, -1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];  // (M, in)
    const size_t k = saved.size() - 1;
    const bool with_bias = ctx->saved_data["biases"].toInt() > 0;
    variable_list out(1 + k + (with_bias ? k : 0));
    torch::Tensor dx;  // (M, in)
    // A frozen weight (LoRA's base) gets no gradient: skipping its GEMM is a third of the backward.
    const bool want_dx = ctx->needs_input_grad(0);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      const torch::Tensor g = grads[i].contiguous();  // (M, out_i)
      const torch::Tensor& w = saved[i + 1];          // (out_i, in)
      if (want_dx && !dx.defined()) {
        dx = torch::matmul(g, w);
      } else if (want_dx) {
        dx.addmm_(g, w);
      }
      if (ctx->needs_input_grad(i + 1)) out[i + 1] = torch::matmul(g.t(), x);        // (out_i, in)
      if (with_bias && ctx->needs_input_grad(1 + k + i)) out[1 + k + i] = g.sum(0);  // (out_i)
    }
    out[0] = dx;
    return out;
  }
};

thread_local bool t_lora_active = true;
thread_local bool t_sampling = false;
thread_local bool t_decode_kernel = true;

void check_factors(const torch::Tensor& a, const torch::Tensor& b, int64_t in, int64_t out, const char* what) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == in && b.size(0) == out && a.size(0) == b.size(1), what,
              ": LoRA factors A ", a.sizes(), " and B ", b.sizes(), " do not fit a layer of ", in, " -> ", out);
}

}  // namespace

// In the factors' dtype, which is x's in a run (attach_lora), so nothing is converted.
torch::Tensor lora_delta(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b, double scale,
                         torch::ScalarType dtype) {
  const torch::Tensor xa = torch::matmul(x.to(a.scalar_type()), a.t()) * scale;  // (..., r)
  return torch::matmul(xa, b.t()).to(dtype);                                     // (..., out)
}

torch::Tensor add_lora(torch::Tensor y, const torch::Tensor& x, const LoraFactors& f, PackedLora* packed) {
  if (!y.is_contiguous() || f.a.scalar_type() != y.scalar_type() || f.b.scalar_type() != y.scalar_type())
    return y + lora_delta(x, f.a, f.b, f.scale, y.scalar_type());
  const torch::Tensor x2 = x.reshape({-1, x.size(-1)});  // (M, in)
  const torch::Tensor y2 = y.view({-1, y.size(-1)});     // (M, out)
  const bool sampling = t_sampling && !at::GradMode::is_enabled();
  if (sampling && t_decode_kernel && packed != nullptr && y2.device().is_cpu() && y2.size(0) <= kLoraDecodeMaxRows) {
    const torch::Tensor& pa = packed->a.of(f.a);  // (tiles of r, in, tile)
    const torch::Tensor& pb = packed->b.of(f.b);  // (tiles of out, r, tile)
    if (lora_decode_applies(y2, x2, pa, pb)) {
      add_lora_decode(y2, x2, pa, pb, f.scale);
      return y;
    }
  }
  const torch::Tensor xa = torch::mm(x2, f.a.t());  // (M, r)
  // One addmm: no (M, out) product held beside y and then added to it. A no-grad scoring forward
  // runs these same ops, so its log-probs are the training forward's to the bit.
  if (!sampling) return torch::addmm(y2, xa, f.b.t(), 1.0, f.scale).view(y.sizes());
  // Sampling: y is this layer's fresh output, and B's GEMM accumulates into it in place, where
  // the decode step otherwise allocates a new output per adapted layer and token.
  y2.addmm_(xa, f.b.t(), 1.0, f.scale);
  return y;
}

bool lora_active() { return t_lora_active; }
SamplingGuard::SamplingGuard() : ScopedThreadFlag(t_sampling, true) { begin_sampling_scope(); }
LoraOffGuard::LoraOffGuard() : ScopedThreadFlag(t_lora_active, false) {}
LoraModeGuard::LoraModeGuard(bool active) : ScopedThreadFlag(t_lora_active, active) {}
LoraDecodeKernelGuard::LoraDecodeKernelGuard(bool enabled) : ScopedThreadFlag(t_decode_kernel, enabled) {}

torch::Tensor copy_to_tp(const torch::Tensor& x, Communicator* tp) {
  if (tp == nullptr || tp->size() == 1) return x;
  return CopyToTp::apply(x, as_int(tp));
}

torch::Tensor reduce_from_tp(const torch::Tensor& x, Communicator* tp) {
  if (tp == nullptr || tp->size() == 1) return x;
  return ReduceFromTp::apply(x, as_int(tp));
}

torch::Tensor gather_last_dim_from_tp(const torch::Tensor& x, Communicator* tp, int64_t local_begin) {
  if (tp == nullptr || tp->size() == 1) return x;
  return GatherLastDim::apply(x, as_int(tp), local_begin);
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, bool with_bias, const ParallelContext& ctx,
                                                   int64_t split_unit)
    : in_features(in),
      out_features(out),
      out_range(shard_range(out / split_unit, ctx.tp_rank, ctx.tp_size, split_unit)),
      tp_(ctx.tp) {
  TORCH_CHECK(out % split_unit == 0, "ColumnParallelLinear: ", out, " outputs are not a multiple of ", split_unit);
  weight = register_parameter("weight", torch::zeros({out_range.size(), in}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out_range.size()}));
}

void ColumnParallelLinearImpl::attach_lora(const torch::Tensor& a, const torch::Tensor& b, double scale) {
  check_factors(a, b, in_features, out_range.size(), "ColumnParallelLinear");
  lora_ = {register_parameter("lora_A", a), register_parameter("lora_B", b), scale};
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  const torch::Tensor xt = copy_to_tp(x, tp_);
  torch::Tensor y = torch::linear(xt, weight, bias);  // (..., out_local)
  if (lora_.defined() && t_lora_active)
    y = add_lora(y, xt, {copy_to_tp(lora_.a, tp_), lora_.b, lora_.scale}, &decode_packed_);
  return y;
}

std::vector<torch::Tensor> fused_column_parallel(const torch::Tensor& x,
                                                 const std::vector<const ColumnParallelLinearImpl*>& layers) {
  TORCH_CHECK(!layers.empty(), "fused_column_parallel: no layers");
  std::vector<torch::Tensor> weights, biases;
  for (const auto* l : layers) {
    TORCH_CHECK(l->tp() == layers[0]->tp() && l->bias.defined() == layers[0]->bias.defined(),
                "fused_column_parallel: layers differ in tp group or bias");
    weights.push_back(l->weight);
    if (l->bias.defined()) biases.push_back(l->bias);
  }
  const torch::Tensor xt = copy_to_tp(x, layers[0]->tp());
  const torch::Tensor x2 = xt.reshape({-1, xt.size(-1)});  // (M, in)
  const auto unflatten = [&](std::vector<torch::Tensor> parts) {
    for (auto& p : parts) {
      std::vector<int64_t> shape(xt.sizes().begin(), xt.sizes().end() - 1);
      shape.push_back(p.size(-1));
      p = p.view(shape);  // (..., out_local)
    }
    return parts;
  };
  if (t_sampling && !at::GradMode::is_enabled()) {
    // Sampling has no backward to share, and concatenating the weights would copy them on every
    // call: at a decode step's few rows that copy costs more than the GEMMs (the Qwen2-0.5B
    // shape's gate/up: 5.6 ms fused vs 1.6 ms apart at 16 rows, bf16, 2 threads; level from 256
    // rows up). Not for a no-grad scoring forward, whose bits must be the training forward's.
    std::vector<torch::Tensor> parts;
    for (const auto* l : layers) {
      torch::Tensor y = l->bias.defined() ? torch::addmm(l->bias, x2, l->weight.t()) : torch::mm(x2, l->weight.t());
      if (l->lora().defined() && t_lora_active) y = add_lora(y, x2, l->lora(), &l->decode_packed());
      parts.push_back(y);  // (M, out_local)
    }
    return unflatten(std::move(parts));
  }
  // As TensorLists, so that autograd sees every weight and bias as an input (a std::vector would not be).
  std::vector<torch::Tensor> parts = FusedLinear::apply(x2, at::TensorList(weights), at::TensorList(biases));
  // The adapters' A factors of all the layers as one GEMM too: x A_cat^T is (M, sum r).
  std::vector<torch::Tensor> as;
  std::vector<int64_t> ranks;
  for (const auto* l : layers)
    if (l->lora().defined() && t_lora_active)
      as.push_back(copy_to_tp(l->lora().a, l->tp()) * l->lora().scale), ranks.push_back(l->lora().a.size(0));
  if (!as.empty()) {
    const torch::Tensor xa = torch::matmul(x2.to(as[0].scalar_type()), torch::cat(as, 0).t());  // (M, sum r)
    const std::vector<torch::Tensor> xas = xa.split_with_sizes(ranks, -1);                      // (M, r) each
    size_t j = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
      if (!layers[i]->lora().defined()) continue;
      const torch::Tensor& b = layers[i]->lora().b;  // (out_i, r)
      const torch::Tensor& xai = xas[j++];           // (M, r), scaled
      parts[i] = b.scalar_type() == parts[i].scalar_type()
                     ? torch::addmm(parts[i], xai, b.t())
                     : parts[i] + torch::matmul(xai, b.t()).to(parts[i].scalar_type());
    }
  }
  return unflatten(std::move(parts));
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, bool with_bias, const ParallelContext& ctx,
                                             int64_t split_unit)
    : in_features(in),
      out_features(out),
      in_range(shard_range(in / split_unit, ctx.tp_rank, ctx.tp_size, split_unit)),
      tp_(ctx.tp) {
  TORCH_CHECK(in % split_unit == 0, "RowParallelLinear: ", in, " inputs are not a multiple of ", split_unit);
  weight = register_parameter("weight", torch::zeros({out, in_range.size()}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
}

void RowParallelLinearImpl::attach_lora(const torch::Tensor& a, const torch::Tensor& b, double scale) {
  check_factors(a, b, in_range.size(), out_features, "RowParallelLinear");
  lora_ = {register_parameter("lora_A", a), register_parameter("lora_B", b), scale};
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor partial = torch::linear(x, weight);  // (..., out): this rank's share of the sum over tp
  // B (A_r x_r) summed over tp is B A x: the adapter's share joins the layer's one reduction.
  if (lora_.defined() && t_lora_active)
    partial = add_lora(partial, x, {lora_.a, copy_to_tp(lora_.b, tp_), lora_.scale}, &decode_packed_);
  torch::Tensor y = reduce_from_tp(partial, tp_);  // (..., out)
  return bias.defined() ? y + bias : y;
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t num, int64_t dim, const ParallelContext& ctx)
    : num_embeddings(num), embedding_dim(dim), vocab_range(shard_range(num, ctx.tp_rank, ctx.tp_size)), tp_(ctx.tp) {
  weight = register_parameter("weight", torch::zeros({vocab_range.size(), dim}));
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  if (tp_ == nullptr || tp_->size() == 1) return torch::embedding(weight, ids);         // (..., dim)
  const torch::Tensor in_shard = (ids >= vocab_range.begin) & (ids < vocab_range.end);  // (...)
  const torch::Tensor local = torch::where(in_shard, ids - vocab_range.begin, torch::zeros_like(ids));
  torch::Tensor rows = torch::embedding(weight, local) * in_shard.unsqueeze(-1).to(weight.scalar_type());
  return reduce_from_tp(rows, tp_);  // (..., dim)
}

}  // namespace tandem::parallel
