// Scaled dot-product attention with grouped-query heads for both layouts: block-diagonal causal
// over packed segments (never an (N, N) mask: segments of similar length are gathered into a few
// batched buckets, so the op count does not grow with the number of sequences) and batched causal
// with a key-padding mask for (B, T) batches; plus the one-query-per-sequence attention over a
// KV cache for decoding. Softmax in float32 (float64 for float64). Packed and padded training
// run either materialised (the (L_q, L_k) scores held: float64's reference) or fused
// (models/layers/fused_attention.h: memory linear in the sequence).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace tandem::models {

// Query rows [q_begin, q_begin + length) sit at positions q_offset.. of one sequence whose K/V
// rows start at k_begin; they attend causally to K/V rows [k_begin, k_begin + q_offset + length).
// With k_own >= 0 the K/V rows of positions q_offset.. start there instead, and only the first
// q_offset rows (the prefix) are at k_begin: a response packed after a prompt it shares with the
// other responses of its group reads the prompt's rows once written, wherever they sit.
struct AttentionSegment {
  int64_t q_begin = 0;
  int64_t length = 0;
  int64_t k_begin = 0;
  int64_t q_offset = 0;
  int64_t k_own = -1;
};

// One segment per sequence of cu_seqlens ((B+1) offsets; empty sequences are skipped).
std::vector<AttentionSegment> segments_from_cu_seqlens(const torch::Tensor& cu_seqlens);

// The same with shared prefixes: prefix_of (B) int64, -1 or the sequence whose rows sequence b
// continues (its positions start after them; that sequence has no prefix of its own).
std::vector<AttentionSegment> segments_with_prefixes(const torch::Tensor& cu_seqlens, const torch::Tensor& prefix_of);

// A bucket admits a segment while its key span is at least this fraction of the bucket's longest,
// so padding costs at most 1 / ratio^2 of a bucket's attention work (and nothing elsewhere).
inline constexpr double kBucketSpanRatio = 0.75;
// Cap on one bucket's score elements (B * H * L_q * L_k) so long sequences never share a bucket
// whose scores would be much larger than one sequence's.
inline constexpr int64_t kBucketMaxScores = 32LL << 20;

// How packed_attention runs a list of segments: built once per forward (host work and small index
// tensors), shared by every layer.
struct PackedAttentionPlan {
  struct Bucket {
    int64_t batch = 0, q_len = 0, k_len = 0;  // the bucket's (B, L_q, L_k)
    int64_t q_start = -1;                     // >= 0: q, k and v rows [q_start, q_start + B*L) are the bucket as is
    torch::Tensor q_index;                    // (B * L_q) int64 query rows; padding repeats a real row
    torch::Tensor k_index;                    // (B * L_k) int64 K/V rows; padding repeats a real row
    torch::Tensor blocked;                    // (B, 1, 1, L_q, L_k) bool: causal, key padding (materialised)
    torch::Tensor real_rows;                  // (n_b) int64 rows of the (B * L_q) output that are real; undefined: all
    // Fused, a prefix bucket: every segment sees K/V rows p_index (P, contiguous, e.g. the group's
    // prompt) in full, then its own K/V rows k_index causally (then L_k = L_q).
    torch::Tensor p_index;  // (P) int64; undefined: no prefix, plain causal over k_index
  };
  std::vector<Bucket> buckets;
  // CUDA, fused, every segment a whole sequence in its own rows (no prefix, no cp offset): the
  // int32 cumulative lengths FlashAttention's variable-length kernel takes, on the device, and the
  // longest sequence. A bf16 / fp16 forward runs that kernel on the packed rows as they are (no
  // gather, no padding, GQA and the sliding window native); float32 runs the buckets.
  torch::Tensor varlen_cu;  // (B+1) int32; undefined: not eligible
  int64_t varlen_max = 0;
  int64_t varlen_window = 0;  // the model's window (> 0: HF's i - window < j <= i)
  bool fused = false;         // buckets run on the fused kernels: padding sits at the end, no mask
  int64_t window = 0;         // > 0: a query at position i sees keys at positions > i - window (Mistral)
  torch::Tensor order;        // (N) int64: bucket-concatenated row of each query row; undefined: identity
  int64_t rows = 0;           // N, the query rows the segments cover
};

