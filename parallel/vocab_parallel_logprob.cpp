// One custom autograd Function does the chunked forward and the recomputing backward; it saves
// only per-token statistics (log-sum-exp and the mean logit under p), never a chunk's logits,
// unless the caller allows the whole call's logits to be kept (save_logits_max_bytes).
//   logp_i = z_it - lse_i                     d logp_i / dz_ij = [j == t_i] - p_ij
//   H_i    = lse_i - mu_i, mu_i = sum_j p_ij z_ij   d H_i / dz_ij = -p_ij (z_ij - mu_i)
// A second Function fuses a token-separable loss into the head (FusedHeadLoss): the chunk's
// gradient is formed in the forward, from the chunk's logits, so nothing is recomputed.
#include "parallel/vocab_parallel_logprob.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "parallel/tp_layers.h"

namespace tandem::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The GEMMs run in the weights' dtype. When that is not the statistics' (bf16 weights, float32
// logits), each chunk's logits and, on the way back, its dz pass through this (rows, V_local)
// buffer in the weights' dtype, allocated once per call: a fresh tensor per chunk and conversion
// took ~0.1 s per 110-row chunk (the 64 MiB default then) of Qwen2's 152K vocabulary (its pages first touched each
// time, 2 threads), 2.3 s of a 2,624-token LoRA step. Undefined when the dtypes agree.
torch::Tensor low_precision_buffer(const torch::Tensor& weight, int64_t rows, torch::ScalarType stats_dtype) {
  if (weight.scalar_type() == stats_dtype) return {};
  return torch::empty({rows, weight.size(0)}, weight.options());  // (C, V_local)
}

// z (C, V_local) <- h (C, D) W^T in z's (statistics) dtype; the GEMM writes z itself when the
// weights have that dtype, else `low` first.
void write_logits(torch::Tensor& z, const torch::Tensor& h, const torch::Tensor& weight, const torch::Tensor& low) {
  if (!low.defined()) {
    torch::matmul_out(z, h, weight.t());
    return;
  }
  torch::Tensor zl = low.narrow(0, 0, z.size(0));  // (C, V_local)
  torch::matmul_out(zl, h, weight.t());
  z.copy_(zl);
}

// Shifts z (C, V_local) by each row's max over the whole vocabulary (all-reduced over tp) and
// returns that max (C).
torch::Tensor shift_by_max(torch::Tensor& z, Communicator* tp) {
  torch::Tensor m = z.amax(1);  // (C)
  if (tp) tp->all_reduce(m, ReduceOp::kMax);
  z.sub_(m.unsqueeze(1));
  return m;
}

// One chunk's dz = d loss / d logits (C, V_local) into the gradients: d_hidden_rows (C, D) <- dz W
// in the weights' dtype (through `low` when that is not dz's), and d_weight (V_local, D) += dz^T h
// in the statistics dtype. An undefined d_weight is a frozen head's (LoRA): its GEMM, as large as
// the logits', is skipped.
void multiply_out(const torch::Tensor& dz, const torch::Tensor& h, const torch::Tensor& weight,
                  const torch::Tensor& low, torch::Tensor d_hidden_rows, torch::Tensor& d_weight) {
  if (!low.defined()) {
    torch::matmul_out(d_hidden_rows, dz, weight);  // contiguous rows of d_hidden
  } else {
    torch::Tensor dl = low.narrow(0, 0, dz.size(0));  // (C, V_local)
    dl.copy_(dz);
    torch::matmul_out(d_hidden_rows, dl, weight);
  }
  if (d_weight.defined()) d_weight.addmm_(dz.t(), low.defined() ? h.to(dz.scalar_type()) : h);
}

// Local column of each target, clamped into the shard, and whether it is in the shard.
std::pair<torch::Tensor, torch::Tensor> local_targets(const torch::Tensor& targets, int64_t begin, int64_t size) {
  const torch::Tensor local = targets - begin;                   // (C)
  const torch::Tensor in_shard = (local >= 0) & (local < size);  // (C)
  return {local.clamp(0, size - 1), in_shard};
}

// One chunk's row statistics over the whole vocabulary, all-reduced over tp, from its logits z
// (C, V_local) already shifted by the row max: writes e = exp(z) into ez and returns (2 or 3, C)
// = sum e, the target's shifted logit (0 outside this shard), [sum e z]. The entropy's e z
// product overwrites whichever of z and ez the caller no longer needs (keep_z: ez).
torch::Tensor chunk_statistics(torch::Tensor& z, torch::Tensor& ez, const torch::Tensor& local,
                               const torch::Tensor& in_shard, bool with_entropy, bool keep_z, Communicator* tp) {
  const torch::Tensor target_shifted =
      z.gather(1, local.unsqueeze(1)).squeeze(1) * in_shard.to(z.scalar_type());  // (C)
  torch::exp_out(ez, z);
  std::vector<torch::Tensor> parts = {ez.sum(1), target_shifted};
  if (with_entropy) parts.push_back((keep_z ? ez.mul_(z) : z.mul_(ez)).sum(1));
  torch::Tensor stats = torch::stack(parts);  // (2 or 3, C)
  if (tp) tp->all_reduce(stats, ReduceOp::kSum);
  return stats;
}

// Every chunk's (C, V_local) work runs in two buffers allocated once per call, with GEMMs
// writing into them (matmul_out, addmm_) and in-place elementwise passes: a fresh chunk-sized output
// per op cost more than the op itself (first touch of the pages, write-allocate traffic).
struct ChunkedVocabLogProb : torch::autograd::Function<ChunkedVocabLogProb> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t vocab_begin, int64_t comm, int64_t chunk,
                               bool keep_logits, bool with_entropy) {
    Communicator* tp = reinterpret_cast<Communicator*>(comm);
    const torch::ScalarType dtype = logits_dtype(weight.scalar_type());
    const int64_t n = hidden.size(0), vocab_local = weight.size(0);
    const auto opts = hidden.options().dtype(dtype);
    torch::Tensor logp = torch::empty({n}, opts), entropy;  // (N)
    torch::Tensor lse = torch::empty({n}, opts), mu;        // (N)
    if (with_entropy) entropy = torch::empty({n}, opts), mu = torch::empty({n}, opts);
    torch::Tensor kept;  // (N, V_local) the shifted logits, when kept for the backward
    if (keep_logits) kept = torch::empty({n, vocab_local}, opts);
    const int64_t rows = std::min(n, chunk);
    const torch::Tensor low = low_precision_buffer(weight, rows, dtype);                            // (C, V_local)
    torch::Tensor z_buf = keep_logits ? torch::Tensor() : torch::empty({rows, vocab_local}, opts);  // (C, V_local)
    torch::Tensor e_buf = torch::empty({rows, vocab_local}, opts);                                  // (C, V_local)
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t e = std::min(n, s + chunk), c = e - s;
      const torch::Tensor h = hidden.slice(0, s, e);                                // (C, D)
      torch::Tensor z = keep_logits ? kept.slice(0, s, e) : z_buf.narrow(0, 0, c);  // (C, V_local)
      write_logits(z, h, weight, low);
      const torch::Tensor m = shift_by_max(z, tp);  // (C) kept shifted: lse and mu below are relative to them
      const auto [local, in_shard] = local_targets(targets.slice(0, s, e), vocab_begin, vocab_local);
      torch::Tensor ez = e_buf.narrow(0, 0, c);  // (C, V_local)
      // z stays intact: kept logits are the backward's input.
      const torch::Tensor stats = chunk_statistics(z, ez, local, in_shard, with_entropy, /*keep_z=*/true, tp);
      const torch::Tensor log_sum = stats[0].log();  // (C)
      logp.slice(0, s, e).copy_(stats[1] - log_sum);
      lse.slice(0, s, e).copy_(keep_logits ? log_sum : m + log_sum);
      if (with_entropy) {
        const torch::Tensor mean_shifted = stats[2] / stats[0];  // (C)
        entropy.slice(0, s, e).copy_(log_sum - mean_shifted);
        mu.slice(0, s, e).copy_(keep_logits ? mean_shifted : m + mean_shifted);
      }
    }
    ctx->save_for_backward(
        {hidden, weight, targets, lse, with_entropy ? mu : torch::Tensor(), keep_logits ? kept : torch::Tensor()});
    ctx->saved_data["vocab_begin"] = vocab_begin;
    ctx->saved_data["chunk"] = chunk;
    if (!with_entropy) entropy = torch::zeros({n}, opts);  // an output autograd needs; never read
    return {logp, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3], &mu = saved[4];
    const torch::Tensor& kept = saved[5];    // (N, V_local) shifted logits, or undefined (recompute)
    const torch::Tensor& g_logp = grads[0];  // (N) or undefined
    // Without with_entropy the entropy output is a placeholder: its gradient is dropped.
    const torch::Tensor g_entropy = mu.defined() ? grads[1] : torch::Tensor();  // (N) or undefined
    const int64_t vocab_begin = ctx->saved_data["vocab_begin"].toInt(), chunk = ctx->saved_data["chunk"].toInt();
    const torch::ScalarType dtype = lse.scalar_type();
    const int64_t n = hidden.size(0), vocab_local = weight.size(0);
    const variable_list none(8);
    if (!g_logp.defined() && !g_entropy.defined()) return none;
    torch::Tensor d_hidden = torch::empty_like(hidden);  // (N, D)
    torch::Tensor d_weight;                              // (V_local, D), for a head that trains
    if (ctx->needs_input_grad(1)) d_weight = torch::zeros(weight.sizes(), weight.options().dtype(dtype));
    const int64_t rows = std::min(n, chunk);
    const auto opts = lse.options();
    const torch::Tensor low = low_precision_buffer(weight, rows, dtype);                               // (C, V_local)
    torch::Tensor z_buf = kept.defined() ? torch::Tensor() : torch::empty({rows, vocab_local}, opts);  // (C, V_local)
    torch::Tensor p_buf = torch::empty({rows, vocab_local}, opts);                                     // (C, V_local)
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t e = std::min(n, s + chunk), c = e - s;
      const torch::Tensor h = hidden.slice(0, s, e);  // (C, D)
      // Kept logits are consumed in place: the backward runs once.
      torch::Tensor z = kept.defined() ? kept.slice(0, s, e) : z_buf.narrow(0, 0, c);  // (C, V_local)
      if (!kept.defined()) write_logits(z, h, weight, low);
      torch::Tensor dz = p_buf.narrow(0, 0, c);                       // (C, V_local)
      torch::sub_out(dz, z, lse.slice(0, s, e).unsqueeze(1)).exp_();  // p
      if (g_entropy.defined()) {
        z.sub_(mu.slice(0, s, e).unsqueeze(1)).mul_(g_entropy.slice(0, s, e).to(dtype).unsqueeze(1));
        if (g_logp.defined()) z.add_(g_logp.slice(0, s, e).to(dtype).unsqueeze(1));
        dz.mul_(z).neg_();  // -p (g_logp + g_H (z - mu))
      } else {
        dz.mul_(g_logp.slice(0, s, e).to(dtype).neg().unsqueeze(1));  // -p g_logp
      }
      if (g_logp.defined()) {
        const auto [local, in_shard] = local_targets(targets.slice(0, s, e), vocab_begin, vocab_local);
        const torch::Tensor add = g_logp.slice(0, s, e).to(dtype) * in_shard.to(dtype);  // (C)
        dz.scatter_add_(1, local.unsqueeze(1), add.unsqueeze(1));
      }
      multiply_out(dz, h, weight, low, d_hidden.slice(0, s, e), d_weight);
    }
    variable_list out = none;
    out[0] = d_hidden;
    if (d_weight.defined()) out[1] = d_weight.to(weight.scalar_type());
    return out;
  }
};

