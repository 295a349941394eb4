// Builds both layouts from the same per-sequence field rows, so they can only differ by layout.
#include "core/batch/collate.h"

#include <algorithm>

namespace tandem {

namespace {

// Per-token fields of one sequence on the token axis (length n = tokens.size()).
struct SequenceRows {
  std::vector<int64_t> targets, positions;
  std::vector<double> mask, adv, logp;
};

SequenceRows sequence_rows(const ArSample& s) {
  check_sample(s);
  const int64_t n = s.length();
  SequenceRows r;
  r.targets.assign(n, 0);
  r.positions.resize(n);
  r.mask.assign(n, 0.0);
  r.adv.assign(n, s.advantage);
  r.logp.assign(n, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    r.positions[j] = j;
    if (j + 1 >= n) break;  // trailing slot: no target, masked
    r.targets[j] = s.tokens[j + 1];
    const int64_t k = j + 1 - s.prompt_len;  // response index of the target
    if (k >= 0) {
      r.mask[j] = s.response_mask[k] ? 1.0 : 0.0;
      if (!s.rollout_logp.empty() && s.response_mask[k]) r.logp[j] = s.rollout_logp[k];
    }
  }
  return r;
}

torch::Tensor ints(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64); }
torch::Tensor floats(const std::vector<double>& v, torch::Dtype dtype) {
  return torch::tensor(v, torch::kFloat64).to(dtype);
}

}  // namespace

PackedBatch collate_packed(const std::vector<const ArSample*>& samples, const LossDenominators& denominators,
                           torch::Dtype dtype, bool share_prompts) {
  std::vector<int64_t> ids, pos, targets, seq, prefix_of;
  std::vector<double> mask, adv, logp;
  std::vector<int32_t> cu{0};
  int64_t max_len = 0;
  bool shared_any = false;
  // Appends rows [from, to) of sample b's per-token fields as one sequence of cu_seqlens.
  const auto append = [&](size_t b, const SequenceRows& r, int64_t from, int64_t to, int64_t prefix) {
    const ArSample& s = *samples[b];
    ids.insert(ids.end(), s.tokens.begin() + from, s.tokens.begin() + to);
    pos.insert(pos.end(), r.positions.begin() + from, r.positions.begin() + to);
    targets.insert(targets.end(), r.targets.begin() + from, r.targets.begin() + to);
    mask.insert(mask.end(), r.mask.begin() + from, r.mask.begin() + to);
    adv.insert(adv.end(), r.adv.begin() + from, r.adv.begin() + to);
    logp.insert(logp.end(), r.logp.begin() + from, r.logp.begin() + to);
    seq.insert(seq.end(), to - from, static_cast<int64_t>(b));
    cu.push_back(cu.back() + static_cast<int32_t>(to - from));
    prefix_of.push_back(prefix);
    max_len = std::max(max_len, to - from);
  };
  for (size_t b = 0; b < samples.size();) {
    size_t end = b + 1;
    if (share_prompts && samples[b]->prompt_len >= 2)
      while (end < samples.size() && same_prompt(*samples[b], *samples[end])) ++end;
    if (end - b < 2) {  // alone: the whole sequence
      append(b, sequence_rows(*samples[b]), 0, samples[b]->length(), -1);
      ++b;
      continue;
    }
    // The prompt but its last token once (its targets are prompt tokens: masked), then each
    // sample from its prompt's last token on, continuing it.
    shared_any = true;
    const int64_t shared = samples[b]->prompt_len - 1;
    const auto prompt_seq = static_cast<int64_t>(prefix_of.size());
    append(b, sequence_rows(*samples[b]), 0, shared, -1);
    for (size_t i = b; i < end; ++i) append(i, sequence_rows(*samples[i]), shared, samples[i]->length(), prompt_seq);
    b = end;
  }
  PackedBatch p;
  p.input_ids = ints(ids).view({1, -1});
  p.position_ids = ints(pos).view({1, -1});
  p.cu_seqlens = torch::tensor(cu, torch::kInt32);
  p.max_seqlen = max_len;
  p.targets = ints(targets);
  p.loss_mask = floats(mask, dtype);
  p.advantages = floats(adv, dtype);
  p.rollout_logp = floats(logp, dtype);
  p.seq_index = ints(seq);
  if (shared_any) p.prefix_of = ints(prefix_of);
  p.denominators = denominators;
  return p;
}