// segments cover q_rows query rows in order and lie within k_rows K/V rows (std::invalid_argument
// otherwise); heads sizes the score cap; span_ratio = 1 buckets only equal spans. Fused: segments
// without a prefix are bucketed by length (no score cap: nothing quadratic is held); those with one
// (q_offset > 0: a shared prompt's responses, a cp shard past its sequence's start) by the prefix
// rows they read, so one group's responses share one call that reads the prompt's keys once.
// window > 0 is a sliding window (HF's: key position j is seen from query position i when
// i - window < j <= i). The fused kernels take no window: a plan where some segment's span exceeds
// it runs materialised (the window in its mask); one where none does is the full attention.
PackedAttentionPlan plan_packed_attention(const std::vector<AttentionSegment>& segments, int64_t q_rows, int64_t k_rows,
                                          int64_t heads, torch::Device device, bool fused = false,
                                          double span_ratio = kBucketSpanRatio, int64_t window = 0);

// q (N, H, D); k, v (N_kv, H_kv, D). Returns (N, H, D).
torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const PackedAttentionPlan& plan);
// The same with the plan built on the spot (tests, one-off calls).
torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const std::vector<AttentionSegment>& segments);

// q (B, T, H, D); k, v (B, T, H_kv, D); key_valid (B, T) bool. Returns (B, T, H, D); rows of
// padding attend at least to themselves so nothing is NaN (fused: a padding row that sees no
// valid key gets zeros). window > 0: a sliding window over the row's columns (a sequence's real
// tokens are contiguous in its row, so columns differ as positions do).
torch::Tensor padded_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid, bool fused = false, int64_t window = 0);

// Decoding: one query per sequence against that sequence's cached keys. q (n, H, D); k, v
// (n, H_kv, S, D) (strided views of a KvCache are fine); key_valid (n, S) bool marks each
// sequence's cached positions. fused: on the CPU, the flash kernel (models/layers/fused_attention.h);
// elsewhere, or not fused, the scores materialised. Returns (n, H, D).
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid, bool fused = false);

// The sequences of a decode step that read one shared prefix (a GRPO group's prompt).
struct PrefixGroup {
  int64_t prefix = 0;            // its slot in the prefix store
  int64_t length = 0;            // its rows (the prompt's tokens)
  std::vector<int64_t> members;  // the sequences (rows of q) that read it, ascending
};

// A decode step's prefix groups as the index tensors decode_attention uses: the same in every
// layer, so built once per step. Every group's readers are padded to the largest group (slot n:
// a zero query row); `place` says where each sequence's prefix scores land among the groups'.
struct PrefixIndex {
  int64_t groups = 0;    // g; 0: no sequence reads a prefix
  int64_t widest = 1;    // m_max: the most readers of one prefix
  int64_t longest = 1;   // P: the longest prefix
  int64_t first = -1;    // >= 0: the prefix slots are first..first+g-1 (a view of the store)
  torch::Tensor slots;   // (g) int64: the groups' prefix slots (a gather when not consecutive)
  torch::Tensor gather;  // (g m_max) int64: the sequence at each group position (n: padding)
  torch::Tensor place;   // (n) int64: each sequence's group position (g m_max: in no group)
  torch::Tensor beyond;  // (g, P) bool: keys past a group's own prefix
  // Sliding window: (g, 1, m_max, 1, P) bool, the prefix keys each reader no longer sees; undefined: none.
  torch::Tensor outside;
};
// `positions` (n) int64 host: each sequence's current position, needed with window > 0 (else unused).
PrefixIndex prefix_index(const std::vector<PrefixGroup>& groups, int64_t n, const torch::Device& device,
                         int64_t window = 0, const std::vector<int64_t>& positions = {});

// Decoding with shared prefixes: sequence i attends to its group's prefix rows of pk and pv
// (P_slots, H_kv, P_cap, D), then to its own rows of k / v as in decode_attention; one softmax
// over both (two parts merged by their maxima and sums, or fused by their log-sum-exps; a
// sliding window that reaches into a prefix stays materialised). The prefix scores of a group's
// m sequences are one (m G x D) x (D x P) product per kv head, so a prompt's keys are read once
// per step for the whole group, not once per sample. Sequences in no group attend to their own
// rows only.
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid, const torch::Tensor& pk, const torch::Tensor& pv,
                               const PrefixIndex& groups, bool fused = false);

}  // namespace tandem::models
