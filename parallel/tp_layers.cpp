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

// [W_1 B_1' ...; W_k ... B_k'] (sum out, in + sum r): the group's weights side by side with their
// B factors, block i's B_i in the columns of its own r_i and zeros in the others', so that
// [x, x a^T] times its transpose is every block's W_i x + B_i (s A_i x). Against adding each B
// GEMM into the output afterwards, this drops a read and a write of the whole output (gate/up:
// 1,436 x 9,728 bf16) for a GEMM 7% deeper.
torch::Tensor folded_weights(at::TensorList weights, at::TensorList bs, const std::vector<int64_t>& ranks) {
  int64_t out = 0, r = 0;
  for (size_t i = 0; i < weights.size(); ++i) out += weights[i].size(0), r += ranks[i];
  const int64_t in = weights[0].size(1);
  for (const torch::Tensor& wi : weights)
    TORCH_CHECK(wi.size(1) == in && wi.scalar_type() == weights[0].scalar_type() && wi.device() == weights[0].device(),
                "fused projections: weights differ in input size, dtype or device");
  torch::Tensor w = torch::empty({out, in + r}, weights[0].options());  // (sum out, in + sum r)
  int64_t row = 0, col = 0;
  size_t j = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const torch::Tensor block = w.narrow(0, row, weights[i].size(0));  // (out_i, in + sum r)
    block.narrow(1, 0, in).copy_(weights[i]);
    torch::Tensor tail = block.narrow(1, in, r);  // (out_i, sum r)
    tail.zero_();
    if (ranks[i] > 0) tail.narrow(1, col, ranks[i]).copy_(bs[j++]);
    col += ranks[i];
    row += weights[i].size(0);
  }
  return w;
}