// The head with the loss in it: per chunk, the logits' statistics give the tokens' log-probs,
// token_loss gives the loss gradient in them, and dz = d loss / d logits is formed in the same
// buffers and multiplied out into d hidden and d weight at once:
//   dz_ij = g_i ([j == t_i] - p_ij) - gH_i p_ij (z_ij - mu_i),  p_ij = e_ij / S_i, e_ij = exp(z_ij - m_i)
// The backward only scales the saved gradients by the incoming one (the loss is a scalar).
struct FusedHeadLoss : torch::autograd::Function<FusedHeadLoss> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, const torch::Tensor& index, int64_t vocab_begin,
                               int64_t comm, int64_t chunk, bool with_entropy, int64_t loss_fn) {
    Communicator* tp = reinterpret_cast<Communicator*>(comm);
    const TokenLossFn& token_loss = *reinterpret_cast<const TokenLossFn*>(loss_fn);
    const torch::ScalarType dtype = logits_dtype(weight.scalar_type());
    const int64_t n = hidden.size(0), vocab_local = weight.size(0);
    const auto opts = hidden.options().dtype(dtype);
    torch::Tensor logp = torch::empty({n}, opts);                                              // (N)
    torch::Tensor entropy = with_entropy ? torch::empty({n}, opts) : torch::zeros({n}, opts);  // (N)
    torch::Tensor d_hidden = torch::empty_like(hidden);                                        // (N, D)
    // (V_local, D): a frozen head (LoRA's) gets none. The forward runs with grad mode off, but
    // the inputs keep their requires_grad.
    torch::Tensor d_weight = weight.requires_grad() ? torch::zeros(weight.sizes(), opts) : torch::Tensor();
    torch::Tensor loss = torch::zeros({}, opts);  // ()
    const int64_t rows = std::min(n, chunk);
    const torch::Tensor low = low_precision_buffer(weight, rows, dtype);  // (C, V_local)
    torch::Tensor z_buf = torch::empty({rows, vocab_local}, opts);        // (C, V_local)
    torch::Tensor e_buf = torch::empty({rows, vocab_local}, opts);        // (C, V_local)
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t e = std::min(n, s + chunk), c = e - s;
      const torch::Tensor h = hidden.slice(0, s, e);  // (C, D)
      torch::Tensor z = z_buf.narrow(0, 0, c);        // (C, V_local)
      write_logits(z, h, weight, low);
      shift_by_max(z, tp);
      const auto [local, in_shard] = local_targets(targets.slice(0, s, e), vocab_begin, vocab_local);
      torch::Tensor ez = e_buf.narrow(0, 0, c);  // (C, V_local)
      // e is dz's factor below; with entropy, z now holds e z.
      const torch::Tensor stats = chunk_statistics(z, ez, local, in_shard, with_entropy, /*keep_z=*/false, tp);
      const torch::Tensor log_sum = stats[0].log();         // (C)
      const torch::Tensor inv_sum = stats[0].reciprocal();  // (C)
      torch::Tensor logp_c = logp.slice(0, s, e), mu;
      logp_c.copy_(stats[1] - log_sum);
      if (with_entropy) {
        mu = stats[2] / stats[0];  // (C) mean shifted logit under p
        entropy.slice(0, s, e).copy_(log_sum - mu);
      }
      const torch::Tensor idx = index.slice(0, s, e);  // (C)
      const TokenLossChunk r = token_loss(idx, logp_c, with_entropy ? entropy.slice(0, s, e) : torch::Tensor());
      TORCH_CHECK(r.loss.defined() && r.loss.numel() == 1, "fused head: token_loss must return the chunk's loss");
      loss.add_(r.loss.detach().to(dtype).reshape({}));
      const torch::Tensor g = r.g_logp.defined() ? r.g_logp.detach().to(dtype) : torch::zeros({c}, opts);  // (C)
      if (r.g_entropy.defined()) {
        TORCH_CHECK(with_entropy, "fused head: an entropy gradient without with_entropy");
        const torch::Tensor gh = r.g_entropy.detach().to(dtype);  // (C)
        // -p (g + gH (z - mu)) = -(e (g - gH mu) + (e z) gH) / S
        ez.mul_(((gh * mu - g) * inv_sum).unsqueeze(1)).sub_(z.mul_((gh * inv_sum).unsqueeze(1)));
      } else {
        ez.mul_((-g * inv_sum).unsqueeze(1));  // -g p
      }
      ez.scatter_add_(1, local.unsqueeze(1), (g * in_shard.to(dtype)).unsqueeze(1));
      multiply_out(ez, h, weight, low, d_hidden.slice(0, s, e), d_weight);
    }
    ctx->saved_data["d_hidden"] = d_hidden;
    if (d_weight.defined()) ctx->saved_data["d_weight"] = d_weight;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->mark_non_differentiable({logp, entropy});
    return {loss, logp, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(9);
    const torch::Tensor& g = grads[0];  // ()
    if (!g.defined()) return out;
    const auto weight_dtype = static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const torch::Tensor d_hidden = ctx->saved_data["d_hidden"].toTensor();  // (N, D)
    out[0] = d_hidden * g.to(d_hidden.scalar_type());
    if (ctx->saved_data.count("d_weight") > 0) {
      const torch::Tensor d_weight = ctx->saved_data["d_weight"].toTensor();  // (V_local, D)
      out[1] = (d_weight * g.to(d_weight.scalar_type())).to(weight_dtype);
    }
    return out;
  }
};