PaddedBatch collate_padded(const std::vector<const ArSample*>& samples, const LossDenominators& denominators,
                           torch::Dtype dtype) {
  const int64_t b = static_cast<int64_t>(samples.size());
  int64_t t = 0;
  for (const ArSample* s : samples) t = std::max(t, s->length());
  // Host rows first, one tensor per field: per-row tensor ops would cost ~10 dispatches a row.
  const size_t cells = static_cast<size_t>(b * t);
  std::vector<int64_t> ids(cells, 0), pos(cells, 0), targets(cells, 0), lengths(static_cast<size_t>(b));
  std::vector<uint8_t> valid(cells, 0);
  std::vector<double> mask(cells, 0.0), adv(cells, 0.0), logp(cells, 0.0);
  for (int64_t i = 0; i < b; ++i) {
    const ArSample& s = *samples[i];
    const int64_t n = s.length();
    lengths[i] = n;
    if (n == 0) continue;
    const SequenceRows r = sequence_rows(s);
    const size_t o = static_cast<size_t>(i * t);
    std::copy(s.tokens.begin(), s.tokens.end(), ids.begin() + o);
    std::copy(r.positions.begin(), r.positions.end(), pos.begin() + o);
    std::fill_n(valid.begin() + o, n, 1);
    std::copy(r.targets.begin(), r.targets.end(), targets.begin() + o);
    std::copy(r.mask.begin(), r.mask.end(), mask.begin() + o);
    std::copy(r.adv.begin(), r.adv.end(), adv.begin() + o);
    std::copy(r.logp.begin(), r.logp.end(), logp.begin() + o);
  }
  PaddedBatch p;
  p.input_ids = ints(ids).view({b, t});
  p.position_ids = ints(pos).view({b, t});
  p.attention_mask = torch::tensor(valid, torch::kUInt8).to(torch::kBool).view({b, t});
  p.lengths = ints(lengths);
  p.targets = ints(targets).view({b, t});
  p.loss_mask = floats(mask, dtype).view({b, t});
  p.advantages = floats(adv, dtype).view({b, t});
  p.rollout_logp = floats(logp, dtype).view({b, t});
  p.denominators = denominators;
  return p;
}

torch::Tensor unpack_to_padded(const torch::Tensor& packed, const torch::Tensor& cu_seqlens, int64_t max_seqlen) {
  const int64_t b = cu_seqlens.numel() - 1;
  std::vector<int64_t> shape{b, max_seqlen};
  for (int64_t d = 1; d < packed.dim(); ++d) shape.push_back(packed.size(d));
  torch::Tensor out = torch::zeros(shape, packed.options());  // (B, T_max, ...)
  const auto cu = cu_seqlens.to(torch::kInt64);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t s = cu[i].item<int64_t>(), e = cu[i + 1].item<int64_t>();
    out[i].slice(0, 0, e - s).copy_(packed.slice(0, s, e));
  }
  return out;
}

std::string packed_padded_mismatch(const PackedBatch& packed, const PaddedBatch& padded) {
  if (packed.num_seqs() != padded.input_ids.size(0)) return "sequence count differs";
  const torch::Tensor lens = (packed.cu_seqlens.slice(0, 1) - packed.cu_seqlens.slice(0, 0, -1)).to(torch::kInt64);
  if (!torch::equal(lens, padded.lengths)) return "sequence lengths differ";
  if (packed.num_seqs() > 0 && packed.max_seqlen != padded.input_ids.size(1)) return "max_seqlen differs";
  const int64_t t = packed.max_seqlen;
  struct Field {
    const char* name;
    torch::Tensor packed, padded;
  };
  const Field fields[] = {
      {"input_ids", packed.input_ids.view({-1}), padded.input_ids},
      {"position_ids", packed.position_ids.view({-1}), padded.position_ids},
      {"targets", packed.targets, padded.targets},
      {"loss_mask", packed.loss_mask, padded.loss_mask},
      {"advantages", packed.advantages, padded.advantages},
      {"rollout_logp", packed.rollout_logp, padded.rollout_logp},
  };
  for (const Field& f : fields) {
    const torch::Tensor unpacked = unpack_to_padded(f.packed, packed.cu_seqlens, t);
    const torch::Tensor valid = padded.attention_mask;
    if (!torch::equal(unpacked.masked_select(valid), f.padded.masked_select(valid)))
      return std::string(f.name) + " differs";
  }
  return "";
}

}  // namespace tandem