// x (M, in) @ [W_1; ...; W_k]^T (+ [b_1; ...; b_k]) as one GEMM, returned as the k column blocks
// (views of one (M, sum out) result). Its backward takes the blocks' gradients as they come:
// dX = sum_i g_i W_i, dW_i = g_i^T X and db_i = sum_rows g_i, where autograd's split backward would
// first cat them into one (M, sum out) gradient (a copy of the whole output: 0.76 s of a 25 s
// step at the mid bench workload). biases: empty, or one per weight.
//
// With LoRA, block i with ranks[i] > 0 also gets xa_i B_i^T, where xa (M, sum r) = x a^T, a the
// adapted blocks' scaled A factors stacked, [s_1 A_1; ...] (sum r, in), and bs their B in order.
// A group of k > 1 blocks folds the B factors into its concatenated weights (folded_weights); one
// weight gets its B product added in place, inside this node: out of place, autograd's addmm wrote
// a fresh (M, out_i) tensor beside each block (gate/up at 2,624 rows: 7 ms each against 2 ms in
// place), and a block's view cannot be modified in place outside the node. The backward adds
// dxa a into dX in place too, where autograd would sum a second (M, in) gradient of x into it (8 ms
// for down_proj's input at 2,624 rows). dxa_i = g_i B_i, dB_i = g_i^T xa_i, da = dxa^T x. a is
// absent (nullopt) without adapters: an undefined tensor has no device for autograd's metadata.
struct FusedLinear : torch::autograd::Function<FusedLinear> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList weights,
                               at::TensorList biases, const std::optional<torch::Tensor>& a_in, at::TensorList bs,
                               const std::vector<int64_t>& ranks) {
    // An unused block's gradient stays undefined (not zeros), so an adapter on it gets none.
    ctx->set_materialize_grads(false);
    std::vector<int64_t> sizes;
    for (const auto& w : weights) sizes.push_back(w.size(0));
    torch::Tensor a, xa;  // (sum r, in), (M, sum r)
    if (a_in.has_value()) {
      a = *a_in;
      xa = torch::mm(x, a.t());
    }
    const torch::Tensor bias = biases.empty()       ? torch::Tensor()
                               : biases.size() == 1 ? biases[0]
                                                    : torch::cat(biases, 0);
    // A group's weights are copied into one matrix anyway; with adapters the B factors join it
    // (folded_weights) and the GEMM's rows are [x, xa], so each block gets its adapter inside the
    // one accumulation. One weight is used as it is (cat would copy it) and its B GEMM adds in place.
    const bool fold = xa.defined() && weights.size() > 1;
    const torch::Tensor lhs = fold ? torch::cat({x, xa}, 1) : x;  // (M, in [+ sum r])
    const torch::Tensor wt = (fold                  ? folded_weights(weights, bs, ranks)
                              : weights.size() == 1 ? weights[0]
                                                    : torch::cat(weights, 0))
                                 .t();  // (in [+ sum r], sum out)
    const torch::Tensor y = bias.defined() ? torch::addmm(bias, lhs, wt) : torch::matmul(lhs, wt);  // (M, sum out)
    std::vector<torch::Tensor> parts = y.split_with_sizes(sizes, -1);                               // (M, out_i) each
    if (xa.defined() && !fold) {
      int64_t col = 0;
      size_t j = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        if (ranks[i] == 0) continue;
        parts[i].addmm_(xa.narrow(1, col, ranks[i]), bs[j++].t());  // (M, out_i) += (M, r_i) (r_i, out_i)
        col += ranks[i];
      }
    }
    variable_list saved = {x, a, xa};
    saved.insert(saved.end(), weights.begin(), weights.end());
    saved.insert(saved.end(), bs.begin(), bs.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["biases"] = static_cast<int64_t>(biases.size());
    ctx->saved_data["ranks"] = ranks;
    return parts;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &a = saved[1], &xa = saved[2];  // (M, in), (sum r, in), (M, sum r)
    const std::vector<int64_t> ranks = ctx->saved_data["ranks"].toIntVector();
    const size_t k = ranks.size(), nb = saved.size() - 3 - k;
    const size_t n_bias = ctx->saved_data["biases"].toInt() > 0 ? k : 0;
    // Positions among the inputs: x, the weights, the biases, a, the B factors, then ranks. Without
    // adapters a is no variable, but nothing after it is either, so no index shifts.
    const size_t at_a = 1 + k + n_bias, at_b = at_a + 1;
    variable_list out(at_b + nb + 1);
    torch::Tensor dx;  // (M, in)
    // A frozen weight (LoRA's base) gets no gradient: skipping its GEMM is a third of the backward.
    const bool want_dx = ctx->needs_input_grad(0);
    const bool want_dxa = nb > 0 && (want_dx || ctx->needs_input_grad(at_a));
    std::vector<torch::Tensor> dxas;  // (M, r_i) per adapted block
    int64_t col = 0;
    size_t j = 0;
    for (size_t i = 0; i < k; ++i) {
      const torch::Tensor& w = saved[3 + i];  // (out_i, in)
      const bool adapted = ranks[i] > 0;
      if (!grads[i].defined()) {
        if (adapted && want_dxa) dxas.push_back(torch::zeros({xa.size(0), ranks[i]}, xa.options()));
        if (adapted) col += ranks[i], ++j;
        continue;
      }
      const torch::Tensor g = grads[i].contiguous();  // (M, out_i)
      if (want_dx && !dx.defined()) {
        dx = torch::matmul(g, w);
      } else if (want_dx) {
        dx.addmm_(g, w);
      }
      if (ctx->needs_input_grad(1 + i)) out[1 + i] = torch::matmul(g.t(), x);         // (out_i, in)
      if (n_bias > 0 && ctx->needs_input_grad(1 + k + i)) out[1 + k + i] = g.sum(0);  // (out_i)
      if (!adapted) continue;
      const torch::Tensor& b = saved[3 + k + j];      // (out_i, r_i)
      if (want_dxa) dxas.push_back(torch::mm(g, b));  // (M, r_i)
      if (ctx->needs_input_grad(at_b + j)) out[at_b + j] = torch::mm(g.t(), xa.narrow(1, col, ranks[i]));
      col += ranks[i];
      ++j;
    }
    if (want_dxa) {
      const torch::Tensor dxa = dxas.size() == 1 ? dxas[0] : torch::cat(dxas, 1);  // (M, sum r)
      if (want_dx && dx.defined()) {
        dx.addmm_(dxa, a);
      } else if (want_dx) {
        dx = torch::mm(dxa, a);
      }
      if (ctx->needs_input_grad(at_a)) out[at_a] = torch::mm(dxa.t(), x);  // (sum r, in)
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

// x2 (M, in) through FusedLinear: the k weights' blocks (M, out_i), each with its adapter (loras[i],
// undefined for none) added, its A and B as the layer's tp style gives them, inside the node where
// the factors share the output's dtype (a run's, attach_lora), else out of place after it.
std::vector<torch::Tensor> fused_linear(const torch::Tensor& x2, const std::vector<torch::Tensor>& weights,
                                        const std::vector<torch::Tensor>& biases,
                                        const std::vector<LoraFactors>& loras) {
  std::vector<torch::Tensor> as, bs;
  std::vector<int64_t> ranks;
  bool in_place = true;
  for (size_t i = 0; i < weights.size(); ++i) {
    const LoraFactors& f = loras[i];
    ranks.push_back(f.defined() ? f.a.size(0) : 0);
    if (!f.defined()) continue;
    as.push_back(f.a * f.scale);
    bs.push_back(f.b);
    in_place = in_place && f.a.scalar_type() == x2.scalar_type() && f.b.scalar_type() == weights[i].scalar_type() &&
               x2.scalar_type() == weights[i].scalar_type();
  }
  // As TensorLists, so that autograd sees every weight, bias and factor as an input (a std::vector would not be).
  if (as.empty() || in_place)
    return FusedLinear::apply(
        x2, at::TensorList(weights), at::TensorList(biases),
        as.empty() ? std::nullopt : std::optional<torch::Tensor>(as.size() == 1 ? as[0] : torch::cat(as, 0)),
        at::TensorList(bs), ranks);
  const torch::Tensor xa = torch::matmul(x2.to(as[0].scalar_type()), torch::cat(as, 0).t());  // (M, sum r), scaled
  std::vector<torch::Tensor> parts =
      FusedLinear::apply(x2, at::TensorList(weights), at::TensorList(biases), std::nullopt, at::TensorList(),
                         std::vector<int64_t>(weights.size(), 0));
  int64_t col = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (ranks[i] == 0) continue;
    const torch::Tensor xai = xa.narrow(1, col, ranks[i]);  // (M, r), scaled
    col += ranks[i];
    parts[i] = parts[i] + torch::matmul(xai, loras[i].b.t()).to(parts[i].scalar_type());
  }
  return parts;
}

// Sampling (no autograd) runs its own path: no backward to share, the decode kernel for few rows.
bool sampling_now() { return t_sampling && !at::GradMode::is_enabled(); }

}  // namespace