void check_inputs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "vocab-parallel log-probs: hidden ", hidden.sizes(), " and lm head ", weight.sizes(), " do not match");
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "vocab-parallel log-probs: targets ",
              targets.sizes(), " for ", hidden.size(0), " tokens");
  TORCH_CHECK(targets.scalar_type() == torch::kInt64, "vocab-parallel log-probs: targets must be int64");
  TORCH_CHECK(weight.size(0) > 0,
              "vocab-parallel log-probs: an empty vocabulary shard (more tp ranks than vocabulary rows)");
}

}  // namespace

torch::ScalarType logits_dtype(torch::ScalarType weight_dtype) {
  return weight_dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

int64_t logits_chunk_tokens(const TokenLogProbOptions& options, int64_t vocab_local, int64_t element_bytes) {
  if (options.chunk_tokens > 0) return options.chunk_tokens;
  return std::max<int64_t>(1, kDefaultLogitsChunkBytes / std::max<int64_t>(1, vocab_local * element_bytes));
}

TokenLogProbs vocab_parallel_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, int64_t vocab_begin, Communicator* tp,
                                       const TokenLogProbOptions& options) {
  check_inputs(hidden, weight, targets);
  if (tp != nullptr && tp->size() == 1) tp = nullptr;
  const int64_t bytes = c10::elementSize(logits_dtype(weight.scalar_type()));
  // Every tp rank must cut the same chunks (each chunk's max and sums are all-reduced), so the
  // size comes from the largest shard: with a vocabulary tp does not divide, shards differ by a
  // row, and 131073 rows over 2 ranks gave chunks of 255 and 256 tokens (collectives of
  // different lengths).
  int64_t vocab_rows = weight.size(0);
  if (tp != nullptr && options.chunk_tokens <= 0) {
    torch::Tensor rows =
        torch::tensor({vocab_rows}, torch::TensorOptions().dtype(torch::kFloat64).device(weight.device()));
    tp->all_reduce(rows, ReduceOp::kMax);
    vocab_rows = static_cast<int64_t>(rows.item<double>());
  }
  const int64_t chunk = logits_chunk_tokens(options, vocab_rows, bytes);
  const torch::Tensor h = copy_to_tp(hidden, tp);
  if (options.token_loss) {
    const torch::Tensor index = options.token_index.defined()
                                    ? options.token_index.to(torch::kInt64)
                                    : torch::arange(hidden.size(0), targets.options());  // (N)
    TORCH_CHECK(index.dim() == 1 && index.size(0) == hidden.size(0), "vocab-parallel log-probs: token_index ",
                index.sizes(), " for ", hidden.size(0), " tokens");
    variable_list out =
        FusedHeadLoss::apply(h, weight, targets, index, vocab_begin, reinterpret_cast<int64_t>(tp), chunk,
                             options.with_entropy, reinterpret_cast<int64_t>(&options.token_loss));
    TokenLogProbs r;
    r.loss = out[0], r.logp = out[1];
    if (options.with_entropy) r.entropy = out[2];
    return r;
  }
  const bool keep = options.save_logits_max_bytes > 0 &&
                    hidden.size(0) * weight.size(0) * bytes <= options.save_logits_max_bytes &&
                    torch::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  variable_list out = ChunkedVocabLogProb::apply(h, weight, targets, vocab_begin, reinterpret_cast<int64_t>(tp), chunk,
                                                 keep, options.with_entropy);
  TokenLogProbs r;
  r.logp = out[0];
  if (options.with_entropy) r.entropy = out[1];
  return r;
}

TokenLogProbs full_logits_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t vocab_begin, Communicator* tp,
                                    bool with_entropy) {
  check_inputs(hidden, weight, targets);
  const torch::Tensor local = torch::linear(copy_to_tp(hidden, tp), weight).to(logits_dtype(weight.scalar_type()));
  const torch::Tensor logits = gather_last_dim_from_tp(local, tp, vocab_begin);  // (N, V)
  const torch::Tensor log_probs = torch::log_softmax(logits, 1);                 // (N, V)
  TokenLogProbs r;
  r.logp = log_probs.gather(1, targets.unsqueeze(1)).squeeze(1);
  if (with_entropy) r.entropy = -(log_probs.exp() * log_probs).sum(1);
  return r;
}

}  // namespace tandem::parallel