// In the factors' dtype, which is x's in a run (attach_lora), so nothing is converted.
torch::Tensor lora_delta(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b, double scale,
                         torch::ScalarType dtype) {
  const torch::Tensor xa = torch::matmul(x.to(a.scalar_type()), a.t()) * scale;  // (..., r)
  return torch::matmul(xa, b.t()).to(dtype);                                     // (..., out)
}

torch::Tensor add_lora(torch::Tensor y, const torch::Tensor& x, const LoraFactors& f, PackedLora* packed) {
  // y contiguous, or (M, out) with contiguous rows: a block of a fused projection's packed output.
  const bool dense_rows = y.is_contiguous() || (y.dim() == 2 && y.stride(1) == 1);
  if (!dense_rows || f.a.scalar_type() != y.scalar_type() || f.b.scalar_type() != y.scalar_type())
    return y + lora_delta(x, f.a, f.b, f.scale, y.scalar_type());
  const torch::Tensor x2 = x.reshape({-1, x.size(-1)});                  // (M, in)
  const torch::Tensor y2 = y.dim() == 2 ? y : y.view({-1, y.size(-1)});  // (M, out)
  const bool sampling = sampling_now();
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
SamplingGuard::SamplingGuard() : ScopedValue(t_sampling, true), outermost_(!previous()) {
  begin_sampling_scope();
  if (outermost_) enter_packed_scope();
}
SamplingGuard::~SamplingGuard() {
  if (outermost_) leave_packed_scope();
}

torch::Tensor sampling_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                              PackedWeight& packed) {
  const torch::Tensor p =
      sampling_now() && x.scalar_type() == w.scalar_type() && x.device().is_cpu() ? packed.of({w}) : torch::Tensor();
  if (!p.defined()) return torch::linear(x, w, b);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(w.size(0));
  return packed_linear(x.reshape({-1, x.size(-1)}), p, b).view(shape);  // (..., out)
}
LoraOffGuard::LoraOffGuard() : ScopedValue(t_lora_active, false) {}
LoraModeGuard::LoraModeGuard(bool active) : ScopedValue(t_lora_active, active) {}
LoraDecodeKernelGuard::LoraDecodeKernelGuard(bool enabled) : ScopedValue(t_decode_kernel, enabled) {}

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

namespace {

// x (..., in) @ W^T (+ b) with the adapter f added, as FusedLinear with one block (its adapter in place).
torch::Tensor linear_with_lora(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                               const LoraFactors& f) {
  const torch::Tensor x2 = x.reshape({-1, x.size(-1)});  // (M, in)
  const torch::Tensor y = fused_linear(x2, {w}, b.defined() ? std::vector{b} : std::vector<torch::Tensor>{}, {f})[0];
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(y.size(-1));
  return y.view(shape);  // (..., out)
}

}  // namespace

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  const torch::Tensor xt = copy_to_tp(x, tp_);
  if (!lora_.defined() || !t_lora_active) return sampling_linear(xt, weight, bias, packed_weight_);  // (..., out_local)
  const LoraFactors f{copy_to_tp(lora_.a, tp_), lora_.b, lora_.scale};
  if (!sampling_now()) return linear_with_lora(xt, weight, bias, f);
  return add_lora(sampling_linear(xt, weight, bias, packed_weight_), xt, f, &decode_packed_);
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
  if (sampling_now()) {
    // Sampling has no backward to share, and concatenating the weights would copy them on every
    // call: at a decode step's few rows that copy costs more than the GEMMs (the Qwen2-0.5B
    // shape's gate/up: 5.6 ms fused vs 1.6 ms apart at 16 rows, bf16, 2 threads; level from 256
    // rows up). Not for a no-grad scoring forward, whose bits must be the training forward's.
    std::vector<torch::Tensor> parts;
    const torch::Tensor packed = x2.scalar_type() == weights[0].scalar_type() && x2.device().is_cpu()
                                     ? layers[0]->group_packed().of(weights)
                                     : torch::Tensor();
    if (packed.defined()) {
      // One GEMM over the group's packed copy, its blocks column views of the (M, sum out) result
      // (copying them out cost 0.7 s of a 6 s rollout); the adapters add into them in place.
      const torch::Tensor y = packed_linear(x2, packed, biases.empty() ? torch::Tensor() : torch::cat(biases));
      int64_t col = 0;
      for (const auto* l : layers) {
        torch::Tensor part = y.narrow(1, col, l->weight.size(0));  // (M, out_local), row stride sum out
        col += l->weight.size(0);
        if (l->lora().defined() && t_lora_active) part = add_lora(part, x2, l->lora(), &l->decode_packed());
        parts.push_back(part);
      }
      return unflatten(std::move(parts));
    }
    for (const auto* l : layers) {
      torch::Tensor y = l->bias.defined() ? torch::addmm(l->bias, x2, l->weight.t()) : torch::mm(x2, l->weight.t());
      if (l->lora().defined() && t_lora_active) y = add_lora(y, x2, l->lora(), &l->decode_packed());
      parts.push_back(y);  // (M, out_local)
    }
    return unflatten(std::move(parts));
  }
  std::vector<LoraFactors> loras;
  for (const auto* l : layers)
    loras.push_back(l->lora().defined() && t_lora_active
                        ? LoraFactors{copy_to_tp(l->lora().a, l->tp()), l->lora().b, l->lora().scale}
                        : LoraFactors{});
  return unflatten(fused_linear(x2, weights, biases, loras));
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
  // B (A_r x_r) summed over tp is B A x: the adapter's share joins the layer's one reduction.
  torch::Tensor partial;  // (..., out): this rank's share of the sum over tp
  if (!lora_.defined() || !t_lora_active) {
    partial = sampling_linear(x, weight, torch::Tensor(), packed_weight_);
  } else {
    const LoraFactors f{lora_.a, copy_to_tp(lora_.b, tp_), lora_.scale};
    partial = sampling_now()
                  ? add_lora(sampling_linear(x, weight, torch::Tensor(), packed_weight_), x, f, &decode_packed_)
                  : linear_with_lora(x, weight, torch::Tensor(), f);
  }
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
